"""The chat page in a real browser (headless Chromium): a turn streams in, a second one is stopped while its tool
runs, and the page shows the rewind the server wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright
from serve._serving import WAIT, RewindWatch, Server
from starlette.types import ASGIApp

from rxgraph import MemorySaver
from rxgraph.examples.chat import ScriptedChat, make
from rxgraph.serve import create_app

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
GREETING = "Hello! I am a scripted model. Ask me about the weather in a city, and press Stop while I look it up."


@contextmanager
def chat_page(tmp_path: Path, server: Server, errors: list[str], elsewhere: list[str]) -> Iterator[Page]:
    """The chat page in headless Chromium, its waits bounded by ``WAIT``; page errors, console errors and requests
    to anywhere but the server are collected. The browser is closed when the block ends."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: install it with `apt-get install -y --no-install-recommends chromium` "
            "(.ci/run does so)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT * 1000)
            expect.set_options(timeout=WAIT * 1000)
            page.on("request", lambda r: None if r.url.startswith(server.url) else elsewhere.append(r.url))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(server.url + "/")
            yield page
        finally:
            browser.close()


def test_the_page_streams_a_turn_stops_the_next_while_its_tool_runs_and_shows_the_rewind(
    tmp_path: Path, serve: Callable[[ASGIApp], Server]
) -> None:
    saver = RewindWatch(MemorySaver())
    model = ScriptedChat(pace=0.02)
    agent = make(saver, model=model, tool_seconds=WAIT)  # the tool runs until the turn is stopped
    server = serve(create_app(agent))
    elsewhere: list[str] = []
    errors: list[str] = []

    with chat_page(tmp_path, server, errors, elsewhere) as page:
        thread = page.get_by_label("Thread").input_value()

        page.get_by_label("Message").fill("Hi")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator(".assistant")).to_have_text([GREETING])
        expect(page.locator("#history li")).to_have_count(2)

        page.get_by_label("Message").fill("What's the weather in Paris?")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".assistant").last).to_have_text("Let me check the weather in Paris.")
        expect(page.locator(".tool-call")).to_have_text('→ get_weather({"city": "Paris"})')
        expect(page.get_by_role("status")).to_have_text("Running get_weather…")
        page.get_by_role("button", name="Stop").click()

        expect(page.get_by_role("status")).to_have_text("Stopped.")
        expect(page.locator(".note")).to_have_text("Stopped: the server cancelled the turn and rewound the thread.")
        newest = page.locator("#history li").first
        expect(newest).to_have_attribute("data-source", "rewind")
        expect(newest).to_contain_text("2 messages · back to the state of #2")
        expect(page.get_by_role("button", name="Send")).to_be_enabled()
        expect(page.get_by_role("button", name="Stop")).to_be_disabled()

    rewind = saver.wait_for_rewind()
    state = httpx.get(f"{server.url}/threads/{thread}/state", timeout=WAIT).json()
    assert (state["checkpoint"]["id"], state["checkpoint"]["source"]) == (rewind.id, "rewind")
    assert [(m["role"], m["content"]) for m in state["values"]["messages"]] == [("user", "Hi"), ("assistant", GREETING)]
    assert len(model.requests) == 2  # stopped before the model was asked to answer with the tool's result
    assert elsewhere == [] and errors == []


def test_the_page_asks_before_a_tool_that_needs_approval_and_runs_it_once_approved(
    tmp_path: Path, serve: Callable[[ASGIApp], Server]
) -> None:
    saver = MemorySaver()
    agent = make(saver, model=ScriptedChat(pace=0.01), tool_seconds=0.01, approve_tools=True)
    server = serve(create_app(agent))
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(tmp_path, server, errors, elsewhere) as page:
        thread = page.get_by_label("Thread").input_value()

        page.get_by_label("Message").fill("What's the weather in Oslo?")
        page.get_by_role("button", name="Send").click()
        approval = page.get_by_role("group", name="Approval")
        expect(approval).to_contain_text('get_weather({"city": "Oslo"})')
        expect(page.get_by_role("status")).to_have_text("Waiting for your approval.")
        pending = httpx.get(f"{server.url}/threads/{thread}/state", timeout=WAIT).json()["interrupt"]
        assert pending["value"]["calls"][0]["name"] == "get_weather"

        approval.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator(".assistant").last).to_contain_text("Here is the weather:")
        expect(page.locator(".tool-result")).to_contain_text("in Oslo")

    state = httpx.get(f"{server.url}/threads/{thread}/state", timeout=WAIT).json()
    assert state["interrupt"] is None
    assert [m["role"] for m in state["values"]["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert errors == [] and elsewhere == []
