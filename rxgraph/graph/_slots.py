"""Run slots: one run per thread at a time, in this process.

A run holds its thread's slot from the moment it is subscribed until it has fully ended: completed, failed, or
cancelled *and rewound*. A run that finds the slot taken follows its ``multitask`` policy:

- ``"enqueue"``: it waits in line and starts when the runs before it have ended. Waiting never blocks a thread: the
  run's subscription simply starts later, on the thread that freed the slot (through its trampoline, or on the
  run's scheduler);
- ``"reject"``: it fails with ``ThreadBusyError`` — unless the holder is already ending (cancelled and rewinding),
  in which case it waits for that, as an enqueued run would;
- ``"interrupt"``: it cancels the holder (which rewinds, and tells its subscriber with ``RunInterruptedError``),
  then starts first in line.

Slots are kept per saver object, so every graph and agent that shares a saver shares its slots. Reads of a thread
through a graph (``get_state`` and friends) wait while the holder is ending, so they never see a cut turn that is
about to be rewound. Across processes the database has to coordinate; that is the saver's part.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from ..errors import ThreadBusyError

if TYPE_CHECKING:
    from ..checkpoint._base import CheckpointSaver
    from ._config import MultitaskPolicy

__all__ = ["Claim", "RunSlots", "SlotHolder", "slots_for"]


class SlotHolder(Protocol):
    """What the slots need of a run (or of another writer, such as ``update_state``)."""

    @property
    def run_id(self) -> str: ...

    @property
    def ending(self) -> bool:
        """It ended abnormally and is finishing its cleanup (the rewind); it frees the slot when done."""

    @property
    def ending_thread(self) -> int | None:
        """The thread running that cleanup (a read from it must not wait for itself)."""

    def granted(self) -> None:
        """The slot is now this holder's (called without any lock held)."""

    def interrupt(self, by_run: str) -> None:
        """A newer run with ``multitask="interrupt"`` wants the slot: cancel, clean up, then free it."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: ``"granted"`` (start now), ``"queued"`` (``granted()`` follows later),
    ``"interrupt"`` (queued first; the caller must now call ``holder.interrupt``)."""

    outcome: Literal["granted", "queued", "interrupt"]
    holder: SlotHolder | None = None


class _Slot:
    __slots__ = ("holder", "waiting")

    def __init__(self, holder: SlotHolder) -> None:
        self.holder: SlotHolder | None = holder
        self.waiting: deque[SlotHolder] = deque()


class RunSlots:
    """The slots of one saver's threads. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._slots: dict[str, _Slot] = {}

    def claim(self, thread_id: str, run: SlotHolder, policy: MultitaskPolicy) -> Claim:
        """Take the thread's slot for ``run``, or line it up as ``policy`` says. Raises ``ThreadBusyError`` for
        ``"reject"`` when a live run holds the slot."""
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None:
                self._slots[thread_id] = _Slot(run)
                return Claim("granted")
            holder = slot.holder
            assert holder is not None  # a slot with no holder is removed, or handed to the next in line at once
            if holder.ending:
                slot.waiting.append(run)  # it is only finishing its rewind: every policy waits for that
                return Claim("queued", holder)
            if policy == "reject":
                raise ThreadBusyError(
                    f"thread {thread_id!r} is busy: run {holder.run_id} is still running on it (multitask='reject'); "
                    "wait for it to end, or use multitask='enqueue' to start after it or 'interrupt' to cancel it",
                    thread_id=thread_id,
                    run_id=holder.run_id,
                )
            if policy == "interrupt":
                slot.waiting.appendleft(run)
                return Claim("interrupt", holder)
            slot.waiting.append(run)
            return Claim("queued", holder)

    def release(self, thread_id: str, run: SlotHolder) -> None:
        """``run`` is done with the thread: free its slot (handing it to the next in line), or, if it was still
        waiting, leave the line. Does nothing for a run that is neither."""
        following: SlotHolder | None = None
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None:
                return
            if slot.holder is run:
                if slot.waiting:
                    following = slot.holder = slot.waiting.popleft()
                else:
                    del self._slots[thread_id]
                self._changed.notify_all()
            else:
                try:
                    slot.waiting.remove(run)
                except ValueError:
                    return
        if following is not None:
            following.granted()

    def holder(self, thread_id: str) -> SlotHolder | None:
        """The run holding the thread's slot now, if any."""
        with self._lock:
            slot = self._slots.get(thread_id)
            return slot.holder if slot is not None else None

    def wait_settled(self, thread_id: str, timeout: float | None = None) -> bool:
        """Wait while the thread's holder is ending (rewinding), unless this thread is the one doing it. Returns
        False if ``timeout`` (seconds) passed first."""
        me = threading.get_ident()

        def _settled() -> bool:
            slot = self._slots.get(thread_id)
            holder = slot.holder if slot is not None else None
            return holder is None or not holder.ending or holder.ending_thread == me

        with self._lock:
            return self._changed.wait_for(_settled, timeout)


_BY_SAVER: weakref.WeakKeyDictionary[CheckpointSaver, RunSlots] = weakref.WeakKeyDictionary()
_BY_SAVER_LOCK = threading.Lock()


def slots_for(saver: CheckpointSaver) -> RunSlots:
    """The slots of the threads stored in ``saver`` (one set per saver object, created on first use)."""
    slots = _BY_SAVER.get(saver)
    if slots is None:
        with _BY_SAVER_LOCK:
            slots = _BY_SAVER.get(saver)
            if slots is None:
                slots = _BY_SAVER[saver] = RunSlots()
    return slots
