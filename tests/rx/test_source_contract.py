"""Node streams and operator sources are subscribed the way ``Observable.subscribe`` would: every disposer it
accepts, a subscribe that raises, events after a terminal event; a teardown that raises never skips the rewind."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from reactivex import abc
from reactivex.disposable import Disposable
from reactivex.testing import TestScheduler

from rxgraph import END, START, CheckpointSaver, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.errors import InvalidTypeError
from rxgraph.rx import SignalType, do_finally, do_on_cancel

Subscribe = Callable[[abc.ObserverBase[Any], abc.SchedulerBase | None], Any]


def _two_node_graph(first: Subscribe, second: Subscribe, saver: CheckpointSaver | None = None) -> Any:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: rx.create(first))
        .add_node("b", lambda s: rx.create(second))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )


def _emitting(value: str, disposer: Callable[[], Any]) -> Subscribe:
    def subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> Any:
        observer.on_next({"log": value})
        observer.on_completed()
        return disposer()

    return subscribe


DISPOSERS: dict[str, Callable[[list[str]], Callable[[], Any]]] = {
    "a plain callable": lambda log: lambda: lambda: log.append("disposed"),
    "None": lambda log: lambda: None,
    "a Disposable": lambda log: lambda: Disposable(lambda: log.append("disposed")),
    "an object with dispose()": lambda log: lambda: _HasDispose(log),
}


class _HasDispose:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def dispose(self) -> None:
        self.log.append("disposed")


@pytest.mark.parametrize("disposer", sorted(DISPOSERS))
def test_a_node_stream_may_return_any_disposer_subscribe_accepts(disposer: str) -> None:
    log: list[str] = []
    make = DISPOSERS[disposer](log)
    app = _two_node_graph(_emitting("a", make), _emitting("b", make))
    assert app.invoke({"log": "in"}) == {"log": ["in", "a", "b"]}
    if disposer != "None":
        assert log.count("disposed") >= 1  # the first stream is disposed when the next step takes its place


def test_a_callable_disposer_is_called_when_the_run_is_disposed_mid_stream() -> None:
    scheduler = TestScheduler()
    log: list[str] = []

    def silent(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Callable[[], None]:
        return lambda: log.append("disposed")  # never emits: the run waits in this step

    app = _two_node_graph(_emitting("a", lambda: None), silent)
    subscription = app.stream({"log": "in"}, RunnableConfig(scheduler=scheduler)).subscribe()
    scheduler.advance_by(1)
    subscription.dispose()
    assert log == ["disposed"]


def test_a_subscribe_that_raises_fails_the_run_with_that_error() -> None:
    def broken(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Any:
        raise ConnectionRefusedError("model endpoint down")

    app = _two_node_graph(_emitting("a", lambda: None), broken)
    with pytest.raises(ConnectionRefusedError, match="model endpoint down"):
        app.invoke({"log": "in"})


def test_a_subscribe_that_returns_something_unusable_fails_the_run_clearly() -> None:
    def unusable(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Any:
        return 42

    app = _two_node_graph(_emitting("a", lambda: None), unusable)
    with pytest.raises(InvalidTypeError, match="returned a int; a subscribe function returns a Disposable") as caught:
        app.invoke({"log": "in"})
    assert caught.value.argument == "subscription" and isinstance(caught.value, TypeError)


def test_events_after_a_terminal_event_are_dropped() -> None:
    def sloppy(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> None:
        observer.on_next({"log": "b"})
        observer.on_completed()
        observer.on_next({"log": "late"})
        observer.on_error(RuntimeError("late"))
        observer.on_completed()

    app = _two_node_graph(_emitting("a", lambda: None), sloppy)
    assert app.invoke({"log": "in"}) == {"log": ["in", "a", "b"]}


def test_a_teardown_that_raises_is_logged_and_the_run_is_still_rewound(
    saver_factory: Callable[[], CheckpointSaver], caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = TestScheduler()

    def hangs_up(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Disposable:
        def close() -> None:
            raise ConnectionResetError("peer reset while closing the stream")

        return Disposable(close)

    app = _two_node_graph(_emitting("a", lambda: None), hangs_up, saver_factory())
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    signals: list[SignalType] = []
    subscription = app.stream({"log": "in"}, config).pipe(do_finally(signals.append)).subscribe()
    scheduler.advance_by(1)
    with caplog.at_level(logging.ERROR, logger="rxgraph.rx"):
        subscription.dispose()  # does not raise
    assert signals == [SignalType.CANCEL]
    head = app.get_state(config).checkpoint
    assert head is not None and head.source == "rewind" and dict(head.values) == {}
    assert any("ConnectionResetError" in (r.exc_text or "") for r in caplog.records)


def test_do_finally_calls_back_even_when_the_upstream_dispose_raises() -> None:
    calls: list[SignalType] = []

    def source(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Callable[[], None]:
        def close() -> None:
            raise OSError("close failed")

        return close

    subscription = rx.create(source).pipe(do_finally(calls.append)).subscribe()
    subscription.dispose()
    assert calls == [SignalType.CANCEL]


@pytest.mark.parametrize("operator", ["do_finally", "do_on_cancel"])
def test_the_operators_accept_a_callable_disposer_from_their_source(operator: str) -> None:
    log: list[str] = []

    def source(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> Callable[[], None]:
        return lambda: log.append("source disposed")

    op = do_finally(lambda s: log.append(s.name)) if operator == "do_finally" else do_on_cancel(lambda: log.append("C"))
    rx.create(source).pipe(op).subscribe().dispose()
    assert "source disposed" in log
