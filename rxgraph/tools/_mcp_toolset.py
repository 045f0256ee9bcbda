"""``MCPToolset``: the tools of an MCP server, for a ``ReactAgent``, on one client session."""

from __future__ import annotations

import asyncio
import os
import shlex
import threading
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any

import mcp
import reactivex as rx
from reactivex import Observable

from ..errors import ConfigurationError, DeadlockError, InvalidArgumentError, InvalidTypeError, MCPError
from ..rx._awaitable import background_loop, from_awaitable, running_loop
from ._mcp_session import CLOSE_WAIT, Server, Session
from ._mcp_tool import MCPTool

__all__ = ["MCPToolset"]


class MCPToolset:
    """The tools of an MCP server, as rxgraph tools: ``ReactAgent(model, tools=toolset.tools)``.

    Make one with ``MCPToolset.stdio([...])`` (the server is a command this process starts and talks to over its
    stdin and stdout) or ``MCPToolset.http(url)`` (a streamable HTTP endpoint), and open it with ``with`` or
    ``async with``: opening connects (for stdio, starts the server), and lists the server's tools. ``with`` keeps the
    session on rxgraph's background event loop; ``async with`` on the caller's loop, which must then run while the
    tools are called (a turn driven by ``astream`` or ``ainvoke`` on it, say). Closing ends the session and stops a
    stdio server's process (its stdin closed, then, if it has not exited after a grace period, its process group
    killed) — when the block ends, an exception leaves it, or, for a toolset left open, when the interpreter exits.
    The toolset can be opened again after it was closed.

    A call of one of its tools (``MCPTool``) sends ``tools/call`` and gives the result's text, each content block on
    a line of its own. A tool message holds text only, so an image or audio block, or a binary resource, is
    described (``[image not shown: image/png, 5120 bytes; ...]``), never dropped without a word; a text resource
    gives its text; a result with structured content only gives it as JSON. A result that reports an error
    (``isError``) fails the call with ``MCPError`` (its message: the result's text), which a ``ReactAgent`` turns
    into an error tool message. Disposing a call — a cancelled turn, say — cancels its request: the SDK tells the
    server (``notifications/cancelled``; over streamable HTTP of the 2026 protocol, the request's stream is closed),
    so the server stops the tool, and the turn is rewound as any cancelled turn.

    Attributes:
        server: what it connects to: the stdio command's parameters (``mcp.StdioServerParameters``) or the URL.
        requires_approval: which of the server's tools a ``ReactAgent`` asks a human about before it runs a call:
            all (True), none (False), or those named (the server's names).
    """

    def __init__(self, server: Server, *, requires_approval: bool | Collection[str] = False) -> None:
        """A toolset for ``server`` (see ``stdio`` and ``http``, which build it); nothing is started until it is
        opened.

        Raises:
            InvalidTypeError: ``server`` is neither ``mcp.StdioServerParameters`` nor a URL, or ``requires_approval``
                is neither a bool nor a collection of tool names.
        """
        if not isinstance(server, mcp.StdioServerParameters | str):
            raise InvalidTypeError(
                f"server must be mcp.StdioServerParameters or a URL, got {type(server).__name__}", argument="server"
            )
        if not isinstance(requires_approval, bool):
            if isinstance(requires_approval, str) or not isinstance(requires_approval, Collection):
                raise InvalidTypeError(
                    f"requires_approval must be a bool or a collection of tool names, got {requires_approval!r}",
                    argument="requires_approval",
                )
            if not all(isinstance(name, str) for name in requires_approval):
                raise InvalidTypeError("requires_approval must name tools by strings", argument="requires_approval")
            requires_approval = frozenset(requires_approval)
        self.server = server
        self.requires_approval: bool | frozenset[str] = requires_approval
        if isinstance(server, str):
            self._description = server
        else:
            self._description = shlex.join([server.command, *server.args])
        self._session: Session | None = None
        self._tools: tuple[MCPTool, ...] = ()
        self._lock = threading.Lock()

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        requires_approval: bool | Collection[str] = False,
    ) -> MCPToolset:
        """A toolset whose server is ``command``, started when the toolset is opened and stopped when it closes.

        Args:
            command: the program and its arguments, e.g. ``[sys.executable, "-m", "my_server"]``.
            env: environment variables for the server, on top of the few the SDK passes on (``HOME``, ``PATH``,
                ``USER``...; not this process's whole environment: pass ``dict(os.environ)`` for that).
            cwd: the server's working directory (default: this process's).
            requires_approval: see the class.

        Raises:
            InvalidTypeError: ``command`` is not a sequence of strings, or ``env`` not a mapping of strings.
            InvalidArgumentError: ``command`` is empty.
        """
        if isinstance(command, str) or not isinstance(command, Sequence):
            raise InvalidTypeError(
                f"command must be a list of strings (the program and its arguments), got {command!r}",
                argument="command",
            )
        if not command:
            raise InvalidArgumentError("command is empty: name the program to start", argument="command")
        if not all(isinstance(part, str) for part in command):
            raise InvalidTypeError(f"command must hold strings only, got {command!r}", argument="command")
        if env is not None and not (
            isinstance(env, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise InvalidTypeError("env must map names to strings", argument="env")
        parameters = mcp.StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
        )
        return cls(parameters, requires_approval=requires_approval)

    @classmethod
    def http(cls, url: str, *, requires_approval: bool | Collection[str] = False) -> MCPToolset:
        """A toolset for the streamable HTTP endpoint at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``).

        Raises:
            InvalidArgumentError: ``url`` is not an ``http://`` or ``https://`` URL.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"url must be an http:// or https:// URL, got {url!r}", argument="url")
        return cls(url, requires_approval=requires_approval)

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        return f"MCPToolset({self._description!r}, {state})"

    @property
    def tools(self) -> tuple[MCPTool, ...]:
        """The server's tools, as it listed them when the toolset was opened.

        Raises:
            ConfigurationError: the toolset is not open.
        """
        if self._session is None:
            raise ConfigurationError(
                f"MCPToolset({self._description!r}) is not open: use it in a `with` (or `async with`) block"
            )
        return self._tools

    # -- opening and closing --------------------------------------------------------------------------------------

    def __enter__(self) -> MCPToolset:
        """Connect on rxgraph's background loop and list the tools (blocks until then).

        Raises:
            MCPError: the server could not be started or reached, or it refused to start the session.
            ConfigurationError: the toolset is open already.
            InvalidArgumentError: ``requires_approval`` names a tool the server does not have.
        """
        session = self._new_session(background_loop())
        session.start()
        try:
            self._tools = self._made_tools(session.listing.result())
        except BaseException:
            self._closing()
            session.abandon()
            session.done.result(CLOSE_WAIT)
            raise
        session.stop_at_exit()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> MCPToolset:
        """Connect on the running event loop and list the tools.

        Raises:
            MCPError: the server could not be started or reached, or it refused to start the session.
            ConfigurationError: the toolset is open already.
            InvalidArgumentError: ``requires_approval`` names a tool the server does not have.
        """
        session = self._new_session(asyncio.get_running_loop())
        session.start()
        try:
            self._tools = self._made_tools(await asyncio.wrap_future(session.listing))
        except BaseException:
            self._closing()
            session.abandon()
            await asyncio.shield(asyncio.wrap_future(session.done))
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def close(self) -> None:
        """End the session (and stop a stdio server), waiting until it has ended. Closing a closed toolset does
        nothing.

        Raises:
            DeadlockError: called on the event loop the session runs on (from ``async with``: use ``aclose``).
            MCPError: the session did not end in time.
        """
        session = self._closing()
        if session is None:
            return
        if running_loop() is session.loop:
            raise DeadlockError(
                f"MCPToolset({self._description!r}).close() would block the event loop its session runs on; "
                "await aclose() instead"
            )
        session.stop()
        try:
            session.done.result(CLOSE_WAIT)
        except TimeoutError:
            raise MCPError(
                f"the session with MCP server {self._description} did not end within {CLOSE_WAIT:.0f} s",
                server=self._description,
            ) from None

    async def aclose(self) -> None:
        """End the session (and stop a stdio server) and wait until it has, without blocking the event loop."""
        session = self._closing()
        if session is not None:
            session.stop()
            await asyncio.shield(asyncio.wrap_future(session.done))

    def _new_session(self, loop: asyncio.AbstractEventLoop) -> Session:
        with self._lock:
            if self._session is not None:
                raise ConfigurationError(f"MCPToolset({self._description!r}) is open already")
            self._session = Session(self.server, self._description, loop)
            return self._session

    def _closing(self) -> Session | None:
        with self._lock:
            session, self._session = self._session, None
            return session

    def _made_tools(self, definitions: list[mcp.types.Tool]) -> tuple[MCPTool, ...]:
        names = {definition.name for definition in definitions}
        wanted = self.requires_approval
        if isinstance(wanted, frozenset) and not wanted <= names:
            unknown = ", ".join(sorted(wanted - names))
            raise InvalidArgumentError(
                f"requires_approval names tools MCP server {self._description} does not have: {unknown} "
                f"(it has: {', '.join(sorted(names)) or 'none'})",
                argument="requires_approval",
            )
        tools = tuple(
            MCPTool(
                definition,
                self._call,
                requires_approval=wanted if isinstance(wanted, bool) else definition.name in wanted,
            )
            for definition in definitions
        )
        seen: dict[str, str] = {}
        for made in tools:
            if made.name in seen:
                raise MCPError(
                    f"MCP server {self._description} has tools {seen[made.name]!r} and {made.server_name!r}, which "
                    f"are both {made.name!r} to a model (a name keeps letters, digits, '_' and '-')",
                    server=self._description,
                )
            seen[made.name] = made.server_name
        return tools

    # -- calling --------------------------------------------------------------------------------------------------

    def _call(self, name: str, arguments: dict[str, Any]) -> Observable[str]:
        """A cold Observable of one call's text: sent when subscribed, through the session open then, as a task on
        its loop; disposing it cancels the task, and with it the request."""

        def _start(_: Any) -> Observable[str]:
            session = self._session
            if session is None:
                raise MCPError(
                    f"the toolset of MCP server {self._description} is closed", server=self._description, tool=name
                )
            return from_awaitable(session.call(name, arguments), session.loop)

        return rx.defer(_start)
