"""A stream is cold: nothing runs and nothing is read until subscribe; each subscription is its own run."""

from __future__ import annotations

from typing import Any

from _support import ReadCountingSaver

from rxgraph import END, START, KeyStrategy, MemorySaver, NodeOutput, RunnableConfig, StateGraph


def _counter_graph(saver: ReadCountingSaver, calls: list[int]) -> Any:
    def bump(state: Any) -> dict[str, Any]:
        calls.append(state.get("count", 0))
        return {"count": state.get("count", 0) + 1}

    return StateGraph().add_node("bump", bump).add_edge(START, "bump").add_edge("bump", END).compile(checkpointer=saver)


def test_nothing_runs_and_nothing_is_read_until_subscribe() -> None:
    saver = ReadCountingSaver(MemorySaver())
    calls: list[int] = []
    app = _counter_graph(saver, calls)
    stream = app.stream({"note": "x"}, RunnableConfig(thread_id="t1"))
    assert saver.reads == 0
    assert calls == []
    stream.subscribe()
    assert saver.reads > 0
    assert calls == [0]


def test_subscribing_twice_runs_twice_each_from_the_head_at_its_own_subscribe_time() -> None:
    saver = ReadCountingSaver(MemorySaver())
    calls: list[int] = []
    app = _counter_graph(saver, calls)
    config = RunnableConfig(thread_id="t1")
    stream = app.stream({"note": "x"}, config)
    outputs: list[NodeOutput] = []
    stream.subscribe(outputs.append)
    stream.subscribe(outputs.append)
    assert calls == [0, 1]
    assert [o.state["count"] for o in outputs] == [1, 2]
    assert app.get_state(config).values["count"] == 2


def test_a_commit_between_assembly_and_subscription_is_the_base() -> None:
    saver = ReadCountingSaver(MemorySaver())
    calls: list[int] = []
    app = _counter_graph(saver, calls)
    config = RunnableConfig(thread_id="t1")
    assembled = app.stream({"note": "late"}, config)
    app.invoke({"note": "meanwhile"}, config)  # commits count=1 after the assembly above
    assembled.subscribe()
    assert calls == [0, 1]
    assert app.get_state(config).values == {"note": "late", "count": 2}


def test_input_is_snapshotted_at_assembly() -> None:
    saver = ReadCountingSaver(MemorySaver())
    app = (
        StateGraph({"items": KeyStrategy.APPEND})
        .add_node("noop", lambda s: None)
        .add_edge(START, "noop")
        .add_edge("noop", END)
        .compile(checkpointer=saver)
    )
    payload: dict[str, Any] = {"items": [1, 2]}
    stream = app.stream(payload, RunnableConfig(thread_id="t"))
    payload["items"].append(3)
    payload["other"] = True
    stream.subscribe()
    assert app.get_state(RunnableConfig(thread_id="t")).values == {"items": [1, 2]}
