"""A served run's span is a child of the request that started it, when the application instruments its ASGI app
(OpenTelemetry's own ``OpenTelemetryMiddleware``, unmodified): a streamed turn, a turn cut by its client's
disconnect (cancelled, rewound, every span ended), and a background run, which outlives its request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langgraph_sdk import get_sync_client
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from otel._recording import Recorded
from serve._serving import Server, leave_when, post_turn
from serve.test_app import Tool, weather_agent

from rxgraph import MemorySaver
from rxgraph.serve import create_app

ASK = {"input": {"messages": [{"role": "user", "content": "Weather in Paris?"}]}}


@pytest.fixture
def served(otel: Recorded) -> Iterator[tuple[Server, Tool]]:
    weather = Tool(held=True)
    agent, _ = weather_agent(MemorySaver(), weather)
    server = Server(OpenTelemetryMiddleware(create_app(agent), tracer_provider=otel.tracer_provider))
    try:
        yield server, weather
    finally:
        weather.released.set()
        server.stop()


def _request(otel: Recorded, path: str) -> ReadableSpan:
    """The server span of the one request for ``path``."""
    found = [span for span in otel.spans() if span.kind is SpanKind.SERVER and _path(span) == path]
    assert len(found) == 1, [(s.name, s.kind, dict(s.attributes or {})) for s in otel.spans()]
    return found[0]


def _path(span: ReadableSpan) -> object:
    attributes = span.attributes or {}
    return attributes.get("url.path", attributes.get("http.target"))  # as the conventions name it, new or old


def test_a_streamed_turn_is_a_child_of_its_request(otel: Recorded, served: tuple[Server, Tool]) -> None:
    server, weather = served
    weather.released.set()
    post_turn(server.url, "t", ASK)
    server.stop()  # every request has ended: its span too
    run = otel.one("rxgraph.run")
    assert otel.parent(run) == _request(otel, "/threads/t/runs/stream")
    assert (run.attributes or {})["rxgraph.outcome"] == "completed"
    assert {s.name for s in otel.children(run)} == {"rxgraph.node"}


def test_a_turn_cut_by_a_disconnect_is_cancelled_rewound_and_ends_every_span(
    otel: Recorded, served: tuple[Server, Tool]
) -> None:
    server, weather = served
    # Left once the tool runs (held): the disconnect cuts the turn in its tool call, whichever thread is faster.
    leave_when(
        server.url, "t", ASK, lambda name, data: name == "updates" and "model" in data and weather.started.wait(10)
    )
    with get_sync_client(url=server.url) as client:
        [cut] = client.runs.list("t")
        client.runs.join("t", cut["run_id"])  # returns once the run has ended, rewound
    server.stop()
    run = otel.one("rxgraph.run")
    assert otel.parent(run) == _request(otel, "/threads/t/runs/stream")
    assert (run.attributes or {})["rxgraph.outcome"] == "cancelled"
    assert [event.name for event in run.events] == ["rxgraph.rewind"]
    assert otel.open.names() == []


def test_a_background_run_is_a_child_of_the_request_that_created_it(
    otel: Recorded, served: tuple[Server, Tool]
) -> None:
    server, weather = served
    weather.released.set()
    with get_sync_client(url=server.url) as client:
        created = client.runs.create("t", "agent", input=ASK["input"], if_not_exists="create")
        client.runs.join("t", created["run_id"])
    server.stop()
    run = otel.one("rxgraph.run")
    assert otel.parent(run) == _request(otel, "/threads/t/runs")
    assert (run.attributes or {})["rxgraph.outcome"] == "completed"
