"""``RunContext``: one subscription's run, and the one place where it writes checkpoints.

Cancellation is cooperative: a node on another thread keeps running after ``dispose()`` returned, and its
completion can reach the tail of its step at any moment. The context makes such late completions harmless:

- ``mark_cancelled`` raises the flag *before* the upstream is disposed (it is wired with ``do_on_cancel``);
- ``commit`` checks the flag on entry, builds the checkpoint, and checks it again under the write lock right
  before the write, so "check + write" is atomic with respect to ``close``;
- ``close`` (wired with ``do_finally``, after the upstream dispose returned) takes the write lock too: once it
  returns, any write that was in flight has landed and every later one sees the flag. What happens next to the
  thread on cancellation (keep, or rewind to the turn's base) is decided there.
"""

from __future__ import annotations

import threading
import uuid
from types import MappingProxyType
from typing import Any

from ..checkpoint._base import Checkpoint, CheckpointSaver, CheckpointSource, new_checkpoint
from ._safety import HistorySafety

__all__ = ["RunContext"]


class RunContext:
    """Per-subscription state of a run: identity, the cancelled flag, the write lock and the last write."""

    __slots__ = (
        "_lock",
        "base",
        "cancelled",
        "head",
        "parent_id",
        "rewind_to",
        "rolled_back_from",
        "run_id",
        "safety",
        "saver",
        "start_head",
        "started",
        "thread_id",
        "wrote",
    )

    def __init__(self, thread_id: str | None, saver: CheckpointSaver | None, safety: HistorySafety) -> None:
        self.thread_id = thread_id
        self.saver = saver
        self.run_id = uuid.uuid4().hex
        self.cancelled = False
        # RLock: a subscriber may dispose from inside a callback of this very run, on the thread that holds it.
        self._lock = threading.RLock()
        self.base: Checkpoint | None = None  # the checkpoint the run started from
        self.head: Checkpoint | None = None  # the head this run expects (what it read at start, then its own writes)
        self.parent_id: str | None = None  # parent of the next checkpoint this run writes
        self.wrote = 0  # how many checkpoints this run wrote (the checkpoints themselves are the saver's to keep)
        self.safety = safety
        self.rolled_back_from: str | None = None  # the unsafe head this run did not start from, if any
        self.started = False  # the base was read (a run that failed before it has nothing to undo)
        self.start_head: Checkpoint | None = None  # the thread's head when the run subscribed
        self.rewind_to: Checkpoint | None = None  # the state a cancelled run puts back

    def start_from(
        self,
        head: Checkpoint | None,
        base: Checkpoint | None,
        *,
        rewind_to: Checkpoint | None,
        rolled_back_from: str | None = None,
    ) -> None:
        """Record the thread's head at subscribe time, the base the run starts from, what a cancel restores, and
        the unsafe head that safe-head selection skipped (if it did)."""
        self.started = True
        self.start_head = head
        self.rewind_to = rewind_to
        self.head = head
        self.base = base
        self.parent_id = base.id if base is not None else None
        self.rolled_back_from = rolled_back_from
        if base is not None:
            self.safety.seed(base.values, base.safe)

    def mark_cancelled(self) -> None:
        """The subscriber went away: from now on no write of this run may land."""
        self.cancelled = True

    def commit(
        self, values: dict[str, Any], *, node: str | None, next_nodes: tuple[str, ...], source: CheckpointSource
    ) -> Checkpoint | None:
        """Write ``values`` as the thread's new head, unless the run was cancelled. ``None`` when skipped.

        ``values`` must be a state built by the schema's merge (frozen values, never mutated afterwards).
        Raises ``CheckpointConflictError`` when another writer moved the head since this run last wrote.
        """
        saver, thread_id = self.saver, self.thread_id
        if saver is None or thread_id is None or self.cancelled:
            return None
        head = self.head
        safe, unsafe_reason = self.safety.assess(values)
        checkpoint = new_checkpoint(
            id=uuid.uuid4().hex,
            thread_id=thread_id,
            seq=head.seq + 1 if head is not None else 1,
            parent_id=self.parent_id,
            values=MappingProxyType(values),
            node=node,
            next=next_nodes,
            run_id=self.run_id,
            source=source,
            safe=safe,
            unsafe_reason=unsafe_reason,
            rolled_back_from=self.rolled_back_from if not self.wrote else None,
        )
        with self._lock:
            # Re-check under the lock: the flag may have been raised while the checkpoint was being built, and
            # close() cannot slip in between this check and the write.
            if self.cancelled:
                return None
            saver.put(checkpoint, expected_head=head.id if head is not None else None)
            self.head = checkpoint
            self.parent_id = checkpoint.id
            self.wrote += 1
        return checkpoint

    def close(self) -> None:
        """Wait for a write in flight (if any) to land; every write after this sees the cancelled flag."""
        with self._lock:
            pass

    def rewind(self) -> Checkpoint | None:
        """After a cancel: put the thread back to ``rewind_to`` (the state before the turn) as its last writer.

        Writes a *new* head (source ``rewind``) whose values are ``rewind_to``'s — the same objects, so a saver
        stores it in O(keys) — or an empty state for a first-ever turn. The write is a compare-and-set against this
        run's last write (or the head it started from): if another writer moved the head since, it raises
        ``CheckpointConflictError`` and the newer head stays. Returns None when there is nothing to undo.
        """
        saver = self.saver
        with self._lock:  # any write in flight lands first; every later one sees the cancelled flag
            thread_id = self.thread_id
            if saver is None or thread_id is None or not self.started:
                return None
            target, start = self.rewind_to, self.start_head
            if not self.wrote and (target.id if target else None) == (start.id if start else None):
                return None  # the run wrote nothing and the head already is the pre-turn state
            head = self.head
            checkpoint = new_checkpoint(
                id=uuid.uuid4().hex,
                thread_id=thread_id,
                seq=head.seq + 1 if head is not None else 1,
                parent_id=target.id if target is not None else None,
                values=target.values if target is not None else MappingProxyType({}),
                node=None,
                next=(),
                run_id=self.run_id,
                source="rewind",
                safe=target.safe if target is not None else True,
                unsafe_reason=target.unsafe_reason if target is not None else None,
                rolled_back_from=None,
            )
            saver.put(checkpoint, expected_head=head.id if head is not None else None)
            self.head = checkpoint
            return checkpoint
