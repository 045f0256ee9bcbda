"""Node outputs are Observables: chunks stream to the subscriber, the update is computed when they complete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import reactivex as rx
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import (
    END,
    START,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    RunnableConfig,
    StateGraph,
    StreamingOutput,
)

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _join(chunks: Sequence[Any]) -> dict[str, Any]:
    return {"text": "".join(chunks)}


def test_chunks_reach_the_subscriber_while_the_node_runs_then_the_node_output() -> None:
    scheduler = TestScheduler()

    def speak(state: Any) -> rx.Observable[str]:
        return scheduler.create_cold_observable(on_next(10, "Hel"), on_next(20, "lo"), on_completed(30))

    app = StateGraph().add_node("speak", speak, reduce=_join).add_edge(START, "speak").add_edge("speak", END).compile()
    observed = scheduler.start(lambda: app.stream({}, RunnableConfig(scheduler=scheduler)))
    kinds = [(m.time, type(m.value.value).__name__) for m in observed.messages if m.value.kind == "N"]
    assert kinds == [(210, "StreamingOutput"), (220, "StreamingOutput"), (230, "NodeOutput")]
    chunks = [m.value.value.chunk for m in observed.messages[:2]]
    assert chunks == ["Hel", "lo"]
    final = observed.messages[2].value.value
    assert final.node == "speak" and final.state["text"] == "Hello"
    assert observed.messages[-1].value.kind == "C" and observed.messages[-1].time == 230


def test_streaming_output_carries_the_state_the_node_started_from() -> None:
    app = (
        StateGraph()
        .add_node("speak", lambda s: rx.of("a", "b"), reduce=_join)
        .add_edge(START, "speak")
        .add_edge("speak", END)
        .compile()
    )
    outputs: list[NodeOutput] = []
    app.stream({"text": "before"}).subscribe(outputs.append)
    streaming = [o for o in outputs if isinstance(o, StreamingOutput)]
    assert [o.state["text"] for o in streaming] == ["before", "before"]
    assert outputs[-1].state["text"] == "ab"


def test_mapping_chunks_merge_in_order_without_a_reducer() -> None:
    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("n", lambda s: rx.of({"log": "a"}, {"log": ["b", "c"], "last": 1}, {"last": 2}))
        .add_edge(START, "n")
        .add_edge("n", END)
        .compile()
    )
    assert app.invoke({}) == {"log": ["a", "b", "c"], "last": 2}


def test_non_mapping_chunks_without_a_reducer_fail_naming_the_node() -> None:
    app = StateGraph().add_node("talk", lambda s: rx.of("x")).add_edge(START, "talk").add_edge("talk", END).compile()
    with pytest.raises(TypeError, match=r"node 'talk' streamed a str chunk .*reduce"):
        app.invoke({})


def test_a_mapping_node_and_a_streaming_node_go_through_the_same_tail() -> None:
    saver = MemorySaver()
    app = (
        StateGraph()
        .add_node("plain", lambda s: {"a": 1})
        .add_node("streamed", lambda s: rx.of({"b": 2}))
        .add_edge(START, "plain")
        .add_edge("plain", "streamed")
        .add_edge("streamed", END)
        .compile(checkpointer=saver)
    )
    outputs: list[NodeOutput] = []
    app.stream({}, RunnableConfig(thread_id="t")).subscribe(outputs.append)
    finals = [o for o in outputs if not isinstance(o, StreamingOutput)]
    assert [o.node for o in finals] == ["plain", "streamed"]
    assert all(o.checkpoint_id is not None for o in finals)
    written = {c.id: c for c in saver.list("t")}
    assert [written[o.checkpoint_id].node for o in finals if o.checkpoint_id] == ["plain", "streamed"]


def test_an_error_in_the_chunk_stream_reaches_the_subscriber_and_writes_nothing_for_the_node_but_the_error() -> None:
    saver = MemorySaver()
    app = (
        StateGraph()
        .add_node("bad", lambda s: rx.concat(rx.of({"a": 1}), rx.throw(ValueError("model broke"))))
        .add_edge(START, "bad")
        .add_edge("bad", END)
        .compile(checkpointer=saver)
    )
    with pytest.raises(ValueError, match="model broke"):
        app.invoke({}, RunnableConfig(thread_id="t"))
    assert [(c.node, c.source) for c in reversed(saver.list("t"))] == [("__start__", "input"), (None, "error")]
    assert saver.get("t").values == {}  # type: ignore[union-attr]  # nothing of the node's chunks


def test_an_action_returning_something_else_is_a_clear_error() -> None:
    app = StateGraph().add_node("odd", lambda s: 42).add_edge(START, "odd").add_edge("odd", END).compile()
    with pytest.raises(TypeError, match=r"node 'odd' returned a int"):
        app.invoke({})


def test_an_action_may_take_the_config() -> None:
    seen: list[RunnableConfig] = []

    def action(state: Any, config: RunnableConfig) -> None:
        seen.append(config)

    app = StateGraph().add_node("n", action).add_edge(START, "n").add_edge("n", END).compile()
    app.invoke({}, RunnableConfig(recursion_limit=7))
    assert seen[0].recursion_limit == 7


def test_a_node_stream_that_breaks_the_protocol_cannot_add_chunks_or_run_the_tail_twice() -> None:
    def rude(observer: rx.abc.ObserverBase[str], scheduler: object = None) -> rx.abc.DisposableBase:
        observer.on_next("a")
        observer.on_completed()
        observer.on_next("late")  # after its completion: must be ignored
        observer.on_completed()
        observer.on_error(RuntimeError("late error"))
        return rx.disposable.Disposable()

    tails: list[int] = []

    def reduce(chunks: Sequence[Any]) -> dict[str, Any]:
        tails.append(len(chunks))
        return {"text": "".join(chunks)}

    app = (
        StateGraph()
        .add_node("rude", lambda s: rx.Observable(rude), reduce=reduce)
        .add_edge(START, "rude")
        .add_edge("rude", END)
        .compile()
    )
    outputs: list[NodeOutput] = []
    errors: list[Exception] = []
    app.stream({}).subscribe(outputs.append, errors.append)
    assert [getattr(o, "chunk", None) for o in outputs] == ["a", None]
    assert tails == [1] and errors == []
    assert outputs[-1].state == {"text": "a"}
