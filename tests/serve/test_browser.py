"""The chat page in a real browser (headless Chromium) against LangGraph's server API: a turn streams in token by
token, the next is stopped while its tool runs and the page shows the rewind; the thread is in the URL and survives a
reload; the thread list switches threads and a new thread starts empty; a tool approval is answered from the page;
a failed turn shows its error."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import reactivex
from playwright.sync_api import Browser, Page, expect, sync_playwright
from reactivex import Observable
from serve._serving import WAIT, RewindWatch, Server
from starlette.types import ASGIApp

from rxgraph import MemorySaver
from rxgraph.agent import ChatChunk, ToolSpec
from rxgraph.examples.chat import ScriptedChat, make
from rxgraph.messages import Message
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
STREAMED = """() => {
  window.streamed = [];
  new MutationObserver((records) => {
    for (const record of records) {
      if (!record.target.classList.contains("assistant")) continue;
      for (const node of record.addedNodes) if (node.nodeType === Node.TEXT_NODE) window.streamed.push(node.data);
    }
  }).observe(document.getElementById("log"), { childList: true, subtree: true });
}"""
"""Records every text an answer on the page showed, as it grew."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, one for the module's tests (each has a context of its own)."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: install it with `apt-get install -y --no-install-recommends chromium` "
            "(.ci/run does so)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def chat_page(browser: Browser, server: Server, errors: list[str], elsewhere: list[str]) -> Iterator[Page]:
    """The chat page in a fresh browser context, its waits bounded by ``WAIT``; page errors, console errors and
    requests to anywhere but the server are collected. The context is closed when the block ends."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT * 1000)
        expect.set_options(timeout=WAIT * 1000)
        page.on("request", lambda r: None if r.url.startswith(server.url) else elsewhere.append(r.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(server.url + "/")
        yield page
    finally:
        context.close()


def thread_of(page: Page) -> str:
    """The id of the thread the page shows, from its URL (``?thread=<id>``)."""
    [thread] = parse_qs(urlsplit(page.url).query)["thread"]
    return thread


def say(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def state(server: Server, thread: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/threads/{thread}/state", timeout=WAIT)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def messages(server: Server, thread: str) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in state(server, thread)["values"].get("messages", [])]


def test_a_turn_streams_token_by_token_and_the_next_is_stopped_while_its_tool_runs_and_rewound(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    saver = RewindWatch(MemorySaver())
    model = ScriptedChat(pace=0.02)
    agent = make(saver, model=model, tool_seconds=WAIT)  # the tool runs until the turn is stopped
    server = serve(create_app(agent))
    elsewhere: list[str] = []
    errors: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        page.evaluate(STREAMED)
        say(page, "Hi")
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator(".assistant")).to_have_text([GREETING])
        expect(page.locator("#history li")).to_have_count(2)
        streamed: list[str] = page.evaluate("window.streamed")
        assert len(streamed) == len(GREETING.split()) and streamed[-1] == GREETING  # one more word each time
        assert all(GREETING.startswith(text) for text in streamed)
        thread = thread_of(page)

        say(page, "What's the weather in Paris?")
        expect(page.locator(".assistant").last).to_have_text("Let me check the weather in Paris.")
        expect(page.locator(".tool-call")).to_have_text('→ get_weather({"city": "Paris"})')
        expect(page.locator(".tool-call")).to_have_class(re.compile(r"\brunning\b"))
        expect(page.get_by_role("status")).to_have_text("Running get_weather…")
        expect(page.get_by_role("button", name="Send")).to_be_disabled()
        expect(page.get_by_role("button", name="New thread")).to_be_disabled()  # the turn ends before another
        page.get_by_role("button", name="Stop").click()

        expect(page.get_by_role("status")).to_have_text("Stopped.")
        expect(page.locator(".note")).to_have_text("Stopped: the server cancelled the turn and rewound the thread.")
        expect(page.locator(".user, .assistant, .tool-call")).to_have_text(["Hi", GREETING])  # the turn is gone
        newest = page.locator("#history li").first
        expect(newest).to_have_attribute("data-source", "rewind")
        expect(newest).to_contain_text("2 messages · back to the state of #2")
        expect(page.get_by_role("button", name="Send")).to_be_enabled()
        expect(page.get_by_role("button", name="Stop")).to_be_disabled()

    rewind = saver.wait_for_rewind()
    head = state(server, thread)
    assert (head["checkpoint"]["checkpoint_id"], head["metadata"]["source"]) == (rewind.id, "rewind")
    assert messages(server, thread) == [("human", "Hi"), ("ai", GREETING)]
    assert len(model.requests) == 2  # stopped before the model was asked to answer with the tool's result
    assert elsewhere == [] and errors == []


def test_a_reload_shows_the_thread_of_the_url_from_its_state(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    agent = make(MemorySaver(), model=ScriptedChat(pace=0.0), tool_seconds=0.0)
    server = serve(create_app(agent))
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        say(page, "What's the weather in Rome?")
        expect(page.get_by_role("status")).to_have_text("Done.")
        shown = page.locator(".entry").all_inner_texts()
        thread = thread_of(page)
        assert [kind for kind, _ in messages(server, thread)] == ["human", "ai", "tool", "ai"]

        page.reload()
        expect(page.locator(".assistant").last).to_contain_text("Here is the weather:")
        assert thread_of(page) == thread
        assert page.locator(".entry").all_inner_texts() == shown
        expect(page.locator(".tool-result")).to_contain_text("in Rome")
        expect(page.locator("#history li")).to_have_count(4)
        expect(page.get_by_role("link", name="What's the weather in Rome?")).to_have_attribute("aria-current", "page")

        page.goto(f"{server.url}/#{thread}")  # the thread named after '#' is the same thread
        expect(page.locator(".assistant").last).to_contain_text("Here is the weather:")
        assert thread_of(page) == thread

    assert errors == [] and elsewhere == []


def test_the_thread_list_switches_threads_and_a_new_thread_starts_empty(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    agent = make(MemorySaver(), model=ScriptedChat(pace=0.0), tool_seconds=0.0)
    server = serve(create_app(agent))
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        threads = page.get_by_role("navigation", name="Threads").get_by_role("link")
        say(page, "Hi")
        expect(page.get_by_role("status")).to_have_text("Done.")
        first = thread_of(page)
        expect(threads).to_have_text(["Hi"])

        page.get_by_role("button", name="New thread").click()
        expect(threads).to_have_text(["Empty thread", "Hi"])  # newest first
        second = thread_of(page)
        assert second != first
        expect(threads.first).to_have_attribute("aria-current", "page")
        expect(page.locator(".entry")).to_have_count(0)
        expect(page.locator("#history li")).to_have_count(0)
        assert state(server, second)["values"] == {}

        say(page, "What's the weather in Oslo?")
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(threads).to_have_text(["What's the weather in Oslo?", "Hi"])
        assert thread_of(page) == second

        threads.get_by_text("Hi", exact=True).click()
        expect(page.locator(".user, .assistant")).to_have_text(["Hi", GREETING])
        assert thread_of(page) == first
        expect(page.get_by_role("link", name="Hi", exact=True)).to_have_attribute("aria-current", "page")
        expect(page.locator("#history li")).to_have_count(2)

        page.go_back()  # the browser's history follows the switches
        expect(page.locator(".tool-result")).to_contain_text("in Oslo")
        assert thread_of(page) == second

    assert messages(server, first) == [("human", "Hi"), ("ai", GREETING)]
    assert errors == [] and elsewhere == []


def test_an_approval_shows_approve_and_reject_and_approve_completes_the_turn(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    agent = make(MemorySaver(), model=ScriptedChat(pace=0.0), tool_seconds=0.0, approve_tools=True)
    server = serve(create_app(agent))
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        say(page, "What's the weather in Oslo?")
        approval = page.get_by_role("group", name="Approval")
        expect(approval).to_contain_text('get_weather({"city": "Oslo"})')
        expect(approval.get_by_role("button", name="Reject")).to_be_enabled()
        expect(page.get_by_role("status")).to_have_text("Waiting for your approval.")
        thread = thread_of(page)
        [pending] = state(server, thread)["interrupts"]
        assert pending["value"]["calls"][0]["name"] == "get_weather"
        expect(page.get_by_role("link", name="What's the weather in Oslo?")).to_contain_text("waiting for approval")

        page.reload()  # the question is read back from the thread's state
        expect(approval).to_contain_text('get_weather({"city": "Oslo"})')
        approval.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator(".assistant").last).to_contain_text("Here is the weather:")
        expect(page.locator(".tool-result")).to_contain_text("in Oslo")
        expect(approval).to_have_count(0)

        say(page, "What's the weather in Lima?")
        approval.get_by_role("button", name="Reject").click()
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator(".tool-result.failed")).to_have_text(
            "← get_weather: tool 'get_weather' was not run: the user rejected this call"
        )

    assert state(server, thread)["interrupts"] == []
    kinds = [kind for kind, _ in messages(server, thread)]
    assert kinds == ["human", "ai", "tool", "ai"] * 2
    assert errors == [] and elsewhere == []


class _Down:
    """A chat model whose API is down."""

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        return reactivex.throw(RuntimeError("the model API is down"))


def test_a_failed_turn_shows_its_error_and_the_thread_is_rewound(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(create_app(make(MemorySaver(), model=_Down())))
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        say(page, "Hi")
        expect(page.get_by_role("status")).to_have_text("The turn failed.")
        expect(page.locator(".error")).to_have_text("RuntimeError: the model API is down")
        expect(page.locator(".user")).to_have_count(0)  # rewound: the turn left nothing
        expect(page.locator("#history li").first).to_have_attribute("data-source", "rewind")
        expect(page.get_by_role("link", name="Empty thread")).to_contain_text("failed")
        expect(page.get_by_role("button", name="Send")).to_be_enabled()

    assert errors == [] and elsewhere == []


def _png() -> bytes:
    """A 64x48 red PNG."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 64 for _ in range(48))
    header = struct.pack(">IIBBBBB", 64, 48, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_an_attached_image_is_sent_as_an_image_part_and_shown_with_its_message(
    browser: Browser, serve: Callable[[ASGIApp], Server], tmp_path: Path
) -> None:
    model = ScriptedChat(pace=0.0)
    server = serve(create_app(make(MemorySaver(), model=model, tool_seconds=0.0)))
    errors: list[str] = []
    elsewhere: list[str] = []
    picture = tmp_path / "red.png"
    picture.write_bytes(_png())
    data_url = "data:image/png;base64," + __import__("base64").b64encode(_png()).decode("ascii")

    with chat_page(browser, server, errors, elsewhere) as page:
        page.get_by_label("Attach an image").set_input_files(str(picture))
        expect(page.locator("#attachment")).to_contain_text("Attached: red.png")
        say(page, "What is in this picture?")
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(page.locator("#attachment")).to_have_text("")
        image = page.locator(".user img")
        expect(image).to_have_count(1)
        expect(image).to_have_attribute("src", data_url)
        assert image.evaluate("img => img.complete && img.naturalWidth") == 64  # the browser decoded it
        expect(page.locator(".user")).to_have_text(["What is in this picture?"])
        thread = thread_of(page)

        page.reload()  # read back from the thread's state: the stored parts
        expect(page.locator(".user img")).to_have_attribute("src", data_url)

    [human, _] = state(server, thread)["values"]["messages"]
    assert human["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": data_url}},
    ]
    # The model was asked with the parts: a text part and an image part.
    [request] = model.requests
    assert request[-1].content[1].url == data_url and request[-1].text == "What is in this picture?"
    assert errors == [] and elsewhere == []


def test_a_message_shows_only_safe_images_and_never_its_markup(
    browser: Browser, serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(create_app(make(MemorySaver(), model=ScriptedChat(pace=0.0), tool_seconds=0.0)))
    markup = '<img src=x onerror="window.injected=1"><b>bold</b>'
    parts = [
        {"type": "text", "text": markup},
        {"type": "image_url", "image_url": {"url": "javascript:window.injected=2"}},
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/plain-http.png"}},
        {"type": "image_url", "image_url": {"url": "data:text/html;base64,PGI+eDwvYj4="}},
    ]
    thread = httpx.post(f"{server.url}/threads", json={}, timeout=WAIT).json()["thread_id"]
    response = httpx.post(
        f"{server.url}/threads/{thread}/runs/wait",
        json={"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": parts}]}},
        timeout=WAIT,
    )
    assert response.status_code == 200, response.text
    errors: list[str] = []
    elsewhere: list[str] = []

    with chat_page(browser, server, errors, elsewhere) as page:
        page.goto(f"{server.url}/?thread={thread}")
        expect(page.locator(".user")).to_have_text([markup])  # as text
        expect(page.locator(".user img, .user b")).to_have_count(0)
        assert page.evaluate("window.injected") is None

    assert errors == [] and elsewhere == []
