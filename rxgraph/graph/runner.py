"""The per-subscription run: reads its base, merges the input, then runs node after node.

One step is "call the node's action, forward its chunks, then run the tail" — the tail being the merge of the
node's update, the checkpoint write, the ``NodeOutput`` and the routing. This module keeps exactly the semantics of
``action(...).map(StreamingOutput) ++ defer(tail)`` — the tail runs only after the chunk stream completed, and only
while the run is still subscribed — with one small purpose-built observer per step instead of a chain of generic
operators (each of which would cost a subscription and a hop per chunk).

Steps are driven by a loop, not by recursion: a node that completes synchronously hands back to the loop, and a node
that completes later (a timer, another thread) restarts the loop from its completion. A graph looping ten thousand
times uses a constant amount of stack.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from reactivex import abc
from reactivex.disposable import Disposable, SerialDisposable

from ..errors import GraphRecursionError
from ..rx._forward import subscribe_forwarding
from .constants import END, START
from .node import NodeSpec
from .outputs import NodeOutput, StreamingOutput
from .run_context import RunContext

if TYPE_CHECKING:
    from .compiled import CompiledGraph
    from .config import RunnableConfig

__all__ = ["Run"]

# Phases of one streaming step, to hand its completion to whoever must run the tail (see Run._step_completed).
_SUBSCRIBING, _COMPLETED_WHILE_SUBSCRIBING, _WAITING = 0, 1, 2


class _Step:
    """Observes one node's chunk stream: forwards each chunk, keeps them for the tail.

    It is subscribed without reactivex's auto-detaching wrapper (one call less per chunk), so it keeps the same
    promise itself: nothing after a terminal event. Chunks it forwards go to the run's subscriber, whose own wrapper
    drops them once the subscription is disposed; the tail checks the run's flags.
    """

    __slots__ = ("_emit", "_keep", "_name", "chunks", "lock", "node", "phase", "run", "state_view", "stopped")

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

    def on_next(self, value: Any) -> None:
        if not self.stopped:
            self._keep(value)
            self._emit(StreamingOutput(self._name, self.state_view, value))

    def on_error(self, error: Exception) -> None:
        if not self.stopped:
            self.stopped = True
            self.run.fail(error)

    def on_completed(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.run.step_completed(self)


class Run:
    """One run of a compiled graph for one subscriber. Created when the stream is subscribed."""

    def __init__(
        self,
        graph: CompiledGraph,
        ctx: RunContext,
        input: Mapping[str, Any] | None,
        config: RunnableConfig,
        scheduler: abc.SchedulerBase | None,
        on_final_state: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.graph = graph
        self.ctx = ctx
        self.input = input
        self.config = config
        self.scheduler = scheduler
        self.on_final_state = on_final_state
        self.observer: abc.ObserverBase[NodeOutput] = _NO_OBSERVER
        self.disposed = False
        self.state: dict[str, Any] = {}
        self.next_node: str = END
        self.steps = 0
        self.current = SerialDisposable()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def subscribe(self, observer: abc.ObserverBase[NodeOutput], _: abc.SchedulerBase | None = None) -> Disposable:
        self.observer = observer
        try:
            self._begin()
        except Exception as error:
            self.fail(error)
            return Disposable(self._dispose)
        self._drive()
        return Disposable(self._dispose)

    def _dispose(self) -> None:
        self.disposed = True
        self.current.dispose()

    def fail(self, error: Exception) -> None:
        if not self.disposed:
            self.disposed = True
            self.observer.on_error(error)

    def _finish(self) -> None:
        if not self.disposed:
            self.disposed = True
            if self.on_final_state is not None:
                self.on_final_state(MappingProxyType(self.state))
            self.observer.on_completed()

    def _begin(self) -> None:
        """Read the base (now, at subscribe time), merge the input, write the input checkpoint, route from START."""
        graph, ctx = self.graph, self.ctx
        base = graph._load_base(ctx, self.config, self.input is not None)
        state: dict[str, Any] = dict(base.values) if base is not None else {}
        if self.input is None:
            # No input: continue where the base checkpoint said the run would go next (nothing left: done).
            self.state = state
            self.next_node = base.next[0] if base is not None and base.next else END
            return
        if not isinstance(self.input, Mapping):
            raise TypeError(
                f"the input of a run must be a mapping of state keys (or None), got {type(self.input).__name__}"
            )
        state = graph.schema.merge(state, self.input, origin="input")
        next_node = graph.branches[START].next_node(MappingProxyType(state), graph.nodes)
        ctx.commit(state, node=START, next_nodes=(next_node,) if next_node != END else (), source="input")
        self.state = state
        self.next_node = next_node

    # -- stepping ----------------------------------------------------------------------------------------------

    def _drive(self) -> None:
        """Run steps until one has to wait for an asynchronous completion, or the run ended."""
        graph = self.graph
        while not self.disposed:
            name = self.next_node
            if name == END:
                self._finish()
                return
            if self.steps >= self.config.recursion_limit:
                self.fail(
                    GraphRecursionError(
                        f"run {self.ctx.run_id} (thread {self.ctx.thread_id!r}) reached recursion_limit="
                        f"{self.config.recursion_limit} steps before END; the next node would be {name!r}. "
                        "Raise RunnableConfig.recursion_limit if the graph is meant to loop this often."
                    )
                )
                return
            self.steps += 1
            node = graph.nodes[name]
            state_view = MappingProxyType(self.state)
            try:
                result = node.call(state_view, self.config)
            except Exception as error:
                self.fail(error)
                return
            if result is None or isinstance(result, Mapping):
                # The zero-chunk case of the same step: straight to the tail.
                if not self._tail(node, (result,)):
                    return
                continue
            if not isinstance(result, abc.ObservableBase):
                self.fail(
                    TypeError(
                        f"node {name!r} returned a {type(result).__name__}; an action returns a mapping (the update), "
                        "None, or an Observable of chunks"
                    )
                )
                return
            step = _Step(self, node, state_view)
            # An error while subscribing reaches step.on_error (so the run fails) and the loop stops below.
            self.current.disposable = subscribe_forwarding(
                result, step.on_next, step.on_error, step.on_completed, self.scheduler
            )
            with step.lock:
                if step.phase != _COMPLETED_WHILE_SUBSCRIBING:
                    step.phase = _WAITING
                    return  # its completion, when it comes, runs the tail and drives on
            if not self._tail_of_stream(step):
                return

    def step_completed(self, step: _Step) -> None:
        with step.lock:
            if step.phase == _SUBSCRIBING:
                # Completed synchronously inside subscribe(): the loop in _drive takes it from here, which keeps
                # the stack flat however many synchronous steps follow each other.
                step.phase = _COMPLETED_WHILE_SUBSCRIBING
                return
        if self._tail_of_stream(step):
            self._drive()

    def _tail_of_stream(self, step: _Step) -> bool:
        if self.disposed:  # the tail is subscribed only while the run is
            return False
        try:
            updates = step.node.updates_from_chunks(step.chunks)
        except Exception as error:
            self.fail(error)
            return False
        return self._tail(step.node, updates)

    def _tail(self, node: NodeSpec, updates: Any) -> bool:
        """Merge, write, emit, route. Returns False when the run ended (cancelled, failed) and must not go on."""
        ctx, graph = self.ctx, self.graph
        if self.disposed or ctx.cancelled:
            return False
        try:
            state = self.state
            for update in updates:
                state = graph.schema.merge(state, update, origin=f"node {node.name!r}")
            next_node = graph.branches[node.name].next_node(MappingProxyType(state), graph.nodes)
            checkpoint = ctx.commit(
                state, node=node.name, next_nodes=(next_node,) if next_node != END else (), source="loop"
            )
        except Exception as error:
            self.fail(error)
            return False
        if ctx.cancelled or (checkpoint is None and ctx.saver is not None):
            return False
        self.state = state
        self.next_node = next_node
        self.observer.on_next(
            NodeOutput(node.name, MappingProxyType(state), checkpoint_id=checkpoint.id if checkpoint else None)
        )
        return True


class _NoObserver(abc.ObserverBase[Any]):
    def on_next(self, value: Any) -> None:
        pass

    def on_error(self, error: Exception) -> None:
        pass

    def on_completed(self) -> None:
        pass


_NO_OBSERVER = _NoObserver()
