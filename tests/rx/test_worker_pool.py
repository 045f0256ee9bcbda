"""``WorkerPool`` (the pool a run's blocking work goes to under asyncio) against reactivex's ``ThreadPoolScheduler``,
the reference whose ``schedule`` it shortcuts: each scenario runs on both and must come out the same."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import reactivex as rx
from reactivex import abc
from reactivex import operators as ops
from reactivex.disposable import Disposable
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOThreadSafeScheduler

from rxgraph.rx._awaitable import WorkerPool, awaiting_loop, worker_pool

WAIT = 10.0  # seconds an event is waited for before the test fails: never reached when it works


@pytest.fixture(params=[ThreadPoolScheduler, WorkerPool], ids=["reference", "worker_pool"])
def pool(request: pytest.FixtureRequest) -> Iterator[ThreadPoolScheduler]:
    scheduler: ThreadPoolScheduler = request.param(1)  # one worker: what is queued behind a task waits for it
    yield scheduler
    scheduler.executor.shutdown(wait=True)


def _block(pool: ThreadPoolScheduler) -> threading.Event:
    """Occupy the pool's one worker until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def hold(*_: Any) -> None:
        started.set()
        release.wait(WAIT)

    pool.schedule(hold)
    assert started.wait(WAIT)
    return release


def _drain(pool: ThreadPoolScheduler) -> None:
    """Return once everything queued on the pool's one worker before this call has run."""
    done = threading.Event()
    pool.schedule(lambda *_: done.set())
    assert done.wait(WAIT)


def test_an_action_runs_on_a_pool_thread_with_its_state(pool: ThreadPoolScheduler) -> None:
    seen: list[Any] = []
    done = threading.Event()

    def action(scheduler: abc.SchedulerBase, state: Any) -> None:
        seen.append((state, threading.get_ident() != caller))
        done.set()

    caller = threading.get_ident()
    pool.schedule(action, "state")
    assert done.wait(WAIT)
    assert seen == [("state", True)]


def test_an_action_disposed_before_it_started_never_runs(pool: ThreadPoolScheduler) -> None:
    release = _block(pool)
    ran: list[str] = []
    pool.schedule(lambda *_: ran.append("cancelled one")).dispose()
    pool.schedule(lambda *_: ran.append("kept one"))
    release.set()
    _drain(pool)
    assert ran == ["kept one"]


def test_disposing_after_the_start_disposes_what_the_action_returned(pool: ThreadPoolScheduler) -> None:
    disposed, returned = threading.Event(), threading.Event()
    subscription = pool.schedule(lambda *_: (returned.set(), Disposable(disposed.set))[1])
    assert returned.wait(WAIT)
    _drain(pool)
    assert not disposed.is_set()
    subscription.dispose()
    assert disposed.is_set()


def test_what_an_action_returns_after_a_dispose_during_its_call_is_disposed(pool: ThreadPoolScheduler) -> None:
    inside, go_on, disposed = threading.Event(), threading.Event(), threading.Event()

    def action(*_: Any) -> abc.DisposableBase:
        inside.set()
        go_on.wait(WAIT)
        return Disposable(disposed.set)

    subscription = pool.schedule(action)
    assert inside.wait(WAIT)
    subscription.dispose()
    go_on.set()
    assert disposed.wait(WAIT)


@pytest.mark.parametrize("count", [1, 7, 500])
def test_observe_on_keeps_every_item_in_order(pool: ThreadPoolScheduler, count: int) -> None:
    seen: list[int] = []
    threads: set[int] = set()
    done = threading.Event()
    rx.range(count).pipe(ops.observe_on(pool)).subscribe(
        lambda value: (seen.append(value), threads.add(threading.get_ident())), on_completed=done.set
    )
    assert done.wait(WAIT)
    assert seen == list(range(count))
    assert threading.get_ident() not in threads


def test_a_source_subscribed_with_the_pool_emits_everything_there(pool: ThreadPoolScheduler) -> None:
    seen: list[int] = []
    done = threading.Event()
    rx.from_iterable(range(50)).subscribe(seen.append, on_completed=done.set, scheduler=pool)
    assert done.wait(WAIT)
    assert seen == list(range(50))


def test_timed_work_still_runs(pool: ThreadPoolScheduler) -> None:
    fired = threading.Event()
    pool.schedule_relative(0.001, lambda *_: fired.set())
    assert fired.wait(WAIT)


def test_rxgraph_runs_on_a_worker_pool() -> None:
    assert isinstance(worker_pool(), WorkerPool)
    assert isinstance(worker_pool(), ThreadPoolScheduler)  # what a user's code may check for


def test_the_pool_serving_a_loop_is_the_same_threads_and_names_that_loop_while_it_lives() -> None:
    loop = asyncio.new_event_loop()
    try:
        serving = worker_pool().serving(loop)
        assert serving is worker_pool().serving(loop)  # one per loop
        assert serving.executor is worker_pool().executor  # the same threads
        assert awaiting_loop(serving) is loop
        assert awaiting_loop(worker_pool()) is None  # the shared pool serves no loop
        assert worker_pool().loop is None
        done = threading.Event()
        serving.schedule(lambda *_: done.set())
        assert done.wait(WAIT)
    finally:
        loop.close()
    held = weakref.ref(loop)
    del loop, serving
    gc.collect()
    assert held() is None  # the pool does not keep a closed loop alive


def test_awaiting_loop_reads_an_asyncio_schedulers_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert awaiting_loop(AsyncIOThreadSafeScheduler(loop)) is loop
        assert awaiting_loop(ThreadPoolScheduler(1)) is None
        assert awaiting_loop(None) is None
    finally:
        loop.close()
