"""``RecordingSaver``: a saver that also notes, in virtual time, every checkpoint written through it; and
``DelegatingSaver``, the forwarding saver it is built on."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from reactivex.scheduler import VirtualTimeScheduler

from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..checkpoint._run_locks import RunLocks
from ..errors import SaverClosedError

__all__ = ["DelegatingSaver", "Event", "EventKind", "Recorder", "RecordingSaver"]

EventKind = Literal["chunk", "node", "write", "rewind", "complete", "error", "cancel"]


@dataclass(frozen=True)
class Event:
    """Something that happened during a run: a chunk or a node output reached the subscriber, a checkpoint was
    written (``write``, or ``rewind``), or the run ended (``complete``, ``error``, ``cancel``)."""

    order: int
    tick: float
    kind: EventKind
    node: str | None = None
    value: Any = None


class Recorder:
    """Collects events in the order they happen, stamped with a virtual-time scheduler's clock."""

    def __init__(self, scheduler: VirtualTimeScheduler) -> None:
        self.scheduler = scheduler
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.listeners: list[Callable[[Event], None]] = []

    def record(self, kind: EventKind, node: str | None = None, value: Any = None) -> Event:
        with self._lock:
            event = Event(len(self.events), float(self.scheduler.clock), kind, node, value)
            self.events.append(event)
        for listener in list(self.listeners):
            listener(event)
        return event


class DelegatingSaver(CheckpointSaver):
    """A saver that forwards every call to another, real one (``inner``). Subclass it to observe or to break just
    the calls a test is about — the rest keeps the inner saver's behaviour, whatever its kind."""

    def __init__(self, inner: CheckpointSaver) -> None:
        self.inner = inner

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return self.inner.get(thread_id, checkpoint_id)

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        return self.inner.list(thread_id, limit=limit, before_seq=before_seq)

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        return self.inner.put(checkpoint, expected_head=expected_head)

    def threads(self) -> builtins.list[str]:
        return self.inner.threads()

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        return self.inner.latest_safe(thread_id, before_seq=before_seq)

    def run_locks(self) -> RunLocks | None:
        return self.inner.run_locks()

    def delete_thread(self, thread_id: str) -> int:
        return self.inner.delete_thread(thread_id)

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        return self.inner.prune(thread_id, keep_last=keep_last, before=before)


class RecordingSaver(DelegatingSaver):
    """Delegates everything to a real saver and records each successful ``put`` as a ``write``/``rewind`` event.

    While ``refusing`` is set, every ``put`` fails with ``SaverClosedError``: how the harness plays a process that
    died mid-run (``crash_at``), whose last writes — its rewind included — never reach the database."""

    def __init__(self, inner: CheckpointSaver, recorder: Recorder) -> None:
        super().__init__(inner)
        self.recorder = recorder
        self.refusing = False

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        if self.refusing:
            raise SaverClosedError(
                f"thread {checkpoint.thread_id!r}: the process of run {checkpoint.run_id} died (a crash played by the "
                "cancellation harness); nothing it writes lands",
                thread_id=checkpoint.thread_id,
            )
        stored = self.inner.put(checkpoint, expected_head=expected_head)
        self.recorder.record("rewind" if stored.source == "rewind" else "write", stored.node, stored)
        return stored
