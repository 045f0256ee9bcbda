"""Runs of plain functions stop when the subscriber does: steps start on the trampoline, as reactivex's sources do.

Every operator that stops early (``take``, ``first``, ``take_while``, ``take_until``, a dispose from ``on_next``)
stops the run at the next step boundary, and the cut turn is rewound — from the first step, and from a step that
completed on another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.abc import DisposableBase
from reactivex.scheduler import CurrentThreadScheduler
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    CompiledGraph,
    KeyStrategy,
    NodeOutput,
    RunnableConfig,
    StateGraph,
    StreamingOutput,
)
from rxgraph.rx import SignalType, do_finally


def _chain(saver: CheckpointSaver, ran: list[str]) -> CompiledGraph:
    """a -> b -> c -> d, each a plain function appending its name to the log."""
    graph = StateGraph({"log": KeyStrategy.APPEND})
    previous = START
    for name in "abcd":

        def action(state: Any, *, name: str = name) -> dict[str, Any]:
            ran.append(name)
            return {"log": name}

        graph.add_node(name, action).add_edge(previous, name)
        previous = name
    return graph.add_edge(previous, END).compile(checkpointer=saver)


class _Stopper:
    """An operator that stops the stream early, and what the subscriber does with each output it receives."""

    def __init__(
        self,
        operator: Callable[[rx.Observable[NodeOutput]], rx.Observable[NodeOutput]],
        on_output: Callable[[NodeOutput], None] = lambda _: None,
    ) -> None:
        self.operator = operator
        self.on_output = on_output


def _take_until_fired_from_on_next() -> _Stopper:
    trigger: Subject[None] = Subject()

    def fire_after_b(output: NodeOutput) -> None:
        if output.node == "b":
            trigger.on_next(None)

    return _Stopper(lambda o: o.pipe(ops.take_until(trigger)), fire_after_b)


STOPPERS: dict[str, Callable[[], _Stopper]] = {
    "take(2)": lambda: _Stopper(lambda o: o.pipe(ops.take(2))),
    "take_while(not b, inclusive)": lambda: _Stopper(
        lambda o: o.pipe(ops.take_while(lambda x: x.node != "b", inclusive=True))
    ),
    "take_until fired from on_next": _take_until_fired_from_on_next,
}


@pytest.mark.parametrize("stopper", sorted(STOPPERS))
def test_an_operator_that_stops_early_stops_a_synchronous_run_and_rewinds_it(
    stopper: str, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    ran: list[str] = []
    app = _chain(saver_factory(), ran)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "turn 1"}, config)
    before = dict(app.get_state(config).values)
    ran.clear()
    seen: list[str] = []
    stop = STOPPERS[stopper]()

    def on_next(output: NodeOutput) -> None:
        seen.append(output.node)
        stop.on_output(output)

    stop.operator(app.stream({"log": "turn 2"}, config)).subscribe(on_next)
    assert seen == ["a", "b"]
    assert ran == ["a", "b"]  # c and d never ran
    head = app.get_state(config)
    assert head.checkpoint is not None and head.checkpoint.source == "rewind"
    assert dict(head.values) == before


def test_first_stops_after_the_first_node(saver_factory: Callable[[], CheckpointSaver]) -> None:
    ran: list[str] = []
    app = _chain(saver_factory(), ran)
    config = RunnableConfig(thread_id="t")
    first: list[NodeOutput] = []
    app.stream({"log": "go"}, config).pipe(ops.first()).subscribe(first.append)
    assert [o.node for o in first] == ["a"] and ran == ["a"]
    assert dict(app.get_state(config).values) == {}  # a first-ever turn rewinds to an empty state


@pytest.mark.parametrize("where", ["inside a trampoline", "on a scheduler"])
def test_a_dispose_from_inside_on_next_stops_the_run_before_the_next_node(
    where: str, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    # A subscriber can only dispose from on_next if subscribe() returned first, as it does for reactivex's own
    # sources: when subscribing inside a running trampoline (any scheduled action, any operator's subscribe), or
    # when the run has a scheduler of its own.
    ran: list[str] = []
    app = _chain(saver_factory(), ran)
    scheduler = TestScheduler() if where == "on a scheduler" else None
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    subscription: list[DisposableBase] = []
    signals: list[SignalType] = []

    def on_next(output: NodeOutput) -> None:
        if output.node == "b":
            subscription[0].dispose()

    def subscribe(*_: Any) -> None:
        subscription.append(app.stream({"log": "go"}, config).pipe(do_finally(signals.append)).subscribe(on_next))

    if scheduler is None:
        CurrentThreadScheduler.singleton().schedule(subscribe)
    else:
        subscribe()
        scheduler.start()
    assert ran == ["a", "b"]
    assert signals == [SignalType.CANCEL]
    assert dict(app.get_state(config).values) == {}


def test_subscribe_returns_before_a_synchronous_run_starts_when_a_trampoline_runs() -> None:
    # Inside a trampoline (as inside any Observable.subscribe), subscribing only queues the run.
    ran: list[str] = []
    app = _chain_without_saver(ran)
    order: list[str] = []

    def outer(observer: Any, scheduler: Any = None) -> DisposableBase:
        app.stream({"log": "go"}).subscribe(lambda o: order.append(o.node))
        order.append("subscribed")
        return rx.empty().subscribe(observer)

    rx.create(outer).subscribe()
    assert order == ["subscribed", "a", "b", "c", "d"]


def _chain_without_saver(ran: list[str]) -> CompiledGraph:
    graph = StateGraph({"log": KeyStrategy.APPEND})
    previous = START
    for name in "abcd":
        graph.add_node(name, lambda s, *, name=name: (ran.append(name), {"log": name})[1]).add_edge(previous, name)
        previous = name
    return graph.add_edge(previous, END).compile()


def _counting(limit: int, pulled: list[int]) -> Iterator[int]:
    for index in range(limit):
        pulled.append(index)
        yield index


def test_a_synchronous_token_stream_after_a_step_on_a_thread_pool_stops_with_take(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    go = threading.Event()
    pulled: list[int] = []
    finished = threading.Event()

    def job() -> dict[str, Any]:
        assert go.wait(10)  # completes on the worker, after subscribe() returned
        return {"x": 1}

    app = (
        StateGraph()
        .add_node("slow", lambda s: rx.from_future(pool.submit(job)))
        .add_node("tokens", lambda s: rx.from_iterable(_counting(1000, pulled)), reduce=lambda c: {"n": len(c)})
        .add_edge(START, "slow")
        .add_edge("slow", "tokens")
        .add_edge("tokens", END)
        .compile(checkpointer=saver_factory())
    )
    config = RunnableConfig(thread_id="t")
    seen: list[Any] = []

    def first_token(output: NodeOutput) -> bool:
        return not (isinstance(output, StreamingOutput) and output.node == "tokens")

    app.stream({"x": 0}, config).pipe(
        ops.take_while(first_token, inclusive=True), do_finally(lambda _: finished.set())
    ).subscribe(seen.append)
    go.set()
    assert finished.wait(10)
    pool.shutdown(wait=True)
    assert [(o.node, type(o).__name__) for o in seen][-1] == ("tokens", "StreamingOutput")
    assert len(pulled) <= 2  # the generator was not drained after the run was cut
    head = app.get_state(config).checkpoint
    assert head is not None and head.source == "rewind" and dict(head.values) == {}
