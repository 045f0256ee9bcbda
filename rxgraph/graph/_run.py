"""The per-subscription run: waits for its thread, reads its base, merges the input, then runs superstep after
superstep.

Life of a run::

    subscribe   claim the thread's slot (``_admission``) or wait in line, per ``multitask``; schedule the start on
                the run's scheduler or on this thread's trampoline (``_hops``), and return: nothing has run and
                nothing was read yet
    start       choose the base (``choose_base``, now), take its position (``_start``): new input is merged and
                routed from START (``after_input``), no input takes up its pending work (``after_resume``); write
                the input checkpoint (``ThreadWriter``)
    drive       superstep after superstep, in a loop: call the action (``_steps``); an update goes straight to the
                tail; an Observable is subscribed, its chunks forwarded, and its completion runs the tail
    tail        land the superstep (``after_superstep``: merge, route), write its checkpoint (guarded), emit a
                NodeOutput per task, go on
    end         exactly one way (``_run_end``, with its diagram): completed, stopped for a human, failed, cancelled,
                subscriber failed, preempted

The run decides *when* to move; ``_transition`` decides *what* it moves to, and every checkpoint the run writes is a
``Position`` from there.

Cancellation points — where a run notices it was cancelled:

- before every step: the drive loop checks the run's ``closed`` flag, so an operator that stops early (``take``,
  ``first``, ``take_while``, ``take_until``, a dispose from ``on_next``) stops the run at the next step boundary;
- every chunk: once cancelled, a step drops what its stream still emits, and the stream is disposed;
- at the tail: before the merge, and again under the run's write lock right before the checkpoint write
  (``ThreadWriter.commit``), so no write lands once the rewind has begun;
- after the write, right before the ``NodeOutput`` is emitted.

Steps are driven by a loop, not by recursion: a node that completes synchronously hands back to the loop, and a
node that completes later (a timer, another thread) restarts the loop from its completion (``Hops.drive_on``). A
graph looping ten thousand times uses a constant amount of stack.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from reactivex import abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from ..errors import GraphRecursionError
from ..otel._active import telemetry
from ..rx._awaitable import background_loop, from_awaitable, loop_of_scheduler
from ..rx._subscribe import subscribe_source
from ._admission import Admission
from ._config import RunnableConfig
from ._edges import task_node
from ._hops import Hops
from ._interrupt import (
    NO_CALL,
    CallScope,
    Command,
    DirectCalls,
    PendingInterrupt,
    call_finished,
    enter_scope,
    leave_scope,
    scoped,
)
from ._landing import Landing
from ._node import LATER, UPDATE, NodeSpec, classify
from ._outputs import RunOutput
from ._run_end import RunEnd
from ._run_info import RunInfo, for_call
from ._slots import slots_for
from ._spec import GraphSpec
from ._start import take_position
from ._steps import COMPLETED_WHILE_SUBSCRIBING, SUBSCRIBING, WAITING, LateResult, Step, Superstep, called_on
from ._transition import (
    Position,
)
from ._writer import ThreadWriter

if TYPE_CHECKING:
    from ..otel._run_trace import RunTrace

__all__ = ["Run"]

_NO_ANSWERS: Mapping[int, PendingInterrupt] = MappingProxyType({})

DIRECT_STEPS = True
"""Whether a run takes the direct step (``Run._drive``) for the supersteps it fits. Always on; the tests turn it off
to check the general path gives the same runs."""


class Run:
    """One run of a compiled graph for one subscriber, from its subscription to its end. Created per subscription
    by ``CompiledGraph.stream``, which wires ``end.cancel`` with ``do_on_cancel`` and ``end.finished`` with
    ``do_finally``. It is its thread slot's holder (``SlotHolder``)."""

    __slots__ = (
        "_progress_lock",
        "admission",
        "answering",
        "at",
        "closed",
        "config",
        "current",
        "emitting",
        "end",
        "ending",
        "ending_thread",
        "group",
        "hops",
        "info",
        "input",
        "landing",
        "observer",
        "on_final_state",
        "on_updates",
        "quiet",
        "resume",
        "scheduler",
        "spec",
        "step",
        "steps",
        "trace",
        "traces_nodes",
        "writer",
    )

    def __init__(
        self,
        spec: GraphSpec,
        input: Mapping[str, Any] | Command[Any] | None,
        config: RunnableConfig,
        on_final_state: Callable[[Mapping[str, Any]], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        on_updates: Callable[[tuple[Any, ...]], None] | None = None,
        *,
        quiet: bool = False,
    ) -> None:
        """``config.scheduler`` is the run's scheduler (the caller put the subscriber's there when the config had
        none); ``on_final_state`` is called with the final state right before ``on_completed``; ``loop`` is the
        event loop the run was subscribed from, if any (where its coroutines are awaited). A ``quiet`` run emits no
        ``NodeOutput`` (its subscriber takes the final state and the stops only: ``invoke``, ``ainvoke``); it stops
        where a run that emits them would stop."""
        self.quiet = quiet
        self.spec = spec
        self.resume: Command[Any] | None = input if isinstance(input, Command) else None
        self.input = None if self.resume is not None else input
        self.config = config
        self.scheduler = config.scheduler
        self.on_final_state = on_final_state
        self.on_updates = on_updates  # told each step's updates before its NodeOutput (a subgraph's parent is)
        self.writer = ThreadWriter(config.thread_id, spec.checkpointer, spec.messages_key, run_id=config.run_id)
        self.info = RunInfo(
            thread_id=config.thread_id,
            run_id=self.writer.run_id,
            context=config.context,
            loop_of=lambda: loop or loop_of_scheduler(config.scheduler) or background_loop(),
        )
        self.observer: abc.ObserverBase[RunOutput] = _NO_OBSERVER
        self.closed = False  # no step may start any more: the run ended (any way), or is being cancelled
        # Where the run stands: between supersteps, or the position the running superstep started from.
        self.at = Position(MappingProxyType({}))
        self.answering: Mapping[int, PendingInterrupt] = _NO_ANSWERS  # the interrupts inside nodes it answers
        self.steps = 0
        self.step: Step | None = None
        self.group: Superstep | None = None  # the parallel superstep running now, if one
        self._progress_lock = threading.Lock()
        self.current = SerialDisposable()  # the running step's stream
        self.ending = False  # ended abnormally and cleaning up (rewinding); readers of the thread wait for it
        self.ending_thread: int | None = None
        self.emitting = False  # an output is being handed to the subscriber right now
        self.hops = Hops(self, self.scheduler)
        self.end = RunEnd(self)
        # Traced from its subscription (now): its span's parent is the span current here, the subscriber's. A
        # subgraph's run (told its updates) is traced inside its node's span, and counted with its parent.
        reporting = telemetry()
        self.trace: RunTrace | None = (
            reporting.start_run(
                run_id=self.writer.run_id,
                thread_id=config.thread_id if on_updates is None else None,
                inner=on_updates is not None,
            )
            if reporting is not None
            else None
        )
        # Whether its node calls are traced, each in its span (not under a tracer that makes no spans: measured only).
        self.traces_nodes = self.trace is not None and self.trace.spans
        self.landing = Landing(self)  # (once the trace is there)
        saver, thread_id = self.writer.saver, self.writer.thread_id
        self.admission = (
            Admission(self, slots_for(saver), thread_id, config.multitask or spec.policy.multitask, self.trace)
            if saver is not None and thread_id is not None
            else None
        )

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
        if self.admission is None:
            self.granted()
        else:
            self.admission.claim()
        return Disposable(self._dispose)

    def granted(self) -> None:
        """The thread's slot is this run's (at once, or passed to it while it waited): start it."""
        if self.trace is not None and self.admission is not None:
            self.trace.slot_granted()
        self.hops.schedule(self._start)

    def refused(self, error: Exception) -> None:
        """It waited for the thread and gets no slot (see ``SlotHolder.refused``): fail with ``error``."""
        self.hops.schedule(functools.partial(self.end.fail, error))

    def preempt(self, by_run: str) -> None:
        """A newer run takes the thread (``multitask="interrupt"``): see ``RunEnd.preempt``."""
        self.end.preempt(by_run)

    def _dispose(self) -> None:
        self.closed = True
        self.current.dispose()

    # -- the start ---------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self.hops.here()
        try:
            take_position(self)
        except Exception as error:
            self.end.fail(error)
            return
        self._drive()

    # -- stepping ----------------------------------------------------------------------------------------------

    def _call(self, node: NodeSpec, state_view: Any, index: int, step: Step | None) -> Any:
        """Call a node's action inside its scope: the answers to its ``interrupt()`` calls when this run resumes it,
        the inner state a subgraph node goes on with, and where a subgraph saves its progress."""
        answering = self.answering.get(index) if self.answering is not _NO_ANSWERS else None
        if answering is not None and answering.node == node.name:
            resumes, inner = answering.resumes, answering.subgraph
        else:
            resumes, inner = (), self.at.progress.get(index)
        save = functools.partial(self.save_progress, index, node.name) if node.subgraph else None
        call = CallScope(resumes, inner, save) if resumes or inner is not None or save is not None else NO_CALL
        token = enter_scope(call)
        trace = self.trace
        traced = trace.enter(index) if trace is not None else None  # the node's span is current in its call
        try:
            info = self.info if node.run_info is None or step is None else for_call(self.info, step.on_write)
            result = scoped(node.call(state_view, self.config, info), call, node.name)
            if result is None or type(result) is dict:
                call_finished()  # as a direct step's call (see DirectCalls): nothing of the node goes on
            return result
        finally:
            if trace is not None:
                trace.leave(traced)
            leave_scope(token)

    def save_progress(self, index: int, node: str, inner_node: str, inner: Mapping[str, Any]) -> None:
        """A subgraph node (task ``index``) finished an inner step: write the parent's state as it was, with the
        inner state in its pending work, under the namespace ``node/inner_node`` — so that a resume after a crash
        goes on inside the subgraph, and a cancel rewinds it with the parent's turn."""
        with self._progress_lock:
            self.at = self.at.with_progress(index, inner)
            self.writer.commit_position(self.at, node=f"{node}/{inner_node}", source="loop")

    def _drive(self) -> None:
        """Run supersteps until one has to wait for an asynchronous completion, or the run ended."""
        nodes, limit, landing = self.spec.nodes, self.config.recursion_limit, self.landing
        direct_steps = DIRECT_STEPS and not self.traces_nodes  # a traced node is called in its span
        calls = DirectCalls()  # the interrupt() scope of this stretch's direct steps
        try:
            self._drive_with(calls, nodes, limit, landing, direct_steps)
        finally:
            calls.close()

    def _drive_with(
        self, calls: DirectCalls, nodes: Mapping[str, NodeSpec], limit: int, landing: Landing, direct_steps: bool
    ) -> None:
        while not self.closed:
            at = self.at
            if at.stop is not None:
                self.landing.stop(at.stop)
                return
            tasks = at.tasks
            if not tasks:
                self.end.complete()
                return
            if self.steps >= limit:
                self.end.fail(_too_many_steps(self, task_node(tasks[0])))
                return
            self.steps += 1
            if len(tasks) != 1 or type(tasks[0]) is not str:
                # Several tasks (or a Send): a parallel superstep.
                if not self._superstep(tasks):
                    return
                continue
            node = nodes[tasks[0]]
            state_view = MappingProxyType(at.state)
            if direct_steps and node.direct and self.answering is _NO_ANSWERS and not at.progress:
                # The direct step (chosen once per superstep): a plain node this run answers nothing in, called as it
                # is; a plain update (a dict, or None) lands with ``after_step``. What else it returns goes on below,
                # as the general path's ``open_step`` would have classified it.
                self.step = step = None
                kind: object
                try:
                    view = state_view if node.reads is None else node.reads(state_view)
                    result = calls.call(node.name, node.action, view, self.config if node.takes_config else None)
                    if result is None or type(result) is dict:
                        kind = None
                    else:
                        kind = classify(node.name, result)
                        if kind is LATER:
                            result = from_awaitable(result, self.info.loop)
                except Exception as error:
                    self.end.node_failed(error, 0, node.name)
                    return
                if kind is None:
                    if not landing.step(node.name, result, state_view):
                        return
                    continue
            else:
                step = self.step = Step(self, node, state_view) if node.run_info is not None else None  # it may write
                try:
                    kind, result = self.open_step(node, state_view, 0, step)
                except Exception as error:
                    self.end.node_failed(error, 0, node.name)
                    return
            if kind is UPDATE:
                # The zero-chunk case of the same step: straight to the tail (once its call's writes ended).
                if (step is not None and not step.end_writes()) or not self._tail(node, (result,)):
                    return
                continue
            step = self.step = step or Step(self, node, state_view)
            if self.closed:
                return  # cancelled while the action ran; cancel() may have missed this step, so do not start it
            # An error while subscribing reaches step.on_error (so the run fails) and the loop stops below.
            self.current.disposable = self.subscribe_step(step, result, late=kind is LATER)
            with step.lock:
                if step.phase != COMPLETED_WHILE_SUBSCRIBING:
                    step.phase = WAITING
                    return  # its completion, when it comes, runs the tail and drives on
            if not self._tail_of_stream(step):
                return

    def open_step(self, node: NodeSpec, state_view: Any, index: int, step: Step | None) -> tuple[object, Any]:
        """Call task ``index``'s node (or have it called on its scheduler): ``(UPDATE, update)`` for an update
        returned at once, ``(STREAM, observable)`` for a chunk stream, ``(LATER, observable)`` for a result that
        comes later (an action on the node's scheduler, a coroutine), which ``LateResult`` resolves. ``step`` (made
        before the call for a node that declares ``RunInfo``) takes its call's writes.

        Raises:
            Exception: what the action raised; the ``NodeInterrupt`` it returned; ``InvalidUpdateError`` for a
                result that is none of those.
        """
        if self.trace is not None:
            self.trace.node_started(node.name, index, self.steps)
        if node.scheduler is not None:
            # Blocking work: the action is called on the node's scheduler, and its result comes back later.
            return LATER, called_on(node.scheduler, functools.partial(self._call, node, state_view, index, step))
        result = self._call(node, state_view, index, step)
        kind = classify(node.name, result)
        return (LATER, from_awaitable(result, self.info.loop)) if kind is LATER else (kind, result)

    def subscribe_step(self, step: Step, source: Any, *, late: bool) -> abc.DisposableBase:
        """Subscribe ``step`` to its node's stream (through ``LateResult`` for a result that comes later)."""
        trace = self.trace
        # Subscribed inside the node's span: a model call, a tool or a subgraph's run it starts is its child.
        token = trace.enter(step.index) if trace is not None else None
        try:
            if not late:
                return subscribe_source(source, step.on_next, step.on_error, step.on_completed, self.scheduler)
            resolver = LateResult(self, step)
            return CompositeDisposable(
                subscribe_source(source, resolver.on_next, step.on_error, resolver.on_completed, None), resolver.inner
            )
        finally:
            if trace is not None:
                trace.leave(token)

    def _superstep(self, tasks: tuple[Any, ...]) -> bool:
        """Start every task of a parallel superstep; True when all of them finished synchronously and the drive
        loop goes on (their tail ran), False when the run waits for them (or ended)."""
        group = self.group = Superstep(self, tasks)
        self.step = None
        self.current.disposable = group.disposables
        group.pump()
        with group.lock:
            if group.phase != COMPLETED_WHILE_SUBSCRIBING:
                group.phase = WAITING
                return False
        return self._superstep_tail(group)

    def superstep_completed(self, group: Superstep) -> None:
        """Every branch of a superstep that had to wait finished (called on the thread of the last one)."""
        self.hops.on_run_thread(functools.partial(self._after, self._superstep_tail, group))

    def _superstep_tail(self, group: Superstep) -> bool:
        """Land the superstep: its branches' updates merged in task order, one checkpoint, a NodeOutput per task."""
        if self.closed or self.writer.cancelled:
            return False
        if group.asked:  # some branches called interrupt(): the superstep stops for them all
            self.end.stop_for_human([(error, index, node) for index, (node, error) in group.asked.items()])
            return False
        finished = [(task_node(task), updates or ()) for task, updates in zip(group.tasks, group.results, strict=True)]
        self.group = None
        return self.landing.land(finished, tuple(update for _, updates in finished for update in updates))

    def step_completed(self, step: Step) -> None:
        """A step's stream completed (on whatever thread it completed on)."""
        if step.group is not None:
            step.group.branch_done(step)
            return
        with step.lock:
            if step.phase == SUBSCRIBING:
                # Completed synchronously inside subscribe(): the loop in _drive takes it from here, which keeps
                # the stack flat however many synchronous steps follow each other.
                step.phase = COMPLETED_WHILE_SUBSCRIBING
                return
        self.hops.on_run_thread(functools.partial(self._after, self._tail_of_stream, step))

    def _after(self, tail: Callable[[Any], bool], finished: Any) -> None:
        """Run the tail of what finished, then drive on (unless the run ended)."""
        if tail(finished):
            self.hops.drive_on(self._drive)

    def _tail_of_stream(self, step: Step) -> bool:
        if self.closed:  # the tail is subscribed only while the run is
            return False
        try:
            updates = step.result()
        except Exception as error:
            self.end.fail(error)
            return False
        return self._tail(step.node, updates)

    def _tail(self, node: NodeSpec, updates: Any) -> bool:
        """Land a one-node superstep. Returns False when the run ended (cancelled, failed) and must not go on."""
        if self.closed or self.writer.cancelled:
            return False
        return self.landing.land(((node.name, updates),), tuple(updates))


def _too_many_steps(run: Run, name: str) -> GraphRecursionError:
    limit = run.config.recursion_limit
    return GraphRecursionError(
        f"run {run.run_id} (thread {run.thread_id!r}) reached recursion_limit={limit} steps before END; the next "
        f"node would be {name!r}. Raise RunnableConfig.recursion_limit if the graph is meant to loop this often.",
        limit=limit,
        next_node=name,
        run_id=run.run_id,
        thread_id=run.thread_id,
    )


class _NoObserver(abc.ObserverBase[Any]):
    def on_next(self, value: Any) -> None:
        pass

    def on_error(self, error: Exception) -> None:
        pass

    def on_completed(self) -> None:
        pass


_NO_OBSERVER = _NoObserver()
