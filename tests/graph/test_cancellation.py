"""Cancelling a run: the cancelled flag, the guarded tail, and nothing written after dispose."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import END, START, KeyStrategy, MemorySaver, NodeOutput, RunnableConfig, StateGraph, StreamingOutput
from rxgraph.rx import SignalType, do_finally

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _stream_graph(scheduler: TestScheduler, saver: MemorySaver, calls: list[str]) -> Any:
    def model(state: Any) -> rx.Observable[str]:
        calls.append("model")
        return scheduler.create_cold_observable(on_next(10, "a"), on_next(20, "b"), on_completed(30))

    def after(state: Any) -> dict[str, Any]:
        calls.append("after")
        return {"done": True}

    def reduce(chunks: Sequence[str]) -> dict[str, Any]:
        calls.append("tail")
        return {"messages": "".join(chunks)}

    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("model", model, reduce=reduce)
        .add_node("after", after)
        .add_edge(START, "model")
        .add_edge("model", "after")
        .add_edge("after", END)
        .compile(checkpointer=saver)
    )


def test_dispose_while_a_streaming_node_emits_skips_its_tail_and_its_checkpoint() -> None:
    scheduler, saver, calls = TestScheduler(), MemorySaver(), []
    app = _stream_graph(scheduler, saver, calls)
    signals: list[SignalType] = []
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(
        lambda: app.stream({"messages": "hi"}, config).pipe(do_finally(signals.append)), disposed=215
    )
    seen = [m.value.value for m in observed.messages]
    assert [type(o).__name__ for o in seen] == ["StreamingOutput"]
    assert seen[0].chunk == "a"
    assert calls == ["model"]  # neither the tail nor the next node ran
    assert "model" not in [c.node for c in saver.list("t")]
    assert signals == [SignalType.CANCEL]


def test_take_after_the_last_chunk_disposes_before_the_tail() -> None:
    scheduler, saver, calls = TestScheduler(), MemorySaver(), []
    app = _stream_graph(scheduler, saver, calls)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(lambda: app.stream({"messages": "hi"}, config).pipe(ops.take(2)))
    assert [type(m.value.value).__name__ for m in observed.messages if m.value.kind == "N"] == [
        "StreamingOutput",
        "StreamingOutput",
    ]
    assert calls == ["model"]
    assert "model" not in [c.node for c in saver.list("t")]


def test_take_until_a_node_output_stops_the_run_before_the_next_node() -> None:
    scheduler, saver, calls = TestScheduler(), MemorySaver(), []
    app = _stream_graph(scheduler, saver, calls)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)

    def first_node_output(outputs: rx.Observable[NodeOutput]) -> rx.Observable[NodeOutput]:
        return outputs.pipe(ops.take_while(lambda o: isinstance(o, StreamingOutput), inclusive=True))

    observed = scheduler.start(lambda: first_node_output(app.stream({"messages": "hi"}, config)))
    assert [m.value.value.node for m in observed.messages if m.value.kind == "N"] == ["model", "model", "model"]
    assert calls == ["model", "tail"]  # "after" never ran: the run stopped with the subscriber
    assert [c.node for c in reversed(saver.list("t"))][:2] == ["__start__", "model"]
    assert "after" not in [c.node for c in saver.list("t")]


def test_completion_keeps_every_checkpoint() -> None:
    scheduler, saver, calls = TestScheduler(), MemorySaver(), []
    app = _stream_graph(scheduler, saver, calls)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    signals: list[SignalType] = []
    scheduler.start(lambda: app.stream({"messages": "hi"}, config).pipe(do_finally(signals.append)))
    assert [c.node for c in reversed(saver.list("t"))] == ["__start__", "model", "after"]
    assert signals == [SignalType.ON_COMPLETE]
    assert app.get_state(config).values == {"messages": ["hi", "ab"], "done": True}
