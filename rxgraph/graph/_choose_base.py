"""Which checkpoint a run starts from, and what a cancel of it puts back (seed 000's rollback, seed 001's rewind).

A run with new input starts from the thread's head when the head's history can take a new user message; otherwise,
as ``on_unsafe_head`` says, from the newest checkpoint that can (``"rollback"``), or not at all (``"error"``), or
from the head anyway (``"ignore"``). A run without input resumes the head's own turn, which may be half done. A run
from an explicit ``checkpoint_id`` is a replay or a fork: no selection. The choice only reads the saver.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._log import log
from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..errors import CheckpointNotFoundError, UnsafeHistoryError
from ._config import UnsafeHeadPolicy
from ._constants import START

__all__ = ["BaseChoice", "choose_base"]

_UNREAD = object()  # choose_base reads the head itself


@dataclass(frozen=True, slots=True)
class BaseChoice:
    """Where a run starts: the thread's ``head`` when the run started, the ``base`` the run's state comes from, the
    checkpoint whose state a cancel puts back (``rewind_to``: the base, or the head for a replay), and the unsafe
    head the selection skipped (``rolled_back_from``), if it did."""

    head: Checkpoint | None
    base: Checkpoint | None
    rewind_to: Checkpoint | None
    rolled_back_from: str | None = None


def choose_base(
    saver: CheckpointSaver,
    thread_id: str,
    *,
    checkpoint_id: str | None,
    has_input: bool,
    on_unsafe_head: UnsafeHeadPolicy,
    head: object = _UNREAD,
) -> BaseChoice:
    """Read the thread's head and choose the base of a run on it.

    Args:
        saver: where the thread is stored (only read).
        thread_id: the thread.
        checkpoint_id: an explicit checkpoint to start from (a replay or a fork), ``START`` for the thread's
            beginning (a fork from the empty state), or None for the head.
        has_input: whether the run brings new input (a new turn) or resumes the head's own turn.
        on_unsafe_head: the graph's policy for a head that cannot take new input.
        head: the thread's head (a Checkpoint or None), when the caller has just read it (saves a read); read here
            by default.

    Returns:
        The choice; ``base`` is None for a thread with no checkpoint yet.

    Raises:
        CheckpointNotFoundError: ``checkpoint_id`` is not a checkpoint of the thread.
        UnsafeHistoryError: the head cannot take new input and the policy is ``"error"``, or no checkpoint of the
            thread can.
    """
    if head is _UNREAD:
        head = saver.get(thread_id)
    assert head is None or isinstance(head, Checkpoint)
    if checkpoint_id == START:  # the thread's beginning, before its first checkpoint: a fork from the empty state
        return BaseChoice(head, None, rewind_to=head)
    if checkpoint_id is not None:
        base = saver.get(thread_id, checkpoint_id)
        if base is None:
            raise CheckpointNotFoundError(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
        # A cancelled replay puts back what the thread looked like before it: the head, not the replayed base.
        return BaseChoice(head, base, rewind_to=head)
    if head is None or head.safe or not has_input or on_unsafe_head == "ignore":
        return BaseChoice(head, head, rewind_to=head)
    if on_unsafe_head == "error":
        raise UnsafeHistoryError(
            f"thread {thread_id!r}: the head checkpoint {head.id!r} (seq {head.seq}) cannot take new input: "
            f"{head.unsafe_reason}. Compile with on_unsafe_head='rollback' to start from the newest safe "
            "checkpoint instead.",
            thread_id=thread_id,
            checkpoint_id=head.id,
        )
    base = saver.latest_safe(thread_id, before_seq=head.seq)
    if base is None:
        raise UnsafeHistoryError(
            f"thread {thread_id!r}: no checkpoint has a history that can take new input (the head "
            f"{head.id!r} has: {head.unsafe_reason}); start a new thread, or run from a chosen "
            "checkpoint with RunnableConfig(checkpoint_id=...)",
            thread_id=thread_id,
            checkpoint_id=head.id,
        )
    log.warning(
        "thread %r: head checkpoint %s (seq %d) is not safe for new input (%s); the run starts from checkpoint %s "
        "(seq %d)",
        thread_id,
        head.id,
        head.seq,
        head.unsafe_reason,
        base.id,
        base.seq,
    )
    return BaseChoice(head, base, rewind_to=base, rolled_back_from=head.id)
