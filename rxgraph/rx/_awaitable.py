"""Awaitables as Observables, awaited on an asyncio event loop; and the loop rxgraph keeps when there is no other."""

from __future__ import annotations

import asyncio
import copy
import threading
import weakref
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import TypeVar

from reactivex import Observable, abc, typing
from reactivex.disposable import Disposable, SingleAssignmentDisposable
from reactivex.scheduler import ThreadPoolScheduler

__all__ = [
    "WorkerPool",
    "awaiting_loop",
    "background_loop",
    "from_awaitable",
    "loop_of_scheduler",
    "running_loop",
    "worker_pool",
]

_T = TypeVar("_T")
_TState = TypeVar("_TState")

_background: asyncio.AbstractEventLoop | None = None
_background_lock = threading.Lock()
_pool: WorkerPool | None = None
_views: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WorkerPool] = weakref.WeakKeyDictionary()


class WorkerPool(ThreadPoolScheduler):
    """reactivex's ``ThreadPoolScheduler``, whose ``schedule`` hands the action to the pool itself.

    ``ThreadPoolScheduler.schedule`` makes an ``EventLoopScheduler`` for every action (a condition, a queue, a loop
    that starts on a pool thread, runs the action and stops): about as much again as the action's hand-off to the
    pool. Here the action is submitted as it is. What a subscriber sees is the same: the action runs on a pool
    thread, never if it was disposed before it started, and disposing after it started disposes what it returned.
    One difference: the scheduler an action is given is this pool, not an event loop of its own, so what it
    schedules there may run on another thread, at once, as anything scheduled on the pool does. Timed and periodic
    work is ``ThreadPoolScheduler``'s.

    ``loop`` is the event loop of the asyncio code whose run this is (``serving``), None for the shared pool itself:
    what is awaited for the run (an async model client's request) is awaited there (``awaiting_loop``).
    """

    _loop: weakref.ref[asyncio.AbstractEventLoop] | None = None  # weak: the views are kept by their loop, as keys

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return None if self._loop is None else self._loop()

    def serving(self, loop: asyncio.AbstractEventLoop) -> WorkerPool:
        """This pool (the same threads) for the runs of asyncio code on ``loop``: one per loop, kept while the loop
        lives."""
        with _background_lock:
            view = _views.get(loop)
            if view is None:
                view = copy.copy(self)  # shares the executor: the same threads
                view._loop = weakref.ref(loop)
                _views[loop] = view
            return view

    def schedule(self, action: typing.ScheduledAction[_TState], state: _TState | None = None) -> abc.DisposableBase:
        disposable = SingleAssignmentDisposable()

        def run() -> None:
            if not disposable.is_disposed:
                disposable.disposable = self.invoke_action(action, state)

        self.executor.submit(run)
        return disposable


def worker_pool() -> WorkerPool:
    """The pool of worker threads rxgraph runs a run's work on when asyncio code awaits it (``astream``,
    ``ainvoke``) without a scheduler of its own: sync nodes and tools, and saver I/O, never on the event loop."""
    global _pool
    with _background_lock:
        if _pool is None:
            _pool = WorkerPool()
        return _pool


def background_loop() -> asyncio.AbstractEventLoop:
    """An event loop running on a daemon thread of its own, started on first use and shared by every run that has
    no loop of its own (a run subscribed outside a coroutine, without an ``AsyncIOScheduler``)."""
    global _background
    with _background_lock:
        if _background is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="rxgraph-asyncio", daemon=True)
            thread.start()
            _background = loop
        return _background


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def loop_of_scheduler(scheduler: abc.SchedulerBase | None) -> asyncio.AbstractEventLoop | None:
    """The event loop of reactivex's ``AsyncIOScheduler`` / ``AsyncIOThreadSafeScheduler``, else None."""
    # They keep it in `_loop` (pinned by tests/rx/test_reactivex_contract.py); there is no public accessor.
    loop = getattr(scheduler, "_loop", None)
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else None


def awaiting_loop(scheduler: abc.SchedulerBase | None) -> asyncio.AbstractEventLoop | None:
    """The event loop that work subscribed with ``scheduler`` awaits its coroutines on: the loop of an
    ``AsyncIOScheduler``, or the loop of the asyncio code a ``WorkerPool`` runs a run for; else None."""
    if isinstance(scheduler, WorkerPool):
        return scheduler.loop
    return loop_of_scheduler(scheduler)


async def _wait_for(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def from_awaitable(awaitable: Awaitable[_T], loop: asyncio.AbstractEventLoop) -> Observable[_T]:
    """An Observable that awaits ``awaitable`` on ``loop`` when subscribed, emits its result and completes (or fails
    with its exception). Disposing the subscription cancels the task: the coroutine sees ``CancelledError``.

    The result and the error arrive on the loop's thread. A coroutine can be awaited once: subscribe once.
    """

    def _subscribe(observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        future: Future[_T] = asyncio.run_coroutine_threadsafe(_wait_for(awaitable), loop)
        disposed = False

        def _dispose() -> None:
            nonlocal disposed
            disposed = True
            future.cancel()

        def _done(finished: Future[_T]) -> None:
            if finished.cancelled():
                if not disposed:  # cancelled from inside, or its loop closed: the subscriber must hear of it
                    observer.on_error(RuntimeError("the awaited coroutine was cancelled before it finished"))
                return
            error = finished.exception()
            if error is None:
                observer.on_next(finished.result())
                observer.on_completed()
            elif isinstance(error, Exception):
                observer.on_error(error)
            else:  # a BaseException such as a CancelledError raised by the coroutine itself
                observer.on_error(RuntimeError(f"the awaited coroutine ended with {type(error).__name__}: {error}"))

        future.add_done_callback(_done)
        return Disposable(_dispose)

    return Observable(_subscribe)
