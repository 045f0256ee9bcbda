"""What a request that starts a run must be before its body is read: JSON (a browser cannot send that cross-site
without asking first), from this site when a browser says where it comes from, and no larger than the server takes."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DEFAULT_MAX_BODY", "LOOPBACK_HOSTS", "HostCheck", "OriginCheck", "read_body"]

DEFAULT_MAX_BODY = 10 * 1024 * 1024
"""The largest request body ``create_app`` takes by default, in bytes (10 MiB)."""


async def read_body(request: Request, *, max_body: int) -> bytes | Response:
    """The request's body, or the response that refuses it without reading further: 415 for a body that is not
    ``application/json`` (which a browser does not send to another site without asking first), 413 for a body
    longer than ``max_body`` bytes (said by its ``Content-Length``, or found while reading it).

    Raises:
        ClientDisconnect: the client went away before its body was whole.
    """
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return _refuse(
            415,
            f"a request's body is JSON: send it with Content-Type: application/json (got {media_type or 'none'!r})",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        return _too_large(max_body)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            return _too_large(max_body)
        chunks.append(chunk)
    return b"".join(chunks)


class OriginCheck:
    """ASGI middleware: answer 403 to a browser's request that changes something (any method but ``GET``,
    ``HEAD`` and ``OPTIONS``) sent from another site — its ``Origin`` is neither this server nor one of
    ``allowed`` — whatever its body: a cancel or a delete has none."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and origin not in self.allowed and _other_site(origin, headers.get("host", "")):
                refused = _refuse(
                    403,
                    f"a request from {origin!r}, another site, cannot change anything here; a server that serves "
                    "a page of another origin lists it in create_app(allowed_origins=...)",
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _other_site(origin: str, host: str) -> bool:
    """Whether a browser's ``Origin`` is not the server it sent the request to (``null``: a sandboxed page or a
    file, never this server)."""
    return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()


def _too_large(max_body: int) -> Response:
    return _refuse(413, f"a request's body may be at most {max_body} bytes (create_app(max_body=...))")


def _refuse(status: int, message: str) -> Response:
    """An error answer as the API gives them: ``{"detail": message}``."""
    return JSONResponse({"detail": message}, status_code=status)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "testserver")
"""The host names ``create_app`` serves by default: this machine's own, and ``testserver``, the name Starlette's
``TestClient`` sends (a name with no domain, which no other site's page can have)."""


class HostCheck:
    """ASGI middleware: answer 400 to a request whose ``Host`` header names none of ``allowed`` — a page of another
    site that had its own name resolve to this server (DNS rebinding) sends its own name. ``"*"`` allows any host;
    ``"*.example.com"`` the subdomains of ``example.com``. The port is not compared."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.names = frozenset(name.lower().strip("[]") for name in allowed if not name.startswith("*."))
        self.suffixes = tuple(name[1:].lower() for name in allowed if name.startswith("*."))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any or scope["type"] not in ("http", "websocket") or self._allowed(Headers(scope=scope).get("host")):
            await self.app(scope, receive, send)
            return
        await _refuse(400, "this server does not serve that host name (create_app(allowed_hosts=...))")(
            scope, receive, send
        )

    def _allowed(self, host: str | None) -> bool:
        if not host:
            return False
        name = host.lower()
        if name.startswith("["):  # an IPv6 address, [::1]:8000
            name = name[1 : name.find("]")] if "]" in name else name
        else:
            name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
        return name in self.names or name.endswith(self.suffixes)
