"""``EventStream``, the response a run's events are written on, against an ASGI server's side as uvicorn plays it
(``receive`` answers ``http.disconnect`` once the client left or the response is complete): keep-alive comments on
an idle stream (``create_app(ping=...)``, 0 for none), a client that leaves, a server that cancels, an error, and no
task left behind by any of them. The same response under a real uvicorn and real clients is in test_disconnect.py,
test_langgraph_api.py and the other served tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from starlette.types import Message

from rxgraph.errors import InvalidArgumentError
from rxgraph.serve._sse import EventStream

PING = b": ping\r\n\r\n"


class Peer:
    """The server's side of one request: what the response sent, and a client that can leave."""

    def __init__(self, method: str = "POST") -> None:
        self.scope = {"type": "http", "method": method}
        self.sent: list[Message] = []
        self.pinged = asyncio.Event()
        self.left = asyncio.Event()
        self._changed = asyncio.Event()

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message.get("body") == PING:
            self.pinged.set()
        self._changed.set()

    async def receive(self) -> Message:
        while not (self.left.is_set() or self.complete):
            self._changed.clear()
            await self._changed.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.left.set()
        self._changed.set()

    @property
    def complete(self) -> bool:
        return bool(self.sent) and self.sent[-1]["type"] == "http.response.body" and not self.sent[-1]["more_body"]

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def a_then_b(release: asyncio.Event) -> AsyncIterator[bytes]:
    """A run's events: ``a`` at once, then ``b`` once ``release`` is set (idle meanwhile)."""
    yield b"a"
    await release.wait()
    yield b"b"


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def checked() -> None:
        await test()
        for _ in range(3):  # let what ended settle
            await asyncio.sleep(0)
        left = asyncio.all_tasks() - {asyncio.current_task()}
        assert not left, f"tasks left behind: {left}"

    asyncio.run(checked())


def test_an_idle_stream_gets_keep_alive_comments_until_its_next_event() -> None:
    async def test() -> None:
        peer, release = Peer(), asyncio.Event()

        response = EventStream(a_then_b(release), ping=0.001, headers={"Location": "/threads/t/runs/r/stream"})
        serving = asyncio.create_task(response(peer.scope, peer.receive, peer.send))
        await peer.pinged.wait()
        release.set()
        await serving
        start, *_ = peer.sent
        assert start["status"] == 200
        assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
        assert (b"location", b"/threads/t/runs/r/stream") in start["headers"]
        bodies = peer.bodies()
        assert bodies[0] == b"a" and bodies[-2:] == [b"b", b""]
        assert set(bodies[1:-2]) == {PING}
        assert peer.sent[-1]["more_body"] is False

    run(test)


def test_a_stream_of_a_server_with_ping_zero_sends_no_comment() -> None:
    async def test() -> None:
        peer, release = Peer(), asyncio.Event()

        asyncio.get_running_loop().call_later(0.02, release.set)
        await EventStream(a_then_b(release), ping=0, headers={})(peer.scope, peer.receive, peer.send)
        assert peer.bodies() == [b"a", b"b", b""]

    run(test)


def test_a_client_that_leaves_ends_the_stream_without_an_error_and_its_content_is_closed() -> None:
    async def test() -> None:
        peer, closed = Peer(), asyncio.Event()

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b"a"
                await asyncio.get_running_loop().create_future()  # a run that says nothing more
                yield b"never"
            finally:
                closed.set()

        async def leave_after_first() -> None:
            while not peer.bodies():
                await peer._changed.wait()
            peer.leave()

        leaving = asyncio.create_task(leave_after_first())
        await EventStream(events(), ping=0, headers={})(peer.scope, peer.receive, peer.send)
        await leaving
        assert closed.is_set()
        assert peer.bodies() == [b"a"]  # no end of body: the client is gone
        assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]

    run(test)


def test_a_client_that_leaves_while_an_event_is_written_ends_the_stream_and_closes_its_content() -> None:
    async def test() -> None:
        peer, closed, writing = Peer(), asyncio.Event(), asyncio.Event()
        stuck = asyncio.get_running_loop().create_future()

        async def slow_send(message: Message) -> None:
            await peer.send(message)
            if message.get("body") == b"a":
                writing.set()
                await stuck  # the client's socket is full

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b"a"
                yield b"b"
            finally:
                closed.set()

        serving = asyncio.create_task(EventStream(events(), ping=0, headers={})(peer.scope, peer.receive, slow_send))
        await writing.wait()
        peer.leave()
        await serving
        assert closed.is_set() and peer.bodies() == [b"a"]

    run(test)


def test_a_stream_its_server_cancels_ends_cancelled() -> None:
    async def test() -> None:
        peer, started = Peer(), asyncio.Event()

        async def events() -> AsyncIterator[bytes]:
            started.set()
            await asyncio.get_running_loop().create_future()
            yield b"never"

        response = EventStream(events(), ping=0.001, headers={})
        serving = asyncio.create_task(response(peer.scope, peer.receive, peer.send))
        await started.wait()
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving

    run(test)


def test_a_stream_whose_content_fails_raises_the_error_and_leaves_no_task() -> None:
    async def test() -> None:
        peer = Peer()

        async def events() -> AsyncIterator[bytes]:
            yield b"a"
            raise LookupError("the log is gone")

        with pytest.raises(LookupError, match="the log is gone"):
            await EventStream(events(), ping=0.001, headers={})(peer.scope, peer.receive, peer.send)
        assert peer.bodies() == [b"a"]

    run(test)


def test_a_head_request_gets_the_headers_and_no_body() -> None:
    async def test() -> None:
        peer = Peer("HEAD")

        async def events() -> AsyncIterator[bytes]:
            raise AssertionError("a HEAD request reads no event")
            yield b""

        await EventStream(events(), ping=15, headers={})(peer.scope, peer.receive, peer.send)
        assert peer.bodies() == [b""]

    run(test)


@pytest.mark.parametrize("ping", [-1, float("nan")])
def test_a_ping_that_is_not_a_non_negative_number_is_refused(ping: float) -> None:
    async def events() -> AsyncIterator[bytes]:
        yield b""

    with pytest.raises(InvalidArgumentError, match="ping"):
        EventStream(events(), ping=ping, headers={})
