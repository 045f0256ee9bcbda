"""``ThreadWriter``: the one place where checkpoints are written — a run's steps, its rewind, ``update_state``.

Every write is a compare-and-set on the head this writer last saw (or wrote), through ``_write``. Cancellation is
cooperative: a node on another thread keeps running after ``dispose()`` returned, and its completion can reach the
tail of its step at any moment. The writer makes such late completions harmless:

- ``mark_cancelled`` raises the flag *before* the run's upstream is disposed (the run wires it with
  ``do_on_cancel``);
- ``commit`` checks the flag on entry, builds the checkpoint, and checks it again under the write lock right before
  the write, so "check + write" is atomic with respect to ``rewind`` and ``close``;
- ``rewind`` and ``close`` take the write lock too: once they return, any write that was in flight has landed and
  every later one sees the flag.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..checkpoint._base import Checkpoint, CheckpointSaver, CheckpointSource, checkpoint_of
from ._choose_base import BaseChoice
from ._safety import HistorySafety

if TYPE_CHECKING:
    from ._transition import Position

__all__ = ["ThreadWriter", "new_id"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_now = datetime.now


_IDS_PER_READ = 64
_ids = threading.local()  # this thread's ids still to hand out, from its last read of os.urandom


def new_id() -> str:
    """A new id for a checkpoint or a run: 128 random bits as 32 hex digits (a uuid4's shape, with six more random
    bits); one is made per write and per run. Ids are shown shortened to their start (``rxgraph inspect``, the
    demo), so every digit is random.

    The bits come from ``os.urandom``, read for 64 ids at once per thread: a system call per id cost twice the rest
    of the id. A forked child forgets the ids its parent had read and not handed out (``_forget_ids``)."""
    try:
        return _ids.pending.pop()  # type: ignore[no-any-return]
    except (AttributeError, IndexError):
        digits = os.urandom(16 * _IDS_PER_READ).hex()
        _ids.pending = pending = [digits[start : start + 32] for start in range(0, len(digits), 32)]
        return pending.pop()


def _forget_ids() -> None:
    _ids.__dict__.pop("pending", None)


os.register_at_fork(after_in_child=_forget_ids)


class ThreadWriter:
    """Writes one run's checkpoints to its thread (or, for ``update_state``, one checkpoint from outside a run).

    Without a saver or a thread every write is skipped (``None``): a graph without a checkpointer keeps nothing.
    """

    __slots__ = (
        "_lock",
        "_parent_id",
        "_rewind_to",
        "_rolled_back_from",
        "_start_id",
        "cancelled",
        "head",
        "run_id",
        "safety",
        "saver",
        "started",
        "thread_id",
        "wrote",
    )

    def __init__(
        self, thread_id: str | None, saver: CheckpointSaver | None, messages_key: str | None, run_id: str | None = None
    ) -> None:
        self.thread_id = thread_id
        self.saver = saver if thread_id is not None else None
        self.run_id = run_id or new_id()
        self.safety = HistorySafety(messages_key)
        self.cancelled = False
        # RLock: a subscriber may dispose from inside a callback of this very run, on the thread that holds it.
        self._lock = threading.RLock()
        self.started = False  # the base was read: a run that failed before that has nothing to undo
        self.head: Checkpoint | None = None  # the head the next compare-and-set expects
        self._parent_id: str | None = None  # the parent of the next checkpoint
        self._rewind_to: Checkpoint | None = None  # what a cancel puts back
        self._start_id: str | None = None  # the head's id when the run started
        self._rolled_back_from: str | None = None  # recorded on the run's first checkpoint only
        self.wrote = 0  # how many checkpoints were written (the checkpoints themselves are the saver's to keep)

    def start(self, choice: BaseChoice) -> None:
        """Begin from a chosen base: the first write's parent is the base, its compare-and-set is on the head."""
        self.started = True
        self.head = choice.head
        self._start_id = choice.head.id if choice.head is not None else None
        self._parent_id = choice.base.id if choice.base is not None else None
        self._rewind_to = choice.rewind_to
        self._rolled_back_from = choice.rolled_back_from
        if choice.base is not None:
            self.safety.seed(choice.base.values, choice.base.safe)

    def mark_cancelled(self) -> None:
        """The subscriber went away: from now on no write of this run lands, except the rewind."""
        self.cancelled = True

    def commit_position(self, at: Position, *, node: str | None, source: CheckpointSource) -> Checkpoint | None:
        """Write the position ``at`` (see ``_transition``) as the thread's new head: its state, and its next
        superstep and pending work as the checkpoint's ``next`` and ``pending``. See ``commit``."""
        if self.saver is None or self.cancelled:
            return None  # (checked again by commit; here it spares a run without a saver the position's encoding)
        return self.commit(at.state, node=node, next_nodes=at.next_nodes, source=source, pending=at.pending())

    def commit(
        self,
        values: Mapping[str, Any],
        *,
        node: str | None,
        next_nodes: tuple[str, ...],
        source: CheckpointSource,
        pending: Mapping[str, Any] | None = None,
    ) -> Checkpoint | None:
        """Write ``values`` as the thread's new head, unless the run was cancelled. ``None`` when skipped.

        ``values`` must be a state built by the schema's merge (frozen values, never mutated afterwards).

        Raises:
            CheckpointConflictError: another writer moved the head since this writer last saw it.
        """
        if self.saver is None or self.cancelled:
            return None
        safe, unsafe_reason = self.safety.assess(values)
        with self._lock:
            # Re-checked under the lock: the flag may have been raised while the state was being judged, and the
            # rewind cannot slip in between this check and the write.
            if self.cancelled:
                return None
            return self._write(
                MappingProxyType(values),
                node=node,
                next_nodes=next_nodes,
                source=source,
                parent_id=self._parent_id,
                safe=safe,
                unsafe_reason=unsafe_reason,
                rolled_back_from=self._rolled_back_from if not self.wrote else None,
                pending=pending,
            )

    def rewind(self, *, error: str | None = None) -> Checkpoint | None:
        """After a cancel (or a failure, whose ``error`` it records): put the thread back to its state before the
        run, as the run's last writer.

        Writes a *new* head (source ``rewind``) whose values, ``next`` and pending work are the rewind target's — the
        same objects, so a saver stores it in O(keys); a resumed interrupt that is cut is pending again — or an
        empty state for a first-ever turn. Returns None when there is nothing to undo
        and no error to record.

        Raises:
            CheckpointConflictError: another writer moved the head since this run's last write; the newer head
                stays.
        """
        with self._lock:  # any write in flight lands first; every later one sees the cancelled flag
            if self.saver is None or not self.started:
                return None
            target = self._rewind_to
            if error is None and not self.wrote and (target.id if target is not None else None) == self._start_id:
                return None  # the run wrote nothing and the head already is the pre-turn state
            return self._write(
                target.values if target is not None else _EMPTY,
                node=None,
                next_nodes=target.next if target is not None else (),  # what it would run next: an interrupt's node
                source="rewind",
                parent_id=target.id if target is not None else None,
                safe=target.safe if target is not None else True,
                unsafe_reason=target.unsafe_reason if target is not None else None,
                rolled_back_from=None,
                error=error,
                pending=target.pending if target is not None else None,  # an interrupt it waited on waits again
            )

    def record_error(
        self, error: str, *, next_nodes: tuple[str, ...], pending: Mapping[str, Any] | None = None
    ) -> Checkpoint | None:
        """After a failure that keeps what the run wrote: a new head with the same state (source ``error``) that
        records ``error`` and sends a resume (``stream(None, ...)``) to ``next_nodes`` — the failed superstep's
        nodes (``pending``: its ``Send`` payloads and the joins' progress before it).

        Raises:
            CheckpointConflictError: another writer moved the head since this run's last write.
        """
        with self._lock:
            head = self.head
            if self.saver is None or not self.started or head is None:
                return None
            return self._write(
                head.values,
                node=None,
                next_nodes=next_nodes,
                source="error",
                parent_id=head.id,
                safe=head.safe,
                unsafe_reason=head.unsafe_reason,
                rolled_back_from=None,
                error=error,
                pending=pending,
            )

    def close(self) -> None:
        """Wait for a write in flight (if any) to land; every write after this sees the cancelled flag."""
        with self._lock:
            pass

    def _write(
        self,
        values: Mapping[str, Any],
        *,
        node: str | None,
        next_nodes: tuple[str, ...],
        source: CheckpointSource,
        parent_id: str | None,
        safe: bool,
        unsafe_reason: str | None,
        rolled_back_from: str | None,
        error: str | None = None,
        pending: Mapping[str, Any] | None = None,
    ) -> Checkpoint:
        """The compare-and-set every write goes through (the caller holds the lock)."""
        saver, thread_id, head = self.saver, self.thread_id, self.head
        assert saver is not None and thread_id is not None
        checkpoint = checkpoint_of(
            new_id(),
            thread_id,
            head.seq + 1 if head is not None else 1,
            parent_id,
            values,
            node,
            next_nodes,
            self.run_id,
            source,
            _now(UTC),
            safe,
            unsafe_reason,
            rolled_back_from,
            error,
            pending,
        )
        saver.put(checkpoint, expected_head=head.id if head is not None else None)
        self.head = checkpoint
        self._parent_id = checkpoint.id
        self.wrote += 1
        return checkpoint
