"""The one place where rxgraph subscribes to Observables it does not control (node streams, operator sources).

``Observable.subscribe`` accepts a lot from a source's subscribe function, and so must we: it may return a
``Disposable``, anything with a ``dispose`` method, a plain callable (called on dispose), or ``None``; it may raise
(the error goes to ``on_error``); its teardown may raise (logged, never propagated: a failing close of a node's
stream must not stop the run's own cleanup). What ``subscribe`` adds per item — an auto-detaching observer wrapped
around the callbacks — we leave out: callers forward items to a downstream observer that already is such a wrapper,
so a second one adds a call per item and nothing else. Callers drop events after a terminal event themselves.

``Observable._subscribe_core`` is reactivex's private hook behind ``subscribe``; ``reactivex`` is bounded in
``pyproject.toml`` and ``tests/rx/test_reactivex_contract.py`` pins the behaviour relied on here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from .._log import rx_log
from ..errors import InvalidTypeError

__all__ = ["as_disposable", "subscribe_source"]

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


class _Teardown(abc.DisposableBase):
    """Disposes what a source returned; an exception from it is logged and goes no further. A plain callable is
    called once; a disposable is asked every time (it is its own judge of repeated calls: some make a second
    caller wait until the first one's cleanup is done)."""

    __slots__ = ("_dispose", "_once", "_source")

    def __init__(self, dispose: Callable[[], Any], source: object, *, once: bool) -> None:
        self._dispose: Callable[[], Any] | None = dispose
        self._once = once
        self._source = source

    def dispose(self) -> None:
        dispose = self._dispose
        if dispose is None:
            return
        if self._once:
            self._dispose = None
        try:
            dispose()
        except Exception:
            rx_log.exception("disposing the subscription to %r raised; the cancellation goes on", self._source)


def as_disposable(subscription: Any, source: object = None) -> abc.DisposableBase:
    """What a subscribe function returned, as a disposable: as ``Observable.subscribe`` accepts it (a disposable,
    anything with ``dispose``, a callable, or ``None``), with its teardown errors logged instead of raised."""
    if subscription is None:
        return Disposable()
    dispose = getattr(subscription, "dispose", None)
    if callable(dispose):
        return _Teardown(dispose, source, once=False)
    if callable(subscription):
        return _Teardown(subscription, source, once=True)
    raise InvalidTypeError(
        f"subscribing to {source!r} returned a {type(subscription).__name__}; a subscribe function returns a "
        "Disposable, a callable or None",
        argument="subscription",
    )


def subscribe_source(
    source: abc.ObservableBase[_T],
    on_next: Callable[[_T], None],
    on_error: Callable[[Exception], None],
    on_completed: Callable[[], None],
    scheduler: abc.SchedulerBase | None,
) -> abc.DisposableBase:
    """Subscribe ``source`` with these callbacks; like ``source.subscribe(...)`` with one call less per item.

    ``on_next`` should be a downstream observer's own method (see the module docstring). An error raised while
    subscribing, or a subscribe function that returns something unusable, reaches ``on_error``.
    """
    try:
        if isinstance(source, Observable):
            subscription: Any = source._subscribe_core(_Forward(on_next, on_error, on_completed), scheduler)
        else:
            subscription = source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        return as_disposable(subscription, source)
    except Exception as error:
        on_error(error)
        return Disposable()
