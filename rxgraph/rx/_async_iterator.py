"""``to_async_iterator``: an Observable as an async iterator on the caller's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from reactivex import Observable

__all__ = ["to_async_iterator"]

_T = TypeVar("_T")

_NEXT, _ERROR, _DONE = 0, 1, 2


async def to_async_iterator(source: Observable[_T]) -> AsyncIterator[_T]:
    """Subscribe ``source`` and yield its items on the running event loop, in order; raise its error; stop when it
    completes.

    Items may come from any thread: each is handed to the loop with ``call_soon_threadsafe`` and waits in a queue
    until the consumer asks for it. The queue is unbounded — a slow consumer loses nothing, and the source is never
    slowed down (reactivex has no backpressure): what the source emits faster than it is consumed is held in memory.

    Leaving the ``async for`` (``break``, an exception), closing the iterator (``aclose``), or cancelling the task
    that iterates disposes the subscription — on a worker thread, because a dispose may do I/O (a run's rewind) —
    and the iterator's cleanup waits until that dispose has returned. (``break`` closes the iterator when it is
    dropped, at once in CPython when nothing else holds it; ``contextlib.aclosing`` makes that explicit.) A task
    that iterates and then ends without closing the iterator — cancelled while its ``async for`` body awaited
    something else, say — disposes it as it ends, without waiting for the garbage collector to close the iterator.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    ended = False

    def _put(kind: int, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    subscription = source.subscribe(
        lambda value: _put(_NEXT, value), lambda error: _put(_ERROR, error), lambda: _put(_DONE, None)
    )

    def _task_ended(_: object) -> None:
        if not ended:
            loop.run_in_executor(None, subscription.dispose)

    task = asyncio.current_task()
    if task is not None:
        task.add_done_callback(_task_ended)
    try:
        while True:
            kind, value = await queue.get()
            if kind == _NEXT:
                yield value
                now = asyncio.current_task()
                if now is not task:  # another task iterates from here on: its end is the one to watch
                    if task is not None:
                        task.remove_done_callback(_task_ended)
                    task = now
                    if task is not None:
                        task.add_done_callback(_task_ended)
            elif kind == _ERROR:
                ended = True
                raise value
            else:
                ended = True
                return
    finally:
        if task is not None:
            task.remove_done_callback(_task_ended)
        if not ended:
            ended = True
            # Shielded: a cancelled task still waits for the dispose (and a run's rewind) it started.
            await asyncio.shield(loop.run_in_executor(None, subscription.dispose))
