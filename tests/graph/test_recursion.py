"""Iterative stepping: a long loop uses constant stack; recursion_limit counts steps."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import reactivex as rx
from reactivex.testing import TestScheduler

from rxgraph import END, START, GraphRecursionError, MemorySaver, RunnableConfig, StateGraph


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


def _loop(action: Any, limit: int, **compile_kwargs: Any) -> tuple[Any, list[int]]:
    depths: list[int] = []

    def node(state: Any) -> Any:
        depths.append(_depth())
        return action(state)

    app = (
        StateGraph()
        .add_node("tick", node)
        .add_edge(START, "tick")
        .add_conditional_edges("tick", lambda s: END if s["n"] >= limit else "tick")
        .compile(**compile_kwargs)
    )
    return app, depths


def test_ten_thousand_synchronous_iterations_use_constant_stack() -> None:
    app, depths = _loop(lambda s: {"n": s["n"] + 1}, 10_000)
    assert app.invoke({"n": 0}, RunnableConfig(recursion_limit=20_000)) == {"n": 10_000}
    assert len(depths) == 10_000
    assert max(depths) == min(depths)


def test_ten_thousand_iterations_of_observable_nodes_use_constant_stack() -> None:
    app, depths = _loop(lambda s: rx.of({"n": s["n"] + 1}), 10_000)
    assert app.invoke({"n": 0}, RunnableConfig(recursion_limit=20_000)) == {"n": 10_000}
    assert len(set(depths[1:])) == 1  # the first step runs inside subscribe(); every later one at one depth


def test_ten_thousand_iterations_with_a_checkpointer_keep_the_chain() -> None:
    saver = MemorySaver()
    app, _ = _loop(lambda s: {"n": s["n"] + 1}, 10_000, checkpointer=saver)
    app.invoke({"n": 0}, RunnableConfig(thread_id="t", recursion_limit=10_000))
    chain = saver.list("t")
    assert len(chain) == 10_001
    assert [c.seq for c in chain[:3]] == [10_001, 10_000, 9_999]


def test_timed_iterations_on_a_test_scheduler() -> None:
    scheduler = TestScheduler()
    app, depths = _loop(lambda s: rx.timer(1.0).pipe(rx.operators.map(lambda _: {"n": s["n"] + 1})), 1_000)
    result = app.invoke({"n": 0}, RunnableConfig(scheduler=scheduler, recursion_limit=1_000))
    assert result == {"n": 1_000}
    assert scheduler.clock == 1_000
    assert len(set(depths[1:])) == 1


def test_recursion_limit_counts_steps_and_fails_the_run() -> None:
    app, depths = _loop(lambda s: {"n": s["n"] + 1}, 10**9)
    with pytest.raises(GraphRecursionError, match=r"recursion_limit=25 .* next node would be 'tick'"):
        app.invoke({"n": 0})
    assert len(depths) == 25
    app.invoke({"n": 10**9 - 3}, RunnableConfig(recursion_limit=3))  # exactly enough steps
