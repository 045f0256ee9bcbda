"""Instrumented under a tracer that makes no spans (the API's own: the application configured no SDK), a run is only
measured: its steps take the path they take uninstrumented, its metrics are counted, and a model's answer reaches the
subscriber as it would uninstrumented. A sampled-out run is still traced, so that its context (not recorded, but
valid) reaches what its nodes call."""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import reactivex as rx
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from reactivex.scheduler import ThreadPoolScheduler

import rxgraph.otel
from rxgraph import END, START, KeyStrategy, MemorySaver, RunnableConfig, StateGraph, StreamingOutput
from rxgraph.agent import ReactAgent
from rxgraph.graph import _landing
from rxgraph.testing import ScriptedChatModel, finish, text

CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


@pytest.fixture
def direct_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose steps landed by the run's direct step (its path for a plain one-node superstep)."""
    landed: list[str] = []
    step = _landing.Landing.step

    def counted(landing: _landing.Landing, name: str, update: dict[str, Any] | None, view: Any) -> bool:
        landed.append(name)
        return step(landing, name, update, view)

    monkeypatch.setattr(_landing.Landing, "step", counted)
    return landed


def _graph(pool: ThreadPoolScheduler, seen: list[trace.SpanContext]) -> Any:
    """``a`` and ``b`` plain, ``pooled`` on a pool (it notes the span current where it runs), ``streamed`` a stream."""

    def pooled(state: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(trace.get_current_span().get_span_context())
        return {"log": "pooled"}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("pooled", pooled, scheduler=pool)
        .add_node("streamed", lambda s: rx.of("x", "y"), reduce=lambda chunks: {"log": "".join(chunks)})
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge("a", "pooled")
        .add_edge("pooled", "streamed")
        .add_edge("streamed", "b")
        .add_edge("b", END)
        .compile(MemorySaver())
    )


def test_a_run_under_a_tracer_that_makes_no_spans_steps_as_uninstrumented_and_is_counted(
    pool: ThreadPoolScheduler, direct_steps: list[str]
) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    rxgraph.otel.instrument(tracer_provider=trace.NoOpTracerProvider(), meter_provider=meters)
    seen: list[trace.SpanContext] = []
    try:
        graph = _graph(pool, seen)
        assert graph.invoke({}, CONFIG)["log"] == ("a", "pooled", "xy", "b")
    finally:
        rxgraph.otel.uninstrument()
        meters.shutdown()
    assert direct_steps == ["a", "b"]  # as uninstrumented: the plain nodes' steps are direct
    assert seen == [trace.INVALID_SPAN_CONTEXT]
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert [(p.attributes["rxgraph.outcome"], p.value) for p in points["rxgraph.runs"]] == [("completed", 1)]
    assert [p.count for p in points["rxgraph.run.duration"]] == [1]
    assert sum(p.value for p in points["rxgraph.runs.active"]) == 0


def test_a_sampled_out_run_still_hands_its_nodes_context_to_what_they_call(
    pool: ThreadPoolScheduler, direct_steps: list[str]
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    rxgraph.otel.instrument(tracer_provider=provider)
    seen: list[trace.SpanContext] = []
    try:
        graph = _graph(pool, seen)
        with provider.get_tracer("test").start_as_current_span("request") as request:
            graph.invoke({}, CONFIG)
    finally:
        rxgraph.otel.uninstrument()
        provider.shutdown()
    caller = request.get_span_context()
    assert caller.is_valid and not request.is_recording()
    (node,) = seen  # the pooled node's span: not recorded, but of the caller's trace, and its own
    assert node.is_valid and node.trace_id == caller.trace_id and node.span_id != caller.span_id
    assert not node.trace_flags.sampled
    assert direct_steps == []  # each node is called in its span


def _chunks_passed_through_otel(tracer_provider: Any) -> list[bool]:
    """For each chunk of a model's answer the subscriber got: whether a frame of rxgraph.otel was on the way."""
    rxgraph.otel.instrument(tracer_provider=tracer_provider)
    seen: list[bool] = []

    def on_next(output: Any) -> None:
        if isinstance(output, StreamingOutput) and output.node == "model":
            seen.append(any("rxgraph/otel/" in frame.filename for frame in traceback.extract_stack()))

    try:
        agent = ReactAgent(ScriptedChatModel([[text("Hel"), text("lo."), finish("stop")]]))
        agent.stream("Hi").subscribe(on_next)
    finally:
        rxgraph.otel.uninstrument()
    return seen


def test_a_model_answer_that_no_span_records_reaches_the_subscriber_as_uninstrumented() -> None:
    assert _chunks_passed_through_otel(trace.NoOpTracerProvider()) == [False, False, False]
    recorded = TracerProvider()
    try:
        assert _chunks_passed_through_otel(recorded) == [True, True, True]  # a chat span sees each chunk
    finally:
        recorded.shutdown()
