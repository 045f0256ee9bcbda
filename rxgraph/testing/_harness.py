"""Run turns in virtual time and cancel them exactly: at a tick, on an event, by ``timeout`` or ``take_until``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import reactivex as rx
from reactivex import Observable
from reactivex import operators as ops
from reactivex.scheduler import VirtualTimeScheduler
from reactivex.testing import TestScheduler

from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..checkpoint._memory import MemorySaver
from ..errors import InvalidArgumentError, InvalidTypeError
from ..graph._compiled import CompiledGraph
from ..graph._config import RunnableConfig
from ..graph._outputs import CustomOutput, RunOutput, StreamingOutput
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
    "crash_at",
    "dispose_at",
    "dispose_when",
    "take_until_at",
    "timeout_after",
]


class Streamable(Protocol):
    """What the harness drives: a ``CompiledGraph``, or a ``ReactAgent`` (anything with this ``stream``)."""

    def stream(self, input: Any, config: RunnableConfig | None = None) -> Observable[RunOutput]: ...


@dataclass(frozen=True)
class CancelSpec:
    """How and when a turn is cancelled. Build one with ``dispose_at``, ``dispose_when``, ``timeout_after`` or
    ``take_until_at``. Ticks are relative to the turn's subscription."""

    mode: Literal["dispose", "timeout", "take_until", "crash"] = "dispose"
    tick: float | None = None
    when: Callable[[Event], bool] | None = None
    late: bool = False

    def describe(self) -> str:
        if self.when is not None:
            return f"dispose when {getattr(self.when, '__name__', 'predicate')}"
        where = f"t+{self.tick:g}" + (" (after that tick's events)" if self.late else "")
        return {
            "dispose": f"dispose at {where}",
            "timeout": f"timeout({self.tick:g})",
            "crash": f"crash at {where} (its process dies: nothing more of the run is written, not even a rewind)",
        }.get(self.mode, f"take_until a trigger at t+{self.tick:g}")


def dispose_at(tick: float, *, late: bool = False) -> CancelSpec:
    """Dispose the subscription ``tick`` after the turn started: before whatever else happens at that tick, or,
    with ``late=True``, after the events already due at that tick."""
    return CancelSpec("dispose", tick=tick, late=late)


def dispose_when(predicate: Callable[[Event], bool]) -> CancelSpec:
    """Dispose right after the first event ``predicate`` accepts (at the same tick, once that event's work ended)."""
    return CancelSpec("dispose", when=predicate)


def crash_at(tick: float, *, late: bool = False) -> CancelSpec:
    """The turn's process dies at ``tick`` (after that tick's events with ``late=True``): from then on nothing the run
    writes reaches the saver — its rewind neither — and its thread's slot is free, as a killed process's lock is.
    The next run on the thread finds what a crash leaves."""
    return CancelSpec("crash", tick=tick, late=late)


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
    """An event predicate: ``node``'s ``NodeOutput`` (or, with ``chunks=n``, its n-th streamed chunk; a value it
    writes with ``RunInfo.write`` counts as a chunk)."""
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
    def outputs(self) -> list[tuple[float, RunOutput]]:
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
            raise InvalidTypeError(
                f"{type(self.target).__name__} is neither a CompiledGraph nor has a .graph", argument="make"
            )
        return graph

    def head(self) -> Checkpoint | None:
        return self.saver.get(self.thread_id)

    def run_turn(self, input: Any, cancel: CancelSpec | None = None) -> TurnRecord:
        """Run one turn to its end (completed, failed, or cancelled as ``cancel`` says) and return its record."""
        turn = self._begin(input, cancel, then=None)
        self._advance([turn])
        # Everything up to the horizon belongs to this turn: a write that landed after its end is its own.
        turn.end_event = len(self.recorder.events)
        turn.head = self.head()
        return self._finish(turn, start_event=turn.first_event)

    def run_chained(self, inputs: Sequence[Any], cancels: Mapping[int, CancelSpec] | None = None) -> list[TurnRecord]:
        """Run one turn per input, each next turn subscribed from the previous turn's terminal callback — as a
        server does that answers the client and then takes its next message.

        The callback is the subscriber's ``on_completed`` or ``on_error``, which ``take_until``, ``take`` and
        ``timeout`` deliver *before* they dispose the cut run; for a plain dispose (``dispose_at``,
        ``dispose_when``) it is right after ``dispose()`` returned. ``cancels`` maps a turn's index to its cancel.
        """
        if not inputs:
            raise InvalidArgumentError("run_chained needs at least one input", argument="inputs")
        cancels = cancels or {}
        turns: list[_Turn] = []

        def begin(index: int) -> None:
            following = (lambda: begin(index + 1)) if index + 1 < len(inputs) else None
            turns.append(self._begin(inputs[index], cancels.get(index), then=following))

        begin(0)
        self._advance(turns)
        if len(turns) != len(inputs):
            raise AssertionError(f"only {len(turns)} of {len(inputs)} chained turns started")
        records: list[TurnRecord] = []
        start_event = turns[0].first_event
        for turn in turns:
            # A next turn is subscribed before the previous one ended, but the thread's slot keeps it from doing
            # anything until then: its events begin where the previous turn's end.
            record = self._finish(turn, start_event=max(start_event, turn.first_event))
            if records:
                record.pre_turn = records[-1].head
            start_event = turn.end_event
            records.append(record)
        # A write a turn's run made after that turn ended is its own, whichever turn was running then.
        for record, turn in zip(records, turns, strict=True):
            ids = record.run_ids
            late = [
                e
                for e in self.recorder.events[turn.end_event :]
                if e.kind in ("write", "rewind") and e.value.run_id in ids
            ]
            if late:
                late_orders = {e.order for e in late}
                record.events = record.events + late
                for other in records:
                    if other is not record:
                        other.events = [e for e in other.events if e.order not in late_orders]
        return records

    def _begin(self, input: Any, cancel: CancelSpec | None, then: Callable[[], None] | None) -> _Turn:
        scheduler, recorder = self.scheduler, self.recorder
        start = float(scheduler.clock)
        record = TurnRecord(input=input, start=start, pre_turn=self.head(), cancel=cancel)
        turn = _Turn(record, len(recorder.events))
        chained = [then]  # the next turn starts once, from whichever terminal callback comes first

        def chain() -> None:
            following, chained[0] = chained[0], None
            if following is not None:
                following()

        def dispose() -> None:
            if turn.subscription is not None and record.signal is None:
                recorder.record("cancel")
                crash = cancel is not None and cancel.mode == "crash"
                self.saver.refusing = crash  # a dead process writes nothing more; its slot goes with it
                try:
                    turn.subscription.dispose()
                finally:
                    self.saver.refusing = False
                chain()

        def on_finally(signal: SignalType) -> None:
            record.signal = signal
            if signal is SignalType.CANCEL and not any(e.kind == "cancel" for e in recorder.events[turn.first_event :]):
                recorder.record("cancel")  # timeout / take_until cancelled it from downstream
            turn.end_event = len(recorder.events)
            turn.head = self.head()

        def on_next(output: RunOutput) -> None:
            # A node's writes are recorded with its chunks: both come while it runs, neither is its end.
            recorder.record(
                "chunk" if isinstance(output, StreamingOutput | CustomOutput) else "node", output.node, output
            )

        def on_error(error: Exception) -> None:
            if record.signal is SignalType.ON_ERROR:
                record.error = error
                recorder.record("error", value=error)
            else:
                record.subscriber_error = error
            chain()

        def on_completed() -> None:
            if record.signal is SignalType.ON_COMPLETE:
                recorder.record("complete")
            chain()

        if cancel is not None and cancel.when is not None:
            predicate = cancel.when

            def listener(event: Event) -> None:
                if record.signal is None and predicate(event):
                    # Not from inside the event (it may be a write under the run's lock): right after it.
                    scheduler.schedule(lambda *_: dispose())

            turn.listener = listener
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
        turn.subscription = stream.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        return turn

    def _advance(self, turns: list[_Turn]) -> None:
        """Advance virtual time until every turn (including turns started meanwhile) ended, up to the horizon."""
        try:
            start = float(self.scheduler.clock)
            VirtualTimeScheduler.advance_to(self.scheduler, start + self.horizon)
        finally:
            for turn in turns:
                if turn.listener is not None:
                    self.recorder.listeners.remove(turn.listener)
                    turn.listener = None
        for turn in turns:
            if turn.record.signal is None:
                raise AssertionError(
                    f"the turn with input {turn.record.input!r} did not end within {self.horizon:g} ticks of "
                    "virtual time"
                )

    def _finish(self, turn: _Turn, *, start_event: int) -> TurnRecord:
        record = turn.record
        record.events = self.recorder.events[start_event : turn.end_event]
        record.head = turn.head
        self.turns.append(record)
        return record


class _Turn:
    """A turn in progress: its record, its subscription, and where its events begin and end."""

    __slots__ = ("end_event", "first_event", "head", "listener", "record", "subscription")

    def __init__(self, record: TurnRecord, first_event: int) -> None:
        self.record = record
        self.first_event = first_event
        self.end_event = first_event
        self.head: Checkpoint | None = None
        self.listener: Callable[[Event], None] | None = None
        self.subscription: rx.abc.DisposableBase | None = None
