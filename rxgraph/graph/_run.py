"""The per-subscription run: waits for its thread, reads its base, merges the input, then runs node after node.

Life of a run::

    subscribe   claim the thread's slot (or wait in line, per ``multitask``); schedule the start on the run's
                scheduler or on this thread's trampoline, and return: nothing has run and nothing was read yet
    start       choose the base (``choose_base``, now), merge the input, write the input checkpoint (``ThreadWriter``),
                route from START
    drive       node after node, in a loop: call the action; an update goes straight to the tail; an Observable is
                subscribed, its chunks forwarded, and its completion runs the tail
    tail        merge the update, write the checkpoint (guarded), emit the NodeOutput, route to the next node
    end         exactly one of: completed, failed, cancelled (disposed), subscriber failed (its on_next raised),
                interrupted (a newer run took the thread). The end cleans up first — the rewind, where the policy
                says — then frees the thread's slot, then tells the subscriber (a cancelled run tells no one)

Cancellation points — where a run notices it was cancelled:

- before every step: the drive loop checks the run's ``disposed`` flag, so an operator that stops early (``take``,
  ``first``, ``take_while``, ``take_until``, a dispose from ``on_next``) stops the run at the next step boundary;
- every chunk: once cancelled, a step drops what its stream still emits, and the stream is disposed;
- at the tail: before the merge, and again under the run's write lock right before the checkpoint write
  (``ThreadWriter.commit``), so no write lands once the rewind has begun;
- after the write, right before the ``NodeOutput`` is emitted.

A step is "call the node's action, forward its chunks, then run the tail". This module keeps exactly the semantics
of ``defer(action).map(StreamingOutput) ++ defer(tail)`` started on the trampoline — the tail runs only after the
chunk stream completed, and only while the run is still subscribed — with one small purpose-built observer per
step instead of a chain of generic operators. ``tests/graph/test_differential.py`` holds a reference runner built
from those operators and checks this one against it on generated graphs and cancellations.

Steps are driven by a loop, not by recursion: a node that completes synchronously hands back to the loop, and a
node that completes later (a timer, another thread) restarts the loop from its completion — inside that thread's
trampoline, or on the run's scheduler when the completion came from a thread the run was not driven on. A graph
looping ten thousand times uses a constant amount of stack.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable
from reactivex.scheduler import CurrentThreadScheduler

from .._frozen import freeze
from .._log import log
from ..checkpoint._base import Checkpoint
from ..errors import (
    CheckpointConflictError,
    GraphRecursionError,
    InvalidArgumentError,
    InvalidTypeError,
    InvalidUpdateError,
    NodeInterrupt,
    RunInterruptedError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from ..rx import SignalType
from ..rx._awaitable import background_loop, from_awaitable, loop_of_scheduler, running_loop, worker_pool
from ..rx._subscribe import subscribe_source
from ._choose_base import choose_base
from ._config import MultitaskPolicy, RunnableConfig
from ._constants import START
from ._dead_run import is_unfinished, rewind_dead_run, rewinds_dead_runs
from ._edges import JoinProgress, Task, task_node
from ._interrupt import (
    NO_CALL,
    CallScope,
    Command,
    PendingInterrupt,
    enter_scope,
    leave_scope,
    names_of,
    pending_of,
    scoped,
    tasks_of,
)
from ._node import NodeSpec
from ._outputs import InterruptOutput, NodeOutput, RunOutput, StreamingOutput
from ._run_info import RunInfo
from ._slots import RunSlots, slots_for
from ._spec import GraphSpec
from ._writer import ThreadWriter

__all__ = ["Run"]

# A StreamingOutput is built for every chunk: object.__new__ and three stores cost a third less than calling the
# class (whose __init__ is a Python frame on 3.11). outputs.py keeps the fields' names and their meaning.
_new = object.__new__

# Phases of one streaming step, to hand its completion to whoever must run the tail (see Run.step_completed).
_SUBSCRIBING, _COMPLETED_WHILE_SUBSCRIBING, _WAITING = 0, 1, 2

# What calling a node gave (see Run.open_step): its update, a chunk stream, or a result that comes later.
_UPDATE, _STREAM, _LATE = object(), object(), object()


class _Step:
    """Observes one node's chunk stream: forwards each chunk, keeps them for the tail.

    It is subscribed without reactivex's auto-detaching wrapper (one call less per chunk), so it keeps the same
    promise itself: nothing after a terminal event, nothing after the run was cancelled.
    """

    __slots__ = (
        "_emit",
        "_keep",
        "_name",
        "busy",
        "chunks",
        "group",
        "index",
        "lock",
        "node",
        "pending",
        "phase",
        "run",
        "state_view",
        "stopped",
        "updates",
    )

    def __init__(self, run: Run, node: NodeSpec, state_view: Mapping[str, Any]) -> None:
        self.run = run
        self.node = node
        self.state_view = state_view
        self.chunks: list[Any] = []
        self.lock = threading.Lock()
        self.phase = _SUBSCRIBING
        # Per-chunk hot path: bind what on_next needs once per step.
        self._keep = self.chunks.append
        self._emit = run.observer.on_next
        self._name = node.name
        self.stopped = False
        self.busy = False  # a chunk is being handed to the subscriber right now (see Run.interrupt)
        self.pending = False  # an interrupt left its error for this emitter to deliver
        self.updates: tuple[Mapping[str, Any] | None, ...] | None = None  # a late result that was an update
        self.group: _Superstep | None = None  # the superstep this step is a branch of, if it runs in parallel
        self.index = 0  # its task's index in the superstep

    def on_next(self, value: Any) -> None:
        # `busy` is set before `stopped` is read and cleared before `pending` is read: see Run.interrupt.
        self.busy = True
        if not self.stopped:
            self._keep(value)
            output = _new(StreamingOutput)
            output._node = self._name
            output._state = self.state_view
            output._chunk = value
            try:
                self._emit(output)
            except Exception as error:
                self.busy = False
                self.run.subscriber_failed(error)
                return
        self.busy = False
        if self.pending:
            self.run.deliver_pending()

    def result(self) -> Any:
        """The step's updates, once its stream completed (an update that came late, or what its chunks make).

        Raises:
            Exception: what the node's ``reduce`` raised; ``InvalidUpdateError`` for chunks that make no update.
        """
        if self.updates is not None:
            return self.updates
        return self.node.updates_from_chunks(self.chunks, self.state_view)

    def on_error(self, error: Exception) -> None:
        if not self.stopped:
            self.stopped = True
            if isinstance(error, NodeInterrupt):
                self.run.interrupted(error, self.index, self._name)
            else:
                self.run.fail(error)

    def on_completed(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.run.step_completed(self)


class _Late:
    """The result of a node that comes later than its call: an action called on the node's own scheduler, or an
    ``async def`` action awaited on the run's loop. An update goes to the step's tail; an Observable's chunks go
    through the step as any node's; an awaitable is awaited first."""

    __slots__ = ("inner", "run", "step", "streaming")

    def __init__(self, run: Run, step: _Step) -> None:
        self.run = run
        self.step = step
        self.inner = SerialDisposable()  # the chunk stream or the awaited coroutine the result turned out to be
        self.streaming = False

    def on_next(self, result: Any) -> None:
        step, run = self.step, self.run
        if step.stopped:
            return
        if result is None or isinstance(result, Mapping):
            step.updates = (result,)
        elif isinstance(result, NodeInterrupt):
            step.on_error(result)
        elif isinstance(result, abc.ObservableBase):
            self.streaming = True
            self.inner.disposable = subscribe_source(
                result, step.on_next, step.on_error, step.on_completed, run.scheduler
            )
        elif inspect.isawaitable(result):
            self.streaming = True  # its own completion ends the step
            late = _Late(run, step)
            self.inner.disposable = CompositeDisposable(
                subscribe_source(
                    from_awaitable(result, run.info.loop), late.on_next, step.on_error, late.on_completed, None
                ),
                late.inner,
            )
        else:
            step.on_error(_not_a_result(step.node.name, result))

    def on_completed(self) -> None:
        if not self.streaming:
            self.step.on_completed()


def _not_a_result(name: str, result: object) -> InvalidUpdateError:
    return InvalidUpdateError(
        f"node {name!r} returned a {type(result).__name__}; an action returns a mapping (the update), None, an "
        "Observable of chunks, or (async def) a coroutine of one of those",
        node=name,
    )


def _called_on(scheduler: abc.SchedulerBase, call: Callable[[], Any]) -> Observable[Any]:
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


class _Superstep:
    """The branches of one parallel superstep: starts them (at most ``max_concurrency`` at a time, in task order),
    serialises their chunks to the subscriber, keeps each one's update, and hands the superstep to its tail once the
    last one finished. An error in one ends the run, which disposes the others (they are all in ``disposables``)."""

    __slots__ = (
        "active",
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

    def __init__(self, run: Run, tasks: tuple[Task, ...]) -> None:
        self.run = run
        self.tasks = tasks
        self.state_view = MappingProxyType(run.state)
        self.results: list[Any] = [None] * len(tasks)
        self.steps: list[_Step] = []
        self.disposables = CompositeDisposable()
        self.lock = threading.Lock()
        self.emit_lock = threading.RLock()
        self.limit = run.spec.max_concurrency or len(tasks)
        self.phase = _SUBSCRIBING
        self.remaining = len(tasks)
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
                if self.run.disposed or self.started >= len(self.tasks) or self.active >= self.limit:
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
        step = _Step(run, node, view)
        step.group = self
        step.index = index
        step._emit = self.emit
        self.steps.append(step)
        try:
            kind, result = run.open_step(node, view, index)
        except Exception as error:
            step.on_error(error)
            return
        if kind is _UPDATE:
            step.updates = (result,)
            step.on_completed()
        elif not run.disposed:
            self.disposables.add(run.subscribe_step(step, result, late=kind is _LATE))

    def branch_done(self, step: _Step) -> None:
        try:
            updates = step.result()
        except Exception as error:
            self.run.fail(error)
            return
        with self.lock:
            self.results[step.index] = updates
            self.remaining -= 1
            self.active -= 1
            done = self.remaining == 0
            more = not done and not self.pumping
            if done and self.phase == _SUBSCRIBING:
                self.phase = _COMPLETED_WHILE_SUBSCRIBING  # the drive loop that started it takes it from here
                return
        if more:
            self.pump()
        elif done:
            self.run.superstep_completed(self)

    def stop(self) -> None:
        for step in list(self.steps):
            step.stopped = True

    def busy(self) -> bool:
        return any(step.busy for step in list(self.steps))

    def mark_pending(self) -> None:
        for step in list(self.steps):
            step.pending = True


class Run:
    """One run of a compiled graph for one subscriber, from its subscription to its end. Created per subscription
    by ``CompiledGraph.stream``, which wires ``cancel`` with ``do_on_cancel`` and ``finished`` with ``do_finally``."""

    __slots__ = (
        "_driver",
        "_end_lock",
        "_ended",
        "_policy",
        "_progress_lock",
        "_slots",
        "config",
        "current",
        "disposed",
        "emitting",
        "ending",
        "ending_thread",
        "group",
        "info",
        "input",
        "interrupt_at",
        "joins",
        "next",
        "observer",
        "on_final_state",
        "on_updates",
        "pending",
        "progress",
        "resume",
        "resuming",
        "scheduler",
        "spec",
        "state",
        "step",
        "steps",
        "tasks",
        "writer",
    )

    def __init__(
        self,
        spec: GraphSpec,
        input: Mapping[str, Any] | Command | None,
        config: RunnableConfig,
        on_final_state: Callable[[Mapping[str, Any]], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        on_updates: Callable[[tuple[Any, ...]], None] | None = None,
    ) -> None:
        """``config.scheduler`` is the run's scheduler (the caller put the subscriber's there when the config had
        none); ``on_final_state`` is called with the final state right before ``on_completed``; ``loop`` is the
        event loop the run was subscribed from, if any (where its coroutines are awaited)."""
        self.spec = spec
        self.resume: Command | None = input if isinstance(input, Command) else None
        self.input = None if self.resume is not None else input
        self.config = config
        self.scheduler = config.scheduler
        self.on_final_state = on_final_state
        self.on_updates = on_updates  # told each step's updates before its NodeOutput (a subgraph's parent is)
        self.writer = ThreadWriter(config.thread_id, spec.checkpointer, spec.messages_key)
        self.info = RunInfo(
            thread_id=config.thread_id,
            run_id=self.writer.run_id,
            context=config.context,
            loop_of=lambda: loop or loop_of_scheduler(config.scheduler) or background_loop(),
        )
        self.observer: abc.ObserverBase[RunOutput] = _NO_OBSERVER
        self.disposed = False  # no step may start any more: cancelled, or the run ended
        self.state: dict[str, Any] = {}
        self.next: tuple[Task, ...] = ()  # the tasks of the next superstep (none: the run is over)
        self.tasks: tuple[Task, ...] = ()  # the tasks of the superstep running now (or that failed)
        self.joins: JoinProgress = {}  # the joins waiting for more of their sources
        self.interrupt_at: PendingInterrupt | None = None  # the run stops here (before or after a superstep)
        self.resuming: PendingInterrupt | None = None  # the interrupt inside a node that this run answers
        self.steps = 0
        self.step: _Step | None = None
        self.group: _Superstep | None = None  # the parallel superstep running now, if one
        self.progress: dict[int, Mapping[str, Any]] = {}  # the inner state of the superstep's subgraph tasks
        self._progress_lock = threading.Lock()
        self.current = SerialDisposable()  # the running step's stream
        self._end_lock = threading.Lock()
        self._ended = False  # the one way this run ended has been claimed
        self.ending = False  # ended abnormally and cleaning up (rewinding); readers of the thread wait for it
        self.ending_thread: int | None = None
        self.emitting = False  # an output is being handed to the subscriber right now
        self.pending: Exception | None = None  # a terminal error another thread could not deliver (interrupt)
        self._driver: int | None = None  # the thread the drive loop last ran on
        self._policy: MultitaskPolicy = config.multitask or spec.policy.multitask
        saver = self.writer.saver
        self._slots: RunSlots | None = slots_for(saver) if saver is not None else None

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    @property
    def thread_id(self) -> str | None:
        return self.writer.thread_id

    # -- subscription and the thread's slot --------------------------------------------------------------------

    def subscribe(self, observer: abc.ObserverBase[RunOutput], _: abc.SchedulerBase | None = None) -> Disposable:
        """Claim the thread's slot (or line up for it) and schedule the start; nothing runs before this returns."""
        self.observer = observer
        slots = self._slots
        if slots is None:
            self._schedule(self._start)
            return Disposable(self._dispose)
        thread_id = self.thread_id
        assert thread_id is not None
        try:
            # Off an event loop, a claim that asks another process's database waits here for its answer, as the
            # run would start here anyway; on a loop it must not (the answer then comes on the worker pool).
            claim = slots.claim(thread_id, self, self._policy, wait=running_loop() is None)
        except ThreadBusyError as busy:
            self._schedule(functools.partial(self.fail, busy))  # the name `busy` is gone after the except block
            return Disposable(self._dispose)
        if claim.outcome == "granted":
            self._schedule(self._start)
        elif claim.outcome == "interrupt":
            assert claim.holder is not None
            claim.holder.interrupt(self.run_id)  # it ends, frees the slot, and that grants it to this run
        return Disposable(self._dispose)

    def granted(self) -> None:
        """The thread's slot passed to this waiting run: start it (on the thread that freed the slot)."""
        self._schedule(self._start)

    def refused(self, error: Exception) -> None:
        """It waited for the thread and gets no slot (see ``SlotHolder.refused``): fail with ``error``."""
        self._schedule(functools.partial(self.fail, error))

    def _schedule(self, action: Callable[[], None]) -> None:
        # Like reactivex's sources: start on the run's scheduler, or on the current thread's trampoline — which
        # queues the action when a trampoline is already running here (always the case inside Observable.subscribe),
        # so the subscriber holds its subscription before anything is emitted. A scheduled action that runs after
        # the run was disposed does nothing.
        scheduler = self.scheduler or CurrentThreadScheduler.singleton()
        scheduler.schedule(lambda *_: None if self.disposed else action())

    def _start(self) -> None:
        self._driver = threading.get_ident()
        try:
            self._begin()
        except Exception as error:
            self.fail(error)
            return
        self._drive()

    def _begin(self) -> None:
        """Read the base (now, at start time), merge the input, write the input checkpoint, route from START — or,
        resuming (no input, or a ``Command``), take up the base checkpoint's pending superstep."""
        spec, writer, config = self.spec, self.writer, self.config
        base = None
        if writer.saver is not None and writer.thread_id is not None:
            head = writer.saver.get(writer.thread_id)
            if head is not None and rewinds_dead_runs(spec.policy) and is_unfinished(head):
                # This run holds the thread's slot: a head left by a run that meant to go on is a dead run's, whose
                # turn is undone first, as its cancel or failure would have undone it.
                rewound = rewind_dead_run(
                    writer.saver, writer.thread_id, spec.messages_key, by_run=writer.run_id, head=head
                )
                head = rewound if rewound is not None else writer.saver.get(writer.thread_id)
            choice = choose_base(
                writer.saver,
                writer.thread_id,
                checkpoint_id=config.checkpoint_id,
                has_input=self.input is not None,
                on_unsafe_head=spec.policy.on_unsafe_head,
                head=head,
            )
            if self.input is None:
                self._check_resume(choice.base)  # refused before the run starts: nothing is written
            writer.start(choice)
            base = choice.base
        state: dict[str, Any] = dict(base.values) if base is not None else {}
        if self.input is None:
            self._resume_from(base, state)
            return
        if not isinstance(self.input, Mapping):
            raise InvalidTypeError(
                f"the input of a run must be a mapping of state keys, a Command or None, got "
                f"{type(self.input).__name__}",
                argument="input",
            )
        # New input: the turn starts at START; an interrupt the base was waiting on is left unanswered.
        state = spec.schema.merge(state, self.input, origin="input")
        tasks, joins = spec.advance((START,), state)
        stop = self._stop_before(tasks)
        writer.commit(
            state, node=START, next_nodes=names_of(tasks), source="input", pending=pending_of(tasks, joins, stop)
        )
        self.state = state
        self.next, self.joins, self.interrupt_at = tasks, joins, stop

    def _check_resume(self, base: Checkpoint | None) -> None:
        """Refuse a run without input that has nothing to resume: no thread, no checkpoint, or a ``Command`` for a
        thread that waits on no interrupt.

        Raises:
            InvalidArgumentError: no checkpointer or thread; a ``Command`` but no pending interrupt.
            ThreadNotFoundError: the thread has no checkpoint.
        """
        writer = self.writer
        if writer.saver is None:
            raise InvalidArgumentError(
                "stream(None) or a Command resumes a thread's run from its checkpoint: the graph needs a "
                "checkpointer (compile(checkpointer=...)) and the config a thread",
                argument="input",
            )
        if base is None:
            raise ThreadNotFoundError(
                f"thread {writer.thread_id!r} has no checkpoint, so there is no run to resume; start it with "
                "input (stream(input, config))",
                thread_id=writer.thread_id or "",
            )
        if self.resume is not None and not (base.pending and "interrupt" in base.pending):
            raise InvalidArgumentError(
                f"thread {writer.thread_id!r} has no pending interrupt (checkpoint {base.id!r}): a Command resumes "
                "an interrupted run (this one may have been answered already); start a turn with input instead",
                argument="input",
            )

    def _resume_from(self, base: Any, state: dict[str, Any]) -> None:
        self._check_resume(base)
        writer = self.writer
        # No input: continue where the base checkpoint said the run would go next (nothing left: done).
        tasks, joins, waiting = tasks_of(base.next, base.pending)
        stored = (base.pending or {}).get("subgraph") or {}
        self.progress = {int(index): inner for index, inner in stored.items()}  # subgraphs go on where they were
        self.state = state
        self.next, self.joins = tasks, joins
        if waiting is None:
            return
        if waiting.when == "inside":
            answer = self.resume.resume if self.resume is not None else None
            self.resuming = replace(waiting, resumes=(*waiting.resumes, freeze(answer)))
        elif waiting.when == "after":
            stop = self._stop_before(tasks)
            if stop is not None:  # the next superstep has a stop before it too: record it, and stop there
                writer.commit(
                    state,
                    node=None,
                    next_nodes=names_of(tasks),
                    source="interrupt",
                    pending=pending_of(tasks, joins, stop),
                )
                self.interrupt_at = stop
            elif not tasks:  # it stopped after the last node: answered, the run is over, and the thread says so
                writer.commit(
                    state, node=waiting.node, next_nodes=(), source="loop", pending=pending_of((), joins, None)
                )

    def _stop_before(self, tasks: tuple[Task, ...]) -> PendingInterrupt | None:
        before = self.spec.interrupt_before
        if before:
            for index, task in enumerate(tasks):
                name = task_node(task)
                if name in before:
                    return PendingInterrupt(name, "before", task=index)
        return None

    def _stop_after(self, finished: tuple[str, ...], tasks: tuple[Task, ...]) -> PendingInterrupt | None:
        after = self.spec.interrupt_after
        if after:
            for index, name in enumerate(finished):
                if name in after:
                    return PendingInterrupt(name, "after", task=index)
        return self._stop_before(tasks)

    def _call(self, node: NodeSpec, state_view: Any, index: int) -> Any:
        """Call a node's action inside its scope: the answers to its ``interrupt()`` calls when this run resumes it,
        the inner state a subgraph node goes on with, and where a subgraph saves its progress."""
        resuming = self.resuming
        if resuming is not None and resuming.task == index and resuming.node == node.name:
            resumes, inner = resuming.resumes, resuming.subgraph
        else:
            resumes, inner = (), self.progress.get(index)
        save = functools.partial(self.save_progress, index, node.name) if node.subgraph else None
        call = CallScope(resumes, inner, save) if resumes or inner is not None or save is not None else NO_CALL
        token = enter_scope(call)
        try:
            return scoped(node.call(state_view, self.config, self.info), call)
        finally:
            leave_scope(token)

    def save_progress(self, index: int, node: str, inner_node: str, inner: Mapping[str, Any]) -> None:
        """A subgraph node (task ``index``) finished an inner step: write the parent's state as it was, with the
        inner state in its pending work, under the namespace ``node/inner_node`` — so that a resume after a crash
        goes on inside the subgraph, and a cancel rewinds it with the parent's turn."""
        with self._progress_lock:
            self.progress[index] = inner
            pending = pending_of(self.tasks, self.joins, None) or {}
            pending["subgraph"] = {str(i): state for i, state in sorted(self.progress.items())}
            self.writer.commit(
                self.state, node=f"{node}/{inner_node}", next_nodes=names_of(self.tasks), source="loop", pending=pending
            )

    def _pending_now(self, stop: PendingInterrupt | None = None) -> dict[str, Any] | None:
        """The pending work of the superstep running now (its Send payloads, the joins before it, the progress of
        its subgraphs), for a checkpoint that stops or fails the run in it."""
        pending = pending_of(self.tasks, self.joins, stop)
        if self.progress:
            pending = {**(pending or {}), "subgraph": {str(i): state for i, state in sorted(self.progress.items())}}
        return pending

    # -- stepping ----------------------------------------------------------------------------------------------

    def _drive(self) -> None:
        """Run supersteps until one has to wait for an asynchronous completion, or the run ended."""
        nodes = self.spec.nodes
        while not self.disposed:
            if self.interrupt_at is not None:
                self._stop(self.interrupt_at)
                return
            tasks = self.next
            if not tasks:
                self._complete()
                return
            if self.steps >= self.config.recursion_limit:
                name = task_node(tasks[0])
                self.fail(
                    GraphRecursionError(
                        f"run {self.run_id} (thread {self.thread_id!r}) reached recursion_limit="
                        f"{self.config.recursion_limit} steps before END; the next node would be {name!r}. "
                        "Raise RunnableConfig.recursion_limit if the graph is meant to loop this often.",
                        limit=self.config.recursion_limit,
                        next_node=name,
                        run_id=self.run_id,
                        thread_id=self.thread_id,
                    )
                )
                return
            self.steps += 1
            self.tasks = tasks
            if len(tasks) != 1 or type(tasks[0]) is not str:
                # Several tasks (or a Send): a parallel superstep.
                if not self._superstep(tasks):
                    return
                continue
            node = nodes[tasks[0]]
            state_view = MappingProxyType(self.state)
            try:
                kind, result = self.open_step(node, state_view, 0)
            except Exception as error:
                self.fail(error)
                return
            if kind is _UPDATE:
                # The zero-chunk case of the same step: straight to the tail.
                if not self._tail(node, (result,)):
                    return
                continue
            step = self.step = _Step(self, node, state_view)
            if self.disposed:
                return  # cancelled while the action ran; cancel() may have missed this step, so do not start it
            # An error while subscribing reaches step.on_error (so the run fails) and the loop stops below.
            self.current.disposable = self.subscribe_step(step, result, late=kind is _LATE)
            with step.lock:
                if step.phase != _COMPLETED_WHILE_SUBSCRIBING:
                    step.phase = _WAITING
                    return  # its completion, when it comes, runs the tail and drives on
            if not self._tail_of_stream(step):
                return

    def open_step(self, node: NodeSpec, state_view: Any, index: int) -> tuple[object, Any]:
        """Call task ``index``'s node (or have it called on its scheduler): ``(_UPDATE, update)`` for an update
        returned at once, ``(_STREAM, observable)`` for a chunk stream, ``(_LATE, observable)`` for a result that
        comes later (an action on the node's scheduler, a coroutine), which ``_Late`` resolves.

        Raises:
            Exception: what the action raised; the ``NodeInterrupt`` it returned; ``InvalidUpdateError`` for a
                result that is none of those.
        """
        if node.scheduler is not None:
            # Blocking work: the action is called on the node's scheduler, and its result comes back later.
            return _LATE, _called_on(node.scheduler, functools.partial(self._call, node, state_view, index))
        result = self._call(node, state_view, index)
        if result is None or isinstance(result, Mapping):
            return _UPDATE, result
        # An Observable is awaitable too (reactivex gives it __await__): it is a chunk stream, checked first.
        if isinstance(result, abc.ObservableBase):
            return _STREAM, result
        if inspect.isawaitable(result):
            return _LATE, from_awaitable(result, self.info.loop)
        raise result if isinstance(result, NodeInterrupt) else _not_a_result(node.name, result)

    def subscribe_step(self, step: _Step, source: Any, *, late: bool) -> abc.DisposableBase:
        """Subscribe ``step`` to its node's stream (through ``_Late`` for a result that comes later)."""
        if not late:
            return subscribe_source(source, step.on_next, step.on_error, step.on_completed, self.scheduler)
        resolver = _Late(self, step)
        return CompositeDisposable(
            subscribe_source(source, resolver.on_next, step.on_error, resolver.on_completed, None), resolver.inner
        )

    def _superstep(self, tasks: tuple[Task, ...]) -> bool:
        """Start every task of a parallel superstep; True when all of them finished synchronously and the drive
        loop goes on (their tail ran), False when the run waits for them (or ended)."""
        group = self.group = _Superstep(self, tasks)
        self.step = None
        self.current.disposable = group.disposables
        group.pump()
        with group.lock:
            if group.phase != _COMPLETED_WHILE_SUBSCRIBING:
                group.phase = _WAITING
                return False
        return self._superstep_tail(group)

    def superstep_completed(self, group: _Superstep) -> None:
        """Every branch of a superstep that had to wait finished (called on the thread of the last one)."""
        elsewhere = self._elsewhere()
        if elsewhere is not None:
            elsewhere.schedule(lambda *_: None if self.disposed else self._after_superstep_here(group))
            return
        if self._superstep_tail(group):
            self._continue()

    def _after_superstep_here(self, group: _Superstep) -> None:
        self._driver = threading.get_ident()
        if self._superstep_tail(group):
            self._continue()

    def _superstep_tail(self, group: _Superstep) -> bool:
        """Merge the branches' updates in task order, write one checkpoint, emit a NodeOutput per task, route."""
        if self.disposed or self.writer.cancelled:
            return False
        tasks_updates = [
            (task_node(task), updates or ()) for task, updates in zip(group.tasks, group.results, strict=True)
        ]
        self.group = None
        return self._land(
            tuple(dict.fromkeys(name for name, _ in tasks_updates)),
            lambda: self.spec.schema.merge_superstep(self.state, tasks_updates),
            tuple(update for _, updates in tasks_updates for update in updates),
            [name for name, _ in tasks_updates],
        )

    def step_completed(self, step: _Step) -> None:
        if step.group is not None:
            step.group.branch_done(step)
            return
        with step.lock:
            if step.phase == _SUBSCRIBING:
                # Completed synchronously inside subscribe(): the loop in _drive takes it from here, which keeps
                # the stack flat however many synchronous steps follow each other.
                step.phase = _COMPLETED_WHILE_SUBSCRIBING
                return
        elsewhere = self._elsewhere()
        if elsewhere is not None:
            # The tail writes to the saver: not on the thread the stream completed on (an event loop serving other
            # runs' model streams, a tool's pool), but where the run runs.
            elsewhere.schedule(lambda *_: None if self.disposed else self._after_step_here(step))
            return
        if self._tail_of_stream(step):
            self._continue()

    def _elsewhere(self) -> abc.SchedulerBase | None:
        """Where to go on after something completed on this thread, if not here: the run's scheduler when this is
        not the thread the run runs on; for a run without one, the worker pool when this thread runs an event loop
        (saver I/O and sync nodes never hold up a loop the run was not subscribed on)."""
        if threading.get_ident() == self._driver:
            return None
        if self.scheduler is not None:
            return self.scheduler
        return worker_pool() if running_loop() is not None else None

    def _after_step_here(self, step: _Step) -> None:
        self._driver = threading.get_ident()
        if self._tail_of_stream(step):
            self._continue()

    def _continue(self) -> None:
        """Drive on after a step that completed asynchronously."""
        elsewhere = self._elsewhere()
        if elsewhere is not None:
            # Completed on a thread the run does not run on (a pool, an I/O thread): back to the run's scheduler.
            elsewhere.schedule(lambda *_: None if self.disposed else self._drive_here())
            return
        trampoline = CurrentThreadScheduler.singleton()
        if trampoline.schedule_required():
            # No trampoline on this thread (a pool thread, a timer): run the next steps inside one, so that a
            # synchronous source of the next node queues its work and can be stopped by an early dispose.
            trampoline.schedule(lambda *_: None if self.disposed else self._drive_here())
        else:
            self._drive()

    def _drive_here(self) -> None:
        self._driver = threading.get_ident()
        self._drive()

    def _tail_of_stream(self, step: _Step) -> bool:
        if self.disposed:  # the tail is subscribed only while the run is
            return False
        try:
            updates = step.result()
        except Exception as error:
            self.fail(error)
            return False
        return self._tail(step.node, updates)

    def _tail(self, node: NodeSpec, updates: Any) -> bool:
        """Merge, write, emit, route. Returns False when the run ended (cancelled, failed) and must not go on."""
        if self.disposed or self.writer.cancelled:
            return False
        name = node.name

        def merged() -> dict[str, Any]:
            state, merge = self.state, self.spec.schema.merge
            for update in updates:
                state = merge(state, update, origin=f"node {name!r}", node=name)
            return state

        return self._land((name,), merged, tuple(updates), (name,))

    def _land(
        self,
        finished: tuple[str, ...],
        merged: Callable[[], dict[str, Any]],
        updates: tuple[Any, ...],
        outputs: Sequence[str],
    ) -> bool:
        """The end of a superstep (one step or several tasks): merge, route, write its one checkpoint, then a
        ``NodeOutput`` per task (``outputs``). False when the run ended (failed, or cancelled under the write lock)."""
        writer, spec = self.writer, self.spec
        try:
            state = merged()
            tasks, joins = spec.advance(finished, state, self.joins)
            stop = self._stop_after(finished, tasks)
            checkpoint = writer.commit(
                state,
                node=",".join(finished),
                next_nodes=names_of(tasks),
                source="loop",
                pending=pending_of(tasks, joins, stop),
            )
        except Exception as error:
            self.fail(error)
            return False
        if checkpoint is None and writer.saver is not None:
            return False  # cancelled under the write lock
        self.state = state
        self.next, self.joins, self.interrupt_at = tasks, joins, stop
        self.progress = {}
        if self.on_updates is not None:
            try:
                self.on_updates(updates)  # a subgraph's parent saving its progress: its write may fail
            except Exception as error:
                self.fail(error)
                return False
        view = MappingProxyType(state)
        checkpoint_id = checkpoint.id if checkpoint is not None else None
        return all(self._emit(NodeOutput(name, view, checkpoint_id=checkpoint_id)) for name in outputs)

    def _emit(self, output: RunOutput) -> bool:
        """Hand an output to the subscriber unless the run was cancelled; False when the run must stop."""
        self.emitting = True  # before the flags are read: see interrupt()
        if self.writer.cancelled:
            self._emitted()
            return False
        try:
            self.observer.on_next(output)
        except Exception as error:
            self.emitting = False
            self.subscriber_failed(error)
            return False
        self._emitted()
        return True

    def _emitted(self) -> None:
        self.emitting = False
        if self.pending is not None:
            self.deliver_pending()

    # -- the end -----------------------------------------------------------------------------------------------

    def _claim_end(self) -> bool:
        with self._end_lock:
            if self._ended:
                return False
            self._ended = True
            return True

    def _complete(self) -> None:
        self.disposed = True
        if not self._claim_end():
            return
        self._release()
        if self.on_final_state is not None:
            self.on_final_state(MappingProxyType(self.state))
        self.observer.on_completed()

    def _stop(self, stop: PendingInterrupt) -> None:
        """The run reached an ``interrupt_before`` / ``interrupt_after`` stop (its checkpoint is written): say so,
        and end as a completed run."""
        if self._emit(InterruptOutput(stop.node, MappingProxyType(self.state), stop)):
            self._complete()

    def interrupted(self, error: NodeInterrupt, index: int, node: str) -> None:
        """A node called ``interrupt(value)``: stop the superstep (its other branches are disposed), write the state
        before it with the interrupt pending, tell the subscriber, and end as a completed run."""
        resuming = self.resuming
        answered = resuming.resumes[: error.index] if resuming is not None and resuming.task == index else ()
        subgraph: Any = error.subgraph
        stop = PendingInterrupt(node, "inside", error.value, index, answered, subgraph)
        self.disposed = True
        if not self._claim_end():
            return
        group = self.group
        if group is not None:
            group.stop()
        elif self.step is not None:
            self.step.stopped = True
        self.current.dispose()
        writer = self.writer
        try:
            checkpoint = writer.commit(
                self.state,
                node=None,
                next_nodes=names_of(self.tasks),
                source="interrupt",
                pending=self._pending_now(stop),
            )
        except Exception as failure:
            self._begin_ending()
            try:
                self._record_failure(failure)
            finally:
                self._release()
            self.observer.on_error(failure)
            return
        if checkpoint is None and writer.saver is not None:
            self._end_abnormally()  # cancelled meanwhile: the turn is undone like any cancelled one
            return
        output = InterruptOutput(node, MappingProxyType(self.state), stop)
        try:
            if group is not None:
                group.emit(output)
            else:
                self.observer.on_next(output)
        except Exception as failure:
            self.subscriber_failed_after_end(failure)
            return
        self._release()
        if self.on_final_state is not None:
            self.on_final_state(MappingProxyType(self.state))
        self.observer.on_completed()

    def subscriber_failed_after_end(self, error: Exception) -> None:
        """The subscriber's ``on_next`` raised on the run's last output, after its end was claimed: undo the turn as
        for any subscriber failure, and tell it."""
        self.writer.mark_cancelled()
        self._end_abnormally()
        self.observer.on_error(error)

    def fail(self, error: Exception) -> None:
        """A node, the tail or the base read failed: end the run with ``error``, after the error policy's cleanup."""
        if isinstance(error, NodeInterrupt):
            self.interrupted(error, 0, task_node(self.tasks[0]) if self.tasks else START)
            return
        self.disposed = True
        if not self._claim_end():
            return
        self._begin_ending()
        try:
            self._record_failure(error)
        finally:
            self._release()
        self.observer.on_error(error)

    def cancel(self) -> None:
        """The subscriber is going away (wired with ``do_on_cancel``, before the upstream is disposed): from now
        on no step starts, no chunk is forwarded and no write lands."""
        self.writer.mark_cancelled()
        self.info.cancelled.set()
        self.disposed = True
        # Ending from now on, not only once do_finally starts the rewind: a second dispose on another thread returns
        # at once while this one still tears the upstream down, and what it starts next (a read, a run) must wait
        # for the rewind. The thread disposing now is the one that will rewind (do_finally runs after the dispose).
        if not self.ending:
            self.ending_thread = threading.get_ident()
            self.ending = True
        step = self.step
        if step is not None:
            step.stopped = True
        group = self.group
        if group is not None:
            group.stop()

    def _dispose(self) -> None:
        self.disposed = True
        self.current.dispose()

    def finished(self, signal: SignalType) -> None:
        """The whole pipeline has ended (wired with ``do_finally``, after the upstream dispose returned). On a
        cancel: undo the turn and free the thread — unless the run had ended another way already."""
        if signal is SignalType.CANCEL and self._claim_end():
            self._end_abnormally()

    def subscriber_failed(self, error: Exception) -> None:
        """The subscriber's ``on_next`` raised: the output did not get through, so the run stops as if cancelled
        (rewound under ``on_cancel="rewind"``), and the error goes to the subscriber's ``on_error``."""
        self.cancel()
        self.current.dispose()
        if self._claim_end():
            self._end_abnormally()
            self.observer.on_error(error)
        elif self.pending is not None:
            self.deliver_pending()

    def interrupt(self, by_run: str) -> None:
        """A newer run on this thread asked for it with ``multitask="interrupt"`` (called on that run's thread).

        The run is cancelled and rewound like a disposed one, then its subscriber gets ``RunInterruptedError``. The
        error must not overlap an output being handed over on another thread right now — without a lock per chunk:
        an emitter sets its ``busy``/``emitting`` flag *before* it reads the cancelled flags, and reads ``pending``
        *after* it clears the flag; here the cancelled flags and ``pending`` are set *before* the emitters' flags
        are read. So either this thread sees no emission in flight and delivers the error, or the emitter sees
        ``pending`` once it is done and delivers it; ``deliver_pending`` lets only one of them do it.
        """
        self.cancel()
        self.current.dispose()
        if not self._claim_end():
            return  # it is ending anyway; the newer run waits in line for its slot
        self._end_abnormally()
        thread_id = self.thread_id or ""
        self.pending = RunInterruptedError(
            f"run {self.run_id} on thread {thread_id!r} was interrupted by run {by_run} (multitask='interrupt'); "
            "its turn was rewound",
            thread_id=thread_id,
            run_id=self.run_id,
            by_run_id=by_run,
        )
        step = self.step
        if step is not None:
            step.pending = True
        group = self.group
        if group is not None:
            group.mark_pending()
        if not self.emitting and (step is None or not step.busy) and (group is None or not group.busy()):
            self.deliver_pending()

    def deliver_pending(self) -> None:
        with self._end_lock:
            error, self.pending = self.pending, None
        if error is None:
            return
        try:
            self.observer.on_error(error)
        except Exception:
            log.exception("the subscriber of run %s failed handling %s", self.run_id, type(error).__name__)

    def _begin_ending(self) -> None:
        self.ending_thread = threading.get_ident()
        self.ending = True
        if self._slots is not None:
            thread_id = self.thread_id
            assert thread_id is not None
            self._slots.ending(thread_id, self)

    def _end_abnormally(self) -> None:
        self._begin_ending()
        try:
            self._undo()
        finally:
            self._release()

    def _record_failure(self, error: Exception) -> None:
        """A failed run stops where it is (nothing more of it lands), then, as ``on_error`` says, rewinds the thread
        or keeps what it wrote — recording the error in the history either way."""
        writer = self.writer
        writer.mark_cancelled()
        self.info.cancelled.set()
        step = self.step
        if step is not None:
            step.stopped = True
        if self.group is not None:
            self.group.stop()
        self.current.dispose()  # a stream still running (the failure came from the tail, say) stops too
        if not writer.started:
            return  # it failed before it read the thread: nothing to undo or to record
        text = f"{type(error).__name__}: {error}"
        try:
            if self.spec.policy.on_error == "rewind":
                writer.rewind(error=text)
            else:
                # A resume (stream(None)) runs the failed superstep again, whole.
                writer.record_error(text, next_nodes=names_of(self.tasks), pending=self._pending_now())
        except CheckpointConflictError as conflict:
            log.info(
                "thread %r: run %s failed (%s); another writer moved the head to %s since, which stays",
                writer.thread_id,
                writer.run_id,
                text,
                conflict.actual_head,
            )
        except Exception:
            log.exception(
                "thread %r: run %s failed (%s) and recording that failed", writer.thread_id, writer.run_id, text
            )

    def _undo(self) -> None:
        """Put the thread back as the cancel policy says; runs after the whole upstream was torn down."""
        writer = self.writer
        if self.spec.policy.on_cancel == "keep":
            writer.close()
            return
        try:
            rewound = writer.rewind()
        except CheckpointConflictError as conflict:
            log.info(
                "thread %r: run %s was cancelled, but another writer moved the head to %s since; the rewind "
                "leaves that newer head alone",
                writer.thread_id,
                writer.run_id,
                conflict.actual_head,
            )
        except Exception:
            # Never mask the cancellation: the next turn's safe-head selection still protects the history.
            log.exception(
                "thread %r: run %s was cancelled and rewinding the thread to its pre-turn state failed",
                writer.thread_id,
                writer.run_id,
            )
        else:
            if rewound is not None:
                log.debug(
                    "thread %r: cancelled run %s rewound to %s", writer.thread_id, writer.run_id, rewound.parent_id
                )

    def _release(self) -> None:
        if self._slots is not None:
            thread_id = self.thread_id
            assert thread_id is not None
            self._slots.release(thread_id, self)


class _NoObserver(abc.ObserverBase[Any]):
    def on_next(self, value: Any) -> None:
        pass

    def on_error(self, error: Exception) -> None:
        pass

    def on_completed(self) -> None:
        pass


_NO_OBSERVER = _NoObserver()
