"""``MemorySaver``: checkpoints in process memory, for tests, notebooks and short-lived processes."""

from __future__ import annotations

import builtins
import threading
from bisect import bisect_left
from datetime import datetime

from ._base import Checkpoint, CheckpointSaver
from .contract import check_limit, check_prune, check_put, select_pruned

__all__ = ["MemorySaver"]


class MemorySaver(CheckpointSaver):
    """A thread-safe in-memory saver; its checkpoints last as long as the instance.

    Checkpoints are immutable and their values frozen, so they are stored and handed out as they are, without copies:
    a ``put`` costs O(1) whatever the length of the conversation. Values are not serialised, so any frozen value
    can be stored (``SqliteSaver`` accepts fewer types: test with the saver you deploy).

    It takes no arguments and has nothing to close. Its methods raise what :class:`CheckpointSaver` says, except
    that it never times out, is never closed and decodes nothing. ``prune`` and ``delete_thread`` let go of the
    checkpoints (values still shared with a kept checkpoint stay in memory through it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chains: dict[str, list[Checkpoint]] = {}  # thread id -> checkpoints in seq order
        self._by_id: dict[str, Checkpoint] = {}

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        with self._lock:
            if checkpoint_id is None:
                chain = self._chains.get(thread_id)
                return chain[-1] if chain else None
            found = self._by_id.get(checkpoint_id)
            return found if found is not None and found.thread_id == thread_id else None

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        check_limit(limit)
        with self._lock:
            chain = self._chains.get(thread_id, [])
            # Seqs have gaps once a thread is pruned.
            end = len(chain) if before_seq is None else bisect_left(chain, before_seq, key=_seq)
            start = 0 if limit is None else max(0, end - limit)
            return chain[start:end][::-1]

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        thread_id, checkpoint_id = checkpoint.thread_id, checkpoint.id
        with self._lock:
            chain = self._chains.get(thread_id)
            head_id, head_seq = (chain[-1].id, chain[-1].seq) if chain else (None, 0)
            if head_id != expected_head or checkpoint.seq != head_seq + 1 or checkpoint_id in self._by_id:
                # What check_put checks, asked first (one write per step passes them all): it raises the error.
                check_put(
                    checkpoint,
                    expected_head=expected_head,
                    head=(head_id, head_seq) if head_id is not None else None,
                    id_stored=checkpoint_id in self._by_id,
                )
            if chain is None:
                chain = self._chains[thread_id] = []
            chain.append(checkpoint)
            self._by_id[checkpoint_id] = checkpoint
            return checkpoint

    def threads(self) -> builtins.list[str]:
        with self._lock:
            return list(self._chains)

    def delete_thread(self, thread_id: str) -> int:
        with self._lock:
            chain = self._chains.pop(thread_id, [])
            for checkpoint in chain:
                del self._by_id[checkpoint.id]
            return len(chain)

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        check_prune(keep_last, before)
        with self._lock:
            chain = self._chains.get(thread_id, [])
            history = [(c.seq, c.safe, c.created_at) for c in reversed(chain)]
            dropped = set(select_pruned(history, keep_last=keep_last, before=before))
            if dropped:
                for checkpoint in chain:
                    if checkpoint.seq in dropped:
                        del self._by_id[checkpoint.id]
                chain[:] = [c for c in chain if c.seq not in dropped]
            return len(dropped)


def _seq(checkpoint: Checkpoint) -> int:
    return checkpoint.seq
