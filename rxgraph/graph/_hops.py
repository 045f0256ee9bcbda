"""Which thread a run goes on from: its steps complete on whatever thread their node's stream completed on (an event
loop serving other runs' model streams, a tool's pool, a timer), but the tail of a step writes to the saver and the
next steps run where the run runs.

- A run starts on its scheduler, or on the current thread's trampoline — which queues the start when a trampoline
  is already running here (always the case inside ``Observable.subscribe``), so the subscriber holds its
  subscription before anything is emitted.
- A completion on the run's own thread goes on at once. One on another thread goes on on the run's scheduler; for a
  run without one, on the worker pool when that thread runs an event loop (saver I/O and sync nodes never hold up a
  loop the run was not subscribed on), else right there.
- The steps after it run inside a trampoline, so that a synchronous source of the next node queues its work and can
  be stopped by an early dispose.

Every action scheduled here does nothing once the run is closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from reactivex import abc
from reactivex.scheduler import CurrentThreadScheduler

from ..rx._awaitable import running_loop, worker_pool

__all__ = ["Hops"]


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...


class Hops:
    """Where one run goes on. ``driver`` is the thread that drove it last."""

    __slots__ = ("_run", "driver", "scheduler")

    def __init__(self, run: _Closable, scheduler: abc.SchedulerBase | None) -> None:
        self._run = run
        self.scheduler = scheduler
        self.driver: int | None = None

    def schedule(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the run's scheduler, or on this thread's trampoline (queued when one is running)."""
        scheduler = self.scheduler or CurrentThreadScheduler.singleton()
        scheduler.schedule(lambda *_: None if self._run.closed else action())

    def here(self) -> None:
        """This thread drives the run from now on."""
        self.driver = threading.get_ident()

    def _elsewhere(self) -> abc.SchedulerBase | None:
        if threading.get_ident() == self.driver:
            return None
        if self.scheduler is not None:
            return self.scheduler
        return worker_pool() if running_loop() is not None else None

    def _there(self, scheduler: abc.SchedulerBase, action: Callable[[], None]) -> None:
        def _run(*_: Any) -> None:
            if not self._run.closed:
                self.driver = threading.get_ident()
                action()

        scheduler.schedule(_run)

    def on_run_thread(self, action: Callable[[], None]) -> None:
        """Run ``action`` (a step's tail) where the run runs: now when this is its thread, else scheduled there."""
        elsewhere = self._elsewhere()
        if elsewhere is None:
            action()
        else:
            self._there(elsewhere, action)

    def drive_on(self, drive: Callable[[], None]) -> None:
        """Drive on after a step that completed asynchronously: where the run runs, inside a trampoline."""
        elsewhere = self._elsewhere()
        if elsewhere is not None:
            self._there(elsewhere, drive)
            return
        trampoline = CurrentThreadScheduler.singleton()
        if trampoline.schedule_required():
            # No trampoline on this thread (a pool thread, a timer): run the next steps inside one.
            self._there(trampoline, drive)
        else:
            drive()
