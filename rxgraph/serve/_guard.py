"""What a request that starts a run must be before its body is read: JSON (a browser cannot send that cross-site
without asking first), from this site when a browser says where it comes from, and no larger than the server takes."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["DEFAULT_MAX_BODY", "read_body"]

DEFAULT_MAX_BODY = 10 * 1024 * 1024
"""The largest request body ``create_app`` takes by default, in bytes (10 MiB)."""


async def read_body(request: Request, *, max_body: int, allowed_origins: Collection[str]) -> bytes | Response:
    """The request's body, or the response that refuses it without reading further: 415 for a body that is not
    ``application/json``, 403 for a browser's request from another site (its ``Origin`` is neither this server's
    host nor one of ``allowed_origins``), 413 for a body longer than ``max_body`` bytes (said by its
    ``Content-Length``, or found while reading it).

    Raises:
        ClientDisconnect: the client went away before its body was whole.
    """
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return _refuse(
            415,
            "UnsupportedMediaType",
            f"a run's body is JSON: send it with Content-Type: application/json (got {media_type or 'none'!r})",
        )
    origin = request.headers.get("origin")
    if origin is not None and origin not in allowed_origins and _other_site(origin, request.headers.get("host", "")):
        return _refuse(
            403,
            "CrossSiteRequest",
            f"a request from {origin!r}, another site, cannot start a run here; a server that serves a page of "
            "another origin lists it in create_app(allowed_origins=...)",
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


def _other_site(origin: str, host: str) -> bool:
    """Whether a browser's ``Origin`` is not the server it sent the request to (``null``: a sandboxed page or a
    file, never this server)."""
    return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()


def _too_large(max_body: int) -> Response:
    return _refuse(413, "RequestTooLarge", f"a run's body may be at most {max_body} bytes (create_app(max_body=...))")


def _refuse(status: int, kind: str, message: str) -> Response:
    return JSONResponse({"type": kind, "message": message}, status_code=status)
