"""``to_async_iterator``: an Observable as an async iterator on the caller's event loop."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar

from reactivex import Observable

__all__ = ["to_async_iterator"]

_T = TypeVar("_T")

_NEXT, _ERROR, _DONE = 0, 1, 2

_Task = asyncio.Task[Any]


def to_async_iterator(source: Observable[_T]) -> AsyncIterator[_T]:
    """Subscribe ``source`` when first iterated and yield its items on the running event loop, in order; raise its
    error; stop when it completes.

    Items may come from any thread: they are handed to the loop with ``call_soon_threadsafe`` (one wake-up for all
    the items that arrive while one is on its way) and wait in a queue until the consumer asks for them. The queue
    is unbounded — a slow consumer loses nothing, and the source is never slowed down (reactivex has no
    backpressure): what the source emits faster than it is consumed is held in memory.

    The iterator is an async generator, and it ends the way one does. Exactly these dispose the subscription (for a
    run: cancel it and rewind its turn):

    1. Closing it: ``aclose()``, ``contextlib.aclosing``, or leaving an ``async for`` by ``break``, ``return`` or an
       exception (the generator is closed as soon as it is dropped, in CPython; the loop runs that close).
    2. Cancelling an ``__anext__`` while it waits for an item: cancelling the task that awaits it, and so also a
       per-item timeout that fires (``asyncio.wait_for(it.__anext__(), t)`` cancels the ``__anext__`` it gives up
       on). Like any async generator whose ``__anext__`` was cancelled, the iterator is then finished: the next
       ``__anext__`` raises ``StopAsyncIteration``. To wait with a timeout (an SSE heartbeat) and keep the run, keep
       the ``__anext__`` in a task and wait with ``asyncio.wait({task}, timeout=t)``, which does not cancel it.
    3. Dropping it without closing it (the garbage collector closes it).
    4. Cancelling the task that created it, or the task that asked for the latest item, while the iterator is open
       and no ``__anext__`` is in progress — a consumer cancelled in its ``async for`` body, say. This does not wait
       for the garbage collector, which the cancellation's traceback can hold off. The creator stops counting once
       another task has asked for items twice in a row: that task runs the iteration from then on. The iterator is
       then finished, as if closed: a later ``__anext__`` raises ``StopAsyncIteration``.

    Nothing else does. A task that ends normally never does — whoever else holds the iterator may go on — so a task
    that reads one item and returns is fine: ``wait_for``'s inner task (Python 3.11 runs each call in a task of its
    own), ``asyncio.create_task(it.__anext__())`` or ``asyncio.ensure_future(anext(it))`` merged with
    ``asyncio.wait``. A task that fails leaves its ``async for`` by an exception, which drops the iterator (rules 1
    and 3; its traceback may hold the iterator until the error is handled). A task still waiting in ``__anext__``
    is iterating: cancel the tasks you create for it when you stop reading.

    The dispose runs on a worker thread (the loop's default executor), because a dispose may do I/O (a run's
    rewind); the iterator's cleanup, and a cancelled ``__anext__``, wait until it has returned.
    """
    try:
        creator = asyncio.current_task()
    except RuntimeError:  # no running loop: made outside asyncio code, so no task can own it yet
        creator = None
    return _iterate(source, creator)


async def _iterate(source: Observable[_T], creator: _Task | None) -> AsyncGenerator[_T, None]:
    loop = asyncio.get_running_loop()
    inbox = _Inbox(loop)
    ended = False
    subscription = source.subscribe(
        lambda value: inbox.put(_NEXT, value), lambda error: inbox.put(_ERROR, error), lambda: inbox.put(_DONE, None)
    )
    owners = _Owners(loop, subscription.dispose, creator)
    try:
        while True:
            kind, value = await inbox.get()
            if kind == _NEXT:
                owners.idle()
                yield value
                if owners.disposal is not None:
                    return  # a task that owned it ended while it was idle: it is finished, as if it were closed
                owners.asking(asyncio.current_task())
            elif kind == _ERROR:
                ended = True
                raise value
            else:
                ended = True
                return
    finally:
        owners.finish()
        if not ended and owners.disposal is None:
            owners.disposal = loop.run_in_executor(None, subscription.dispose)
        if owners.disposal is not None:
            # Shielded: a cancelled task still waits for the dispose (and a run's rewind) it started.
            await asyncio.shield(owners.disposal)


class _Inbox:
    """The items on their way to the loop, in order: put from any thread, taken on the loop.

    A put wakes the loop (``call_soon_threadsafe``, a write to its self-pipe) only when no wake-up is on its way
    already: the items a source emits while the loop is busy — a model's chunks while the server writes the last
    one — go over with one wake-up, not one each. A put on the loop's own thread (a model stream awaited there)
    schedules the wake-up with ``call_soon``: the loop is awake.
    """

    __slots__ = ("_items", "_lock", "_loop", "_loop_thread", "_waiter", "_waking")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop, by the iterator
        self._items: deque[tuple[int, Any]] = deque()
        self._lock = threading.Lock()
        self._waking = False  # a wake-up is scheduled and has not run yet
        self._waiter: asyncio.Future[None] | None = None

    def put(self, kind: int, value: Any) -> None:
        with self._lock:
            self._items.append((kind, value))
            if self._waking:
                return  # the wake-up on its way runs after this item is in: the loop will see it
            self._waking = True
        if threading.get_ident() == self._loop_thread:  # on the loop (a model stream awaited there): no self-pipe
            self._loop.call_soon(self._wake)
        else:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._waking = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> tuple[int, Any]:
        """The next item, waiting for it if none is there (on the loop; cancelling the wait leaves the items)."""
        items = self._items
        while not items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return items.popleft()


class _Owners:
    """The tasks whose cancellation disposes an idle iterator (rule 4 of ``to_async_iterator``): the owner (the
    creator, until a task asks twice in a row) and the borrower (the task that asked for the latest item, when that
    is not the owner).

    Why not simply the task that asked last: a task that runs one ``__anext__`` (``wait_for``'s inner task, a
    ``create_task(it.__anext__())``) ends as soon as it has the item, while the consumer that awaits it goes on. Such
    a task ends normally, and a normal end never disposes; the owner is still watched for the consumer.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, dispose: Callable[[], None], creator: _Task | None) -> None:
        self._loop = loop
        self._dispose = dispose
        self.disposal: asyncio.Future[None] | None = None
        """The dispose an owner's cancellation started, once one did (the iterator's cleanup waits for it)."""
        self._busy = False
        self._finished = False
        self._watched: set[_Task] = set()
        self._owner: _Task | None = None
        self._borrower: _Task | None = None
        # Weak: a finished helper task still holds its coroutine, the ``__anext__`` of this generator, whose frame
        # holds this object — a strong reference would keep a dropped iterator alive until a cycle collection.
        self._last: weakref.ref[_Task] | None = None
        if creator is not None and not creator.done() and creator.get_loop() is loop:
            self._owner = creator
            self._watch(creator)
        self.asking(asyncio.current_task())

    def asking(self, task: _Task | None) -> None:
        """An ``__anext__`` runs in ``task``: it may become the borrower, or the owner if it asked last time too."""
        self._busy = True
        if task is not None and task is not self._owner:
            # Asking again, it runs the loop that iterates: the creator's part is over.
            if self._last is not None and task is self._last():
                if self._owner is not None:
                    self._unwatch(self._owner)
                self._owner, self._borrower = task, None
            elif task is not self._borrower:
                if self._borrower is not None:
                    self._unwatch(self._borrower)
                self._borrower = task
            self._watch(task)
        self._last = None if task is None else weakref.ref(task)

    def idle(self) -> None:
        """The ``__anext__`` in progress has its item: nobody is iterating until the next one."""
        self._busy = False

    def finish(self) -> None:
        """The iterator is finished: no task's end matters any more."""
        self._finished = True
        for task in list(self._watched):
            self._unwatch(task)

    def _watch(self, task: _Task) -> None:
        if task not in self._watched:
            self._watched.add(task)
            task.add_done_callback(self._ended)

    def _unwatch(self, task: _Task) -> None:
        if task in self._watched:
            self._watched.discard(task)
            task.remove_done_callback(self._ended)

    def _ended(self, task: _Task) -> None:
        self._watched.discard(task)
        if task is self._owner:
            self._owner = None
        if task is self._borrower:
            self._borrower = None
        # While an `__anext__` is in progress someone is iterating: were it this task's, being cancelled in it
        # already closed the iterator (rule 2).
        if self._finished or self._busy or self.disposal is not None:
            return
        # Only a cancellation: an error's traceback keeps its exception retrievable for whoever awaits the task
        # (asking for it here would silence asyncio's "never retrieved" report), and the failing task's frame drops
        # the iterator once the error is handled (rule 3).
        if task.cancelled():
            self.disposal = self._loop.run_in_executor(None, self._dispose)
