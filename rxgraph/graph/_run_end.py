"""The end of a run: the one way it ends, its cleanup, and what its subscriber is told.

::

                                 ┌───────────────────────────────┐
              subscribed ──────► │ running (holds the thread)    │
                                 └───────────────┬───────────────┘
           ┌──────────────┬───────────────┬──────┴───────┬─────────────────┬──────────────────┐
           ▼              ▼               ▼              ▼                 ▼                  ▼
       completed    stopped for a     failed         cancelled       subscriber failed     preempted
                       human
      last superstep  a node's         a node, the    dispose, take,   its on_next raised   a newer run took the
      landed, or an   interrupt():     tail or the    timeout, a                            thread (multitask=
      interrupt_      the state        base read      disconnect                            "interrupt")
      before/after    before its       raised
      stop            superstep, the
                      interrupt
                      pending
           │              │               │              │                 │                  │
           │              │         record: rewind   rewind (or keep,  as cancelled        as cancelled
           │              │         (or keep, with   per on_cancel)
           │              │         the error), per
           │              │         on_error
           ▼              ▼               ▼              ▼                 ▼                  ▼
      on_completed   InterruptOutput,  on_error(e)    nobody is told    on_error(e)      on_error(RunInterrupted-
                     on_completed                                                          Error)

Whatever happens, a run ends one way only: each way *claims* the end first (``RunEnd.claim``), and the ways that
come later do nothing. Every way stops the steps the same way (``stop_steps``: no step starts, no chunk is forwarded,
no write lands but the cleanup's), cleans up (the rewind, where the policy says; the thread's readers wait for it
meanwhile: the run is *ending*), frees the thread's slot, and only then tells the subscriber — so a subscriber that
starts the next turn from its ``on_completed`` or ``on_error`` finds the thread settled.

A cancel is two calls: ``cancel`` (wired with ``do_on_cancel``, before the upstream is disposed) stops the steps at
once, and ``finished`` (wired with ``do_finally``, after the whole upstream was disposed) rewinds — as the last writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from reactivex import abc
from reactivex.disposable import SerialDisposable

from .._log import log
from ..errors import CheckpointConflictError, NodeInterrupt, RunInterruptedError
from ..rx import SignalType
from ._admission import Admission
from ._interrupt import PendingInterrupt
from ._outputs import InterruptOutput, RunOutput
from ._run_info import RunInfo
from ._spec import GraphSpec
from ._steps import Step, Superstep
from ._transition import Position
from ._writer import ThreadWriter

if TYPE_CHECKING:
    from ..checkpoint._base import Checkpoint
    from ..otel._run_trace import Outcome, RunTrace

__all__ = ["EndHost", "RunEnd"]


class EndHost(Protocol):
    """What the end needs of its run (``Run``): its steps to stop, its thread to clean up, its subscriber to tell."""

    closed: bool
    ending: bool
    ending_thread: int | None

    @property
    def step(self) -> Step | None: ...

    @property
    def group(self) -> Superstep | None: ...

    @property
    def current(self) -> SerialDisposable: ...

    @property
    def observer(self) -> abc.ObserverBase[RunOutput]: ...

    @property
    def on_final_state(self) -> Callable[[Mapping[str, Any]], None] | None: ...

    @property
    def on_updates(self) -> Callable[[tuple[Any, ...]], None] | None: ...

    @property
    def trace(self) -> RunTrace | None: ...

    @property
    def at(self) -> Position: ...

    @property
    def answering(self) -> Mapping[int, PendingInterrupt]: ...

    @property
    def writer(self) -> ThreadWriter: ...

    @property
    def info(self) -> RunInfo: ...

    @property
    def admission(self) -> Admission | None: ...

    @property
    def spec(self) -> GraphSpec: ...

    @property
    def run_id(self) -> str: ...

    @property
    def thread_id(self) -> str | None: ...

    @property
    def emitting(self) -> bool: ...


class RunEnd:
    """The ways one run ends (see the module's diagram)."""

    __slots__ = ("_ended", "_lock", "late_error", "run")

    def __init__(self, run: EndHost) -> None:
        self.run = run
        self._lock = threading.Lock()
        self._ended = False  # the one way this run ended has been claimed
        self.late_error: Exception | None = None  # a terminal error another thread could not deliver (preempt)

    def claim(self) -> bool:
        """Claim the end for the way calling this; False when the run ended another way already."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
            return True

    def stop_steps(self, *, dispose: bool = True) -> None:
        """No step starts from now on, and the running ones drop what they still emit; their streams are disposed
        (``dispose``), unless the caller's upstream is about to dispose them anyway."""
        run = self.run
        run.closed = True
        step = run.step
        if step is not None:
            step.stopped = True
        if run.group is not None:
            run.group.stop()
        if dispose:
            run.current.dispose()

    # -- the ways -------------------------------------------------------------------------------------------------

    def complete(self) -> None:
        """The run is over: the last superstep landed, or the run reached a stop (its checkpoint is written)."""
        run = self.run
        run.closed = True
        if not self.claim():
            return
        self._release()
        self._traced("interrupted" if run.at.stop is not None else "completed")  # a stop: interrupt_before/after
        if run.on_final_state is not None:
            run.on_final_state(run.spec.schema.shown(MappingProxyType(run.at.state)))
        run.observer.on_completed()

    def stop_for_human(self, asked: Sequence[tuple[NodeInterrupt, int, str]]) -> None:
        """Tasks called ``interrupt(value)`` (``(error, task index, node)`` each): stop the superstep (a branch still
        running is disposed), write the state before it with the questions pending and the finished branches kept,
        tell the subscriber (an ``InterruptOutput`` per question, in task order), and end as a completed run."""
        run = self.run
        stops = [self._question(error, index, node) for error, index, node in sorted(asked, key=lambda a: a[1])]
        run.closed = True
        if not self.claim():
            return
        group = run.group
        self.stop_steps()
        writer = run.writer
        at = run.at.stopped_at(stops[0], tuple(stops[1:])).with_done(group.finished() if group is not None else {})
        try:
            checkpoint = writer.commit_position(at, node=None, source="interrupt")
        except Exception as failure:
            self._begin_ending()
            try:
                self._record_failure(failure)
            finally:
                self._release()
            self._traced("failed", failure)
            run.observer.on_error(failure)
            return
        if checkpoint is None and writer.saver is not None:
            self._end_abnormally()  # cancelled meanwhile: the turn is undone like any cancelled one
            return
        try:
            for stop in stops:
                output = InterruptOutput(stop.node, run.spec.schema.shown(MappingProxyType(run.at.state)), stop)
                if group is not None:
                    group.emit(output)
                else:
                    run.observer.on_next(output)
        except Exception as failure:
            run.writer.mark_cancelled()
            self._end_abnormally()
            run.observer.on_error(failure)
            return
        self._release()
        self._traced("interrupted")
        if run.on_final_state is not None:
            run.on_final_state(run.spec.schema.shown(MappingProxyType(run.at.state)))
        run.observer.on_completed()

    def _question(self, error: NodeInterrupt, index: int, node: str) -> PendingInterrupt:
        answering = self.run.answering.get(index)
        answered = answering.resumes[: error.index] if answering is not None else ()
        subgraph: Any = error.subgraph
        return PendingInterrupt(node, "inside", error.value, index, answered, subgraph)

    def node_failed(self, error: Exception, index: int, node: str, group: Superstep | None = None) -> None:
        """Task ``index`` (node ``node``) raised ``error`` (or its stream failed with it): the one way a node's error
        reaches the end — a ``NodeInterrupt`` stops the run for a human (in a parallel superstep, once its other
        branches have ended too: ``Superstep.branch_asked``), anything else fails it."""
        if not isinstance(error, NodeInterrupt):
            if self.run.trace is not None:
                self.run.trace.node_failed(index, error)
            self.fail(error)
        elif group is not None:
            group.branch_asked(index, node, error)
        else:
            self.stop_for_human([(error, index, node)])

    def fail(self, error: Exception) -> None:
        """A node, the tail or the base read failed: end the run with ``error``, after the error policy's cleanup."""
        run = self.run
        run.closed = True
        if not self.claim():
            return
        self._begin_ending()
        try:
            self._record_failure(error)
        finally:
            self._release()
        self._traced("failed", error)
        run.observer.on_error(error)

    def cancel(self) -> None:
        """The subscriber is going away (wired with ``do_on_cancel``, before the upstream is disposed): from now
        on no step starts, no chunk is forwarded and no write lands."""
        run = self.run
        run.writer.mark_cancelled()
        run.info.set_cancelled()
        # Ending from now on, not only once do_finally starts the rewind: a second dispose on another thread returns
        # at once while this one still tears the upstream down, and what it starts next (a read, a run) must wait
        # for the rewind. The thread disposing now is the one that will rewind (do_finally runs after the dispose).
        if not run.ending:
            run.ending_thread = threading.get_ident()
            run.ending = True
        self.stop_steps(dispose=False)

    def finished(self, signal: SignalType) -> None:
        """The whole pipeline has ended (wired with ``do_finally``, after the upstream dispose returned). On a
        cancel: undo the turn and free the thread — unless the run had ended another way already."""
        if signal is SignalType.CANCEL and self.claim():
            self._end_abnormally()

    def subscriber_failed(self, error: Exception) -> None:
        """The subscriber's ``on_next`` raised: the output did not get through, so the run stops as if cancelled
        (rewound under ``on_cancel="rewind"``), and the error goes to the subscriber's ``on_error``."""
        self.cancel()
        self.run.current.dispose()
        if self.claim():
            self._end_abnormally()
            self.run.observer.on_error(error)
        elif self.late_error is not None:
            self.deliver_late_error()

    def preempt(self, by_run: str) -> None:
        """A newer run on this thread asked for it with ``multitask="interrupt"`` (called on that run's thread).

        The run is cancelled and rewound like a disposed one, then its subscriber gets ``RunInterruptedError``. The
        error must not overlap an output being handed over on another thread right now — without a lock per chunk:
        an emitter sets its ``busy``/``emitting`` flag *before* it reads the cancelled flags, and reads
        ``late_error`` *after* it clears the flag; here the cancelled flags and ``late_error`` are set *before* the
        emitters' flags are read. So either this thread sees no emission in flight and delivers the error, or the
        emitter sees ``late_error`` once it is done and delivers it; ``deliver_late_error`` lets only one of them.
        """
        run = self.run
        self.cancel()
        run.current.dispose()
        if not self.claim():
            return  # it is ending anyway; the newer run waits in line for its slot
        self._end_abnormally(interrupted_by=by_run)
        thread_id = run.thread_id or ""
        self.late_error = RunInterruptedError(
            f"run {run.run_id} on thread {thread_id!r} was interrupted by run {by_run} (multitask='interrupt'); "
            "its turn was rewound",
            thread_id=thread_id,
            run_id=run.run_id,
            by_run_id=by_run,
        )
        step, group = run.step, run.group
        if step is not None:
            step.late_error = True
        if group is not None:
            group.owe_late_error()
        if (
            not run.emitting
            and (step is None or not (step.busy or step.writing))
            and (group is None or not group.busy())
        ):
            self.deliver_late_error()

    def deliver_late_error(self) -> None:
        """Tell the subscriber the error a preempting run left, once (see ``preempt``)."""
        with self._lock:
            error, self.late_error = self.late_error, None
        if error is None:
            return
        try:
            self.run.observer.on_error(error)
        except Exception:
            log.exception("the subscriber of run %s failed handling %s", self.run.run_id, type(error).__name__)

    # -- cleaning up ----------------------------------------------------------------------------------------------

    def _begin_ending(self) -> None:
        run = self.run
        run.ending_thread = threading.get_ident()
        run.ending = True
        if run.admission is not None:
            run.admission.ending()

    def _release(self) -> None:
        if self.run.admission is not None:
            self.run.admission.release()

    def _end_abnormally(self, *, interrupted_by: str | None = None) -> None:
        """Cancelled (or as cancelled): undo the turn as the policy says, free the thread, close the trace."""
        self._begin_ending()
        try:
            self._undo(interrupted_by)
        finally:
            self._release()
        trace = self.run.trace
        if trace is not None:
            if interrupted_by is not None:
                trace.ended("cancelled", None, **{"rxgraph.interrupted_by": interrupted_by})
            else:
                trace.ended("cancelled")

    def _traced(self, outcome: Outcome, error: Exception | None = None) -> None:
        """The run's trace ends ``outcome`` (before its subscriber is told: the subscriber sees its spans ended)."""
        trace = self.run.trace
        if trace is not None:
            trace.ended(outcome, error)

    def _rewind(self, error: str | None = None) -> Checkpoint | None:
        """``writer.rewind``, and the trace's ``rxgraph.rewind`` event when it wrote a new head."""
        writer, trace = self.run.writer, self.run.trace
        if trace is None:
            return writer.rewind(error=error)
        left = writer.head.id if writer.head is not None else None
        started = time.perf_counter()
        rewound = writer.rewind(error=error)
        if rewound is not None:
            seconds = time.perf_counter() - started
            trace.rewound(to=rewound.parent_id, left=left, head=rewound.id, seconds=seconds)
        return rewound

    def _logs(self) -> bool:
        """Whether this run's end is logged: a run of its own (a subgraph's run is its parent's to log)."""
        return self.run.on_updates is None and log.isEnabledFor(logging.INFO)

    def _record_failure(self, error: Exception) -> None:
        """A failed run stops where it is (nothing more of it lands), then, as ``on_error`` says, rewinds the thread
        or keeps what it wrote — recording the error in the history either way. Logged at INFO: where the thread
        now stands."""
        run = self.run
        writer = run.writer
        writer.mark_cancelled()
        run.info.set_cancelled()
        self.stop_steps()  # a stream still running (the failure came from the tail, say) stops too
        text = f"{type(error).__name__}: {error}"
        if not writer.started:  # it failed before it read the thread: nothing to undo or to record
            if self._logs():
                if writer.thread_id is None or writer.saver is None:
                    log.info("run %s failed (%s); it keeps no thread", writer.run_id, text)
                else:
                    log.info(
                        "thread %r: run %s failed before it read the thread (%s); the thread is unchanged",
                        writer.thread_id,
                        writer.run_id,
                        text,
                    )
            return
        try:
            if run.spec.policy.on_error == "rewind":
                rewound = self._rewind(error=text)
                if rewound is not None and self._logs():
                    log.info(
                        "thread %r: run %s failed (%s) and was rewound to %s; its head is now checkpoint %s "
                        "(seq %d), which records the error",
                        writer.thread_id,
                        writer.run_id,
                        text,
                        _checkpoint(rewound.parent_id),
                        rewound.id,
                        rewound.seq,
                    )
            else:
                # A resume (stream(None)) runs the failed superstep again, but the branches that had finished.
                at = run.at.with_done(run.group.finished() if run.group is not None else {})
                kept = writer.record_error(text, next_nodes=at.next_nodes, pending=at.pending())
                if kept is not None and self._logs():
                    log.info(
                        "thread %r: run %s failed (%s); what it wrote is kept (on_error='keep'): its head is now "
                        "checkpoint %s (seq %d), which records the error, and a resume goes on from %s",
                        writer.thread_id,
                        writer.run_id,
                        text,
                        kept.id,
                        kept.seq,
                        ", ".join(kept.next) or "nowhere",
                    )
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

    def _undo(self, interrupted_by: str | None = None) -> None:
        """Put the thread back as the cancel policy says; runs after the whole upstream was torn down. Logged at
        INFO (for a run with a thread): where the thread now stands."""
        writer = self.run.writer
        how = f"interrupted by run {interrupted_by}" if interrupted_by is not None else "cancelled"
        if self.run.spec.policy.on_cancel == "keep":
            writer.close()
            if writer.saver is not None and self._logs():
                log.info(
                    "thread %r: run %s was %s; what it wrote is kept (on_cancel='keep'): its head is %s",
                    writer.thread_id,
                    writer.run_id,
                    how,
                    _checkpoint(writer.head.id if writer.head is not None else None),
                )
            return
        try:
            rewound = self._rewind()
        except CheckpointConflictError as conflict:
            log.info(
                "thread %r: run %s was %s, but another writer moved the head to %s since; the rewind "
                "leaves that newer head alone",
                writer.thread_id,
                writer.run_id,
                how,
                conflict.actual_head,
            )
        except Exception:
            # Never mask the cancellation: the next turn's safe-head selection still protects the history.
            log.exception(
                "thread %r: run %s was %s and rewinding the thread to its pre-turn state failed",
                writer.thread_id,
                writer.run_id,
                how,
            )
        else:
            if writer.saver is None or not self._logs():
                return
            if rewound is not None:
                log.info(
                    "thread %r: run %s was %s and rewound to %s; its head is now checkpoint %s (seq %d)",
                    writer.thread_id,
                    writer.run_id,
                    how,
                    _checkpoint(rewound.parent_id),
                    rewound.id,
                    rewound.seq,
                )
            elif writer.started:
                log.info(
                    "thread %r: run %s was %s before it wrote anything; its head stays %s",
                    writer.thread_id,
                    writer.run_id,
                    how,
                    _checkpoint(writer.head.id if writer.head is not None else None),
                )
            else:
                log.info(
                    "thread %r: run %s was %s before it started; the thread is unchanged",
                    writer.thread_id,
                    writer.run_id,
                    how,
                )


def _checkpoint(checkpoint_id: str | None) -> str:
    return f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "its empty start (no checkpoint)"
