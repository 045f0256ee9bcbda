"""``create_app``: a graph or an agent as an ASGI app (Starlette), its runs streamed as server-sent events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources
from typing import Any

from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .._json import checkpoint_metadata, to_json
from .._log import log
from ..agent._react import ReactAgent
from ..errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTypeError,
    MessageFormatError,
    RxGraphError,
    ThreadBusyError,
    ThreadNotFoundError,
    UnsafeHistoryError,
)
from ..graph._compiled import CompiledGraph
from ..graph._config import RunnableConfig
from ..graph._interrupt import Command
from ..graph._outputs import RunOutput
from ..messages._openai import from_openai
from ._events import EventEncoder, error_json, interrupt_json
from ._guard import DEFAULT_MAX_BODY, LOOPBACK_HOSTS, HostCheck, read_body
from ._outputs import Item, RunOutputs
from ._requests import AgentRunRequest, GraphRunRequest

__all__ = ["create_app"]

_HISTORY_LIMIT = 20
"""Checkpoints ``GET /threads/{thread_id}/history`` returns when the client does not say."""

_HISTORY_MAX = 10_000
"""The most checkpoints one ``GET /threads/{thread_id}/history`` returns (a larger ``limit`` is refused with 422):
one answer stays a size a server builds in memory and a client reads at once."""

_PAGE_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The chat page loads nothing but itself, and talks to this server only."""


def create_app(
    target: CompiledGraph | ReactAgent,
    *,
    page: bool = True,
    ping: float = 15.0,
    max_body: int = DEFAULT_MAX_BODY,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
) -> Starlette:
    """An ASGI app serving ``target``'s threads over HTTP (Starlette; install the ``serve`` extra).

    Routes (see the ``rxgraph.serve`` docstring for the bodies and the events):

    - ``POST /threads/{thread_id}/runs/stream``: start a run (an agent's turn) and stream it as server-sent events.
      The client going away cancels the run, which is rewound.
    - ``GET /threads/{thread_id}/state``: the thread's head (404 for a thread with no checkpoint).
    - ``GET /threads/{thread_id}/history?limit=N``: its newest ``N`` checkpoints (1 to 10,000; default 20), newest
      first (404 for a thread with no checkpoint).
    - ``GET /``: for an agent, a chat page to try it in a browser (``page=False`` leaves it out).

    Args:
        target: a compiled graph or a ``ReactAgent``, with a checkpointer.
        page: serve the chat page at ``/`` (for an agent; a graph's runs take state as JSON, which the page does
            not write).
        ping: seconds between keep-alive comments on an idle stream (0: none), for proxies that close quiet
            connections.
        max_body: the largest body a run's request may have, in bytes (default 10 MiB); a larger one is refused
            with 413 before the run starts.
        allowed_origins: origins (``"https://app.example.com"``) whose pages may start runs here, besides this
            server's own. A browser's request from any other site — its ``Origin`` header says so — is refused with
            403; a run's body must be ``application/json`` (415 otherwise), which a browser does not send to another
            site without asking first, so a cross-site form or ``text/plain`` post never starts a run.
        allowed_hosts: the host names the app answers for, on every route (400 for any other ``Host``, so that
            another site's page cannot reach it under its own name: DNS rebinding). Default: this machine's own
            (``127.0.0.1``, ``localhost``, ``::1``, and ``testserver`` for Starlette's ``TestClient``);
            ``"*.example.com"`` for subdomains, ``["*"]`` for any host.

    Raises:
        InvalidTypeError: ``target`` is neither a ``CompiledGraph`` nor a ``ReactAgent``.
        InvalidArgumentError: ``target`` has no checkpointer (threads are what the app serves), ``ping`` < 0, or
            ``max_body`` < 1.
    """
    if isinstance(target, ReactAgent):
        graph, agent = target.graph, target
    elif isinstance(target, CompiledGraph):
        graph, agent = target, None
    else:
        raise InvalidTypeError(
            f"create_app serves a CompiledGraph or a ReactAgent, got {type(target).__name__}", argument="target"
        )
    if graph.checkpointer is None:
        raise InvalidArgumentError(
            "create_app serves threads, which need a checkpointer: compile(checkpointer=...) or "
            "ReactAgent(..., checkpointer=...)",
            argument="target",
        )
    if not ping >= 0:
        raise InvalidArgumentError(f"ping must be >= 0 seconds, got {ping!r}", argument="ping")
    if type(max_body) is not int or max_body < 1:
        raise InvalidArgumentError(f"max_body must be a number of bytes >= 1, got {max_body!r}", argument="max_body")
    if isinstance(allowed_hosts, str) or not allowed_hosts:
        raise InvalidTypeError(
            f"allowed_hosts takes a non-empty list of host names (['*'] for any), got {allowed_hosts!r}",
            argument="allowed_hosts",
        )
    if isinstance(allowed_origins, str):
        raise InvalidTypeError(
            f"allowed_origins takes a list of origins, not a string: [{allowed_origins!r}]", argument="allowed_origins"
        )
    routes = [
        Route(
            "/threads/{thread_id}/runs/stream",
            _RunStream(graph, agent, ping, max_body, frozenset(allowed_origins)),
            methods=["POST"],
        ),
        Route("/threads/{thread_id}/state", _Reads(graph).state, methods=["GET"]),
        Route("/threads/{thread_id}/history", _Reads(graph).history, methods=["GET"]),
    ]
    if page and agent is not None:
        html = resources.files(__package__).joinpath("chat.html").read_text(encoding="utf-8")

        async def _page(request: Request) -> Response:
            return HTMLResponse(html, headers={"Content-Security-Policy": _PAGE_POLICY})

        routes.append(Route("/", _page, methods=["GET"]))
    return Starlette(
        routes=routes,
        exception_handlers={RxGraphError: _failed_read},
        middleware=[Middleware(HostCheck, allowed=frozenset(allowed_hosts))],
    )


class _JSON(JSONResponse):
    """JSON as rxgraph writes it: ASCII with escapes, so that a string holding half of a surrogate pair (a streamed
    emoji cut in two) is still sent, and non-finite floats refused (``to_json`` turns them into strings)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _refused(document: dict[str, Any]) -> Response:
    """The answer to a request the app cannot act on: 422, with the error JSON."""
    return _JSON(document, status_code=422)


def _config(request: Request, **fields: Any) -> RunnableConfig | Response:
    """The run's config, for the thread in the path; or the 422 that refuses the request."""
    try:
        return RunnableConfig(thread_id=request.path_params["thread_id"], **fields)
    except InvalidConfigError as error:
        return _refused(_validation_json(error.errors))


def _validation_json(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors]
    return {"type": "ValidationError", "message": "; ".join(problems)}


async def _failed_read(request: Request, error: Exception) -> Response:
    status = 422 if isinstance(error, InvalidArgumentError | InvalidTypeError) else 500
    return _JSON(error_json(error), status_code=status)


class _Reads:
    """The read endpoints. The saver's I/O runs on Starlette's thread pool, never on the event loop; a read waits
    for a rewind in flight on the thread (``CompiledGraph.get_state``)."""

    def __init__(self, graph: CompiledGraph) -> None:
        self._graph = graph

    async def state(self, request: Request) -> Response:
        config = _config(request)
        if isinstance(config, Response):
            return config
        snapshot = await run_in_threadpool(self._graph.get_state, config)
        checkpoint = snapshot.checkpoint
        if checkpoint is None:
            return _no_thread(str(config.thread_id))
        return _JSON(
            {
                "thread_id": config.thread_id,
                "values": to_json(snapshot.values),
                "next": list(snapshot.next),
                "interrupt": interrupt_json(snapshot.interrupt) if snapshot.interrupt is not None else None,
                "checkpoint": checkpoint_metadata(checkpoint),
            }
        )

    async def history(self, request: Request) -> Response:
        config = _config(request)
        if isinstance(config, Response):
            return config
        limit = _limit(request.query_params.get("limit"))
        if limit is None:
            return _refused(
                {"type": "ValidationError", "message": f"limit: must be a whole number from 1 to {_HISTORY_MAX}"}
            )
        snapshots = await run_in_threadpool(self._graph.get_state_history, config, limit=limit)
        checkpoints = [
            {**checkpoint_metadata(s.checkpoint), "values": to_json(s.values)}
            for s in snapshots
            if s.checkpoint is not None
        ]
        if not checkpoints:  # a limit >= 1 lists the head of any thread there is
            return _no_thread(str(config.thread_id))
        return _JSON({"thread_id": config.thread_id, "checkpoints": checkpoints})


def _no_thread(thread_id: str) -> Response:
    """The answer to a read of a thread with no checkpoint (a typo in its id, most likely): 404, with the error
    JSON."""
    error = ThreadNotFoundError(
        f"thread {thread_id!r} has no checkpoint: check its id (a thread exists once a run has written to it)",
        thread_id=thread_id,
    )
    return _JSON(error_json(error), status_code=404)


def _limit(text: str | None) -> int | None:
    """The ``limit`` a client asked for (or the default); None when it is not a whole number from 1 to
    ``_HISTORY_MAX``."""
    if text is None:
        return _HISTORY_LIMIT
    # The length first: int() refuses decimal text longer than 4,300 digits with a ValueError.
    if not (text.isascii() and text.isdigit() and len(text.lstrip("0")) <= len(str(_HISTORY_MAX))):
        return None
    return int(text) if 1 <= int(text) <= _HISTORY_MAX else None


class _RunStream:
    """``POST /threads/{thread_id}/runs/stream`` as a plain ASGI app, so that one ``try``/``finally`` owns the run
    from its start to its teardown, whatever ends the request: the run's end, the client going away (seen by
    sse-starlette, or while waiting for the first output), or the request's task being cancelled."""

    def __init__(
        self,
        graph: CompiledGraph,
        agent: ReactAgent | None,
        ping: float,
        max_body: int = DEFAULT_MAX_BODY,
        allowed_origins: frozenset[str] = frozenset(),
    ) -> None:
        self._graph = graph
        self._agent = agent
        self._ping = ping
        self._max_body = max_body
        self._allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            body = await read_body(request, max_body=self._max_body, allowed_origins=self._allowed_origins)
        except ClientDisconnect:
            return  # gone before its request was whole: nothing was started
        if isinstance(body, Response):
            await body(scope, receive, send)  # refused before anything was started
            return
        started = self._start(request, body)
        if isinstance(started, Response):
            await started(scope, receive, send)
            return
        config, outputs = started
        run = RunOutputs(outputs)
        try:
            first = await _first_or_gone(run, receive)
            if isinstance(first, _Gone):
                return  # nobody to answer; `finally` cancels (and rewinds) the run
            if isinstance(first, ThreadBusyError):
                # multitask="reject": refused before a byte of the stream, so the client gets a status to act on.
                await _JSON(error_json(first), status_code=409)(scope, receive, send)
                return
            encoder = EventEncoder(thread_id=str(config.thread_id), agent=self._agent is not None)
            events = self._events(first, run, encoder, config)
            await EventSourceResponse(events, ping=self._ping)(scope, receive, send)
        finally:
            await run.close()

    def _start(self, request: Request, body: bytes) -> tuple[RunnableConfig, AsyncIterator[RunOutput]] | Response:
        """The run the request asks for, not started yet (nothing runs until it is iterated); or the 422 that
        refuses a body that does not say."""
        try:
            if self._agent is not None:
                turn = AgentRunRequest.model_validate_json(body)
                config = _config(request, context=turn.context, multitask=turn.multitask)
                if isinstance(config, Response):
                    return config
                if turn.resumes:
                    return config, self._agent.astream(Command(resume=turn.resume), config)
                assert turn.input is not None
                messages = turn.input if isinstance(turn.input, str) else from_openai(turn.input)
                return config, self._agent.astream(messages, config)
            run = GraphRunRequest.model_validate_json(body)
            config = _config(request, context=run.context, multitask=run.multitask)
            if isinstance(config, Response):
                return config
            return config, self._graph.astream(Command(resume=run.resume) if run.resumes else run.input, config)
        except ValidationError as error:
            return _refused(_validation_json(error.errors()))
        except (MessageFormatError, InvalidArgumentError, InvalidTypeError, UnsafeHistoryError) as error:
            return _refused(error_json(error))

    async def _events(
        self, item: Item, run: RunOutputs, encoder: EventEncoder, config: RunnableConfig
    ) -> AsyncIterator[ServerSentEvent]:
        while True:
            if isinstance(item, RunOutput):
                yield encoder.output(item)
            elif isinstance(item, Exception):
                if not isinstance(item, RxGraphError):
                    log.warning("run on thread %r failed", config.thread_id, exc_info=item)
                yield encoder.error(item)
                return
            else:
                head = encoder.last_checkpoint_id
                if head is None:  # the run wrote nothing (a resume with nothing left to run): read the head
                    head = (await run_in_threadpool(self._graph.get_state, config)).checkpoint_id
                yield encoder.end(head)
                return
            item = await run.next()


class _Gone:
    """The client disconnected."""


async def _first_or_gone(run: RunOutputs, receive: Receive) -> Item | _Gone:
    """The run's first item (which may be a while: an enqueued run waits for the runs before it, a model for its
    first token), or ``_Gone`` if the client disconnects first."""
    first = asyncio.ensure_future(run.next())
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait([first, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not first.done():
            first.cancel()
    return first.result() if first.done() and not first.cancelled() else _Gone()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
