"""A run that never reached its end — its process was killed, it lost its thread's lock or a compare-and-set, its
database went away — undone by the next run on the thread, as a cancel would have undone it.

A run ends in one of a few recorded ways: its last checkpoint says there is nothing ``next`` (it completed), it is
a stop for a human (an interrupt pending), it is a ``rewind`` (cancelled or failed, and undone), an ``error`` (failed,
and kept) — or it was written from outside a run (``update``). A head that is none of these was written by a run that
meant to go on. The next run sees it only once it holds the thread's slot, so that run is not running any more: in
this process (the slot is free), and, with a saver whose slots hold across processes (PostgreSQL's run locks), in any
process. That run is dead, and under ``on_error="rewind"`` its turn is rewound before the new run reads the thread.

With ``SqliteSaver`` the slots hold within one process only: a run still alive in another process on the same file
looks dead, is rewound, and then loses the compare-and-set of its next write (it fails; the history stays whole).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._log import log
from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..errors import CheckpointConflictError
from ._choose_base import BaseChoice
from ._config import TurnPolicy
from ._writer import ThreadWriter

__all__ = ["DeadRun", "find_dead_run", "is_unfinished", "rewind_dead_run", "rewinds_dead_runs"]


def rewinds_dead_runs(policy: TurnPolicy) -> bool:
    """Whether a graph with this policy undoes a dead run's turn: a failed turn is rewound (``on_error``), and so is a
    cut one (``on_cancel="keep"`` keeps a cut turn, which the thread cannot tell from a dead one)."""
    return policy.on_error == "rewind" and policy.on_cancel == "rewind"


def is_unfinished(head: Checkpoint) -> bool:
    """Whether ``head`` was written by a run that meant to go on: a step's (or the input's) checkpoint that names a
    next superstep and waits on no human."""
    return head.source in ("input", "loop") and bool(head.next) and not (head.pending and "interrupt" in head.pending)


@dataclass(frozen=True, slots=True)
class DeadRun:
    """A run that left the thread's ``head`` and never ended, and the checkpoint it started from (``base``; None for
    a thread's first run)."""

    head: Checkpoint
    base: Checkpoint | None


def find_dead_run(saver: CheckpointSaver, thread_id: str, head: Checkpoint | None = None) -> DeadRun | None:
    """The run that left the thread's head unfinished, if it did (only reads). Meaningful only while no run of this
    process holds the thread: a live run's head is unfinished too.

    Returns:
        The dead run, or None when the head is not unfinished, or the checkpoint its run started from is gone
        (pruned): then nothing can be rewound, and a new turn starts from the newest safe checkpoint.
    """
    if head is None:
        head = saver.get(thread_id)
    if head is None or not is_unfinished(head):
        return None
    first = head
    while first.parent_id is not None:
        parent = saver.get(thread_id, first.parent_id)
        if parent is None or parent.run_id != head.run_id:
            break
        first = parent
    if first.parent_id is None:
        return DeadRun(head, None)
    base = saver.get(thread_id, first.parent_id)
    if base is None:
        log.warning(
            "thread %r: run %s did not end (head %s), but the checkpoint it started from (%s) is gone; the next "
            "turn starts from the newest safe checkpoint instead",
            thread_id,
            head.run_id,
            head.id,
            first.parent_id,
        )
        return None
    return DeadRun(head, base)


def rewind_dead_run(
    saver: CheckpointSaver, thread_id: str, messages_key: str | None, *, by_run: str, head: Checkpoint | None = None
) -> Checkpoint | None:
    """If the thread's head was left by a run that did not end, write a new head equal to the state that run started
    from (source ``rewind``, tagged with the dead run's id, its ``error`` saying what happened); the dead run's
    checkpoints stay in the history. Call it only while holding the thread's slot.

    Args:
        saver: the thread's saver.
        thread_id: the thread.
        messages_key: the state key holding the message history (for the rewind's ``safe`` flag).
        by_run: the run that found it (named in the rewind's ``error``).
        head: the thread's head, when the caller has just read it.

    Returns:
        The rewind checkpoint, or None when there is no dead run to rewind (see ``find_dead_run``) or another writer
        moved the head meanwhile (that newer head stays).

    Raises:
        Exception: what the saver raised reading or writing (other than a lost compare-and-set).
    """
    dead = find_dead_run(saver, thread_id, head)
    if dead is None:
        return None
    head, base = dead.head, dead.base
    writer = ThreadWriter(thread_id, saver, messages_key, run_id=head.run_id)
    writer.start(BaseChoice(head, base, rewind_to=base))
    try:
        rewound = writer.rewind(
            error=f"run {head.run_id} never ended (its process died, or it lost its lock, a write or its database); "
            f"rewound by run {by_run} before it started"
        )
    except CheckpointConflictError as conflict:
        log.info(
            "thread %r: run %s did not end, but another writer moved the head to %s meanwhile, which stays",
            thread_id,
            head.run_id,
            conflict.actual_head,
        )
        return None
    log.warning(
        "thread %r: run %s never ended (head %s, seq %d); its turn was rewound to %s",
        thread_id,
        head.run_id,
        head.id,
        head.seq,
        base.id if base is not None else "an empty state",
    )
    return rewound
