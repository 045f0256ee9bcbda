"""``Checkpoint`` and the contract every checkpoint saver keeps."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .._frozen import freeze

if TYPE_CHECKING:
    from ._run_locks import RunLocks

__all__ = ["Checkpoint", "CheckpointSaver", "CheckpointSource", "checkpoint_of", "new_checkpoint"]

CheckpointSource = Literal["input", "loop", "rewind", "update", "error", "interrupt"]
"""Why a checkpoint was written: the input merged at START, a node (or a superstep of nodes) finished, a cancelled
or failed turn was rewound, a state was written from outside a run, a failed run recorded its error and kept what it
had written, or a node interrupted the run (the state before its superstep, with the interrupt pending)."""


class Checkpoint(BaseModel):
    """One link in a thread's chain of states. Immutable; ``values`` is a read-only mapping of frozen values.

    The head of a thread is its checkpoint with the highest ``seq``. ``parent_id`` is the checkpoint this one was
    derived from (for the first checkpoint of a run: the base the run started from, which is not always the previous
    head, see ``base_id`` on the run's outputs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    id: str = Field(min_length=1)
    thread_id: str = Field(min_length=1)
    seq: int = Field(ge=1, description="per-thread, strictly increasing by one per write")
    parent_id: str | None = None
    values: Mapping[str, Any] = Field(default_factory=lambda: MappingProxyType({}))
    node: str | None = Field(default=None, description="the node that produced the values; None for a rewind")
    next: tuple[str, ...] = Field(default=(), description="the node(s) to run next; empty when the run ended")
    run_id: str = Field(min_length=1)
    source: CheckpointSource
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    safe: bool = Field(
        default=True,
        description="whether the message history can take a new user turn; computed once, when written",
    )
    unsafe_reason: str | None = Field(default=None, description="why the history is not safe (the broken rules)")
    rolled_back_from: str | None = Field(
        default=None,
        description="on a run's first checkpoint: the unsafe head the run did not start from (its base is parent_id)",
    )
    error: str | None = Field(
        default=None,
        description="for a run that failed: its error, as 'Type: message', on the checkpoint that ended it",
    )
    pending: Mapping[str, Any] | None = Field(
        default=None,
        description="the run's work in flight beyond `next`: the interrupt waiting for a resume, the payloads of "
        "`Send` tasks, the progress of joins (see `rxgraph.graph.Pending`); None when there is none",
    )

    @field_validator("values", mode="after")
    @classmethod
    def _freeze_values(cls, values: Mapping[str, Any]) -> Mapping[str, Any]:
        return MappingProxyType({str(k): freeze(v) for k, v in values.items()})

    @field_validator("pending", mode="after")
    @classmethod
    def _freeze_pending(cls, pending: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return None if not pending else MappingProxyType({str(k): freeze(v) for k, v in pending.items()})


def new_checkpoint(
    *,
    id: str,
    thread_id: str,
    seq: int,
    values: Mapping[str, Any],
    run_id: str,
    source: CheckpointSource,
    parent_id: str | None = None,
    node: str | None = None,
    next: tuple[str, ...] = (),
    safe: bool = True,
    unsafe_reason: str | None = None,
    rolled_back_from: str | None = None,
    error: str | None = None,
    created_at: datetime | None = None,
    pending: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """A checkpoint built without validation: the one constructor for the engine's writes and the savers' reads.

    The caller vouches for every field — ``values`` above all, which must already be a read-only mapping of frozen
    values (the engine's merged states are, and so are a saver's decoded ones). Validating would copy and re-freeze
    the whole state on every write; users build checkpoints with ``Checkpoint(...)``, which validates.

    Args:
        id, thread_id, seq, values, run_id, source, parent_id, node, next, safe, unsafe_reason, rolled_back_from,
            error, pending: the fields of :class:`Checkpoint`, taken as they are (``pending`` frozen, or None).
        created_at: when it was written; ``None`` for now (UTC).

    Returns:
        The checkpoint. Nothing is checked, so nothing is raised.
    """
    return checkpoint_of(
        id,
        thread_id,
        seq,
        parent_id,
        values,
        node,
        next,
        run_id,
        source,
        created_at if created_at is not None else datetime.now(UTC),
        safe,
        unsafe_reason,
        rolled_back_from,
        error,
        pending,
    )


def checkpoint_of(
    id: str,
    thread_id: str,
    seq: int,
    parent_id: str | None,
    values: Mapping[str, Any],
    node: str | None,
    next: tuple[str, ...],
    run_id: str,
    source: CheckpointSource,
    created_at: datetime,
    safe: bool,
    unsafe_reason: str | None,
    rolled_back_from: str | None,
    error: str | None,
    pending: Mapping[str, Any] | None,
    /,
) -> Checkpoint:
    """``new_checkpoint`` with every field given, by position in the fields' order: the engine's writes (one per
    step) build their checkpoints with it. Nothing is checked, so nothing is raised."""
    # What Checkpoint.model_construct(...) of every field makes, field for field (the instance's __dict__ in the
    # fields' order, all of them set, no extra, no private), without its loop over the fields' aliases and defaults.
    # tests/checkpoint/test_new_checkpoint.py compares the two on generated fields.
    checkpoint = _new_model(Checkpoint)
    _set(
        checkpoint,
        "__dict__",
        {
            "id": id,
            "thread_id": thread_id,
            "seq": seq,
            "parent_id": parent_id,
            "values": values,
            "node": node,
            "next": next,
            "run_id": run_id,
            "source": source,
            "created_at": created_at,
            "safe": safe,
            "unsafe_reason": unsafe_reason,
            "rolled_back_from": rolled_back_from,
            "error": error,
            "pending": pending or None,
        },
    )
    # Every field is set in every checkpoint, so they all share one set of names (half the memory a checkpoint
    # costs, 728 of 1,513 bytes, was its own copy). pydantic changes a model's set in place only for a field it
    # assigns (already in it: a no-op; a frozen Checkpoint assigns none) and in model_copy, after copying it.
    _set(checkpoint, "__pydantic_fields_set__", _FIELDS)
    _set(checkpoint, "__pydantic_extra__", None)
    _set(checkpoint, "__pydantic_private__", None)
    return checkpoint


_new_model = BaseModel.__new__
_set = object.__setattr__
_FIELDS = set(Checkpoint.model_fields)
# new_checkpoint builds what model_construct would only as long as these hold (a model with a post-init hook, private
# attributes or extra fields is built otherwise).
assert not Checkpoint.__pydantic_post_init__ and not Checkpoint.__private_attributes__
assert Checkpoint.model_config.get("extra") != "allow" and not Checkpoint.__pydantic_root_model__


class CheckpointSaver(abc.ABC):
    """Stores the checkpoints of many threads. Implementations must be safe to call from several threads.

    The contract:
    - ``put`` is a compare-and-set on the thread's head: it stores ``checkpoint`` only if the head's id is
      ``expected_head`` (``None``: the thread has no checkpoint yet), and raises ``CheckpointConflictError``
      otherwise. The new checkpoint's ``seq`` must be the head's ``seq + 1`` (1 for a new thread), and its id
      new to the saver. :func:`~rxgraph.checkpoint.contract.check_put` makes these checks (and ``check_limit``
      those of ``list``; both in :mod:`rxgraph.checkpoint.contract`): call them under the lock, or inside the
      transaction, that the write takes.
    - Reads never return a checkpoint a caller can change, and never report "nothing" because of a timeout or a
      lock: a saver that cannot answer raises.
    """

    @abc.abstractmethod
    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """One checkpoint of a thread, or the thread's head.

        Args:
            thread_id: the thread.
            checkpoint_id: a checkpoint of that thread; ``None`` for its head (the highest ``seq``).

        Returns:
            The checkpoint; ``None`` when the thread, or that checkpoint in it, does not exist (a checkpoint of
            another thread is not found either).

        Raises:
            CheckpointDecodeError: the stored checkpoint cannot be read back.
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time (it never answers ``None`` instead).
        """

    @abc.abstractmethod
    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        """A thread's checkpoints, newest (highest ``seq``) first.

        Args:
            thread_id: the thread; an unknown one has no checkpoints.
            limit: at most this many (the newest ones); ``None`` for all.
            before_seq: only those with ``seq < before_seq``; ``None`` for all.

        Returns:
            The checkpoints, possibly none.

        Raises:
            InvalidArgumentError: ``limit`` is negative or above ``MAX_LIST_LIMIT`` (``argument="limit"``).
            InvalidTypeError: ``limit`` is not an int.
            CheckpointDecodeError: a stored checkpoint cannot be read back.
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time.
        """

    @abc.abstractmethod
    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        """Store ``checkpoint`` as the new head of its thread, if the head is still ``expected_head``.

        Args:
            checkpoint: the new head; its ``seq`` must be the current head's plus one (1 for a new thread) and its
                id new to the saver.
            expected_head: the id of the head the caller built on; ``None`` when the thread has no checkpoint yet.

        Returns:
            ``checkpoint``.

        Raises:
            CheckpointConflictError: the head is not ``expected_head``; nothing was written.
            InvalidCheckpointError: the ``seq`` is not the head's plus one, or the id is already stored.
            SerializationError: a value cannot be stored exactly (durable savers); nothing was written.
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time.
        """

    @abc.abstractmethod
    def threads(self) -> builtins.list[str]:
        """Every thread that has at least one checkpoint.

        Returns:
            Their ids, in no particular order.

        Raises:
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time.
        """

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        """The newest checkpoint of a thread whose ``safe`` flag is set: where a new user turn may start.

        The default reads the head first and then walks back a page at a time, so the common case (a safe head)
        costs one read; savers with an index on ``safe`` may answer in one query.

        Args:
            thread_id: the thread.
            before_seq: only a checkpoint with ``seq < before_seq``; ``None`` for any.

        Returns:
            The checkpoint, or ``None`` when the thread has no safe one (there).

        Raises:
            CheckpointDecodeError: a checkpoint it reads cannot be read back (a saver may skip such checkpoints
                instead, as ``SqliteSaver`` does).
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time.
        """
        if before_seq is None:
            head = self.get(thread_id)
            if head is None or head.safe:
                return head
            before_seq = head.seq
        page = 1
        while before_seq > 1:
            older = self.list(thread_id, limit=page, before_seq=before_seq)
            if not older:
                return None
            for checkpoint in older:
                if checkpoint.safe:
                    return checkpoint
            before_seq = older[-1].seq
            page = min(page * 4, 256)
        return None

    def delete_thread(self, thread_id: str) -> int:
        """Remove a thread entirely: its checkpoints, and whatever storage only they used.

        A run still writing to the thread fails at its next write with ``CheckpointConflictError`` (the head it
        expects is gone); a later ``put`` with ``expected_head=None`` starts the thread again at seq 1.

        Args:
            thread_id: the thread; an unknown one is left as it is.

        Returns:
            How many checkpoints were removed (0 for an unknown thread).

        Raises:
            NotImplementedError: the saver keeps every checkpoint (the default; ``SaverContract`` skips its
                retention checks for such a saver).
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time; nothing was removed.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps every checkpoint: it has no delete_thread")

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        """Drop the older checkpoints of a thread (see :func:`~rxgraph.checkpoint.contract.select_pruned` for
        which), and the storage only they used. The thread stays usable: its head and its newest safe checkpoint
        stay, so a new turn finds the same base as before; ``list`` (and ``get_state_history``) shows what is left,
        with gaps in ``seq``; a dropped checkpoint is gone (``get`` answers ``None``), and a kept one's ``parent_id``
        may name one that is gone.

        Args:
            thread_id: the thread; an unknown one has nothing to drop.
            keep_last: keep the newest this many (>= 0); ``None``: decide by ``before`` alone.
            before: keep those created at or after this time (with a time zone); ``None``: decide by ``keep_last``
                alone. With both, a checkpoint goes only when both let it go.

        Returns:
            How many checkpoints were dropped.

        Raises:
            InvalidArgumentError: neither ``keep_last`` nor ``before`` is given, ``keep_last`` is negative, or
                ``before`` has no time zone (``argument`` names it).
            InvalidTypeError: ``keep_last`` is not an int, or ``before`` not a datetime.
            NotImplementedError: the saver keeps every checkpoint (the default; ``SaverContract`` skips its
                retention checks for such a saver).
            SaverClosedError: the saver was closed.
            SaverTimeoutError: the saver could not get its storage in time; nothing was dropped.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps every checkpoint: it has no prune")

    def run_locks(self) -> RunLocks | None:
        """Run exclusivity shared with the other processes using this saver's storage, or ``None`` (the default):
        runs on one thread then exclude each other within a process only — the compare-and-set of every ``put``
        still keeps a thread's history whole when two processes write it.

        A saver on a database that several processes share returns its :class:`RunLocks` here, the same object on
        every call; the saver closes it when it is closed. Graphs call this once per saver object.
        """
        return None
