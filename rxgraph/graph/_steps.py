"""The steps of a run: one node's call and chunk stream (``Step``), a result that comes later (``LateResult``), and
a parallel superstep's branches (``Superstep``).

A step is "call the node's action, forward its chunks, then run the tail". ``Step`` keeps exactly the semantics of
``defer(action).map(StreamingOutput) ++ defer(tail)`` started on the trampoline — the tail runs only after the chunk
stream completed, and only while the run is still subscribed — with one small purpose-built observer per step
instead of a chain of generic operators (``tests/graph/test_differential.py`` checks it against a reference runner
built from those operators). What a call gave is decided in one place, ``_node.classify``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, SerialDisposable

from .._frozen import freeze
from ..errors import ConfigurationError, NodeInterrupt
from ..rx._awaitable import from_awaitable
from ..rx._subscribe import subscribe_source
from ._edges import Task, task_node
from ._node import LATER, STREAM, UPDATE, NodeSpec, classify
from ._outputs import CustomOutput, RunOutput, StreamingOutput
from ._run_info import RunInfo
from ._spec import GraphSpec
from ._transition import Position

__all__ = [
    "COMPLETED_WHILE_SUBSCRIBING",
    "SUBSCRIBING",
    "WAITING",
    "LateResult",
    "Step",
    "StepHost",
    "Superstep",
    "called_on",
]

# A StreamingOutput is built for every chunk: object.__new__ and three stores cost a third less than calling the
# class (whose __init__ is a Python frame on 3.11). _outputs.py keeps the fields' names and their meaning.
_new = object.__new__

# Phases of one streaming step, to hand its completion to whoever must run the tail (see Run.step_completed).
SUBSCRIBING, COMPLETED_WHILE_SUBSCRIBING, WAITING = 0, 1, 2


class _Ends(Protocol):
    def fail(self, error: Exception) -> None: ...

    def node_failed(self, error: Exception, index: int, node: str, group: Superstep | None = None) -> None: ...

    def subscriber_failed(self, error: Exception) -> None: ...

    def deliver_late_error(self) -> None: ...


class StepHost(Protocol):
    """What the steps need of their run (``Run``): where outputs go, how it ends, and how it goes on."""

    @property
    def observer(self) -> abc.ObserverBase[RunOutput]: ...

    @property
    def end(self) -> _Ends: ...

    @property
    def closed(self) -> bool: ...

    @property
    def scheduler(self) -> abc.SchedulerBase | None: ...

    @property
    def info(self) -> RunInfo: ...

    @property
    def spec(self) -> GraphSpec: ...

    @property
    def at(self) -> Position: ...

    def open_step(self, node: NodeSpec, state_view: Any, index: int, step: Step | None) -> tuple[object, Any]: ...

    def subscribe_step(self, step: Step, source: Any, *, late: bool) -> abc.DisposableBase: ...

    def step_completed(self, step: Step) -> None: ...

    def superstep_completed(self, group: Superstep) -> None: ...


class Step:
    """Observes one node's chunk stream: forwards each chunk, keeps them for the tail.

    It is subscribed without reactivex's auto-detaching wrapper (one call less per chunk), so it keeps the same
    promise itself: nothing after a terminal event, nothing after the run was cancelled.

    The step of a node that declares ``RunInfo`` exists from before its call, and forwards its writes too
    (``on_write``): they may come from any thread while the call runs, so its chunks and writes take turns under
    ``emit_lock`` (the superstep's, for a branch). Writes are forwarded only: never kept, never an update.
    """

    __slots__ = (
        "_emit",
        "_keep",
        "_name",
        "_shown",
        "busy",
        "chunks",
        "emit_lock",
        "group",
        "index",
        "late_error",
        "lock",
        "node",
        "phase",
        "run",
        "state_view",
        "stopped",
        "updates",
        "writing",
    )

    def __init__(self, run: StepHost, node: NodeSpec, state_view: Mapping[str, Any]) -> None:
        self.run = run
        self.node = node
        self.state_view = state_view
        self.chunks: list[Any] = []
        self.lock = threading.Lock()
        self.phase = SUBSCRIBING
        # Per-chunk hot path: bind what on_next needs once per step.
        self._keep = self.chunks.append
        self._emit = run.observer.on_next
        self._name = node.name
        schema = run.spec.schema
        self._shown = state_view if schema.output_keys is None else schema.shown(state_view)  # what outputs show
        self.stopped = False
        self.busy = False  # a chunk is being handed to the subscriber right now (see RunEnd.preempt)
        self.late_error = False  # a preempting run left its error for this emitter to deliver
        self.updates: tuple[Mapping[str, Any] | None, ...] | None = None  # a late result that was an update
        self.group: Superstep | None = None  # the superstep this step is a branch of, if it runs in parallel
        self.index = 0  # its task's index in the superstep
        self.writing = False  # a write is being handed to the subscriber right now (see RunEnd.preempt)
        self.emit_lock: Any = None
        if node.run_info is not None:  # it may write from other threads: its chunks take turns with its writes
            self.emit_lock = threading.RLock()
            self._emit = self._emit_in_turn

    def on_next(self, value: Any) -> None:
        # `busy` is set before `stopped` is read and cleared before `late_error` is read: see RunEnd.preempt.
        self.busy = True
        if not self.stopped:
            self._keep(value)
            output = _new(StreamingOutput)
            output._node = self._name
            output._state = self._shown
            output._chunk = value
            try:
                self._emit(output)
            except Exception as error:
                self.busy = False
                self.run.end.subscriber_failed(error)
                return
        self.busy = False
        if self.late_error:
            self.run.end.deliver_late_error()

    def _emit_in_turn(self, value: RunOutput) -> None:
        with self.emit_lock:
            self.run.observer.on_next(value)

    def on_write(self, value: Any) -> None:
        """``RunInfo.write`` of the step's node call: a ``CustomOutput`` to the subscriber, in turn with its chunks.
        ``writing`` and ``late_error`` follow the chunks' ``busy`` protocol (see ``RunEnd.preempt``).

        Raises:
            ConfigurationError: the call has ended, and the run was not cancelled (a cancelled run drops it).
        """
        failure: Exception | None = None
        with self.emit_lock:
            self.writing = True
            ended = self.stopped
            if not ended:
                try:
                    self.run.observer.on_next(CustomOutput(self._name, self.state_view, value))
                except Exception as error:
                    failure = error
            self.writing = False
        if failure is not None:
            self.run.end.subscriber_failed(failure)
            return
        if self.late_error:
            self.run.end.deliver_late_error()
        if ended and not self.run.info.cancelled.is_set():
            raise ConfigurationError(
                f"node {self._name!r} wrote {value!r} after its call had ended: RunInfo.write works while the node "
                "runs (until it returned its update, or its stream or coroutine ended)"
            )

    def end_writes(self) -> bool:
        """The node's call ended: no write gets through from now on (one on its way on another thread is handed
        over first). False when the step had stopped already."""
        if self.emit_lock is None:
            stopped, self.stopped = self.stopped, True
            return not stopped
        with self.emit_lock:
            stopped, self.stopped = self.stopped, True
            return not stopped

    def result(self) -> Any:
        """The step's updates, once its stream completed (an update that came late, or what its chunks make).

        Raises:
            Exception: what the node's ``reduce`` raised; ``InvalidUpdateError`` for chunks that make no update.
        """
        if self.updates is not None:
            return self.updates
        return self.node.updates_from_chunks(self.chunks, self.state_view)

    def on_error(self, error: Exception) -> None:
        if not self.stopped and self.end_writes():
            self.run.end.node_failed(error, self.index, self._name, self.group)

    def on_completed(self) -> None:
        if not self.stopped and self.end_writes():
            self.run.step_completed(self)


class LateResult:
    """The result of a node that comes later than its call: an action called on the node's own scheduler, or an
    ``async def`` action awaited on the run's loop. An update goes to the step's tail; an Observable's chunks go
    through the step as any node's; an awaitable is awaited first."""

    __slots__ = ("inner", "run", "step", "streaming")

    def __init__(self, run: StepHost, step: Step) -> None:
        self.run = run
        self.step = step
        self.inner = SerialDisposable()  # the chunk stream or the awaited coroutine the result turned out to be
        self.streaming = False

    def on_next(self, result: Any) -> None:
        step, run = self.step, self.run
        if step.stopped:
            return
        try:
            kind = classify(step.node.name, result)
        except Exception as error:
            step.on_error(error)
            return
        if kind is UPDATE:
            step.updates = (result,)
        elif kind is STREAM:
            self.streaming = True
            self.inner.disposable = subscribe_source(
                result, step.on_next, step.on_error, step.on_completed, run.scheduler
            )
        else:
            self.streaming = True  # its own completion ends the step
            late = LateResult(run, step)
            self.inner.disposable = CompositeDisposable(
                subscribe_source(
                    from_awaitable(result, run.info.loop), late.on_next, step.on_error, late.on_completed, None
                ),
                late.inner,
            )

    def on_completed(self) -> None:
        if not self.streaming:
            self.step.on_completed()


def called_on(scheduler: abc.SchedulerBase, call: Callable[[], Any]) -> Observable[Any]:
    """Call ``call`` in an action on ``scheduler``; emit what it returns (or fail with what it raises)."""

    def _subscribe(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        def _action(*_: Any) -> None:
            try:
                result = call()
            except Exception as error:
                observer.on_error(error)
                return
            observer.on_next(result)
            observer.on_completed()

        return scheduler.schedule(_action)

    return Observable(_subscribe)


class Superstep:
    """The branches of one parallel superstep: starts them (at most ``max_concurrency`` at a time, in task order),
    serialises their chunks to the subscriber, keeps each one's update, and hands the superstep to its tail once the
    last one finished. An error in one ends the run, which disposes the others (they are all in ``disposables``)."""

    __slots__ = (
        "active",
        "asked",
        "disposables",
        "emit_lock",
        "limit",
        "lock",
        "phase",
        "pumping",
        "remaining",
        "results",
        "run",
        "started",
        "state_view",
        "steps",
        "tasks",
    )

    def __init__(self, run: StepHost, tasks: tuple[Task, ...]) -> None:
        self.run = run
        self.tasks = tasks
        self.state_view = MappingProxyType(run.at.state)
        self.results: list[Any] = [None] * len(tasks)
        self.steps: list[Step] = []
        self.disposables = CompositeDisposable()
        self.lock = threading.Lock()
        self.emit_lock = threading.RLock()
        self.limit = run.spec.max_concurrency or len(tasks)
        self.phase = SUBSCRIBING
        self.remaining = len(tasks)
        self.asked: dict[int, tuple[str, NodeInterrupt]] = {}  # the branches that called interrupt(), by index
        self.started = 0
        self.active = 0
        self.pumping = False

    def emit(self, value: RunOutput) -> None:
        with self.emit_lock:  # branches stream from several threads; a subscriber gets one event at a time
            self.run.observer.on_next(value)

    def pump(self) -> None:
        """Start branches while the concurrency bound allows. One thread pumps at a time: a branch that finishes
        while another thread pumps leaves the next start to it (the check and the hand-off share the lock)."""
        with self.lock:
            if self.pumping:
                return
            self.pumping = True
        while True:
            with self.lock:
                if self.run.closed or self.started >= len(self.tasks) or self.active >= self.limit:
                    self.pumping = False
                    return
                index = self.started
                self.started += 1
                self.active += 1
            self._start(index)

    def _start(self, index: int) -> None:
        run = self.run
        task = self.tasks[index]
        node = run.spec.nodes[task_node(task)]
        view: Any = self.state_view if type(task) is str else freeze(task.arg)  # type: ignore[union-attr]
        step = Step(run, node, view)
        step.group = self
        step.index = index
        step._emit = self.emit
        if step.emit_lock is not None:
            step.emit_lock = self.emit_lock  # its writes take turns with every branch's chunks
        self.steps.append(step)
        done = run.at.done.get(index)
        if done is not None:  # it finished before this superstep failed or stopped: its update, as it was
            step.updates = done
            step.on_completed()
            return
        try:
            kind, result = run.open_step(node, view, index, step)
        except Exception as error:
            step.on_error(error)
            return
        if kind is UPDATE:
            step.updates = (result,)
            step.on_completed()
        elif not run.closed:
            self.disposables.add(run.subscribe_step(step, result, late=kind is LATER))

    def branch_asked(self, index: int, node: str, error: NodeInterrupt) -> None:
        """Branch ``index`` (node ``node``) called ``interrupt()``: the others go on; once all have ended, the
        superstep stops for every question asked (``asked``), keeping the branches that finished."""
        with self.lock:
            self.asked[index] = (node, error)
        self._ended(index, None)

    def branch_done(self, step: Step) -> None:
        try:
            updates = step.result()
        except Exception as error:
            self.run.end.fail(error)
            return
        self._ended(step.index, updates)

    def _ended(self, index: int, updates: Any) -> None:
        with self.lock:
            if updates is not None:
                self.results[index] = updates
            self.remaining -= 1
            self.active -= 1
            done = self.remaining == 0
            more = not done and not self.pumping
            if done and self.phase == SUBSCRIBING:
                self.phase = COMPLETED_WHILE_SUBSCRIBING  # the drive loop that started it takes it from here
                return
        if more:
            self.pump()
        elif done:
            self.run.superstep_completed(self)

    def finished(self) -> dict[int, tuple[Any, ...]]:
        """The updates of the branches that have finished, by task index (kept if the superstep fails or stops)."""
        with self.lock:
            return {index: tuple(updates) for index, updates in enumerate(self.results) if updates is not None}

    def stop(self) -> None:
        for step in list(self.steps):
            step.stopped = True

    def busy(self) -> bool:
        return any(step.busy or step.writing for step in list(self.steps))

    def owe_late_error(self) -> None:
        for step in list(self.steps):
            step.late_error = True
