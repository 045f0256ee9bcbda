"""``RunLocks``: the part of run exclusivity that a database shared by several processes has to provide.

In one process, the run slots (:mod:`rxgraph.graph._slots`) keep one run per thread. A saver whose database other
processes share provides ``RunLocks`` too, and the slots then hold a thread in the database as well while any run of
theirs holds or waits for it. The slots drive it; it answers through ``RunLockEvents``:

- ``attempt(thread_id, run_id)`` tries to take the thread for this process. The answer is ``acquired`` or
  ``refused`` (with what is known of the holder: its run and whether it is ending). It never waits for the holder.
- ``update`` says which of this process's runs holds the thread now and whether it is ending (rewinding), so a
  ``reject`` elsewhere can tell a live run from one that is only finishing its rewind.
- ``release`` frees the thread, after the holder's rewind has landed; other processes hear ``released``.
- ``interrupt`` asks the process holding the thread to cancel its run (``multitask="interrupt"``); that process hears
  ``interrupted``.
- ``poll`` comes every ``poll_interval`` seconds while the locks are open: a holder that died sends no ``released``,
  so whatever waits is tried again then.
- ``unavailable`` says an ``attempt`` failed for want of the database (it could not be reached, or did not answer
  in time): the runs waiting for that thread fail.

A thread's hold must end with its holder: a process that dies (even killed) loses its holds at once, or within a
stated lease. Every method returns at once (but ``release(wait=True)``, which waits a bounded time): the work happens
on the locks' own threads, and so do the events — which must not block for long. No wait for the database may be
without a deadline: an ``attempt`` is answered (``unavailable`` included) in bounded time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

__all__ = ["RemoteHolder", "RunLockEvents", "RunLocks"]


@dataclass(frozen=True, slots=True)
class RemoteHolder:
    """What is known of a run holding a thread in another process: its id (None when not known yet) and whether it
    is ending (cancelled, and rewinding)."""

    run_id: str | None
    ending: bool


class RunLockEvents(Protocol):
    """What ``RunLocks`` tells the run slots (on its own threads)."""

    def acquired(self, thread_id: str, run_id: str | None) -> None:
        """An ``attempt`` took the thread: it is this process's until ``release``. ``run_id`` is the run the
        database now names as its holder (the attempt's), or None when the thread was held here already."""

    def refused(self, thread_id: str, holder: RemoteHolder) -> None:
        """An ``attempt`` found the thread held by another process."""

    def released(self, thread_id: str) -> None:
        """Another process freed the thread."""

    def interrupted(self, thread_id: str, by_run: str) -> None:
        """A run in another process asked for the thread with ``multitask="interrupt"``."""

    def poll(self) -> None:
        """Time to try again whatever waits (a holder that died sent no ``released``)."""

    def unavailable(self, thread_id: str, error: Exception) -> None:
        """An ``attempt`` could not reach the database, or it did not answer in time: what waits for the thread
        cannot start (``error`` says why; ``SaverTimeoutError`` for a deadline)."""


class RunLocks(ABC):
    """Run exclusivity across the processes sharing a database; see the module docstring."""

    poll_interval: float
    """Seconds between ``poll`` events: at most how long a thread freed by a dead process stays unused."""

    @abstractmethod
    def open(self, events: RunLockEvents) -> None:
        """Start: from now on, events go to ``events``. Called once, before any other method."""

    @abstractmethod
    def attempt(self, thread_id: str, run_id: str) -> None:
        """Try to take ``thread_id`` for this process, on behalf of ``run_id`` (answered by ``acquired`` or
        ``refused``)."""

    @abstractmethod
    def update(self, thread_id: str, run_id: str, *, ending: bool) -> None:
        """A held thread's holder is now ``run_id``, ending or not."""

    @abstractmethod
    def release(self, thread_id: str, *, wait: bool = False) -> None:
        """Free a held thread (or stop waiting for one), and tell the other processes. With ``wait``, return once
        the database has freed it — so that a run that has ended is not found still running by the next one,
        wherever that starts — or once the database has had its time to answer (the hold then goes with the
        connection that does not answer); never pass it on the locks' own threads."""

    @abstractmethod
    def interrupt(self, thread_id: str, by_run: str) -> None:
        """Ask whichever process holds ``thread_id`` to cancel its run."""

    @abstractmethod
    def close(self) -> None:
        """Free every hold and stop; no event follows."""
