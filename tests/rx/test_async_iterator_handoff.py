"""How ``to_async_iterator`` hands items from another thread to the loop: in order, all of them, and with one
wake-up of the loop for all the items that arrive while one is on its way (not one per item)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import reactivex as rx
from reactivex.disposable import Disposable

from rxgraph.rx import to_async_iterator


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts how often another thread woke it up."""

    wake_ups = 0

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        type(self).wake_ups += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def _emitted_while_the_loop_waits(items: int) -> rx.Observable[int]:
    """``items`` integers and a completion, emitted by a thread of their own while the loop's thread waits for that
    thread to finish, inside the subscription: the loop is busy for all of it."""

    def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
        def produce() -> None:
            for item in range(items):
                observer.on_next(item)
            observer.on_completed()

        producer = threading.Thread(target=produce)
        producer.start()
        producer.join()
        return Disposable()

    return rx.create(subscribe)


def _read(source: rx.Observable[int]) -> tuple[list[int], int]:
    _CountingLoop.wake_ups = 0

    async def main() -> list[int]:
        seen = []
        async for item in to_async_iterator(source):
            seen.append(item)
        return seen

    with asyncio.Runner(loop_factory=_CountingLoop) as runner:
        seen = runner.run(main())
    return seen, _CountingLoop.wake_ups


def test_items_that_arrive_while_the_loop_is_busy_cross_with_one_wake_up() -> None:
    seen, wake_ups = _read(_emitted_while_the_loop_waits(100))

    assert seen == list(range(100))
    assert wake_ups == 1  # 101 puts (the items and the completion), one wake-up


def test_every_item_arrives_in_order_when_the_source_and_the_loop_race() -> None:
    # A producer thread that never waits races the consumer on the loop: whatever the interleaving, nothing is lost
    # or reordered, and the iterator ends with the completion.
    def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
        def produce() -> None:
            for item in range(20_000):
                observer.on_next(item)
            observer.on_completed()

        threading.Thread(target=produce).start()
        return Disposable()

    seen, wake_ups = _read(rx.create(subscribe))

    assert seen == list(range(20_000))
    assert 1 <= wake_ups <= 20_001
