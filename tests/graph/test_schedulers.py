"""Schedulers: synchronous with none, virtual time with a TestScheduler in the config or given to subscribe."""

from __future__ import annotations

import threading
from typing import Any

import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import END, START, NodeOutput, RunnableConfig, StateGraph


def _timed_graph(seen_configs: list[RunnableConfig] | None = None) -> Any:
    def wait_then_update(state: Any, config: RunnableConfig) -> rx.Observable[dict[str, Any]]:
        if seen_configs is not None:
            seen_configs.append(config)
        # No scheduler named here: the run's scheduler is the default one for what the node subscribes.
        return rx.timer(5.0).pipe(ops.map(lambda _: {"steps": state.get("steps", 0) + 1}))

    return (
        StateGraph()
        .add_node("wait", wait_then_update)
        .add_edge(START, "wait")
        .add_conditional_edges("wait", lambda s: END if s["steps"] >= 3 else "wait")
        .compile()
    )


def test_without_a_scheduler_the_run_is_synchronous_on_the_subscribing_thread() -> None:
    threads: list[int] = []
    app = (
        StateGraph()
        .add_node("a", lambda s: threads.append(threading.get_ident()))
        .add_node("b", lambda s: rx.of({"x": 1}))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    outputs: list[NodeOutput] = []
    completed: list[bool] = []
    app.stream({}).subscribe(outputs.append, on_completed=lambda: completed.append(True))
    assert [o.node for o in outputs if type(o) is NodeOutput] == [
        "a",
        "b",
    ]
    assert completed == [True]
    assert threads == [threading.get_ident()]


def test_a_test_scheduler_in_the_config_runs_timed_nodes_in_virtual_time() -> None:
    scheduler = TestScheduler()
    observed = scheduler.start(lambda: _timed_graph().stream({}, RunnableConfig(scheduler=scheduler)))
    finished = [
        (m.time, m.value.value.state["steps"])
        for m in observed.messages
        if m.value.kind == "N" and type(m.value.value) is NodeOutput
    ]
    assert finished == [(205.0, 1), (210.0, 2), (215.0, 3)]
    assert observed.messages[-1].value.kind == "C" and observed.messages[-1].time == 215.0


def test_a_scheduler_given_to_subscribe_reaches_the_nodes_and_their_config() -> None:
    scheduler = TestScheduler()
    configs: list[RunnableConfig] = []
    outputs: list[tuple[float, int]] = []
    _timed_graph(configs).stream({}).subscribe(
        lambda o: type(o) is NodeOutput and outputs.append((scheduler.clock, o.state["steps"])), scheduler=scheduler
    )
    assert outputs == []  # nothing happens until virtual time advances
    scheduler.advance_to(12.0)
    assert outputs == [(5.0, 1), (10.0, 2)]
    scheduler.start()
    assert outputs == [(5.0, 1), (10.0, 2), (15.0, 3)]
    assert all(c.scheduler is scheduler for c in configs)


def test_invoke_advances_a_virtual_time_scheduler_until_the_run_ends() -> None:
    scheduler = TestScheduler()
    assert _timed_graph().invoke({}, RunnableConfig(scheduler=scheduler)) == {"steps": 3}
    assert scheduler.clock == 15.0
