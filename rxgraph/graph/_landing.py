"""``Landing``: the tail of a run's superstep — the next position made (``_transition``), its checkpoint written
(guarded by the writer), the outputs handed to the subscriber — and every output a run emits.

Two ways in, one landing: ``land`` for any superstep (one step or several tasks, through ``after_superstep``), and
``step`` for the commonest one, a node the run called directly that returned a plain update (through
``after_step``), which skips what that case does not need. ``tests/graph/test_differential.py`` and the explorer's
tests run both ways (the ``step_path`` fixture) against the same expectations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from reactivex import abc

from ._interrupt import PendingInterrupt
from ._outputs import InterruptOutput, NodeOutput, RunOutput, node_update
from ._transition import Position, after_step, after_superstep, plain_update

if TYPE_CHECKING:
    from ..checkpoint._base import Checkpoint
    from ..otel._run_trace import RunTrace
    from ._run_end import RunEnd
    from ._spec import GraphSpec
    from ._writer import ThreadWriter

__all__ = ["Landed", "Landing"]

_new = object.__new__


class Landed(Protocol):
    """What a landing needs of its run (``Run``): where it stands (which the landing moves on), what it writes with,
    where outputs go, how it ends."""

    at: Position
    emitting: bool

    @property
    def quiet(self) -> bool: ...

    @property
    def spec(self) -> GraphSpec: ...

    @property
    def writer(self) -> ThreadWriter: ...

    @property
    def closed(self) -> bool: ...

    @property
    def on_updates(self) -> Callable[[tuple[Any, ...]], None] | None: ...

    @property
    def trace(self) -> RunTrace | None: ...

    @property
    def traces_nodes(self) -> bool: ...

    @property
    def end(self) -> RunEnd: ...

    @property
    def observer(self) -> abc.ObserverBase[RunOutput]: ...


class Landing:
    """Lands the supersteps of one run and emits its outputs. Every method returns False when the run ended (failed,
    or cancelled: then nothing is written or emitted any more) and must not go on."""

    __slots__ = ("plain", "run")

    def __init__(self, run: Landed) -> None:
        self.run = run
        # Whether its outputs are the plain ones: it tells no parent, shows the whole state and its nodes are not
        # traced.
        self.plain = run.on_updates is None and run.spec.schema.output_keys is None and not run.traces_nodes

    def step(self, name: str, update: dict[str, Any] | None, view: Mapping[str, Any]) -> bool:
        """Land a direct step: node ``name`` returned ``update`` (a dict, or None) for the state ``view`` shows. What
        ``land(((name, (update,)),), (update,))`` does, its position made by ``after_step``; an empty update keeps
        the state, and its outputs show it through ``view``."""
        run = self.run
        writer = run.writer
        if run.closed or writer.cancelled:
            return False
        saver = writer.saver
        try:
            at = after_step(run.spec, run.at, name, update)
            checkpoint = writer.commit_position(at, node=name, source="loop") if saver is not None else None
        except Exception as error:
            run.end.fail(error)
            return False
        if not self.plain:
            return self._landed(at, checkpoint, ((name, (update,)),), (update,))
        # What _landed does for a plain run.
        if checkpoint is None and saver is not None:
            return False  # cancelled under the write lock
        run.at = at
        if run.quiet:
            return not writer.cancelled  # where emit would have stopped
        # NodeOutput(name, view, checkpoint_id=..., update=update), its four stores without the Python __init__.
        output = _new(NodeOutput)
        output._node, output._update = name, update
        output._state = view if not update else MappingProxyType(at.state)  # (no update: after_step kept the state)
        output._checkpoint_id = checkpoint.id if checkpoint is not None else None
        return self.emit(output)

    def land(self, finished: Sequence[tuple[str, Sequence[Any]]], updates: tuple[Any, ...]) -> bool:
        """The end of a superstep (one step or several tasks; ``finished``: each task's node and updates, in task
        order): move to the next position, write its checkpoint, then a ``NodeOutput`` per task."""
        run = self.run
        try:
            at = after_superstep(run.spec, run.at, finished)
            node = finished[0][0] if len(finished) == 1 else ",".join(dict.fromkeys(name for name, _ in finished))
            checkpoint = run.writer.commit_position(at, node=node, source="loop")
        except Exception as error:
            run.end.fail(error)
            return False
        return self._landed(at, checkpoint, finished, updates)

    def _landed(
        self,
        at: Position,
        checkpoint: Checkpoint | None,
        finished: Sequence[tuple[str, Sequence[Any]]],
        updates: tuple[Any, ...],
    ) -> bool:
        """The next position ``at`` was made and written (``checkpoint``, None without a saver or when cancelled
        under the write lock): take it, tell a subgraph's parent, emit a ``NodeOutput`` per task."""
        run = self.run
        if checkpoint is None and run.writer.saver is not None:
            return False  # cancelled under the write lock
        if run.trace is not None:
            run.trace.landed(checkpoint.id if checkpoint is not None else None)
        run.at = at
        if run.on_updates is not None:
            try:
                # A subgraph's parent saving its progress (its write may fail); a Command's goto stays inside.
                run.on_updates(tuple(plain_update(update) for update in updates))
            except Exception as error:
                run.end.fail(error)
                return False
        if run.quiet:
            return not run.writer.cancelled  # where emit would have stopped
        schema = run.spec.schema
        checkpoint_id = checkpoint.id if checkpoint is not None else None
        if schema.output_keys is None:  # the outputs show the whole state: nothing to leave out
            view = MappingProxyType(at.state)
            if len(finished) == 1:
                name, done = finished[0]
                return self.emit(NodeOutput(name, view, checkpoint_id=checkpoint_id, update=node_update(done)))
            return all(
                self.emit(NodeOutput(n, view, checkpoint_id=checkpoint_id, update=node_update(u))) for n, u in finished
            )
        shown = schema.shown(MappingProxyType(at.state))
        return all(
            self.emit(NodeOutput(n, shown, checkpoint_id=checkpoint_id, update=schema.shown_update(node_update(u))))
            for n, u in finished
        )

    def stop(self, stop: PendingInterrupt) -> None:
        """The run reached an ``interrupt_before`` / ``interrupt_after`` stop (its checkpoint is written): say so,
        and end as a completed run."""
        run = self.run
        if self.emit(InterruptOutput(stop.node, run.spec.schema.shown(MappingProxyType(run.at.state)), stop)):
            run.end.complete()

    def emit(self, output: RunOutput) -> bool:
        """Hand an output to the subscriber unless the run was cancelled; False when the run must stop."""
        run = self.run
        run.emitting = True  # before the flags are read: see RunEnd.preempt
        if run.writer.cancelled:
            self._emitted()
            return False
        try:
            run.observer.on_next(output)
        except Exception as error:
            run.emitting = False
            run.end.subscriber_failed(error)
            return False
        run.emitting = False  # _emitted(), inlined: once per output
        if run.end.late_error is not None:
            run.end.deliver_late_error()
        return True

    def _emitted(self) -> None:
        run = self.run
        run.emitting = False
        if run.end.late_error is not None:
            run.end.deliver_late_error()
