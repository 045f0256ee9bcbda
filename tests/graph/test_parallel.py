"""Parallel supersteps: fan-out edges, joins and ``Send`` run their tasks together, merge in task order, write one
checkpoint per superstep, and stay atomic under cancellation — in virtual time and on real threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    CompiledGraph,
    InvalidUpdateError,
    KeyStrategy,
    NodeOutput,
    RunnableConfig,
    Send,
    StateGraph,
    StreamingOutput,
)

on_next, on_completed, on_error = ReactiveTest.on_next, ReactiveTest.on_completed, ReactiveTest.on_error


def _after(scheduler: TestScheduler, ticks: int, name: str) -> Callable[[Any], Any]:
    """A node that streams one chunk halfway through ``ticks`` and completes at ``ticks``."""

    def action(state: Any) -> rx.Observable[Any]:
        return scheduler.create_cold_observable(on_next(ticks // 2, f"{name}-chunk"), on_completed(ticks))

    return action


def _logs(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda chunks: {"log": name}


def _three_branches(scheduler: TestScheduler, saver: CheckpointSaver | None = None, **compile: Any) -> CompiledGraph:
    """START -> split -> (b: 30 ticks, c: 10 ticks, d: 20 ticks) -> join -> collect -> END."""
    graph = StateGraph({"log": KeyStrategy.APPEND})
    graph.add_node("split", lambda s: {"log": "split"})
    graph.add_node("b", _after(scheduler, 30, "b"), reduce=_logs("b"))
    graph.add_node("c", _after(scheduler, 10, "c"), reduce=_logs("c"))
    graph.add_node("d", _after(scheduler, 20, "d"), reduce=_logs("d"))
    graph.add_node("collect", lambda s: {"seen": list(s["log"])})
    graph.add_edge(START, "split")
    for branch in ("b", "c", "d"):
        graph.add_edge("split", branch)
    graph.add_edge(["b", "c", "d"], "collect").add_edge("collect", END)
    return graph.compile(saver, **compile)


def _events(observed: Any) -> list[tuple[int, str, str]]:
    out = []
    for message in observed.messages:
        value = message.value
        if value.kind == "N":
            output = value.value
            kind = "chunk" if isinstance(output, StreamingOutput) else type(output).__name__
            out.append((message.time, kind, output.node))
        else:
            out.append((message.time, value.kind, ""))
    return out


def test_branches_of_different_lengths_run_together_and_merge_in_task_order() -> None:
    scheduler = TestScheduler()
    app = _three_branches(scheduler)
    observed = scheduler.start(lambda: app.stream({}, RunnableConfig(scheduler=scheduler)))
    assert _events(observed) == [
        (200, "NodeOutput", "split"),
        (205, "chunk", "c"),  # every branch started at 200: chunks interleave as they come
        (210, "chunk", "d"),
        (215, "chunk", "b"),
        # the superstep ends when its longest branch does: one NodeOutput per task, in task order
        (230, "NodeOutput", "b"),
        (230, "NodeOutput", "c"),
        (230, "NodeOutput", "d"),
        (230, "NodeOutput", "collect"),
        (230, "C", ""),
    ]
    final = observed.messages[-2].value.value
    # merged in task order (b, c, d), not in the order the branches finished (c, d, b)
    assert final.state["seen"] == ["split", "b", "c", "d"]


def test_one_checkpoint_per_superstep_and_the_join_fires_once(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler = TestScheduler()
    saver = saver_factory()
    app = _three_branches(scheduler, saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    scheduler.start(lambda: app.stream({}, config))
    written = [(c.node, c.next, c.source) for c in reversed(saver.list("t"))]
    assert written == [
        ("__start__", ("split",), "input"),
        ("split", ("b", "c", "d"), "loop"),
        ("b,c,d", ("collect",), "loop"),
        ("collect", (), "loop"),
    ]
    outputs: list[Any] = []
    app.stream({}, config).pipe(ops.filter(lambda o: isinstance(o, NodeOutput))).subscribe(outputs.append)
    scheduler.start()
    ids = {o.checkpoint_id for o in outputs if o.node in ("b", "c", "d")}
    assert len(ids) == 1  # the three NodeOutputs of one superstep name its one checkpoint


def test_a_join_waits_for_branches_that_take_different_numbers_of_steps(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    graph = StateGraph({"log": KeyStrategy.APPEND})
    for name in ("a", "b", "c1", "c2", "c3", "d"):
        graph.add_node(name, _logs(name))
    graph.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c1").add_edge("c1", "c2").add_edge("c2", "c3")
    graph.add_edge(["b", "c3"], "d").add_edge("d", END)
    saver = saver_factory()
    app = graph.compile(saver)
    final = app.invoke({}, RunnableConfig(thread_id="t"))
    assert final["log"] == ["a", "b", "c1", "c2", "c3", "d"]
    steps = [(c.node, c.next, dict(c.pending or {}).get("joins")) for c in reversed(saver.list("t"))]
    assert steps == [
        ("__start__", ("a",), None),
        ("a", ("b", "c1"), None),
        ("b,c1", ("c2",), {"0": ["b"]}),  # the join remembers b until c3 comes
        ("c2", ("c3",), {"0": ["b"]}),
        ("c3", ("d",), None),
        ("d", (), None),
    ]


def test_send_runs_one_node_over_many_payloads_in_send_order() -> None:
    scheduler = TestScheduler()

    def work(item: Any) -> rx.Observable[dict[str, Any]]:
        # the larger the number, the sooner it finishes: completion order is the reverse of the send order
        return rx.timer(10 * (5 - item["n"]), scheduler=scheduler).pipe(ops.map(lambda _: {"results": item["n"]}))

    graph = StateGraph({"results": KeyStrategy.APPEND})
    graph.add_node("split", lambda s: None)
    graph.add_node("work", work)
    graph.add_node("total", lambda s: {"total": sum(s["results"])})
    graph.add_edge(START, "split")
    graph.add_conditional_edges("split", lambda s: [Send("work", {"n": n}) for n in s["items"]])
    graph.add_edge("work", "total").add_edge("total", END)
    app = graph.compile()
    observed = scheduler.start(lambda: app.stream({"items": [1, 2, 3, 4]}, RunnableConfig(scheduler=scheduler)))
    outputs = [(m.time, m.value.value) for m in observed.messages if m.value.kind == "N"]
    chunks = [(time, o.chunk["results"]) for time, o in outputs if isinstance(o, StreamingOutput)]
    assert chunks == [(210, 4), (220, 3), (230, 2), (240, 1)]  # as they finish
    nodes = [(time, o.node) for time, o in outputs if isinstance(o, NodeOutput)]
    assert nodes == [(200, "split"), (240, "work"), (240, "work"), (240, "work"), (240, "work"), (240, "total")]
    final = observed.messages[-2].value.value.state
    assert final["results"] == [1, 2, 3, 4] and final["total"] == 10


def test_send_payloads_and_finished_branches_are_kept_with_the_checkpoint_for_a_resume(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    calls: list[Any] = []

    def work(item: Any) -> dict[str, Any]:
        calls.append(item["n"])
        if item["n"] == 2 and calls.count(2) == 1:
            raise RuntimeError("flaky")
        return {"results": item["n"] * 10}

    graph = StateGraph({"results": KeyStrategy.APPEND})
    graph.add_node("split", lambda s: None).add_node("work", work)
    graph.add_edge(START, "split").add_conditional_edges("split", lambda s: [Send("work", {"n": n}) for n in (1, 2)])
    graph.add_edge("work", END)
    saver = saver_factory()
    app = graph.compile(saver)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(RuntimeError, match="flaky"):
        app.invoke({}, config)
    head = app.get_state(config)
    assert head.next == ("work", "work") and head.checkpoint is not None and head.checkpoint.source == "error"
    assert head.checkpoint.pending is not None and head.checkpoint.pending["done"] == {
        "0": [["update", {"results": 10}]]
    }
    # The failed superstep runs again but its finished branch, whose update is merged as it was, in task order
    # (after LangGraph's test_pending_writes_resume: a branch that finished is not run again).
    assert app.invoke(None, config)["results"] == [10, 20]
    assert calls == [1, 2, 2]


def test_max_concurrency_bounds_the_branches_running_at_once() -> None:
    scheduler = TestScheduler()
    started: list[tuple[str, float]] = []

    def slow(name: str) -> Callable[[Any], Any]:
        def action(state: Any) -> rx.Observable[dict[str, Any]]:
            started.append((name, scheduler.clock))
            return rx.timer(10, scheduler=scheduler).pipe(ops.map(lambda _: {name: True}))

        return action

    graph = StateGraph().add_node("a", lambda s: None)
    for name in ("x", "y", "z"):
        graph.add_node(name, slow(name)).add_edge("a", name).add_edge(name, END)
    app = graph.add_edge(START, "a").compile(max_concurrency=2)
    observed = scheduler.start(lambda: app.stream({}, RunnableConfig(scheduler=scheduler)))
    assert started == [("x", 200.0), ("y", 200.0), ("z", 210.0)]
    assert observed.messages[-1].time == 220 and observed.messages[-1].value.kind == "C"


def test_two_replace_writes_to_one_key_in_one_superstep_fail_unless_the_key_has_a_reducer() -> None:
    def graph(schema: dict[str, Any]) -> CompiledGraph:
        g = StateGraph(schema).add_node("a", lambda s: None)
        g.add_node("b", lambda s: {"x": 1}).add_node("c", lambda s: {"x": 2})
        return g.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c").add_edge(["b", "c"], END).compile()

    with pytest.raises(InvalidUpdateError, match="nodes 'b' and 'c' both wrote state key 'x' in one superstep"):
        graph({}).invoke({})
    assert graph({"x": KeyStrategy.APPEND}).invoke({})["x"] == [1, 2]
    assert graph({"x": lambda old, new: (old or 0) + new}).invoke({})["x"] == 3


def test_an_error_in_one_branch_disposes_its_siblings_and_ends_the_run(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    sibling = scheduler.create_cold_observable(on_next(50, {"log": "late"}), on_completed(50))
    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", lambda s: {"log": "a"})
    graph.add_node("ok", lambda s: sibling)
    graph.add_node("bad", lambda s: scheduler.create_cold_observable(on_error(10, RuntimeError("boom"))))
    graph.add_edge(START, "a").add_edge("a", "ok").add_edge("a", "bad").add_edge(["ok", "bad"], END)
    saver = saver_factory()
    app = graph.compile(saver, on_error="rewind")
    observed = scheduler.start(lambda: app.stream({"log": "in"}, RunnableConfig(thread_id="t", scheduler=scheduler)))
    assert observed.messages[-1].time == 210 and observed.messages[-1].value.kind == "E"
    assert [(s.subscribe, s.unsubscribe) for s in sibling.subscriptions] == [(200, 210)]
    head = saver.get("t")
    assert head is not None and head.source == "rewind" and dict(head.values) == {}


def test_disposing_the_run_disposes_every_branch_and_rewinds_the_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    saver = saver_factory()
    app = _three_branches(scheduler, saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    scheduler.start(lambda: app.stream({"log": "turn 1"}, config))
    before = saver.get("t")
    observed = scheduler.start(
        lambda: app.stream({"log": "turn 2"}, config), created=1000, subscribed=1000, disposed=1015
    )
    assert [m.value.value.node for m in observed.messages] == ["split", "c", "d"]  # cut mid-superstep
    scheduler.advance_by(100)  # the branches would have finished here, had they not been disposed
    head = saver.get("t")
    assert before is not None and head is not None and head.source == "rewind"
    assert head.values == before.values and head.parent_id == before.id
    assert [c.source for c in saver.list("t")][:1] == ["rewind"]


# -- real threads ----------------------------------------------------------------------------------------------------


def test_branches_on_a_pool_really_run_at_the_same_time() -> None:
    pool = ThreadPoolScheduler(3)
    barrier = threading.Barrier(3, timeout=30)  # breaks (and the branch fails) unless all three wait together

    def meet(name: str) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            barrier.wait()
            return {"met": name}

        return action

    graph = StateGraph({"met": KeyStrategy.APPEND}).add_node("a", lambda s: None)
    for name in ("x", "y", "z"):
        graph.add_node(name, meet(name), scheduler=pool).add_edge("a", name)
    app = graph.add_edge(START, "a").add_edge(["x", "y", "z"], END).compile()
    assert app.invoke({})["met"] == ["x", "y", "z"]


def test_a_cancel_while_pool_branches_block_rewinds_and_late_results_write_nothing(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    pool = ThreadPoolScheduler(2)
    running = threading.Barrier(3, timeout=30)  # both branches and this test
    release = threading.Event()
    returned = threading.Barrier(3, timeout=30)

    def blocking(state: Any) -> dict[str, Any]:
        if "turn 2" in state["log"]:
            running.wait()
            release.wait(30)
            returned.wait()  # the result goes back to the run right after this
        return {"log": "late"}

    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", lambda s: {"log": "a"})
    graph.add_node("x", blocking, scheduler=pool).add_node("y", blocking, scheduler=pool)
    graph.add_edge(START, "a").add_edge("a", "x").add_edge("a", "y").add_edge(["x", "y"], END)
    saver = saver_factory()
    app = graph.compile(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "turn 1"}, config)
    before = saver.get("t")
    subscription = app.stream({"log": "turn 2"}, config).subscribe()
    running.wait()  # both branches are inside their actions
    subscription.dispose()
    release.set()
    returned.wait()
    head = app.get_state(config)  # waits for a rewind in flight
    assert before is not None and head.checkpoint is not None and head.checkpoint.source == "rewind"
    assert head.values == before.values
    # A late result cannot land after the rewind: the next turn starts from the pre-turn state and completes.
    assert app.invoke({"log": "turn 3"}, config)["log"] == [
        "turn 1",
        "a",
        "late",
        "late",
        "turn 3",
        "a",
        "late",
        "late",
    ]


def test_async_branches_run_concurrently_on_the_loop_of_astream() -> None:
    import asyncio

    async def scenario() -> Any:
        ready = asyncio.Event()

        async def waits(state: Any) -> dict[str, Any]:
            await asyncio.wait_for(ready.wait(), 30)  # only the other branch can set it
            return {"log": "waited"}

        async def sets(state: Any) -> dict[str, Any]:
            ready.set()
            return {"log": "set"}

        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", lambda s: None)
        graph.add_node("waits", waits).add_node("sets", sets).add_edge("a", "waits").add_edge("a", "sets")
        app = graph.add_edge(START, "a").add_edge(["waits", "sets"], END).compile()
        outputs = [output async for output in app.astream({})]
        return outputs[-1].state["log"]

    assert asyncio.run(scenario()) == ["waited", "set"]  # task order, though "sets" finished first
