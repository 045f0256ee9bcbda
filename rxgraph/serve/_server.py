"""``run_server``: serve an app with uvicorn until interrupted."""

from __future__ import annotations

import contextlib
import signal
import threading

import uvicorn
from starlette.types import ASGIApp

__all__ = ["run_server"]


def run_server(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve ``app`` on ``host``:``port`` with uvicorn until Ctrl+C or SIGTERM; port 0 picks a free one, which
    uvicorn's "running on" line shows. Blocks; returns once the server has shut down gracefully (streams still open
    are closed after 5 seconds: their runs are cancelled and rewound). ``log_level`` is uvicorn's (``"info"`` logs
    each request)."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5))
    if threading.current_thread() is not threading.main_thread():
        server.run()  # uvicorn handles no signals off the main thread
        return
    # uvicorn shuts down on SIGINT and SIGTERM, then raises the signal again: let both end up here as
    # KeyboardInterrupt, so the caller's cleanup (closing a saver) runs rather than the process being killed.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
