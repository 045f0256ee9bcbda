"""The server's own records, beside the checkpoints: which threads exist and who owns them, and the runs it was
asked for. A thread's values, history and interrupts stay in the checkpointer; a record holds what the checkpointer
has no place for (its owner, its metadata, a thread created before any run wrote to it; a run's status and options).

``Registry`` is what the server needs of such a store; ``MemoryRegistry`` keeps the records in this process (for a
``MemorySaver``, whose threads live no longer than the process either).
"""

from __future__ import annotations

import abc
import builtins
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

__all__ = [
    "ACTIVE",
    "HEARTBEAT",
    "LEASE",
    "MemoryRegistry",
    "Registry",
    "RunRecord",
    "RunStatus",
    "ThreadRecord",
    "live",
    "now",
    "shown_status",
]

RunStatus: TypeAlias = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
"""A run's status, as LangGraph's server names them: waiting for its thread, running, or how it ended
(``interrupted``: cancelled; a run that stopped for a human has ended with ``success``)."""

ACTIVE: frozenset[RunStatus] = frozenset({"pending", "running"})
"""The statuses of a run that has not ended."""

HEARTBEAT = 10.0
"""Seconds between the times a server process touches the records of the runs it executes (``touch_runs``)."""

LEASE = 3 * HEARTBEAT
"""How long a run's record counts as live after it was last touched: the record of a run whose process died (killed,
say) stops counting as pending or running after this long, so its thread is not busy forever."""


def live(record: RunRecord, at: datetime | None = None) -> bool:
    """Whether a run's record says it has not ended, and was touched by its process within ``LEASE``."""
    return record.status in ACTIVE and ((at or now()) - record.updated_at).total_seconds() < LEASE


def shown_status(record: RunRecord) -> RunStatus:
    """A run's status as clients see it: a record that says pending or running but that its process stopped touching
    (the process died) shows ``error``."""
    return "error" if record.status in ACTIVE and not live(record) else record.status


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """A thread the server knows: its id, the identity that created it (None without auth), and its metadata."""

    thread_id: str
    owner: str | None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run the server was asked for: what it runs (``kwargs``: the request, as JSON), on which thread and assistant,
    for whom, and its status."""

    run_id: str
    thread_id: str
    assistant_id: str
    owner: str | None
    status: RunStatus
    kwargs: Mapping[str, Any]
    metadata: Mapping[str, Any]
    multitask_strategy: str
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)


class Registry(abc.ABC):
    """Where the server keeps its thread and run records. Safe to call from several threads; each call is one
    atomic change or read. Blocking calls: the server makes them off its event loop."""

    lanes: int = 1
    """How many of its calls the server makes at once, each on a worker thread of its own. A store whose calls take
    turns on one connection gains nothing from more: its callers would only queue on its lock, each in a thread."""

    @abc.abstractmethod
    def create_thread(self, record: ThreadRecord) -> ThreadRecord | None:
        """Store a new thread; ``None`` (and nothing written) when its id is taken."""

    @abc.abstractmethod
    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread's record, or ``None``."""

    @abc.abstractmethod
    def threads(self, owner: str | None) -> builtins.list[ThreadRecord]:
        """Every thread of ``owner`` (every thread at all for ``None``: a server without auth), newest first."""

    @abc.abstractmethod
    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> ThreadRecord | None:
        """Merge ``metadata`` into the thread's (a key set to ``None`` stays, as ``None``) and touch its
        ``updated_at``; ``None`` for an unknown thread."""

    @abc.abstractmethod
    def delete_thread(self, thread_id: str) -> bool:
        """Remove the thread's record and its runs' records; whether there was one."""

    @abc.abstractmethod
    def put_run(self, record: RunRecord) -> None:
        """Store a run's record (a new one, or its new status)."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's record, or ``None``."""

    @abc.abstractmethod
    def runs(self, thread_id: str) -> builtins.list[RunRecord]:
        """The thread's runs, newest first."""

    @abc.abstractmethod
    def delete_run(self, run_id: str) -> bool:
        """Remove a run's record; whether there was one."""

    def set_status(self, run_id: str, status: RunStatus) -> RunRecord | None:
        """Change a run's status (and ``updated_at``); ``None`` when the run has no record (it was deleted)."""
        record = self.get_run(run_id)
        if record is None:
            return None
        changed = replace(record, status=status, updated_at=now())
        self.put_run(changed)
        return changed

    def touch_runs(self, run_ids: list[str]) -> None:
        """Say that this process still executes these runs: their ``updated_at`` is now (see ``LEASE``); a run
        without a record is left alone."""
        for run_id in run_ids:
            record = self.get_run(run_id)
            if record is not None:
                self.put_run(replace(record, updated_at=now()))

    def close(self) -> None:  # noqa: B027 - a registry in memory has nothing to close
        """Release what the registry holds (connections); it is not used afterwards."""


class MemoryRegistry(Registry):
    """The records in this process's memory, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, ThreadRecord] = {}
        self._runs: dict[str, RunRecord] = {}

    def create_thread(self, record: ThreadRecord) -> ThreadRecord | None:
        with self._lock:
            if record.thread_id in self._threads:
                return None
            self._threads[record.thread_id] = record
            return record

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._lock:
            return self._threads.get(thread_id)

    def threads(self, owner: str | None) -> builtins.list[ThreadRecord]:
        with self._lock:
            found = [r for r in self._threads.values() if owner is None or r.owner == owner]
        return sorted(found, key=lambda r: r.created_at, reverse=True)

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> ThreadRecord | None:
        with self._lock:
            record = self._threads.get(thread_id)
            if record is None:
                return None
            changed = replace(record, metadata={**record.metadata, **metadata}, updated_at=now())
            self._threads[thread_id] = changed
            return changed

    def delete_thread(self, thread_id: str) -> bool:
        with self._lock:
            for run_id in [r.run_id for r in self._runs.values() if r.thread_id == thread_id]:
                del self._runs[run_id]
            return self._threads.pop(thread_id, None) is not None

    def put_run(self, record: RunRecord) -> None:
        with self._lock:
            self._runs[record.run_id] = record

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            return self._runs.get(run_id)

    def runs(self, thread_id: str) -> builtins.list[RunRecord]:
        with self._lock:
            found = [r for r in self._runs.values() if r.thread_id == thread_id]
        return sorted(found, key=lambda r: r.created_at, reverse=True)

    def delete_run(self, run_id: str) -> bool:
        with self._lock:
            return self._runs.pop(run_id, None) is not None
