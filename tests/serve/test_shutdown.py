"""A server that shuts down while a run's stream is open: the stream goes on until the server's graceful shutdown
gives up (``run_server``: 5 seconds; these tests' server: ``GRACE``). A turn that ends meanwhile reaches its client
whole; one still going then is cancelled, and rewound before the server is gone. (The saver does not matter here:
SQLite's stands for all.)"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import WAIT, RewindWatch, Server, post_turn
from starlette.types import ASGIApp

from rxgraph import CheckpointSaver, RunInfo
from rxgraph.agent import ReactAgent, tool
from rxgraph.checkpoint import SqliteSaver
from rxgraph.serve import create_app
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

POOL = ThreadPoolScheduler(2)
GREETING = [text("Hello!"), finish()]
CALL = [tool_call("c1", "get_weather", '{"city": "Paris"}'), finish("tool_calls")]
ANSWER = [text("Sunny."), finish()]


class Turn:
    """The weather turn, its tool held until the test releases it (``release``) or, when ``hold``, until the run
    is cancelled; and the client that streams it, in a thread of its own."""

    def __init__(self, saver: CheckpointSaver, *, hold: bool) -> None:
        self.started, self.release, self.saw_cancel = threading.Event(), threading.Event(), threading.Event()
        self.events: list[tuple[str, Any]] = []
        self.error: Exception | None = None

        @tool(scheduler=POOL)
        def get_weather(city: str, run: RunInfo) -> str:
            """Current weather for a city."""
            self.started.set()
            if hold:
                if run.cancelled.wait(WAIT):
                    self.saw_cancel.set()
            else:
                self.release.wait(WAIT)
            return f"Sunny in {city}"

        self.agent = ReactAgent(ScriptedChatModel([GREETING, CALL, ANSWER]), tools=[get_weather], checkpointer=saver)
        self._client: threading.Thread | None = None

    def stream(self, url: str) -> None:
        def client() -> None:
            try:
                self.events = post_turn(url, "t", {"input": {"messages": "Weather in Paris?"}})
            except httpx.HTTPError as error:  # the server went away before the stream's end
                self.error = error

        self._client = threading.Thread(target=client)
        self._client.start()
        assert self.started.wait(WAIT), "the tool was not called"

    def streamed(self) -> None:
        assert self._client is not None
        self._client.join(WAIT)
        assert not self._client.is_alive(), "the client's stream did not end"


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[RewindWatch]:
    with SqliteSaver(tmp_path / "threads.db") as inner:
        yield RewindWatch(inner)


def stop_in_background(server: Server) -> threading.Thread:
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    assert server.stopping.wait(WAIT), "the server did not begin its shutdown"
    return stopping


def test_a_turn_that_ends_while_the_server_shuts_down_reaches_its_client_whole(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    turn = Turn(saver, hold=False)
    server = serve(create_app(turn.agent))
    post_turn(server.url, "t", {"input": {"messages": "Hi"}})
    turn.stream(server.url)

    stopping = stop_in_background(server)
    turn.release.set()
    turn.streamed()
    stopping.join()

    assert turn.error is None
    name, values = turn.events[-1]
    assert name == "values" and values["messages"][-1]["content"] == "Sunny."
    head = saver.get("t")
    assert head is not None and head.values["messages"][-1].content == "Sunny."
    assert saver.rewinds == []


def test_a_turn_still_going_when_the_grace_period_ends_is_cancelled_and_rewound(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    turn = Turn(saver, hold=True)
    server = serve(create_app(turn.agent))
    post_turn(server.url, "t", {"input": {"messages": "Hi"}})
    before = saver.get("t")
    assert before is not None
    turn.stream(server.url)

    stopping = stop_in_background(server)
    assert not turn.saw_cancel.is_set()  # the shutdown began; the turn goes on
    turn.streamed()
    stopping.join()

    assert turn.saw_cancel.is_set()
    rewind = saver.wait_for_rewind()
    assert rewind.parent_id is not None and rewind.values == before.values
    head = saver.get("t")
    assert head is not None and head.id == rewind.id
    assert turn.events == [] or all(name != "values" or "Sunny." not in str(data) for name, data in turn.events)
