"""Awaitables as Observables, awaited on an asyncio event loop; and the loop rxgraph keeps when there is no other."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.scheduler import ThreadPoolScheduler

__all__ = ["background_loop", "from_awaitable", "loop_of_scheduler", "running_loop", "worker_pool"]

_T = TypeVar("_T")

_background: asyncio.AbstractEventLoop | None = None
_background_lock = threading.Lock()
_pool: ThreadPoolScheduler | None = None


def worker_pool() -> ThreadPoolScheduler:
    """The pool of worker threads rxgraph runs a run's work on when asyncio code awaits it (``astream``,
    ``ainvoke``) without a scheduler of its own: sync nodes and tools, and saver I/O, never on the event loop."""
    global _pool
    with _background_lock:
        if _pool is None:
            _pool = ThreadPoolScheduler()
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
