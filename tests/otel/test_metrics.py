"""The run metrics: runs counted by outcome, how long runs and rewinds took, and the runs holding their thread or
waiting in line for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
import reactivex as rx
from otel._recording import Recorded
from reactivex import operators as ops
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import END, START, CompiledGraph, MemorySaver, RunnableConfig, StateGraph
from rxgraph.agent import ChatChunk, ReactAgent, ToolSpec
from rxgraph.messages import Message
from rxgraph.testing import ScriptedChatModel, finish, text


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


def _by_outcome(otel: Recorded, name: str) -> dict[str, Any]:
    return {point.attributes["rxgraph.outcome"]: point for point in otel.metric_points(name)}


def _value(otel: Recorded, name: str) -> int:
    points = otel.metric_points(name)
    return sum(point.value for point in points)


class _DownOnce:
    """Its second call fails, as an API that was down for a moment; the others answer."""

    def __init__(self) -> None:
        self.scripted = ScriptedChatModel([[text("Hello."), finish("stop")], [text("Back."), finish("stop")]])
        self.calls = 0

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> rx.Observable[ChatChunk]:
        self.calls += 1
        return rx.throw(ConnectionError("down")) if self.calls == 2 else self.scripted.stream(messages, tools)


def test_runs_are_counted_by_outcome_with_their_durations_and_rewinds(otel: Recorded) -> None:
    agent = ReactAgent(_DownOnce(), checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t")
    agent.invoke("Hi", config)  # completed
    with pytest.raises(ConnectionError):
        agent.invoke("Again", config)  # failed, rewound
    agent.stream("Once more", config).pipe(ops.take(1)).subscribe()  # cancelled after the first chunk, rewound

    runs = _by_outcome(otel, "rxgraph.runs")
    assert {outcome: point.value for outcome, point in runs.items()} == {"completed": 1, "failed": 1, "cancelled": 1}
    durations = _by_outcome(otel, "rxgraph.run.duration")
    assert {outcome: point.count for outcome, point in durations.items()} == {
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
    }
    assert all(point.sum >= 0 for point in durations.values())
    (rewinds,) = otel.metric_points("rxgraph.rewind.duration")
    assert rewinds.count == 2  # the failed turn's and the cancelled one's
    assert rewinds.sum >= 0


def _held(pool: ThreadPoolScheduler, started: threading.Event, release: threading.Event) -> CompiledGraph:
    """A graph whose one node, on ``pool``, says it started and holds its run until ``release``; later runs on its
    thread wait in line (enqueue)."""

    def slow(state: Mapping[str, Any]) -> None:
        started.set()
        release.wait(10)

    return (
        StateGraph()
        .add_node("slow", slow, scheduler=pool)
        .add_edge(START, "slow")
        .add_edge("slow", END)
        .compile(MemorySaver(), multitask="enqueue")
    )


def test_runs_holding_their_thread_and_waiting_for_it_are_counted_while_they_do(
    otel: Recorded, pool: ThreadPoolScheduler
) -> None:
    started, release = threading.Event(), threading.Event()
    graph = _held(pool, started, release)
    config = RunnableConfig(thread_id="t")
    done = [threading.Event(), threading.Event()]
    first = graph.stream({}, config).subscribe(on_completed=done[0].set)
    try:
        assert started.wait(10)
        second = graph.stream({}, config).subscribe(on_completed=done[1].set)
        assert (_value(otel, "rxgraph.runs.active"), _value(otel, "rxgraph.runs.waiting")) == (1, 1)
    finally:
        release.set()
    assert done[0].wait(10) and done[1].wait(10)
    first.dispose()
    second.dispose()
    assert (_value(otel, "rxgraph.runs.active"), _value(otel, "rxgraph.runs.waiting")) == (0, 0)
    assert _by_outcome(otel, "rxgraph.runs")["completed"].value == 2


def test_a_run_left_while_it_waits_for_its_thread_stops_waiting(otel: Recorded, pool: ThreadPoolScheduler) -> None:
    started, release = threading.Event(), threading.Event()
    graph = _held(pool, started, release)
    config = RunnableConfig(thread_id="t")
    done = threading.Event()
    graph.stream({}, config).subscribe(on_completed=done.set)
    try:
        assert started.wait(10)
        graph.stream({}, config).subscribe().dispose()  # it leaves the line
        assert (_value(otel, "rxgraph.runs.active"), _value(otel, "rxgraph.runs.waiting")) == (1, 0)
    finally:
        release.set()
    assert done.wait(10)
    assert (_value(otel, "rxgraph.runs.active"), _value(otel, "rxgraph.runs.waiting")) == (0, 0)
    assert {outcome: p.value for outcome, p in _by_outcome(otel, "rxgraph.runs").items()} == {
        "completed": 1,
        "cancelled": 1,
    }
