"""``do_on_cancel``: run a callback when the subscriber disposes before the source terminated."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from .._log import rx_log
from ._subscribe import subscribe_source

__all__ = ["do_on_cancel"]

_T = TypeVar("_T")


def do_on_cancel(on_cancel: Callable[[], None]) -> Callable[[Observable[_T]], Observable[_T]]:
    """Call ``on_cancel()`` once when the subscription is disposed before a terminal event.

    ::

        source      --a--b--c--|        --a--b--|
                    [      do_on_cancel(f)      ]
        subscriber  --a--b-X            --a--b--|
        f                  F                             (no call: the source completed)

        X  the subscriber disposes
        F  f(), then the source is disposed (c and | never come), in the same tick

    The callback runs *before* the upstream subscription is disposed, so it can raise a flag that work still
    running upstream (on another thread, say) sees before it is told to stop. It does not run after ``on_completed``
    or ``on_error``.

    Several in one ``pipe`` call back from the subscriber inwards (the last in the ``pipe`` first), each before it
    disposes its upstream. Followed by a ``do_finally``, as rxgraph's runs use the pair
    (``pipe(do_on_cancel(stop), do_finally(finish))``), a cancel runs ``stop()``, then disposes the source, then
    ``finish(CANCEL)``.

    Args:
        on_cancel: called at most once per subscription. An exception from it is logged (logger ``rxgraph.rx``)
            and does not stop the cancellation: the upstream is disposed all the same.

    Returns:
        An operator for ``Observable.pipe``.
    """

    def _operator(source: Observable[_T]) -> Observable[_T]:
        def _subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            lock = threading.Lock()
            done = False  # terminated or already cancelled: the callback must not run (again)
            upstream = SingleAssignmentDisposable()

            def _on_error(error: Exception) -> None:
                nonlocal done
                with lock:
                    done = True
                observer.on_error(error)

            def _on_completed() -> None:
                nonlocal done
                with lock:
                    done = True
                observer.on_completed()

            def _dispose() -> None:
                nonlocal done
                with lock:
                    cancel, done = not done, True
                try:
                    if cancel:
                        on_cancel()
                except Exception:
                    rx_log.exception("do_on_cancel callback %r failed; the cancellation goes on", on_cancel)
                finally:
                    upstream.dispose()

            upstream.disposable = subscribe_source(source, observer.on_next, _on_error, _on_completed, scheduler)
            return Disposable(_dispose)

        return Observable(_subscribe)

    return _operator
