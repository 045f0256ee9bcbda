"""A compiled graph as a node of another: its run is one step of the parent's.

The inner run gets the parent's state (or a ``Send``'s payload) as its input and streams its outputs as
``SubgraphEvent`` chunks of the node; the updates its nodes made are merged into the parent's state, with the
parent's key strategies, when it finishes. Its checkpoints are the parent's: it runs on a private in-memory saver,
and after each of its steps the parent's run writes the inner state into the parent's thread (``save`` of the
call's scope: a checkpoint under the namespace ``node/inner``); when it stops for a human, its state is kept with
the pending interrupt. A resume — ``Command(resume=...)`` or ``stream(None)`` after a failure or a crash — puts the
inner run back where it was and goes on inside it. Cancelling the parent disposes it; the rewind is the parent's
turn boundary.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import reactivex as rx
from reactivex import Observable
from reactivex import operators as ops

from ..checkpoint._base import new_checkpoint
from ..checkpoint._memory import MemorySaver
from ..errors import NodeInterrupt
from ._compiled import CompiledGraph, inner_stream, spec_of
from ._config import RunnableConfig
from ._interrupt import CallScope, Command, current_call
from ._outputs import InterruptOutput, NodeOutput, RunOutput, SubgraphEvent

__all__ = ["SubgraphNode"]

_INNER_THREAD = "subgraph"


class SubgraphNode:
    """The action of a node that runs ``graph`` (built by ``StateGraph.add_node`` for a ``CompiledGraph``)."""

    def __init__(self, name: str, graph: CompiledGraph) -> None:
        self.name = name
        self.graph = graph
        self.spec = spec_of(graph)  # what it runs, for drawing

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> Observable[SubgraphEvent]:
        call = current_call()  # read now: the scope is the node call's
        return rx.defer(lambda _: self._run(state, config, call))

    def _values(self, state: Mapping[str, Any], updates: Any) -> Mapping[str, Any]:
        """The inner state after ``updates``: the inner run's input (this node's state) and each update it made,
        merged with the subgraph's key strategies — what is kept is only the updates, never the inner history."""
        schema = self.spec.schema
        values = schema.merge({}, state, origin="input")
        for update in updates:
            values = schema.merge(values, update, origin=f"subgraph {self.name!r}")
        return MappingProxyType(values)

    def _run(self, state: Mapping[str, Any], config: RunnableConfig, call: CallScope) -> Observable[SubgraphEvent]:
        resumes, stored = call.resumes, call.subgraph
        saver = MemorySaver()  # the inner run's own, for this call
        # The inner run's private saver keeps it under the parent's thread id, so that its nodes are told the thread
        # they work for (RunInfo.thread_id); a parent without a thread lends a placeholder its nodes are not told.
        thread = config.thread_id if config.thread_id is not None else _INNER_THREAD
        inner_config = RunnableConfig(
            thread_id=thread,
            scheduler=config.scheduler,
            context=config.context,
            recursion_limit=config.recursion_limit,
        )
        carried: list[Any] = []
        if stored is not None:
            # Resumed: put the inner run back where it stopped (or last saved its progress), and answer it.
            saver.put(
                new_checkpoint(
                    id=uuid.uuid4().hex,
                    thread_id=thread,
                    seq=1,
                    values=self._values(state, stored["updates"]),
                    next=tuple(stored["next"]),
                    pending=stored["pending"],
                    run_id="resume",
                    source="interrupt",
                ),
                expected_head=None,
            )
            carried.extend(stored["updates"])
            source: Any = Command(resume=resumes[-1]) if resumes else None
        else:
            source = dict(state)
        made: list[Any] = list(carried)  # every update of the inner run so far (kept if it stops again)
        waiting: list[Any] = list(carried)  # updates not yet handed to the parent in an event
        stopped: list[InterruptOutput] = []

        def inner_state() -> dict[str, Any]:
            head = saver.get(thread)
            assert head is not None
            return {
                "next": list(head.next),
                "pending": dict(head.pending or {}),
                "updates": list(made),
                "node": head.node,
            }

        def on_updates(updates: tuple[Any, ...]) -> None:
            made.extend(updates)
            waiting.extend(updates)
            if call.save is not None:  # an inner step landed: the parent's thread keeps it
                progress = inner_state()
                call.save(str(progress["node"]), progress)

        def event(output: RunOutput) -> SubgraphEvent:
            if isinstance(output, NodeOutput) and waiting:
                updates = tuple(waiting)
                waiting.clear()
                return SubgraphEvent(self.name, output, updates)
            return SubgraphEvent(self.name, output)

        def keep(output: RunOutput) -> bool:
            if isinstance(output, InterruptOutput):
                stopped.append(output)
                return False
            return True

        def after() -> Observable[SubgraphEvent]:
            if stopped:
                return rx.throw(NodeInterrupt(stopped[-1].value, subgraph=inner_state()))
            if waiting:  # a resumed run that made no step of its own still hands over what it made before
                return rx.of(SubgraphEvent(self.name, None, tuple(waiting)))
            return rx.empty()

        run = inner_stream(self.graph, saver, source, inner_config, on_updates, shown_thread=config.thread_id)
        return rx.concat(run.pipe(ops.filter(keep), ops.map(event)), rx.defer(lambda _: after()))
