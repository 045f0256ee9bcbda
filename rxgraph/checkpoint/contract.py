"""For people writing a checkpoint saver: the checks and rules of the saver contract, in one place.

A saver subclasses :class:`~rxgraph.checkpoint.CheckpointSaver` and keeps its contract (see there). These helpers
raise the contract's errors, with the messages the contract suite (``rxgraph.testing.SaverContract``) expects:

- :func:`check_put`: whether ``put`` may store a checkpoint, given the thread's head read under the write's own lock
  (or in its own transaction); :func:`duplicate_id` is the error for an id the store finds it already holds;
- :func:`check_limit`: the ``limit`` of ``list`` (at most :data:`MAX_LIST_LIMIT`);
- :func:`check_prune` and :func:`select_pruned`: the arguments of ``prune``, and which checkpoints it drops.

Users of savers need none of this: the savers, ``Checkpoint`` and ``CheckpointSource`` are in
:mod:`rxgraph.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..errors import CheckpointConflictError, InvalidArgumentError, InvalidCheckpointError, InvalidTypeError
from ._base import Checkpoint

__all__ = ["MAX_LIST_LIMIT", "check_limit", "check_prune", "check_put", "duplicate_id", "select_pruned"]


def check_put(
    checkpoint: Checkpoint, *, expected_head: str | None, head: tuple[str, int] | None, id_stored: bool = False
) -> None:
    """Raise unless the saver contract lets ``put`` store ``checkpoint``; the one place the contract is enforced.

    A saver calls it with what it read under its own lock (or inside its own transaction), and writes under that
    same lock: a check on one read and a write on another would let a second writer slip in between.

    Args:
        checkpoint: the checkpoint ``put`` was given.
        expected_head: the head id the caller built on (``None``: the thread has no checkpoint yet).
        head: the thread's head as ``(id, seq)``, or ``None`` when it has no checkpoint.
        id_stored: whether a checkpoint with ``checkpoint.id`` is already stored, in any thread (a saver whose store
            refuses a duplicate id itself may leave it False and raise ``duplicate_id(checkpoint)`` then).

    Raises:
        CheckpointConflictError: the head is not ``expected_head``.
        InvalidCheckpointError: ``checkpoint.seq`` is not the head's plus one, or its id is already stored.
    """
    thread_id = checkpoint.thread_id
    head_id, head_seq = head if head is not None else (None, 0)
    if head_id != expected_head:
        raise CheckpointConflictError(
            f"thread {thread_id!r}: head is {head_id!r}, expected {expected_head!r}; another writer moved it and "
            "nothing was written. Read the thread again and decide on its new head (a run that gets this error "
            "fails rather than write over a newer turn)",
            thread_id=thread_id,
            expected_head=expected_head,
            actual_head=head_id,
        )
    if checkpoint.seq != head_seq + 1:
        raise InvalidCheckpointError(
            f"thread {thread_id!r}: checkpoint {checkpoint.id!r} has seq {checkpoint.seq}, expected {head_seq + 1} "
            "(the head's seq plus one)",
            thread_id=thread_id,
            checkpoint_id=checkpoint.id,
        )
    if id_stored:
        raise duplicate_id(checkpoint)


def duplicate_id(checkpoint: Checkpoint) -> InvalidCheckpointError:
    """The error for a ``put`` of an id that is already stored — for savers whose store finds that out itself (a
    unique index) rather than before the write, as ``check_put(..., id_stored=...)`` does."""
    return InvalidCheckpointError(
        f"thread {checkpoint.thread_id!r}: checkpoint id {checkpoint.id!r} is already stored; ids are unique across "
        "threads",
        thread_id=checkpoint.thread_id,
        checkpoint_id=checkpoint.id,
    )


MAX_LIST_LIMIT = 2**63 - 1
"""The largest ``limit`` ``CheckpointSaver.list`` takes: the largest integer SQLite and PostgreSQL count to (``None``
lists every checkpoint)."""


def check_limit(limit: int | None) -> None:
    """Raise unless ``limit`` is a valid ``limit`` for ``CheckpointSaver.list``: ``None``, or an int from 0 to
    :data:`MAX_LIST_LIMIT`.

    Raises:
        InvalidTypeError: ``limit`` is not an int (a bool is not one).
        InvalidArgumentError: ``limit`` is negative, or larger than ``MAX_LIST_LIMIT`` (which an SQL ``LIMIT`` cannot
            take).
    """
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidTypeError(f"limit must be None or an int, got {type(limit).__name__}", argument="limit")
    if limit < 0:
        raise InvalidArgumentError(f"limit must be None or >= 0, got {limit}", argument="limit")
    if limit > MAX_LIST_LIMIT:
        # Not the number itself: its decimal text may be longer than Python writes.
        raise InvalidArgumentError(
            f"limit must be at most 2**63 - 1, got an int of {limit.bit_length()} bits; pass None to list every "
            "checkpoint",
            argument="limit",
        )


def check_prune(keep_last: int | None, before: datetime | None) -> None:
    """Raise unless ``keep_last`` and ``before`` are valid arguments of ``CheckpointSaver.prune``: at least one given,
    ``keep_last`` a whole number >= 0, ``before`` a datetime with a time zone.

    Raises:
        InvalidArgumentError: neither is given (``argument="keep_last"``), ``keep_last`` is negative, or ``before``
            has no time zone (``argument`` names it).
        InvalidTypeError: ``keep_last`` is not an int, or ``before`` not a datetime.
    """
    if keep_last is None and before is None:
        raise InvalidArgumentError(
            "prune needs keep_last, before, or both: it keeps the newest keep_last checkpoints and those created at "
            "or after before",
            argument="keep_last",
        )
    if keep_last is not None:
        if type(keep_last) is not int:
            raise InvalidTypeError(f"keep_last must be an int, got {keep_last!r}", argument="keep_last")
        if keep_last < 0:
            raise InvalidArgumentError(f"keep_last must be None or >= 0, got {keep_last}", argument="keep_last")
    if before is not None:
        if not isinstance(before, datetime):
            raise InvalidTypeError(f"before must be a datetime, got {before!r}", argument="before")
        if before.utcoffset() is None:
            raise InvalidArgumentError(
                f"before must have a time zone (datetime.now(UTC), say), got {before!r}", argument="before"
            )


def select_pruned(
    history: Sequence[tuple[int, bool, datetime | None]], *, keep_last: int | None, before: datetime | None
) -> list[int]:
    """Which checkpoints of a thread ``prune`` drops: the one rule every saver applies.

    A checkpoint goes when it is not among the newest ``keep_last`` (when given) and was created before ``before``
    (when given); the head and the newest safe checkpoint always stay, so that the thread keeps its head and a new
    turn still finds its base. A checkpoint whose time is unknown stays when ``before`` is given; a stored time
    without a zone counts as UTC.

    Args:
        history: the thread's checkpoints, newest first, as ``(seq, safe, created_at)``.
        keep_last: as ``prune`` takes it (checked with :func:`check_prune`).
        before: as ``prune`` takes it (checked with :func:`check_prune`).

    Returns:
        The seqs to drop, newest first.
    """
    dropped: list[int] = []
    safe_seen = False
    for index, (seq, safe, created_at) in enumerate(history):
        keep = index == 0 or (safe and not safe_seen)
        safe_seen = safe_seen or safe
        if keep_last is not None and index < keep_last:
            keep = True
        if before is not None and (created_at is None or _aware(created_at) >= before):
            keep = True
        if not keep:
            dropped.append(seq)
    return dropped


def _aware(moment: datetime) -> datetime:
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)
