"""Subscribe a source so that its items reach the downstream observer without an extra call per item."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable

__all__ = ["subscribe_forwarding"]

_T = TypeVar("_T")


class _Forward(abc.ObserverBase[Any]):
    """An observer whose ``on_next`` *is* the downstream observer's bound method.

    The methods below only satisfy the abstract base class (sources check ``isinstance(x, ObserverBase)``); each
    instance shadows them with the callbacks it was given, so no frame of ours sits between source and downstream.
    """

    def __init__(
        self, on_next: Callable[[Any], None], on_error: Callable[[Exception], None], on_completed: Callable[[], None]
    ) -> None:
        # Functions are non-data descriptors: an instance attribute of the same name takes precedence.
        self.__dict__.update(on_next=on_next, on_error=on_error, on_completed=on_completed)

    def on_next(self, value: Any) -> None:  # pragma: no cover - shadowed per instance
        raise NotImplementedError

    def on_error(self, error: Exception) -> None:  # pragma: no cover - shadowed per instance
        raise NotImplementedError

    def on_completed(self) -> None:  # pragma: no cover - shadowed per instance
        raise NotImplementedError


def subscribe_forwarding(
    source: abc.ObservableBase[_T],
    on_next: Callable[[_T], None],
    on_error: Callable[[Exception], None],
    on_completed: Callable[[], None],
    scheduler: abc.SchedulerBase | None,
) -> abc.DisposableBase:
    """Like ``source.subscribe(on_next, on_error, on_completed)``, with one call less per item.

    ``source.subscribe`` wraps the callbacks in an auto-detaching observer, which drops events after a terminal
    event or a dispose and detaches on termination. An operator of ours forwards items to a downstream observer
    that already is such a wrapper (every ``subscribe`` makes one), so a second wrapper adds a call per item and
    nothing else. ``on_next`` must therefore be a downstream observer's own method. An error raised while
    subscribing reaches ``on_error``, as it would through ``subscribe``.
    """
    if not isinstance(source, Observable):
        return source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
    try:
        return source._subscribe_core(_Forward(on_next, on_error, on_completed), scheduler)
    except Exception as error:
        on_error(error)
        return Disposable()
