"""``create_app``: graphs and agents as an ASGI app (Starlette) speaking LangGraph's server API, so that its
official clients (``langgraph-sdk`` for Python, ``@langchain/langgraph-sdk`` for JavaScript and its React hook) work
against it unmodified — with rxgraph's guarantee: a run that is cancelled, whatever cancels it, is rewound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .. import __version__
from ..agent._react import ReactAgent
from ..errors import InvalidArgumentError, InvalidTypeError
from ..graph._compiled import CompiledGraph
from ._api_assistants import assistant_routes
from ._api_runs import run_routes
from ._api_threads import thread_routes
from ._guard import DEFAULT_MAX_BODY, LOOPBACK_HOSTS, HostCheck, OriginCheck
from ._registries import registry_for, relay_for
from ._runs import RunManager
from ._service import Auth, Refusal, Service, answer
from ._targets import targets_of

__all__ = ["create_app"]

_PAGE_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The chat page loads nothing but itself, and talks to this server only."""

Target = CompiledGraph | ReactAgent


def create_app(
    target: Target | Mapping[str, Target],
    *,
    auth: Auth | None = None,
    page: bool = True,
    ping: float = 15.0,
    max_body: int = DEFAULT_MAX_BODY,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
) -> Starlette:
    """An ASGI app serving ``target``'s threads with LangGraph's server API (Starlette; install the ``serve``
    extra). The HTTP API guide lists every route, and which of LangGraph's are not served.

    Args:
        target: a compiled graph or a ``ReactAgent`` (with a checkpointer), served as the assistant ``"agent"``;
            or ``{name: target, ...}`` for several, each an assistant of that name. They share one checkpointer.
        auth: who the caller is: ``auth(headers)`` (may be async) returns their identity, or ``None`` for 401.
            Every thread belongs to the identity that created it: another gets 404 on each of its routes, and never
            sees it in a search. Without it, anyone who reaches the server reads and writes every thread.
        page: serve the chat page at ``/`` (when the first target is an agent).
        ping: seconds between keep-alive comments on an idle stream (0: none).
        max_body: the largest request body, in bytes (default 10 MiB); a larger one is refused with 413.
        allowed_origins: origins (``"https://app.example.com"``) whose pages may call the API, besides this
            server's own: a browser's request from any other site is refused with 403, and these get CORS headers.
            Every body must be ``application/json`` (415 otherwise), which a browser never sends to another site
            without asking first.
        allowed_hosts: the host names the app answers for (400 for any other ``Host``: DNS rebinding). Default:
            this machine's (``127.0.0.1``, ``localhost``, ``::1``, and ``testserver``); ``["*"]`` for any.

    Raises:
        InvalidTypeError: a target is neither a ``CompiledGraph`` nor a ``ReactAgent``, or an argument has the
            wrong type.
        InvalidArgumentError: a target has no checkpointer, the targets do not share one, ``ping`` < 0, or
            ``max_body`` < 1.
    """
    targets = targets_of(target)
    savers = {id(t.graph.checkpointer) for t in targets.values()}
    if len(savers) != 1:
        raise InvalidArgumentError(
            "the served targets must share one checkpointer: a thread is read by whichever target runs on it",
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
    if auth is not None and not callable(auth):
        raise InvalidTypeError(f"auth must be a function of the request's headers, got {auth!r}", argument="auth")
    first = next(iter(targets.values()))
    assert first.graph.checkpointer is not None
    registry = registry_for(first.graph.checkpointer)
    try:
        relay = relay_for(first.graph.checkpointer)
    except BaseException:
        registry.close()
        raise
    service = Service(
        targets=targets,
        registry=registry,
        relay=relay,
        runs=RunManager(registry, lambda thread_id: _forget(service, thread_id), relay),
        auth=auth,
        max_body=max_body,
    )
    routes = [
        Route("/ok", _ok, methods=["GET"]),
        Route("/info", _info, methods=["GET"]),
        *assistant_routes(service),
        *thread_routes(service),
        *run_routes(service, ping),
    ]
    if page and first.agent is not None:
        html = resources.files(__package__).joinpath("chat.html").read_text(encoding="utf-8")

        async def _page(request: Request) -> Response:
            return HTMLResponse(html, headers={"Content-Security-Policy": _PAGE_POLICY})

        routes.append(Route("/", _page, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        relay.open(asyncio.get_running_loop(), service.runs)
        service.runs.open()
        try:
            yield
        finally:
            await service.runs.close()  # every run still going is cancelled and rewound before the server stops
            relay.close()
            registry.close()

    middleware = [Middleware(HostCheck, allowed=frozenset(allowed_hosts))]
    if allowed_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(allowed_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
                allow_headers=["*"],
                expose_headers=["Content-Location", "Location"],
                allow_credentials=True,
            )
        )
    # Outermost first: the host is checked before anything, CORS answers preflights, then the origin of a change.
    middleware.append(Middleware(OriginCheck, allowed=frozenset(allowed_origins)))
    return Starlette(
        routes=routes,
        exception_handlers={Refusal: _refused},
        middleware=middleware,
        lifespan=lifespan,
    )


def _forget(service: Service, thread_id: str) -> None:
    """Remove a stateless run's thread, records and checkpoints."""
    service.registry.delete_thread(thread_id)
    with contextlib.suppress(NotImplementedError):
        service.saver.delete_thread(thread_id)


async def _refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, Refusal)
    return answer({"detail": error.detail}, error.status)


async def _ok(request: Request) -> Response:
    return answer({"ok": True})


async def _info(request: Request) -> Response:
    return answer(
        {
            "version": __version__,
            "server": "rxgraph",
            "flags": {"assistants": True, "crons": False, "langsmith": False, "store": False},
        }
    )
