"""What rxgraph relies on in reactivex beyond its documented surface, pinned so that an upgrade that changes it fails
here (``pyproject.toml`` bounds the version too)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import reactivex as rx
from reactivex import Observable, abc
from reactivex.scheduler import CurrentThreadScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler, AsyncIOThreadSafeScheduler


def test_subscribe_core_calls_the_subscribe_function_with_the_observer_as_given() -> None:
    # rxgraph.rx._subscribe passes its own observer to Observable._subscribe_core: no wrapper may come between.
    received: list[Any] = []

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> None:
        received.append((observer, scheduler))

    class Plain(abc.ObserverBase[int]):
        def on_next(self, value: int) -> None: ...
        def on_error(self, error: Exception) -> None: ...
        def on_completed(self) -> None: ...

    observer, scheduler = Plain(), CurrentThreadScheduler.singleton()
    returned = Observable(subscribe)._subscribe_core(observer, scheduler)
    assert received == [(observer, scheduler)]
    assert returned is None  # the raw return value: rxgraph fixes it up as subscribe() would


def test_subscribe_runs_inside_a_trampoline_so_sources_queue_their_work() -> None:
    # Why a run can be cancelled from on_next: Observable.subscribe sets up the current thread's trampoline before
    # calling the subscribe function, so work a source schedules on it runs after subscribe_core returned.
    order: list[str] = []

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        assert not CurrentThreadScheduler.singleton().schedule_required()
        CurrentThreadScheduler.singleton().schedule(lambda *_: order.append("scheduled work"))
        order.append("subscribe returns")
        return rx.empty().subscribe(observer)

    Observable(subscribe).subscribe()
    assert order == ["subscribe returns", "scheduled work"]


def test_the_trampoline_is_per_thread_and_idle_on_a_fresh_thread() -> None:
    idle: list[bool] = []
    thread = threading.Thread(target=lambda: idle.append(CurrentThreadScheduler.singleton().schedule_required()))
    thread.start()
    thread.join()
    assert idle == [True]


def test_the_asyncio_schedulers_keep_their_loop_in_loop() -> None:
    # invoke() looks at `_loop` to refuse blocking the loop its own run needs (DeadlockError).
    loop = asyncio.new_event_loop()
    try:
        assert AsyncIOScheduler(loop)._loop is loop
        assert AsyncIOThreadSafeScheduler(loop)._loop is loop
    finally:
        loop.close()
