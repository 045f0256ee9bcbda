"""``at_once``: a one-value Observable that emits where it is subscribed, whatever scheduler is passed down to it."""

from __future__ import annotations

from typing import TypeVar

import reactivex as rx
from reactivex import Observable
from reactivex.scheduler import ImmediateScheduler

__all__ = ["at_once"]

_T = TypeVar("_T")


def at_once(value: _T) -> Observable[_T]:
    """An Observable that emits ``value`` and completes as it is subscribed, on the subscribing thread.

    ``rx.of(value)`` emits on the scheduler its subscriber passes down (an operator such as ``merge`` or ``catch``
    passes the run's): on a ``ThreadPoolScheduler`` that is a hop to a worker thread, on a ``TestScheduler`` a tick
    later, for a value that is already there.
    """
    return rx.return_value(value, ImmediateScheduler.singleton())
