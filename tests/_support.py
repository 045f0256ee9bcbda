"""Small building blocks shared by the tests (real savers and graphs; nothing here fakes the thing under test)."""

from __future__ import annotations

import threading
from typing import Any

from rxgraph import Checkpoint, MemorySaver


class CountingSaver(MemorySaver):
    """A MemorySaver that counts reads, to prove when a run reads its base."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self._count_lock = threading.Lock()

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        with self._count_lock:
            self.reads += 1
        return super().get(thread_id, checkpoint_id)

    def list(self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None) -> list[Checkpoint]:
        with self._count_lock:
            self.reads += 1
        return super().list(thread_id, limit=limit, before_seq=before_seq)


def nodes_written(saver: MemorySaver, thread_id: str) -> list[Any]:
    """The node of every checkpoint of the thread, oldest first."""
    return [c.node for c in reversed(saver.list(thread_id))]
