"""``run_server``: serve an app with uvicorn until interrupted."""

from __future__ import annotations

import uvicorn
from starlette.types import ASGIApp

__all__ = ["run_server"]


def run_server(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``app`` on ``host``:``port`` with uvicorn until Ctrl+C (or SIGTERM); port 0 picks a free one, which
    uvicorn's "running on" line shows. Blocks; returns once the server has shut down."""
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)).run()
