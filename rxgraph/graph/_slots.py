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
about to be rewound.

Across processes, a saver whose database is shared provides ``RunLocks`` (:mod:`rxgraph.checkpoint._run_locks`),
and a slot then also holds its thread in the database, from the first claim until the line is empty. A claim that
creates a slot waits for that (the run starts once the database says the thread is this process's); while another
process holds the thread, the line waits: ``reject`` runs are refused unless that holder is ending, an ``interrupt``
run asks it to cancel, and everything is tried again when it frees the thread. A process passes the thread from one
of its runs to the next without letting go — unless another process interrupted, then it lets go after the current
run's rewind. Grants and refusals that come from the database are delivered on the worker pool, never on the
database's threads.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from ..errors import ThreadBusyError
from ..rx._awaitable import worker_pool

if TYPE_CHECKING:
    from ..checkpoint._base import CheckpointSaver
    from ..checkpoint._run_locks import RemoteHolder, RunLocks
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

    def refused(self, error: Exception) -> None:
        """It has left the line without the slot: it waited for another process's run and its ``reject`` policy
        refuses to wait (``ThreadBusyError``), or the database that shares the slot could not be reached (called
        without any lock held)."""

    def preempt(self, by_run: str) -> None:
        """A newer run with ``multitask="interrupt"`` wants the slot: cancel, clean up, then free it."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: ``"granted"`` (start now), ``"queued"`` (``granted()`` or ``refused()`` follows
    later), ``"interrupt"`` (queued first; the caller must now call ``holder.preempt``)."""

    outcome: Literal["granted", "queued", "interrupt"]
    holder: SlotHolder | None = None


@dataclass(slots=True)
class _Waiter:
    run: SlotHolder
    policy: MultitaskPolicy
    # Set while its claim waits, on the claiming thread, for the database's first answer (see RunSlots.claim).
    answer: threading.Event | None = None
    outcome: Literal["granted", "queued"] | Exception = "queued"

    def tell(self, outcome: Literal["granted", "queued"] | Exception) -> Callable[[], None] | None:
        """Give the waiter the database's answer (under the slots' lock): to its blocked claim if it waits for one,
        else as what to call, without the lock, on the worker pool."""
        if self.answer is not None:
            self.outcome, answer, self.answer = outcome, self.answer, None
            answer.set()
            return None
        if outcome == "granted":
            return self.run.granted
        if isinstance(outcome, Exception):
            return functools.partial(self.run.refused, outcome)
        return None


class _Slot:
    __slots__ = ("asked", "holder", "waiting", "yielding")

    def __init__(self, holder: SlotHolder | None) -> None:
        # None only with shared locks: the line waits for the database (another process holds the thread).
        self.holder: SlotHolder | None = holder
        self.waiting: deque[_Waiter] = deque()
        self.yielding = False  # another process interrupted: let go of the thread after the current holder
        self.asked: set[str | None] = set()  # the other process's runs already asked to stop

    def leave(self, run: SlotHolder) -> bool:
        for waiter in self.waiting:
            if waiter.run is run:
                self.waiting.remove(waiter)
                return True
        return False


class RunSlots:
    """The slots of one saver's threads. Thread-safe. ``shared``: the saver's ``RunLocks``, if other processes
    share its database."""

    def __init__(self, shared: RunLocks | None = None) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._slots: dict[str, _Slot] = {}
        self._shared = shared
        if shared is not None:
            shared.open(_Events(self))

    def claim(self, thread_id: str, run: SlotHolder, policy: MultitaskPolicy, *, wait: bool = False) -> Claim:
        """Take the thread's slot for ``run``, or line it up as ``policy`` says. Raises ``ThreadBusyError`` for
        ``"reject"`` when a live run holds the slot.

        With shared locks, a claim that has to ask the database returns ``"queued"`` and the answer comes later —
        unless ``wait`` is set: then it waits here for the database's first answer (one round trip), so that a
        free thread is ``"granted"`` at once and a ``reject`` raises here, as in one process. Waiting suits the
        thread a run would start on anyway; an event loop's thread passes ``wait=False``.
        """
        shared = self._shared
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None:
                if shared is None:
                    self._slots[thread_id] = _Slot(run)
                    return Claim("granted")
                slot = self._slots[thread_id] = _Slot(None)
            holder = slot.holder
            if holder is None:
                # Waiting for the database: every policy lines up; the database's answer refuses or interrupts.
                waiter = _Waiter(run, policy, threading.Event() if wait else None)
                slot.waiting.appendleft(waiter) if policy == "interrupt" else slot.waiting.append(waiter)
            elif holder.ending:
                slot.waiting.append(_Waiter(run, policy))  # only finishing its rewind: every policy waits for that
                return Claim("queued", holder)
            elif policy == "reject":
                raise _busy(thread_id, holder.run_id)
            elif policy == "interrupt":
                slot.waiting.appendleft(_Waiter(run, policy))
                return Claim("interrupt", holder)
            else:
                slot.waiting.append(_Waiter(run, policy))
                return Claim("queued", holder)
        assert shared is not None
        answer = waiter.answer
        shared.attempt(thread_id, run.run_id)
        if answer is None:
            return Claim("queued")
        answer.wait()
        outcome = waiter.outcome
        if isinstance(outcome, Exception):
            raise outcome
        return Claim(outcome)

    def release(self, thread_id: str, run: SlotHolder) -> None:
        """``run`` is done with the thread: free its slot (handing it to the next in line), or, if it was still
        waiting, leave the line. Does nothing for a run that is neither."""
        following: SlotHolder | None = None
        let_go = attempt = None
        shared = self._shared
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None:
                return
            if slot.holder is run:
                if slot.waiting and not slot.yielding:
                    following = slot.holder = slot.waiting.popleft().run
                elif shared is None:
                    del self._slots[thread_id]
                else:
                    # Let go of the thread in the database; the line (if any) then tries for it again, after the
                    # release (the locks do one thing after the other).
                    slot.holder, slot.yielding = None, False
                    slot.asked.clear()
                    let_go = thread_id
                    if slot.waiting:
                        attempt = slot.waiting[0].run.run_id
                    else:
                        del self._slots[thread_id]
                self._changed.notify_all()
            elif slot.leave(run):
                if slot.holder is None and not slot.waiting:
                    del self._slots[thread_id]
                    let_go = thread_id  # nobody waits for the database any more
            else:
                return
        if shared is not None:
            if following is not None:
                shared.update(thread_id, following.run_id, ending=False)
            if let_go is not None:
                # Waits for the database: the run ending here is not found still running by the next run,
                # whichever process starts it.
                shared.release(let_go, wait=True)
            if attempt is not None:
                shared.attempt(thread_id, attempt)
        if following is not None:
            following.granted()

    def ending(self, thread_id: str, run: SlotHolder) -> None:
        """``run`` has started ending (its rewind): other processes may now wait for it instead of refusing."""
        shared = self._shared
        if shared is None:
            return
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None or slot.holder is not run:
                return
        shared.update(thread_id, run.run_id, ending=True)

    def holder(self, thread_id: str) -> SlotHolder | None:
        """The run of this process holding the thread's slot now, if any."""
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

    # -- what the database says (on the locks' threads) -----------------------------------------------------------

    def _acquired(self, thread_id: str, named: str | None) -> None:
        shared = self._shared
        assert shared is not None
        granted: SlotHolder | None = None
        actions: list[Callable[[], None] | None] = []
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is not None and slot.holder is not None:
                return  # an answer to an attempt made while it already held the thread
            if slot is None or not slot.waiting:
                if slot is not None:
                    del self._slots[thread_id]
            else:
                first = slot.waiting.popleft()
                granted = slot.holder = first.run
                actions = [first.tell("granted"), *(waiter.tell("queued") for waiter in slot.waiting)]
                self._changed.notify_all()
        if granted is None:
            shared.release(thread_id)  # everyone left the line meanwhile
            return
        if granted.run_id != named:
            shared.update(thread_id, granted.run_id, ending=False)
        _on_pool(*actions)

    def _refused(self, thread_id: str, remote: RemoteHolder) -> None:
        shared = self._shared
        assert shared is not None
        actions: list[Callable[[], None] | None] = []
        ask: str | None = None
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None or slot.holder is not None:
                return
            for waiter in list(slot.waiting):
                if waiter.policy == "reject" and not remote.ending:
                    slot.waiting.remove(waiter)
                    actions.append(waiter.tell(_busy(thread_id, remote.run_id, elsewhere=True)))
                else:
                    actions.append(waiter.tell("queued"))
            interrupting = next((waiter for waiter in slot.waiting if waiter.policy == "interrupt"), None)
            if interrupting is not None and not remote.ending and remote.run_id not in slot.asked:
                slot.asked.add(remote.run_id)
                ask = interrupting.run.run_id
            emptied = not slot.waiting
            if emptied:
                del self._slots[thread_id]
        if ask is not None:
            shared.interrupt(thread_id, ask)
        if emptied:
            shared.release(thread_id)  # nobody waits for it any more
        _on_pool(*actions)

    def _unavailable(self, thread_id: str, error: Exception) -> None:
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None or slot.holder is not None:
                return
            actions = [waiter.tell(error) for waiter in slot.waiting]
            del self._slots[thread_id]
        _on_pool(*actions)

    def _retry(self, thread_id: str | None) -> None:
        """Try again for one thread (it was freed) or, with None, for every thread whose line waits."""
        shared = self._shared
        assert shared is not None
        with self._lock:
            ids = [thread_id] if thread_id is not None else list(self._slots)
            heads = [
                (tid, slot.waiting[0].run.run_id)
                for tid in ids
                if (slot := self._slots.get(tid)) is not None and slot.holder is None and slot.waiting
            ]
        for tid, run_id in heads:
            shared.attempt(tid, run_id)

    def _interrupted(self, thread_id: str, by_run: str) -> None:
        with self._lock:
            slot = self._slots.get(thread_id)
            if slot is None or slot.holder is None:
                return
            slot.yielding = True
            holder = slot.holder
        if not holder.ending:
            _on_pool(functools.partial(holder.preempt, by_run))


class _Events:
    """``RunLockEvents`` for one ``RunSlots`` (kept apart so the slots' own methods stay what runs call)."""

    def __init__(self, slots: RunSlots) -> None:
        self._slots = slots

    def acquired(self, thread_id: str, run_id: str | None) -> None:
        self._slots._acquired(thread_id, run_id)

    def refused(self, thread_id: str, holder: RemoteHolder) -> None:
        self._slots._refused(thread_id, holder)

    def released(self, thread_id: str) -> None:
        self._slots._retry(thread_id)

    def interrupted(self, thread_id: str, by_run: str) -> None:
        self._slots._interrupted(thread_id, by_run)

    def poll(self) -> None:
        self._slots._retry(None)

    def unavailable(self, thread_id: str, error: Exception) -> None:
        self._slots._unavailable(thread_id, error)


def _busy(thread_id: str, run_id: str | None, *, elsewhere: bool = False) -> ThreadBusyError:
    where = " in another process" if elsewhere else ""
    return ThreadBusyError(
        f"thread {thread_id!r} is busy: run {run_id or '(unknown)'} is still running on it{where} "
        "(multitask='reject'); wait for it to end, or use multitask='enqueue' to start after it or 'interrupt' to "
        "cancel it",
        thread_id=thread_id,
        run_id=run_id or "",
    )


def _on_pool(*actions: Callable[[], None] | None) -> None:
    """Run each action on the worker pool: never on a database thread of the locks, which must stay responsive."""
    for action in actions:
        if action is not None:
            worker_pool().schedule(functools.partial(_call, action))


def _call(action: Callable[[], None], *_: object) -> None:
    action()


_BY_SAVER: weakref.WeakKeyDictionary[CheckpointSaver, RunSlots] = weakref.WeakKeyDictionary()
_BY_LOCKS: weakref.WeakKeyDictionary[RunLocks, RunSlots] = weakref.WeakKeyDictionary()
_BY_SAVER_LOCK = threading.Lock()


def slots_for(saver: CheckpointSaver) -> RunSlots:
    """The slots of the threads stored in ``saver``: one set per saver object, created on first use — or, for a
    saver with ``run_locks``, one set per locks object, so that a saver wrapping another shares its slots."""
    slots = _BY_SAVER.get(saver)
    if slots is None:
        with _BY_SAVER_LOCK:
            slots = _BY_SAVER.get(saver)
            if slots is None:
                locks = saver.run_locks()
                if locks is None:
                    slots = RunSlots()
                else:
                    slots = _BY_LOCKS.get(locks)
                    if slots is None:
                        slots = _BY_LOCKS[locks] = RunSlots(locks)
                _BY_SAVER[saver] = slots
    return slots
