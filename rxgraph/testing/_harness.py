"""Run turns in virtual time and cancel them exactly: at a tick, on an event, by ``timeout`` or ``take_until``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import reactivex as rx
from reactivex import Observable
from reactivex import operators as ops
from reactivex.scheduler import VirtualTimeScheduler
from reactivex.testing import TestScheduler

from ..checkpoint.base import Checkpoint, CheckpointSaver
from ..checkpoint.memory import MemorySaver
from ..graph.compiled import CompiledGraph
from ..graph.config import RunnableConfig
from ..graph.outputs import NodeOutput, StreamingOutput
from ..rx import SignalType, do_finally
from ._recording import Event, Recorder, RecordingSaver
from ._timeline import render_timeline

__all__ = [
    "CancelSpec",
    "CancellationHarness",
    "Streamable",
    "TurnRecord",
    "after_checkpoint",
    "after_output",
    "dispose_at",
    "dispose_when",
    "take_until_at",
    "timeout_after",
]


class Streamable(Protocol):
    """What the harness drives: a ``CompiledGraph``, or a ``ReactAgent`` (anything with this ``stream``)."""

    def stream(self, input: Any, config: RunnableConfig | None = None) -> Observable[NodeOutput]: ...


@dataclass(frozen=True)
class CancelSpec:
    """How and when a turn is cancelled. Build one with ``dispose_at``, ``dispose_when``, ``timeout_after`` or
    ``take_until_at``. Ticks are relative to the turn's subscription."""

    mode: Literal["dispose", "timeout", "take_until"] = "dispose"
    tick: float | None = None
    when: Callable[[Event], bool] | None = None
    late: bool = False

    def describe(self) -> str:
        if self.when is not None:
            return f"dispose when {getattr(self.when, '__name__', 'predicate')}"
        where = f"t+{self.tick:g}" + (" (after that tick's events)" if self.late else "")
        return {"dispose": f"dispose at {where}", "timeout": f"timeout({self.tick:g})"}.get(
            self.mode, f"take_until a trigger at t+{self.tick:g}"
        )


def dispose_at(tick: float, *, late: bool = False) -> CancelSpec:
    """Dispose the subscription ``tick`` after the turn started: before whatever else happens at that tick, or,
    with ``late=True``, after the events already due at that tick."""
    return CancelSpec("dispose", tick=tick, late=late)


def dispose_when(predicate: Callable[[Event], bool]) -> CancelSpec:
    """Dispose right after the first event ``predicate`` accepts (at the same tick, once that event's work ended)."""
    return CancelSpec("dispose", when=predicate)


def timeout_after(duration: float) -> CancelSpec:
    """Pipe the turn through ``ops.timeout(duration)`` on the virtual scheduler."""
    return CancelSpec("timeout", tick=duration)


def take_until_at(tick: float) -> CancelSpec:
    """Pipe the turn through ``ops.take_until(trigger)`` with a trigger that fires ``tick`` after the start."""
    return CancelSpec("take_until", tick=tick)


def after_checkpoint(node: str) -> Callable[[Event], bool]:
    """An event predicate: the checkpoint written after ``node`` ran."""

    def _match(event: Event) -> bool:
        return event.kind == "write" and event.node == node

    _match.__name__ = f"after_checkpoint({node!r})"
    return _match


def after_output(node: str, *, chunks: int | None = None) -> Callable[[Event], bool]:
    """An event predicate: ``node``'s ``NodeOutput`` (or, with ``chunks=n``, its n-th streamed chunk)."""
    seen = 0

    def _match(event: Event) -> bool:
        nonlocal seen
        if event.node != node:
            return False
        if chunks is None:
            return event.kind == "node"
        if event.kind == "chunk":
            seen += 1
            return seen == chunks
        return False

    _match.__name__ = f"after_output({node!r}" + (f", chunks={chunks})" if chunks else ")")
    return _match


@dataclass
class TurnRecord:
    """What happened in one turn."""

    input: Any
    start: float
    pre_turn: Checkpoint | None
    events: list[Event] = field(default_factory=list)
    signal: SignalType | None = None
    error: BaseException | None = None
    subscriber_error: BaseException | None = None
    cancel: CancelSpec | None = None
    head: Checkpoint | None = None

    @property
    def completed(self) -> bool:
        return self.signal is SignalType.ON_COMPLETE

    @property
    def cancelled(self) -> bool:
        return self.signal is SignalType.CANCEL

    @property
    def cancelled_at(self) -> float | None:
        return next((e.tick for e in self.events if e.kind == "cancel"), None)

    @property
    def outputs(self) -> list[tuple[float, NodeOutput]]:
        return [(e.tick, e.value) for e in self.events if e.kind in ("chunk", "node")]

    @property
    def writes(self) -> list[tuple[float, Checkpoint]]:
        return [(e.tick, e.value) for e in self.events if e.kind in ("write", "rewind")]

    @property
    def run_ids(self) -> set[str]:
        return {c.run_id for _, c in self.writes}

    def timeline(self, *, legend: bool = True) -> str:
        """The turn as a marble diagram (see ``render_timeline``)."""
        return render_timeline(self.events, start=self.start, legend=legend)


class CancellationHarness:
    """Runs turns of a graph or agent on a ``TestScheduler`` against a recording saver.

    ``make(saver)`` builds the graph or agent with the saver it is given (a real ``MemorySaver`` by default, or
    ``saver_factory()``, wrapped so that every write is recorded with its tick). Then ``run_turn(input, cancel)``
    runs one turn to its end — completed, failed, or cancelled as ``cancel`` says — and returns its ``TurnRecord``.
    """

    def __init__(
        self,
        make: Callable[[CheckpointSaver], Streamable],
        *,
        thread_id: str = "harness",
        saver_factory: Callable[[], CheckpointSaver] = MemorySaver,
        horizon: float = 10_000.0,
    ) -> None:
        self.scheduler = TestScheduler()
        self.recorder = Recorder(self.scheduler)
        self.saver = RecordingSaver(saver_factory(), self.recorder)
        self.target = make(self.saver)
        self.thread_id = thread_id
        self.config = RunnableConfig(thread_id=thread_id, scheduler=self.scheduler)
        self.horizon = horizon
        self.turns: list[TurnRecord] = []

    @property
    def graph(self) -> CompiledGraph:
        """The compiled graph behind the target (the target itself, or an agent's ``graph``)."""
        graph = getattr(self.target, "graph", self.target)
        if not isinstance(graph, CompiledGraph):
            raise TypeError(f"{type(self.target).__name__} is neither a CompiledGraph nor has a .graph")
        return graph

    def head(self) -> Checkpoint | None:
        return self.saver.get(self.thread_id)

    def run_turn(self, input: Any, cancel: CancelSpec | None = None) -> TurnRecord:
        scheduler, recorder = self.scheduler, self.recorder
        start = float(scheduler.clock)
        record = TurnRecord(input=input, start=start, pre_turn=self.head(), cancel=cancel)
        first_event = len(recorder.events)
        subscription: list[rx.abc.DisposableBase] = []

        def dispose() -> None:
            if subscription and record.signal is None:
                recorder.record("cancel")
                subscription[0].dispose()

        def on_finally(signal: SignalType) -> None:
            record.signal = signal
            if signal is SignalType.CANCEL and not any(e.kind == "cancel" for e in recorder.events[first_event:]):
                recorder.record("cancel")  # timeout / take_until cancelled it from downstream

        def on_next(output: NodeOutput) -> None:
            recorder.record("chunk" if isinstance(output, StreamingOutput) else "node", output.node, output)

        def on_error(error: Exception) -> None:
            if record.signal is SignalType.ON_ERROR:
                record.error = error
                recorder.record("error", value=error)
            else:
                record.subscriber_error = error

        def on_completed() -> None:
            if record.signal is SignalType.ON_COMPLETE:
                recorder.record("complete")

        listener = None
        if cancel is not None and cancel.when is not None:
            predicate = cancel.when

            def listener(event: Event) -> None:
                if record.signal is None and predicate(event):
                    # Not from inside the event (it may be a write under the run's lock): right after it.
                    scheduler.schedule(lambda *_: dispose())

            recorder.listeners.append(listener)

        stream = self.target.stream(input, self.config).pipe(do_finally(on_finally))
        if cancel is not None and cancel.tick is not None:
            if cancel.mode == "timeout":
                stream = stream.pipe(ops.timeout(cancel.tick, scheduler=scheduler))
            elif cancel.mode == "take_until":
                stream = stream.pipe(ops.take_until(rx.timer(cancel.tick, scheduler=scheduler)))
            elif cancel.late:
                due = start + cancel.tick
                scheduler.schedule_absolute(due, lambda *_: scheduler.schedule_absolute(due, lambda *_: dispose()))
            else:
                scheduler.schedule_absolute(start + cancel.tick, lambda *_: dispose())
        try:
            subscription.append(stream.subscribe(on_next, on_error, on_completed, scheduler=scheduler))
            VirtualTimeScheduler.advance_to(scheduler, start + self.horizon)
        finally:
            if listener is not None:
                recorder.listeners.remove(listener)
        if record.signal is None:
            raise AssertionError(
                f"the turn with input {input!r} did not end within {self.horizon:g} ticks of virtual time"
            )
        record.events = recorder.events[first_event:]
        record.head = self.head()
        self.turns.append(record)
        return record
