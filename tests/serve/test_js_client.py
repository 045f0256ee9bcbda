"""LangGraph's JavaScript client, ``@langchain/langgraph-sdk`` (pinned in ``js/package-lock.json``), unmodified, under
node against a real uvicorn: its React hook ``useStream`` rendered headless (``react-test-renderer``) by
``js/use_stream.mjs``, which prints what the hook shows and every request it sent, one JSON line per step.

Shown: a thread made by the hook (``POST /threads``); a turn streamed with the modes ``values`` and
``messages-tuple``, its run id taken from ``Content-Location``, the run read back and the history read after it; an
edited message that branches the thread (a run from an older ``checkpoint``); a tool approval seen as
``__interrupt__`` and answered with ``command.resume``; Stop (the request aborted, or with ``reconnectOnMount`` the run
cancelled) rewinding the turn on the server, and the hook's read of the thread after it; a page reloaded while its
run goes on, rejoining it (``GET /threads/{id}/runs/{run_id}/stream``, ``Last-Event-ID``), and the client resuming a
stream after an event it had.

The npm packages are installed once (``npm ci``) into a folder of the system's temporary directory named after the
lock file, and reused by later sessions. The tests are skipped without ``node`` and ``npm``, or when the registry
cannot be reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client
from serve._serving import WAIT, ReadingModel, RewindWatch, Server
from serve.test_app import Tool
from serve.test_approval_served import ASKED, Mailer, _agent
from starlette.types import ASGIApp

from rxgraph import MemorySaver
from rxgraph.agent import ReactAgent
from rxgraph.messages import Message, check_request
from rxgraph.serve import create_app

JS = Path(__file__).parent / "js"
NODE, NPM = shutil.which("node"), shutil.which("npm")
INSTALL_SECONDS = 40.0
"""How long ``npm ci`` may take (about 5 s with a network and an empty npm cache; the first test includes it)."""
STEP_SECONDS = 30.0
"""How long a step of the script may take (the script fails a wait of its own after 15 s, and says why)."""
UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH")
"""npm's errors for a registry it cannot reach."""


class ScriptFailed(Exception):
    """The node script failed, or stopped answering: not an assertion of the test about the server."""


class Script:
    """``node use_stream.mjs URL SCENARIO [VARIANT]``, read step by step (``step``); ``go_on`` answers a step that
    waits for the test."""

    def __init__(self, where: Path, *args: str) -> None:
        assert NODE is not None
        self._process = subprocess.Popen(
            [NODE, "use_stream.mjs", *args],
            cwd=where,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        self._stderr.extend(self._process.stderr)

    def _said(self) -> str:
        return "\nnode's stderr:\n" + "".join(self._stderr) if self._stderr else ""

    def step(self, name: str) -> dict[str, Any]:
        """The script's next step, which must be ``name``."""
        try:
            line = self._lines.get(timeout=STEP_SECONDS)
        except queue.Empty:
            raise ScriptFailed(f"node said nothing for {STEP_SECONDS} s; the test waited for {name!r}") from None
        if line is None:
            raise ScriptFailed(f"node exited ({self._process.wait()}) before the step {name!r}{self._said()}")
        data: dict[str, Any] = json.loads(line)
        if data["step"] == "failed":
            raise ScriptFailed("\n".join([data["error"], "what happened:", *data["trace"]]) + self._said())
        if data["step"] != name:
            raise ScriptFailed(f"the step {name!r} was expected, the script said {line}")
        return data

    def go_on(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()

    def finish(self) -> None:
        """The script ends, having said nothing more."""
        try:
            code = self._process.wait(STEP_SECONDS)
        except subprocess.TimeoutExpired:
            raise ScriptFailed("node did not exit after its last step") from None
        rest = []
        while (line := self._lines.get(timeout=STEP_SECONDS)) is not None:
            rest.append(line)
        if code != 0 or rest:
            raise ScriptFailed(f"node exited with {code}, saying {rest}{self._said()}")

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for reader in self._readers:  # they read to the end of the pipes of the exited process
            reader.join(WAIT)
        for pipe in (self._process.stdin, self._process.stdout, self._process.stderr):
            assert pipe is not None
            with suppress(BrokenPipeError):
                pipe.close()


@pytest.fixture(scope="session")
def js_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the scripts of ``js/`` and the npm packages of its lock file (``node_modules``)."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are needed to run LangGraph's JavaScript client (Node.js 20 or later)")
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.skip(f"LangGraph's JavaScript client needs Node.js 20 or later, this is {version}")
    sources = [JS / "package.json", JS / "package-lock.json"]
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in sources)).hexdigest()[:16]
    user = getattr(os, "getuid", lambda: "user")()
    cache = Path(tempfile.gettempdir()) / f"rxgraph-js-client-{user}-{digest}"
    if not (cache / "node_modules" / ".installed").is_file():
        _install(sources, cache)
    here = tmp_path_factory.mktemp("js-client")
    for script in [JS / "package.json", *JS.glob("*.mjs")]:
        shutil.copy2(script, here)
    (here / "node_modules").symlink_to(cache / "node_modules", target_is_directory=True)
    return here


def _install(sources: Sequence[Path], cache: Path) -> None:
    """``npm ci`` in a folder of its own, renamed ``cache`` once complete (a session that installs at the same time
    keeps its own copy)."""
    assert NPM is not None
    staging = Path(tempfile.mkdtemp(prefix=f"{cache.name}.", dir=cache.parent))
    try:
        for source in sources:
            shutil.copy2(source, staging)
        try:
            done = subprocess.run(
                [NPM, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=staging,
                capture_output=True,
                text=True,
                timeout=INSTALL_SECONDS,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm ci did not finish within {INSTALL_SECONDS:.0f} s: is the npm registry out of reach?")
        said = (done.stdout + done.stderr).strip()
        if done.returncode != 0 and any(code in said for code in UNREACHABLE):
            lines = said.splitlines()
            why = next((line for line in lines if "request to" in line), lines[0])
            pytest.skip(f"npm ci could not reach the npm registry (no network?): {why}")
        if done.returncode != 0:
            pytest.fail(f"npm ci failed for tests/serve/js/package-lock.json:\n{said}")
        (staging / "node_modules" / ".installed").write_text("npm ci completed\n")
        if cache.exists() and not (cache / "node_modules" / ".installed").is_file():
            shutil.rmtree(cache)  # left incomplete (a temporary files cleaner)
        try:
            staging.rename(cache)
        except OSError:
            if not (cache / "node_modules" / ".installed").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def node(js_client: Path, *args: str) -> Iterator[Script]:
    script = Script(js_client, *args)
    try:
        yield script
    finally:
        script.close()


def _echo(last: Message) -> list[str]:
    """What the model answers to anything but the weather: "You said: <it>"."""
    return ["You said: ", str(last.content)]


@pytest.fixture
def saver() -> RewindWatch:
    return RewindWatch(MemorySaver())


def _echo_server(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server], tool: Tool | None = None
) -> tuple[Server, ReadingModel]:
    model = ReadingModel(_echo)
    agent = ReactAgent(model, tools=[(tool or Tool()).tool], checkpointer=saver)
    return serve(create_app(agent)), model


def _shown(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The messages the hook showed, as (type, content)."""
    return [(m["type"], m["content"]) for m in view["messages"]]


def _calls(requests: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["method"], r["path"].split("?")[0]) for r in requests]


WEATHER_TURN = [("human", "Weather in Paris?"), ("ai", ""), ("tool", "Sunny in Paris"), ("ai", "Sunny today.")]


def test_use_stream_makes_a_thread_streams_turns_reads_them_back_and_an_edit_branches_the_thread(
    js_client: Path, saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    server, model = _echo_server(saver, serve)
    with node(js_client, server.url, "turns") as script, closing(get_sync_client(url=server.url)) as client:
        first = script.step("first turn")
        view = first["view"]
        thread, run = view["threadId"], first["created"]["run_id"]
        # The hook's calls: the thread, the run streamed, the run read back (is it still going?), the history.
        assert _calls(first["requests"]) == [
            ("POST", "/threads"),
            ("POST", f"/threads/{thread}/runs/stream"),
            ("GET", f"/threads/{thread}/runs/{run}"),
            ("POST", f"/threads/{thread}/history"),
            ("GET", f"/threads/{thread}/runs/{run}"),  # the script's own client.runs.get
        ]
        made, streamed = first["requests"][0], first["requests"][1]
        assert made["status"] == 200
        assert sorted(streamed["body"]["stream_mode"]) == ["messages-tuple", "values"]
        assert streamed["body"]["input"] == {"messages": [{"type": "human", "content": "Weather in Paris?"}]}
        # onCreated: the run id the hook took from the stream's Content-Location, the one its metadata event names.
        assert streamed["contentLocation"] == f"/threads/{thread}/runs/{run}"
        assert first["created"] == {"run_id": run, "thread_id": thread}
        assert first["metadata"] == [{"run_id": run, "attempt": 1}]
        assert first["run"]["status"] == "success" and first["run"]["run_id"] == run
        assert first["requests"][3]["body"] == {"limit": 10}
        assert _shown(view) == WEATHER_TURN
        assert view["messages"][1]["tool_calls"] == [{"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}]
        assert (view["isLoading"], view["error"], view["interrupt"]) == (False, None, None)
        history = client.threads.get_history(thread)
        assert view["history"] == [h["checkpoint"]["checkpoint_id"] for h in reversed(history)]
        assert view["tree"] == ["", "Weather in Paris?", "", "Sunny in Paris", "Sunny today."]  # "": the start
        head_after_first = view["history"][-1]
        script.go_on()

        second = script.step("second turn")
        assert _shown(second["view"]) == [*WEATHER_TURN, ("human", "Hello"), ("ai", "You said: Hello")]
        assert _calls(second["requests"])[0] == ("POST", f"/threads/{thread}/runs/stream")
        assert "checkpoint" not in second["requests"][0]["body"]

        # "Hello" edited: a run from the checkpoint before it; its messages replace it and what followed.
        edited = script.step("edited")
        assert edited["parent"]["checkpoint_id"] == head_after_first
        sent = edited["requests"][0]["body"]
        assert sent["checkpoint"] == {"checkpoint_ns": "", "checkpoint_id": head_after_first, "checkpoint_map": None}
        assert sent["input"] == {"messages": [{"type": "human", "content": "Hi there"}]}
        assert _shown(edited["view"]) == [*WEATHER_TURN, ("human", "Hi there"), ("ai", "You said: Hi there")]
        assert [m.content for m in model.requests[-1]] == [*(c for _, c in WEATHER_TURN), "Hi there"]
        check_request(model.requests[-1])
        state = client.threads.get_state(thread)
        assert [m["content"] for m in state["values"]["messages"]] == [c for _, c in _shown(edited["view"])]
        assert state["parent_checkpoint"]["checkpoint_id"] != head_after_first  # the edited turn's own input
        assert edited["view"]["tree"] == [
            "",
            "Weather in Paris?",
            "",
            "Sunny in Paris",
            "Sunny today.",
            {"fork": [["Hello", "You said: Hello"], ["Hi there", "You said: Hi there"]]},
        ]
        assert len(edited["branchOptions"]) == 2 and edited["branch"] in edited["branchOptions"]

        other = script.step("other branch")
        assert _shown(other["view"]) == [*WEATHER_TURN, ("human", "Hello"), ("ai", "You said: Hello")]
        assert other["requests"] == []
        script.finish()
        assert [r["status"] for r in client.runs.list(thread)] == ["success"] * 3


def test_editing_the_first_message_of_a_thread_replaces_it(
    js_client: Path, saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    server, _ = _echo_server(saver, serve)
    with node(js_client, server.url, "edit-first") as script:
        edited = script.step("edited")
        script.finish()
    assert edited["parent"] is not None, "the hook found no checkpoint before the first message"
    assert _shown(edited["view"]) == [("human", "Hi"), ("ai", "You said: Hi")]


def test_a_streamed_message_keeps_its_id_in_the_values(
    js_client: Path, saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    server, _ = _echo_server(saver, serve)
    with node(js_client, server.url, "ids") as script:
        ids = script.step("ids")
        script.finish()
    assert _shown(ids["view"]) == [("human", "Hello"), ("ai", "You said: Hello")]
    assert len(set(ids["streamed"])) == 1
    assert ids["streamed"][0] == ids["final"][1]
    assert ids["streamMetadata"] is not None and ids["streamMetadata"]["langgraph_node"] == "model"


def test_use_stream_shows_a_tool_approval_and_resumes_the_turn_with_the_answer(
    js_client: Path, serve: Callable[[ASGIApp], Server]
) -> None:
    mailer = Mailer()
    agent, model = _agent(MemorySaver(), mailer)
    server = serve(create_app(agent))
    with node(js_client, server.url, "approval") as script, closing(get_sync_client(url=server.url)) as client:
        asked = script.step("asked")
        view = asked["view"]
        thread = view["threadId"]
        interrupt = view["interrupt"]
        assert interrupt == {"value": ASKED, "id": interrupt["id"], "when": "inside", "node": "tools"}
        assert asked["interruptsSeen"] == [[interrupt]]  # from the values event's __interrupt__, while it streamed
        assert _shown(view) == [("human", "Email Ada"), ("ai", "")]
        assert (view["isLoading"], view["error"]) == (False, None)
        assert mailer.sent == []
        assert client.threads.get(thread)["status"] == "interrupted"
        script.go_on()

        approved = script.step("approved")
        [resumed, *_] = approved["requests"]
        assert _calls([resumed]) == [("POST", f"/threads/{thread}/runs/stream")]
        assert resumed["body"]["command"] == {"resume": {"c1": {"decision": "approve"}}}
        assert "input" not in resumed["body"]
        assert _shown(approved["view"]) == [
            ("human", "Email Ada"),
            ("ai", ""),
            ("tool", "sent to ada@example.com"),
            ("ai", "Sent."),
        ]
        assert approved["view"]["interrupt"] is None and approved["view"]["error"] is None
        script.finish()
        assert mailer.sent == ["ada@example.com"]
        check_request(model.requests[-1].messages)
        assert client.threads.get(thread)["status"] == "idle"


@pytest.mark.parametrize("variant", ["abort", "reconnect"])
def test_stop_rewinds_the_turn_and_the_hook_shows_the_thread_as_the_server_kept_it(
    js_client: Path, saver: RewindWatch, serve: Callable[[ASGIApp], Server], variant: str
) -> None:
    tool = Tool(held=True)
    server, model = _echo_server(saver, serve, tool)
    try:
        with node(js_client, server.url, "stop", variant) as script, closing(get_sync_client(url=server.url)) as client:
            before = script.step("first turn")["view"]
            thread = before["threadId"]
            assert _shown(before) == [("human", "Hello"), ("ai", "You said: Hello")]
            pre_turn = client.threads.get_state(thread)
            script.go_on()

            running = script.step("tool running")
            run = running["created"]["run_id"]
            assert tool.started.wait(WAIT)
            [streamed] = running["requests"]
            if variant == "abort":  # the run ends with its request
                assert (streamed["body"]["on_disconnect"], streamed["body"]["stream_resumable"]) == ("cancel", False)
                assert running["stored"] == {}
            else:  # the run outlives its request; the hook keeps its id in sessionStorage
                assert (streamed["body"]["on_disconnect"], streamed["body"]["stream_resumable"]) == ("continue", True)
                assert running["stored"] == {f"lg:stream:{thread}": run}
            assert _shown(running["view"])[2:] == [("human", "Weather in Paris?"), ("ai", "")]
            script.go_on()  # Stop, while the tool runs

            stopped = script.step("stopped")
            # Stop: the request aborted (and the run cancelled, with reconnectOnMount); the thread read again.
            expected = [("POST", f"/threads/{thread}/history")]
            if variant == "reconnect":
                expected.insert(0, ("POST", f"/threads/{thread}/runs/{run}/cancel"))
                assert stopped["requests"][0]["status"] == 202
            assert _calls(stopped["requests"]) == expected
            rewind = saver.wait_for_rewind()
            assert _shown(stopped["view"]) == _shown(before)
            assert stopped["view"]["history"][-1] == rewind.id  # the hook read the rewound thread
            assert (stopped["view"]["isLoading"], stopped["view"]["error"], stopped["errors"]) == (False, None, [])
            assert stopped["stored"] == {}
            script.step("stopped on the server?")
            state = client.threads.get_state(thread)
            assert state["values"] == pre_turn["values"]
            assert state["checkpoint"]["checkpoint_id"] == rewind.id
            assert client.runs.get(thread, run)["status"] == "interrupted"
            assert client.threads.get(thread)["status"] == "idle"
            tool.released.set()
            script.go_on()

            after = script.step("next turn")
            assert _shown(after["view"]) == [
                ("human", "Hello"),
                ("ai", "You said: Hello"),
                ("human", "Hello again"),
                ("ai", "You said: Hello again"),
            ]
            assert after["errors"] == []
            script.finish()
            assert [m.content for m in model.requests[-1]] == ["Hello", "You said: Hello", "Hello again"]
            check_request(model.requests[-1])
            assert len(saver.rewinds) == 1
    finally:
        tool.released.set()


def test_a_reloaded_page_rejoins_its_run_and_the_client_resumes_a_stream_after_an_event(
    js_client: Path, saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    tool = Tool(held=True)
    server, _ = _echo_server(saver, serve, tool)
    try:
        with node(js_client, server.url, "rejoin") as script, closing(get_sync_client(url=server.url)) as client:
            running = script.step("running")
            thread, run = running["view"]["threadId"], running["created"]["run_id"]
            assert tool.started.wait(WAIT)
            streamed = running["requests"][1]
            assert (streamed["body"]["on_disconnect"], streamed["body"]["stream_resumable"]) == ("continue", True)
            assert running["stored"] == {f"lg:stream:{thread}": run}
            script.go_on()

            # The page reloaded: its history read, then the run it kept in sessionStorage joined from the start.
            rejoined = script.step("rejoined")
            assert _calls(rejoined["requests"]) == [
                ("POST", f"/threads/{thread}/history"),
                ("GET", f"/threads/{thread}/runs/{run}/stream"),
            ]
            join = rejoined["requests"][1]
            assert (join["lastEventId"], join["status"]) == ("-1", 200)
            assert rejoined["metadata"] == [{"run_id": run, "attempt": 1}]
            assert rejoined["view"]["isLoading"] is True
            assert _shown(rejoined["view"]) == [("human", "Weather in Paris?"), ("ai", "")]
            assert client.runs.get(thread, run)["status"] == "running"  # the reload did not cancel it

            # The client: the stream read up to the model's step and left, then resumed after its second event.
            released = script.step("release the tool")
            head = released["head"]
            assert [(p["id"], p["event"]) for p in head] == [
                ("1", "metadata"),
                ("2", "messages"),
                ("3", "messages"),
                ("4", "values"),
            ]
            assert released["after"] == "2"
            tool.released.set()
            script.go_on()

            finished = script.step("finished")
            assert _shown(finished["view"]) == WEATHER_TURN
            assert (finished["view"]["error"], finished["errors"]) == (None, [])
            assert finished["stored"] == {}  # the hook forgets a run once it has ended
            replay = finished["replay"]
            assert replay[:4] == head
            assert finished["resumed"] == replay[2:]  # nothing lost, nothing repeated
            assert [p["id"] for p in replay] == [str(n) for n in range(1, len(replay) + 1)]
            assert replay[-1]["event"] == "values"
            assert [m["content"] for m in replay[-1]["data"]["messages"]] == [c for _, c in WEATHER_TURN]
            script.finish()
            assert client.runs.get(thread, run)["status"] == "success"
            assert client.threads.get_state(thread)["values"] == replay[-1]["data"]
            assert saver.rewinds == []
    finally:
        tool.released.set()
