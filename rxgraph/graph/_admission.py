"""Admission: a run (or ``update_state``) gets its thread's slot before it reads or writes the thread.

A run claims the slot when it is subscribed. ``"granted"``: it starts. Queued: it starts when the slot passes to it
(``granted``), or fails when it leaves the line without it (``refused``). ``multitask="reject"`` against a live run:
it fails with ``ThreadBusyError``. ``multitask="interrupt"``: the holder is preempted (cancelled and rewound), and its
end grants the slot to the newer run. A run frees the slot when it ends, after its cleanup; while it cleans up it is
*ending*, and reads of the thread wait for it (``RunSlots.wait_settled``).

``update_state`` holds the slot too, for one short write, through an ``UpdateHolder``.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from ..errors import ThreadBusyError
from ..rx._awaitable import running_loop
from ._slots import RunSlots, SlotHolder

if TYPE_CHECKING:
    from ..otel._run_trace import RunTrace
    from ._config import MultitaskPolicy

__all__ = ["Admission", "UpdateHolder"]


class Admission:
    """One run's place on its thread: its claim on the slot, the news that it is ending, and its release."""

    __slots__ = ("_policy", "_run", "_slots", "_thread_id", "_trace")

    def __init__(
        self, run: SlotHolder, slots: RunSlots, thread_id: str, policy: MultitaskPolicy, trace: RunTrace | None = None
    ) -> None:
        self._run = run
        self._slots = slots
        self._thread_id = thread_id
        self._policy = policy
        self._trace = trace  # counts the run while it waits for the slot and while it holds it

    def claim(self) -> None:
        """Claim the slot (or line up for it): the run is ``granted`` it, or ``refused`` (``ThreadBusyError``), now
        or later; or the holder is preempted and its end grants the slot to this run."""
        run = self._run
        try:
            # Off an event loop, a claim that asks another process's database waits here for its answer, as the
            # run would start here anyway; on a loop it must not (the answer then comes on the worker pool).
            claim = self._slots.claim(self._thread_id, run, self._policy, wait=running_loop() is None)
        except ThreadBusyError as busy:
            run.refused(busy)
            return
        if claim.outcome == "granted":
            run.granted()
            return
        if self._trace is not None:
            self._trace.slot_waiting()  # unless the slot passed to it already (the trace counts it once)
        if claim.outcome == "interrupt":
            assert claim.holder is not None
            claim.holder.preempt(run.run_id)  # it ends, frees the slot, and that grants it to this run

    def ending(self) -> None:
        """The run ended abnormally and cleans up now: runs and reads of the thread wait for it."""
        self._slots.ending(self._thread_id, self._run)

    def release(self) -> None:
        """The run is over and cleaned up: the slot passes to the next in line."""
        if self._trace is not None:
            self._trace.slot_released()  # first: the run it passes to is counted as holding it next
        self._slots.release(self._thread_id, self._run)


class UpdateHolder:
    """Holds a thread's slot for ``update_state``: runs, reads and other updates that arrive meanwhile wait for it,
    as for a run that is ending. It is one short write that cannot be cancelled, so a run that would preempt it
    (``multitask="interrupt"``) waits for it instead: ``preempt`` has nothing to stop."""

    ending = True

    def __init__(self) -> None:
        self.run_id = f"update-{uuid.uuid4().hex}"
        self.ending_thread = threading.get_ident()
        self._granted = threading.Event()
        self._refusal: Exception | None = None

    def granted(self) -> None:
        self._granted.set()

    def refused(self, error: Exception) -> None:
        self._refusal = error
        self._granted.set()

    def wait(self) -> None:
        """Wait for the slot.

        Raises:
            ThreadBusyError: a live run in another process holds the thread.
            Exception: the error that kept the slot from being shared with the other processes.
        """
        self._granted.wait()
        if self._refusal is not None:
            raise self._refusal

    def preempt(self, by_run: str) -> None:
        """Nothing to stop: the update's write ends on its own, and then the slot passes on."""
