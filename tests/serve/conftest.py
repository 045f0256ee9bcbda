"""The ``serve`` fixture: apps on a real uvicorn, stopped when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from serve._serving import Server
from starlette.types import ASGIApp


@pytest.fixture
def serve() -> Iterator[Callable[[ASGIApp], Server]]:
    """Starts a server for an app; every server it started is stopped when the test ends."""
    servers: list[Server] = []

    def start(app: ASGIApp) -> Server:
        servers.append(Server(app))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
