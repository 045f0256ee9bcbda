"""``do_finally``: run a callback once, after the subscription ended for any reason."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import SingleAssignmentDisposable

from .._log import rx_log
from ._signal import SignalType
from ._subscribe import subscribe_source

__all__ = ["do_finally"]

_T = TypeVar("_T")


def do_finally(on_finally: Callable[[SignalType], None]) -> Callable[[Observable[_T]], Observable[_T]]:
    """Call ``on_finally(signal)`` exactly once, when the subscription has ended.

    ::

        source      --a--b--|        --a--b--#        --a--b--c--|
                    [           do_finally(f)                    ]
        subscriber  --a--b--|        --a--b--#        --a--b-X
        f                   C                E               F

        C  f(ON_COMPLETE), once the subscriber's on_completed has returned
        E  f(ON_ERROR), once the subscriber's on_error has returned
        X  the subscriber disposes (c and | never come); the source is disposed, and then
        F  f(CANCEL), once that upstream dispose has returned (or raised), in the same tick

    - ``SignalType.ON_COMPLETE`` / ``ON_ERROR``: after the terminal event has been passed to the subscriber.
    - ``SignalType.CANCEL``: when the subscriber disposed before a terminal event (a plain ``dispose()``, or an
      operator downstream such as ``take``, ``take_until`` or ``timeout`` doing it), *after* the upstream dispose has
      returned — or raised: the callback runs either way. Put this operator last in a ``pipe`` so that "upstream" is
      the whole pipeline: on cancel the callback then runs when nothing upstream is still being torn down, which
      makes it the last word on any shared state.

    Several in one pipe, ``source.pipe(do_finally(f1), do_finally(f2), do_finally(f3))`` (``f1`` nearest the
    source), call back in an order that depends on the signal, because the signal and the dispose travel in
    opposite directions and each operator calls back only once its part of the journey has returned:

    ::

        source      --a--b--|                   --a--b--c--|
        subscriber  --a--b--|                   --a--b-X
        callbacks           f3 f2 f1                   f1 f2 f3    (all in the tick of | or X)

    - completion and error: from the subscriber inwards, ``f3, f2, f1`` — the reverse of the order in the ``pipe``,
      as in Reactor (``severalInARowExecutedInReverseOrder``). Each passes the signal on, then calls back.
    - cancel: from the source outwards, ``f1, f2, f3`` — each disposes its upstream, then calls back, so ``f3``
      (the last in the ``pipe``) is the last word.

    A callback that raises does not change this: the others still run, in the same order, and the subscriber has its
    signal. The order is that of operators chained directly or through synchronous ones (``map``, ``filter``...);
    one between them that hands the signal or the dispose to a scheduler (``observe_on``, ``subscribe_on``,
    ``delay``) orders them by that scheduler instead. ``tests/rx/test_do_finally.py`` pins all of this.

    A ``dispose()`` of this subscription returns only once the callback has run, also when another thread got there
    first and is still running it (a dispose from inside the callback, on its own thread, returns at once).

    Args:
        on_finally: called once with how the subscription ended. An exception from it is logged (logger
            ``rxgraph.rx``) and goes no further: it never replaces the signal the subscriber already got.

    Returns:
        An operator for ``Observable.pipe``; every subscription to its result gets its own call.
    """

    def _operator(source: Observable[_T]) -> Observable[_T]:
        def _subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            lock = threading.Lock()
            signal: SignalType | None = None  # the first way the subscription ended; decides the callback's signal
            finisher: int | None = None  # the thread that runs the callback
            # Held by the finisher from its claim until its callback returned: a later dispose waits on it. (A lock,
            # not an Event: one is made per subscription, and an Event costs forty times more to make.)
            finished = threading.Lock()
            upstream = SingleAssignmentDisposable()

            def _claim(candidate: SignalType) -> bool:
                nonlocal signal, finisher
                with lock:
                    if signal is not None:
                        return False
                    signal, finisher = candidate, threading.get_ident()
                    finished.acquire()
                    return True

            def _call(candidate: SignalType) -> None:
                try:
                    on_finally(candidate)
                except Exception:
                    rx_log.exception("do_finally callback %r failed on %s", on_finally, candidate.name)
                finally:
                    finished.release()

            def _on_error(error: Exception) -> None:
                if _claim(SignalType.ON_ERROR):
                    try:
                        observer.on_error(error)
                    finally:
                        _call(SignalType.ON_ERROR)

            def _on_completed() -> None:
                if _claim(SignalType.ON_COMPLETE):
                    try:
                        observer.on_completed()
                    finally:
                        _call(SignalType.ON_COMPLETE)

            def _dispose() -> None:
                if _claim(SignalType.CANCEL):
                    try:
                        upstream.dispose()
                    finally:
                        _call(SignalType.CANCEL)
                    return
                upstream.dispose()
                # Someone else ended it: wait until its callback ran, unless that someone is this very thread
                # (a dispose from inside the terminal event or the callback), which would wait for itself.
                if finisher != threading.get_ident():
                    with finished:
                        pass

            upstream.disposable = subscribe_source(source, observer.on_next, _on_error, _on_completed, scheduler)
            return _EveryCall(_dispose)

        return Observable(_subscribe)

    return _operator


class _EveryCall(abc.DisposableBase):
    """Calls ``dispose`` on every call (reactivex's ``Disposable`` only on the first): a later caller must get to
    wait for the first one's callback."""

    __slots__ = ("_dispose",)

    def __init__(self, dispose: Callable[[], None]) -> None:
        self._dispose = dispose

    def dispose(self) -> None:
        self._dispose()
