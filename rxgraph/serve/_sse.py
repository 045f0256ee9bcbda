"""``EventStream``: the response a run's server-sent events are written on.

It is written by the request's own task. Two things happen beside the writing, and neither costs a task while the
stream runs normally:

- a client that goes away is noticed by one listener task waiting on the request's ``receive``. The server answers
  that call with ``http.disconnect`` when the client leaves, and also once the response is complete, so the
  listener ends by itself with the stream; only a client that left before the end makes it cancel the writer, which
  then ends the stream as if its events had run out (the caller's ``finally`` cancels the run);
- keep-alive comments come from a timer on the loop, which starts a task only when one is due (an idle stream).

A server that shuts down lets open streams go on until its graceful shutdown's limit, then cancels their requests
(``run_server``: 5 seconds), which cancels their runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from ..errors import InvalidArgumentError

__all__ = ["EventStream"]

_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
)
_PING = b": ping\r\n\r\n"
_END: Message = {"type": "http.response.body", "body": b"", "more_body": False}


class EventStream:
    """A ``text/event-stream`` response of ``content``'s pieces, each written as it comes, with a keep-alive comment
    every ``ping`` seconds the stream is idle (0: none). ``headers`` are added to the event stream's own. A ``HEAD``
    request gets the headers and no body.

    Raises:
        InvalidArgumentError: ``ping`` is negative or not a number.
    """

    __slots__ = ("_content", "_headers", "ping_interval")

    def __init__(self, content: AsyncIterator[bytes], *, ping: float, headers: Mapping[str, str]) -> None:
        if not ping >= 0:
            raise InvalidArgumentError(f"ping must be >= 0 seconds, got {ping!r}", argument="ping")
        self._content = content
        self.ping_interval = float(ping)
        self._headers = [*_HEADERS, *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        if scope.get("method") == "HEAD":
            await send(_END)
            return
        task = asyncio.current_task()
        assert task is not None, "an ASGI app runs in a task"
        writer = _Writer(send, task)
        loop = asyncio.get_running_loop()
        listener = loop.create_task(writer.listen(receive))
        if self.ping_interval > 0:
            writer.keep_alive(loop, self.ping_interval)
        try:
            async for body in self._content:
                await writer.write({"type": "http.response.body", "body": body, "more_body": True})
            await writer.write(_END, last=True)
        except asyncio.CancelledError:
            if not writer.gone or task.uncancel() > 0:
                listener.cancel()
                raise  # cancelled by someone else (the server shutting down): the request ends cancelled
        except BaseException:
            listener.cancel()  # the response never completes: nothing would answer the listener's receive
            raise
        finally:
            writer.close()
        if writer.gone:  # the stream stops where it was: its content is closed now, not when collected
            await _close(self._content)


class _Writer:
    """What the writing task shares with the listener and the keep-alive timer."""

    __slots__ = ("_lock", "_ping", "_send", "ended", "gone", "task")

    def __init__(self, send: Send, task: asyncio.Task[Any]) -> None:
        self._send = send
        self._lock = asyncio.Lock()  # one message at a time: the stream's and the keep-alive comments
        self._ping: asyncio.TimerHandle | None = None
        self.task = task
        self.gone = False  # the client left before the end
        self.ended = False  # the last message was sent (or the stream was closed): nothing more is written

    async def write(self, message: Message, *, last: bool = False) -> None:
        async with self._lock:
            if last:
                self.ended = True
            await self._send(message)

    async def listen(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.ended:
            self.gone = True
            self.ended = True
            self.task.cancel()

    def keep_alive(self, loop: asyncio.AbstractEventLoop, every: float) -> None:
        self._ping = loop.call_later(every, self._ping_due, loop, every)

    def _ping_due(self, loop: asyncio.AbstractEventLoop, every: float) -> None:
        if self.ended:
            return
        if self._lock.locked():  # the stream is writing: it is not idle
            self.keep_alive(loop, every)
            return
        loop.create_task(self._send_ping(loop, every))

    async def _send_ping(self, loop: asyncio.AbstractEventLoop, every: float) -> None:
        async with self._lock:
            if self.ended:
                return
            await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
        if not self.ended:
            self.keep_alive(loop, every)

    def close(self) -> None:
        self.ended = True
        if self._ping is not None:
            self._ping.cancel()


async def _close(content: AsyncIterator[bytes]) -> None:
    close = getattr(content, "aclose", None)
    if close is not None:
        await close()
