"""``create_app(ping=...)``: seconds between keep-alive comments on an idle stream, 0 for none (``sse_starlette``
itself takes None for 15 seconds)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rxgraph.serve._api_runs import _EventStream


async def _nothing() -> AsyncIterator[bytes]:
    yield b""


@pytest.mark.parametrize(("ping", "every"), [(0.5, 0.5), (15.0, 15.0), (30, 30)])
def test_a_stream_pings_at_the_servers_interval(ping: float, every: float) -> None:
    assert _EventStream(_nothing(), ping=ping, headers={}).ping_interval == every


def test_a_stream_of_a_server_with_ping_zero_never_pings() -> None:
    assert _EventStream(_nothing(), ping=0, headers={}).ping_interval >= 365 * 24 * 3600
