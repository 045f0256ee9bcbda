"""``RunInfo.cancelled``: one event per run, shared by every node call, set when the run is cancelled or fails —
also when nothing asked for it before (it is made when first asked for)."""

from __future__ import annotations

import threading
from typing import Any

import reactivex as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import TestScheduler

from rxgraph import END, START, MemorySaver, RunInfo, RunnableConfig, StateGraph


def _chain(*actions: Any) -> Any:
    builder = StateGraph()
    names = [f"n{index}" for index in range(len(actions))]
    for name, action in zip(names, actions, strict=True):
        builder.add_node(name, action)
    for source, target in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(source, target)
    return builder.compile(checkpointer=MemorySaver())


def test_every_node_call_of_a_run_shares_one_event_which_a_completed_run_leaves_unset() -> None:
    calls: list[RunInfo] = []

    def node(state: Any, run: RunInfo) -> None:
        calls.append(run)

    _chain(node, node).invoke({"x": 1}, RunnableConfig(thread_id="t"))

    assert len(calls) == 2 and calls[0] is not calls[1]
    assert calls[0].cancelled is calls[1].cancelled
    assert not calls[1].cancelled.is_set()


def test_a_cancel_before_anyone_asked_for_the_event_is_seen_by_who_asks_later() -> None:
    calls: list[RunInfo] = []

    def node(state: Any, run: RunInfo) -> rx.Observable[Any]:
        calls.append(run)  # (the event is not asked for before the cancel)
        return rx.never()

    scheduler = TestScheduler()
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    scheduler.start(lambda: _chain(node).stream({"x": 1}, config), disposed=250)

    assert calls[0].cancelled.is_set()
    assert calls[0].cancelled.wait(0)


def test_a_node_waiting_on_the_event_on_another_thread_wakes_when_the_run_fails() -> None:
    waiting, woke = threading.Event(), threading.Event()

    def blocking(state: Any, run: RunInfo) -> None:
        waiting.set()
        if run.cancelled.wait(60):
            woke.set()

    def failing(state: Any) -> None:
        assert waiting.wait(60)
        raise RuntimeError("the other branch failed")

    pool = ThreadPoolScheduler(2)
    builder = StateGraph()
    builder.add_node("blocking", blocking, scheduler=pool).add_node("failing", failing, scheduler=pool)
    builder.add_edge(START, "blocking").add_edge(START, "failing")
    builder.add_edge("blocking", END).add_edge("failing", END)
    errors: list[Exception] = []
    done = threading.Event()

    def _failed(error: Exception) -> None:
        errors.append(error)
        done.set()

    builder.compile().stream({"x": 1}).subscribe(on_error=_failed)

    assert done.wait(60) and isinstance(errors[0], RuntimeError)
    assert woke.wait(60)
