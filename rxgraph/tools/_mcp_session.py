"""One client session with an MCP server, owned by a task on one event loop from its start to its end."""

from __future__ import annotations

import asyncio
import atexit
import sys
import threading
from concurrent.futures import Future
from typing import Any, TextIO

import mcp
from mcp import types
from mcp.client.stdio import stdio_client

from .._log import log
from ..errors import MCPError
from ..rx._awaitable import running_loop
from ._mcp_content import result_text

__all__ = ["CLOSE_WAIT", "Server", "Session"]

Server = mcp.StdioServerParameters | str
"""What to connect to: a command to start (stdio), or the URL of a streamable HTTP endpoint."""

CLOSE_WAIT = 30.0
"""Seconds a blocking close waits for the session's end. Every wait in the SDK's shutdown of a stdio server is
bounded (its stdin closed, a grace period, then its process group killed), so this is reached only if its loop is
stuck."""

_unclosed: set[Session] = set()
_unclosed_lock = threading.Lock()


class Session:
    """The session of one opening of an ``MCPToolset``.

    ``run`` is the task that owns it: it connects, lists the tools, and keeps the client open until ``stop``; the
    SDK's context managers are entered and left in that one task, as anyio requires. Calls are other tasks on the
    same loop (``call``). ``listing`` gets the tools (or the error that kept it from connecting), ``done`` is set when
    the session has ended and, for a stdio server, its process has been stopped.
    """

    def __init__(self, server: Server, description: str, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.description = description
        self.loop = loop
        self.listing: Future[list[types.Tool]] = Future()
        self.done: Future[None] = Future()
        self.task: asyncio.Task[None] | Future[None] | None = None  # the owning task (or its future), kept referenced
        self._client: mcp.Client | None = None
        self._closing = asyncio.Event()  # bound to the loop on first use, which is in `run`

    def start(self) -> None:
        """Start ``run`` on the session's loop: from another thread (``with``) or on the loop itself (``async
        with``)."""
        if running_loop() is self.loop:
            self.task = self.loop.create_task(self.run(), name=f"MCP session {self.description}")
        else:
            self.task = asyncio.run_coroutine_threadsafe(self.run(), self.loop)
        # Set when the task is over, even one cancelled before it began (which never runs its own `finally`).
        self.task.add_done_callback(self._ended)

    async def run(self) -> None:
        try:
            async with _client(self.server) as client:
                tools = await _all_tools(client)
                self._client = client
                self.listing.set_result(tools)
                await self._closing.wait()
        except BaseException as error:
            if not self.listing.done():
                self.listing.set_exception(_not_connected(self.description, error))
            elif not isinstance(error, asyncio.CancelledError):
                log.warning("the session with MCP server %s ended with an error", self.description, exc_info=True)
            if not isinstance(error, Exception):
                raise

    def _ended(self, _: object) -> None:
        self._client = None
        if not self.listing.done():
            self.listing.set_exception(MCPError("the session was stopped before it connected", server=self.description))
        self.done.set_result(None)

    def stop(self) -> None:
        """Ask ``run`` to close the session (from any thread); ``done`` says when it has."""
        self.loop.call_soon_threadsafe(self._closing.set)

    def abandon(self) -> None:
        """Stop ``run`` where it is (from any thread): for an opening that was interrupted while it connected."""
        task = self.task
        if isinstance(task, asyncio.Task):
            self.loop.call_soon_threadsafe(task.cancel)
        elif task is not None:
            task.cancel()

    def stop_at_exit(self) -> None:
        """Close this session when the interpreter exits, if it is still open then (a toolset opened with ``with``
        on rxgraph's background loop, whose thread would otherwise just stop, leaving a stdio server running)."""
        with _unclosed_lock:
            _unclosed.add(self)
        self.done.add_done_callback(lambda _: _forget(self))

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The text of tool ``name``'s result for ``arguments``, on the session's loop.

        Raises:
            MCPError: the session is closed, the server answered with an error or went away, or the result reports
                an error (``isError``; the message is its text).
        """
        client = self._client
        if client is None:
            raise MCPError(f"the session with MCP server {self.description} ended", server=self.description, tool=name)
        try:
            result = await client.call_tool(name, arguments)
        except mcp.MCPError as error:
            raise MCPError(
                f"MCP server {self.description} answered the call with an error: {error.message} (code {error.code})",
                server=self.description,
                tool=name,
            ) from error
        text = result_text(result)
        if result.is_error:
            raise MCPError(text or "the tool reported an error without a message", server=self.description, tool=name)
        return text


def _client(server: Server) -> mcp.Client:
    if isinstance(server, str):
        return mcp.Client(server)
    return mcp.Client(stdio_client(server, errlog=_stderr()))


def _stderr() -> TextIO:
    """Where a stdio server's stderr goes: this process's, when it is a file (a captured ``sys.stderr``, as in a
    notebook or a test, is not one; the process's own is used then)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    raise MCPError("a stdio MCP server needs a stderr with a file descriptor; this process has none", server="stdio")


async def _all_tools(client: mcp.Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _not_connected(description: str, error: BaseException) -> BaseException:
    if not isinstance(error, Exception):
        return error  # a cancellation or an interrupt: the opener gets it as it is
    return MCPError(f"could not connect to MCP server {description}: {_reason(error)}", server=description)


def _reason(error: BaseException) -> str:
    """What went wrong, from the leaves of the exception groups anyio wraps errors in."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_reason(inner) for inner in error.exceptions))
    if isinstance(error, mcp.MCPError):
        return f"{error.message} (code {error.code})"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _forget(session: Session) -> None:
    with _unclosed_lock:
        _unclosed.discard(session)


@atexit.register
def _stop_unclosed() -> None:
    with _unclosed_lock:
        sessions = list(_unclosed)
    for session in sessions:
        session.stop()
    for session in sessions:
        try:
            session.done.result(CLOSE_WAIT)
        except Exception:
            log.warning("MCP server %s: its session did not end at exit", session.description, exc_info=True)
