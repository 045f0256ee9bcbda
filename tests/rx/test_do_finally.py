from __future__ import annotations

import threading
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler
from reactivex.testing.marbles import marbles_testing

from rxgraph.rx import SignalType, do_finally, do_on_cancel
from rxgraph.rx._subscribe import subscribe_source

on_next, on_completed, on_error = ReactiveTest.on_next, ReactiveTest.on_completed, ReactiveTest.on_error


def test_completion_is_reported_once_after_the_subscriber_saw_it() -> None:
    events: list[str] = []
    with marbles_testing(timespan=1.0) as (start, cold, _hot, exp):
        source = cold("-a-b|").pipe(do_finally(lambda s: events.append(f"finally:{s.name}")))
        observed = start(source.pipe(ops.do_action(on_completed=lambda: events.append("completed"))))
        assert observed == exp("-a-b|")
    assert events == ["completed", "finally:ON_COMPLETE"]


def test_error_is_reported_with_on_error() -> None:
    signals: list[SignalType] = []
    with marbles_testing(timespan=1.0) as (start, cold, _hot, exp):
        observed = start(cold("-a#").pipe(do_finally(signals.append)))
        assert observed == exp("-a#")
    assert signals == [SignalType.ON_ERROR]


def test_dispose_before_terminal_is_cancel_after_upstream_dispose_returned() -> None:
    order: list[str] = []
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_next(10, "a"), on_next(20, "b"), on_completed(30))

    def upstream_disposed() -> None:
        order.append("upstream disposed")

    def make() -> rx.Observable[str]:
        guarded = rx.using(lambda: rx.disposable.Disposable(upstream_disposed), lambda _: source)
        return guarded.pipe(do_finally(lambda s: order.append(f"finally:{s.name}")))

    observed = scheduler.start(make, disposed=215)
    assert observed.messages == [on_next(210, "a")]
    assert order == ["upstream disposed", "finally:CANCEL"]


def test_take_downstream_is_a_cancel() -> None:
    signals: list[SignalType] = []
    with marbles_testing(timespan=1.0) as (start, cold, _hot, _exp):
        observed = start(cold("-a-b-c|").pipe(do_finally(signals.append), ops.take(2)))
        assert observed == [on_next(201, "a"), on_next(203, "b"), on_completed(203)]
    assert signals == [SignalType.CANCEL]


def test_take_until_downstream_is_a_cancel() -> None:
    signals: list[SignalType] = []
    with marbles_testing(timespan=1.0) as (start, cold, hot, exp):
        trigger = hot("---x")
        observed = start(cold("-a-b-c|").pipe(do_finally(signals.append), ops.take_until(trigger)))
        assert observed == exp("-a-|")
    assert signals == [SignalType.CANCEL]


def test_dispose_at_the_exact_completion_tick_of_a_cold_source_cancels() -> None:
    # The dispose is scheduled (by start) before the cold source schedules its completion at the same tick, so it
    # runs first: the subscriber never sees the completion and the callback says CANCEL.
    signals: list[SignalType] = []
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_next(10, "a"), on_completed(100))
    observed = scheduler.start(lambda: source.pipe(do_finally(signals.append)), disposed=300)
    assert observed.messages == [on_next(210, "a")]
    assert signals == [SignalType.CANCEL]


def test_completion_at_the_exact_dispose_tick_of_a_hot_source_completes() -> None:
    # A hot source scheduled its completion before start() scheduled the dispose: completion wins, no cancel.
    signals: list[SignalType] = []
    scheduler = TestScheduler()
    source = scheduler.create_hot_observable(on_next(210, "a"), on_completed(300))
    observed = scheduler.start(lambda: source.pipe(do_finally(signals.append)), disposed=300)
    assert observed.messages == [on_next(210, "a"), on_completed(300)]
    assert signals == [SignalType.ON_COMPLETE]


def test_callback_runs_once_even_if_disposed_again() -> None:
    signals: list[SignalType] = []
    subscription = rx.never().pipe(do_finally(signals.append)).subscribe()
    subscription.dispose()
    subscription.dispose()
    assert signals == [SignalType.CANCEL]


def test_a_failing_callback_is_logged_and_does_not_replace_the_signal(caplog: object) -> None:
    def boom(_: SignalType) -> None:
        raise RuntimeError("boom")

    completed: list[bool] = []
    rx.of(1).pipe(do_finally(boom)).subscribe(on_completed=lambda: completed.append(True))
    assert completed == [True]


def test_do_on_cancel_runs_before_upstream_dispose_and_only_on_cancel() -> None:
    order: list[str] = []
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_next(10, "a"), on_completed(30))

    def make() -> rx.Observable[str]:
        guarded = rx.using(
            lambda: rx.disposable.Disposable(lambda: order.append("upstream disposed")), lambda _: source
        )
        return guarded.pipe(do_on_cancel(lambda: order.append("cancel")))

    scheduler.start(make, disposed=215)
    assert order == ["cancel", "upstream disposed"]

    completed_order: list[str] = []
    rx.of(1, 2).pipe(do_on_cancel(lambda: completed_order.append("cancel"))).subscribe()
    assert completed_order == []


def test_do_on_cancel_is_not_called_after_an_error() -> None:
    calls: list[str] = []
    rx.throw(ValueError("x")).pipe(do_on_cancel(lambda: calls.append("cancel"))).subscribe(on_error=lambda _: None)
    assert calls == []


def test_a_source_failing_while_subscribing_is_an_error_for_both_operators() -> None:
    def broken_subscribe(observer: object, scheduler: object = None) -> rx.abc.DisposableBase:
        raise ValueError("cannot subscribe")

    signals: list[SignalType] = []
    cancels: list[str] = []
    errors: list[Exception] = []
    source: rx.Observable[int] = rx.Observable(broken_subscribe)
    source.pipe(do_on_cancel(lambda: cancels.append("cancel")), do_finally(signals.append)).subscribe(
        on_error=errors.append
    )
    assert [str(e) for e in errors] == ["cannot subscribe"]
    assert signals == [SignalType.ON_ERROR] and cancels == []


def test_items_after_a_terminal_event_of_a_misbehaving_source_are_dropped() -> None:
    def rude(observer: rx.abc.ObserverBase[int], scheduler: object = None) -> rx.abc.DisposableBase:
        observer.on_next(1)
        observer.on_completed()
        observer.on_next(2)  # not allowed by the protocol: the subscriber must not see it
        return rx.disposable.Disposable()

    seen: list[int] = []
    signals: list[SignalType] = []
    rx.Observable(rude).pipe(do_on_cancel(lambda: None), do_finally(signals.append)).subscribe(seen.append)
    assert seen == [1] and signals == [SignalType.ON_COMPLETE]


def test_a_second_dispose_on_another_thread_returns_only_after_the_callback_ran() -> None:
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_finally(signal: SignalType) -> None:
        entered.set()
        assert release.wait(10)
        order.append("callback done")

    # Held as rxgraph's operators hold a source (Observable.subscribe would wrap it in a once-only disposable,
    # which returns at once on the second call before this operator is even asked).
    disposable = _held(rx.never().pipe(do_finally(slow_finally)))
    first = threading.Thread(target=disposable.dispose)
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: (disposable.dispose(), order.append("second returned")))
    second.start()
    release.set()
    first.join()
    second.join()
    assert order == ["callback done", "second returned"]


def test_a_dispose_from_inside_the_callback_does_not_wait_for_itself() -> None:
    holder: list[Any] = []
    calls: list[SignalType] = []

    def callback(signal: SignalType) -> None:
        calls.append(signal)
        holder[0].dispose()  # re-entrant: must return at once

    subscription = _held(rx.never().pipe(do_finally(callback)))
    holder.append(subscription)
    subscription.dispose()
    assert calls == [SignalType.CANCEL]


def _held(source: rx.Observable[Any]) -> Any:
    """``source`` subscribed the way rxgraph's own operators do it, its subscription as the source returned it."""
    return subscribe_source(source, lambda _: None, lambda _: None, lambda: None, None)


# -- several in one pipe -----------------------------------------------------------------------------------------
# f1 sits nearest the source, f3 nearest the subscriber. Each case records, in one list, what the subscriber saw,
# when the source's own subscription was disposed, and each callback.


def _three_in_a_row(
    messages: list[Any], *, disposed: float = 1000, failing: int | None = None
) -> tuple[list[Any], list[str]]:
    order: list[str] = []
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(*messages)

    def callback(number: int) -> Any:
        def record(signal: SignalType) -> None:
            order.append(f"f{number}:{signal.name}")
            if number == failing:
                raise RuntimeError(f"f{number} failed")

        return record

    def make() -> rx.Observable[str]:
        guarded = rx.using(lambda: rx.disposable.Disposable(lambda: order.append("source disposed")), lambda _: source)
        return guarded.pipe(
            do_finally(callback(1)),
            do_finally(callback(2)),
            do_finally(callback(3)),
            ops.do_action(
                on_completed=lambda: order.append("subscriber:completed"),
                on_error=lambda e: order.append(f"subscriber:error {e}"),
            ),
        )

    observed = scheduler.start(make, disposed=disposed)
    return observed.messages, order


def test_several_in_a_row_call_back_from_the_subscriber_inwards_on_completion() -> None:
    # Reactor's severalInARowExecutedInReverseOrder: each operator passes the completion on, then calls back.
    messages, order = _three_in_a_row([on_next(10, "a"), on_completed(20)])
    assert messages == [on_next(210, "a"), on_completed(220)]
    callbacks = [event for event in order if event.startswith("f")]
    assert callbacks == ["f3:ON_COMPLETE", "f2:ON_COMPLETE", "f1:ON_COMPLETE"]
    assert order[0] == "subscriber:completed"


def test_several_in_a_row_call_back_from_the_subscriber_inwards_on_error() -> None:
    messages, order = _three_in_a_row([on_next(10, "a"), on_error(20, ValueError("bad"))])
    assert [m.value.kind for m in messages] == ["N", "E"] and messages[-1].time == 220
    callbacks = [event for event in order if event.startswith("f")]
    assert callbacks == ["f3:ON_ERROR", "f2:ON_ERROR", "f1:ON_ERROR"]
    assert order[0] == "subscriber:error bad"


def test_several_in_a_row_call_back_from_the_source_outwards_on_cancel() -> None:
    # The dispose travels the other way: each operator disposes its upstream, then calls back. So f1 runs first,
    # right after the source was disposed, and f3, nearest the subscriber, has the last word.
    messages, order = _three_in_a_row([on_next(10, "a"), on_completed(20)], disposed=215)
    assert messages == [on_next(210, "a")]
    assert order == ["source disposed", "f1:CANCEL", "f2:CANCEL", "f3:CANCEL"]


def test_a_failing_callback_in_a_row_stops_neither_the_others_nor_the_signal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    completed = _three_in_a_row([on_next(10, "a"), on_completed(20)], failing=2)
    assert completed[0] == [on_next(210, "a"), on_completed(220)]
    assert [e for e in completed[1] if e.startswith(("f", "subscriber"))] == [
        "subscriber:completed",
        "f3:ON_COMPLETE",
        "f2:ON_COMPLETE",
        "f1:ON_COMPLETE",
    ]

    failed = _three_in_a_row([on_next(10, "a"), on_error(20, ValueError("bad"))], failing=2)
    assert [m.value.kind for m in failed[0]] == ["N", "E"] and str(failed[0][-1].value.exception) == "bad"
    assert [e for e in failed[1] if e.startswith(("f", "subscriber"))] == [
        "subscriber:error bad",
        "f3:ON_ERROR",
        "f2:ON_ERROR",
        "f1:ON_ERROR",
    ]

    cancelled = _three_in_a_row([on_next(10, "a"), on_completed(20)], disposed=215, failing=2)
    assert cancelled == ([on_next(210, "a")], ["source disposed", "f1:CANCEL", "f2:CANCEL", "f3:CANCEL"])

    failures = [r for r in caplog.records if r.name == "rxgraph.rx" and r.exc_info is not None]
    assert [str(r.exc_info[1]) for r in failures if r.exc_info] == ["f2 failed"] * 3


def test_several_do_on_cancel_call_back_from_the_subscriber_inwards_before_the_source_is_disposed() -> None:
    # What rxgraph's runs rely on: do_on_cancel then do_finally gives on_cancel, upstream dispose, on_finally.
    order: list[str] = []
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_next(10, "a"), on_completed(20))

    def make() -> rx.Observable[str]:
        guarded = rx.using(lambda: rx.disposable.Disposable(lambda: order.append("source disposed")), lambda _: source)
        return guarded.pipe(
            do_on_cancel(lambda: order.append("c1")),
            do_on_cancel(lambda: order.append("c2")),
            do_finally(lambda s: order.append(f"f:{s.name}")),
        )

    scheduler.start(make, disposed=215)
    assert order == ["c2", "c1", "source disposed", "f:CANCEL"]
