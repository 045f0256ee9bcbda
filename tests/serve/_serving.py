"""What the server tests share (``from serve._serving import ...``): a real uvicorn on 127.0.0.1, a saver that says
when a rewind is written, a scripted model that says when it is called and how its answers ended, and a reader of
server-sent events."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import reactivex as rx
import uvicorn
from reactivex import Observable
from starlette.types import ASGIApp

import rxgraph
from rxgraph import Checkpoint, CheckpointSaver
from rxgraph.agent import ChatChunk, ToolSpec
from rxgraph.messages import Message, ToolMessage, UserMessage
from rxgraph.rx import SignalType, do_finally
from rxgraph.testing import DelegatingSaver, ScriptedChatModel, finish, text, tool_call

WAIT = 10.0
"""Seconds a test waits for something that should happen at once, before it fails."""
GRACE = 2
"""Seconds a test server's graceful shutdown waits for the requests still going before it cancels them."""


class RewindWatch(DelegatingSaver):
    """A saver that signals every rewind written through it."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.rewinds: list[Checkpoint] = []
        self._changed = threading.Condition()

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        stored = super().put(checkpoint, expected_head=expected_head)
        if stored.source == "rewind":
            with self._changed:
                self.rewinds.append(stored)
                self._changed.notify_all()
        return stored

    def wait_for_rewind(self, count: int = 1) -> Checkpoint:
        """The ``count``-th rewind, once it is written."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.rewinds) >= count, WAIT):
                raise AssertionError(f"no rewind #{count} was written within {WAIT} s (rewinds: {self.rewinds})")
            return self.rewinds[count - 1]


WEATHER_CALL = tool_call("c1", "get_weather", '{"city": "Paris"}')
"""The model's call of ``get_weather`` for Paris, as the served weather agents' models stream it."""


class ReadingModel:
    """A model that answers by reading the request: a question about the weather gets ``WEATHER_CALL``, a tool's
    result "Sunny today.", anything else the pieces ``answer(last message)`` gives ("Rain." by default). Every
    request is kept."""

    def __init__(self, answer: Callable[[Message], Sequence[str]] = lambda _: ["Rain."]) -> None:
        self.requests: list[Sequence[Message]] = []
        self._answer = answer

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        self.requests.append(tuple(messages))
        last = messages[-1]
        if isinstance(last, UserMessage) and "Weather" in last.content:
            chunks = [WEATHER_CALL, finish("tool_calls")]
        elif isinstance(last, ToolMessage):
            chunks = [text("Sunny "), text("today."), finish()]
        else:
            chunks = [*(text(piece) for piece in self._answer(last)), finish()]
        return rx.from_iterable(chunks)


class SignallingModel(ScriptedChatModel):
    """A ``ScriptedChatModel`` that also says when it is called and how each answer's stream ended (``ends``:
    ``SignalType.CANCEL`` when the answer was disposed before it completed)."""

    def __init__(self, scripts: Sequence[Any]) -> None:
        super().__init__(scripts)
        self.ends: dict[int, SignalType] = {}
        self._changed = threading.Condition()

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        answer = super().stream(messages, tools)
        call = self.calls

        def ended(signal: SignalType) -> None:
            with self._changed:
                self.ends[call] = signal
                self._changed.notify_all()

        with self._changed:
            self._changed.notify_all()
        return answer.pipe(do_finally(ended))

    def wait_for_calls(self, calls: int) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.calls >= calls, WAIT):
                raise AssertionError(f"the model was called {self.calls} time(s) within {WAIT} s, not {calls}")

    def wait_for_end(self, call: int) -> SignalType:
        """How the answer to call number ``call`` (1 for the first) ended, once it has."""
        with self._changed:
            if not self._changed.wait_for(lambda: call in self.ends, WAIT):
                raise AssertionError(f"the model's answer #{call} did not end within {WAIT} s")
            return self.ends[call]


class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self.stopping = threading.Event()  # it stopped listening, and waits for the requests still going

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


class Server:
    """An app served by uvicorn on 127.0.0.1 (a free port) in a thread of its own, until ``stop``. Its graceful
    shutdown waits ``GRACE`` seconds for the requests still going, then cancels them."""

    def __init__(self, app: ASGIApp) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE, lifespan="off")
        self._server = _Uvicorn(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        if not self._server.ready.wait(WAIT):
            self.stop()
            raise AssertionError(f"uvicorn did not start within {WAIT} s")

    @property
    def stopping(self) -> threading.Event:
        """Set once the server has begun its shutdown (stopped listening; the requests still going go on)."""
        return self._server.stopping

    def stop(self) -> None:
        """Stop serving, once every request has ended (stopping again does nothing)."""
        self._server.should_exit = True
        self._thread.join(WAIT + GRACE)
        self._socket.close()
        assert not self._thread.is_alive(), "uvicorn did not stop"


def events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """The server-sent events of a streamed response, as (event, data parsed as JSON), as they arrive."""
    name, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))


def run_body(body: Any) -> dict[str, Any]:
    """A run's request body: ``body`` (an agent's messages as ``{"messages": ...}``, state, ``command``...) with the
    defaults these tests use: the assistant ``agent``, the thread created by its first run, and every stream mode
    (``values``, ``updates``, ``messages-tuple``, ``custom``)."""
    return {
        "assistant_id": "agent",
        "if_not_exists": "create",
        "stream_mode": ["values", "updates", "messages-tuple", "custom"],
        **body,
    }


def post_turn(url: str, thread: str, body: Any) -> list[tuple[str, Any]]:
    """One run from start to end (``POST /threads/{thread}/runs/stream``, ``run_body(body)``), on a connection of
    its own: every event the server sent, the ``metadata`` event first."""
    with (
        httpx.Client(base_url=url, timeout=WAIT) as client,
        client.stream("POST", f"/threads/{thread}/runs/stream", json=run_body(body)) as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(events(response))


def leave_when(url: str, thread: str, body: Any, reached: Callable[[str, Any], bool]) -> None:
    """Start a run and read its events until ``reached(event, data)``; then close the connection, as a browser tab
    closing does."""
    with (
        httpx.Client(base_url=url, timeout=WAIT) as client,
        client.stream("POST", f"/threads/{thread}/runs/stream", json=run_body(body)) as response,
    ):
        for name, data in events(response):
            assert name != "error", (name, data)
            if reached(name, data):
                return
    raise AssertionError("the run ended before the point to leave it")


def hang_up_after(url: str, thread: str, body: Any, ready: Callable[[], None]) -> None:
    """Send a run's request, wait for ``ready()`` and hang up: for a run that has sent nothing yet, not even its
    response's headers, which an HTTP client would wait for."""
    address = urlsplit(url)
    assert address.hostname is not None and address.port is not None
    content = json.dumps(run_body(body)).encode()
    with socket.create_connection((address.hostname, address.port), timeout=WAIT) as connection:
        connection.sendall(
            f"POST /threads/{thread}/runs/stream HTTP/1.1\r\nHost: {address.netloc}\r\n".encode()
            + f"Content-Type: application/json\r\nContent-Length: {len(content)}\r\n\r\n".encode()
            + content
        )
        ready()


SERVE_ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")},  # the scripted model
    "PYTHONPATH": os.pathsep.join([str(Path(rxgraph.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
    "PYTHONUNBUFFERED": "1",
}
"""The environment ``rxgraph serve`` runs in for the tests: the package under test importable, the demo agent on its
scripted model."""


@contextmanager
def rxgraph_serve(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, after: list[str] | None = None
) -> Iterator[tuple[str, str]]:
    """``rxgraph serve ARGS --port 0`` in a subprocess (``env`` added to its environment): yields its URL and what it
    printed until it listened. When the block ends, it is sent SIGINT and must exit cleanly (it is killed if the
    block failed first); what it printed from then on is appended to ``after``, if given."""
    server = subprocess.Popen(
        [sys.executable, "-m", "rxgraph", "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**SERVE_ENV, **(env or {})},
    )
    try:
        assert server.stdout is not None
        said: list[str] = []
        started = None
        for line in server.stdout:  # ends if the server exits
            said.append(line)
            started = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if started:
                break
        assert started, "".join(said)
        yield started.group(1), "".join(said)
        server.send_signal(signal.SIGINT)
        rest, _ = server.communicate(timeout=WAIT)
        assert server.returncode == 0, rest
        if after is not None:
            after.append(rest)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
