"""A compiled graph as a node of another: its run is one step of the parent's.

The inner run gets the parent's state (or a ``Send``'s payload) as its input and streams its outputs as
``SubgraphEvent`` chunks of the node; the updates its nodes made are merged into the parent's state, with the
parent's key strategies, when it finishes. Its checkpoints are the parent's: it runs on a private in-memory saver,
and when it stops for a human its state is kept in the parent's checkpoint (the pending interrupt's ``subgraph``),
so that ``Command(resume=...)`` on the parent's thread goes on inside it. Cancelling the parent disposes it; the
rewind is the parent's turn boundary.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import reactivex as rx
from reactivex import Observable
from reactivex import operators as ops

from ..checkpoint._base import new_checkpoint
from ..checkpoint._memory import MemorySaver
from ..errors import NodeInterrupt
from ._compiled import CompiledGraph, inner_stream, spec_of
from ._config import RunnableConfig
from ._interrupt import Command, current_resumes
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
        resumes, stored = current_resumes()  # read now: the scope is the node call's
        return rx.defer(lambda _: self._run(state, config, resumes, stored))

    def _run(
        self,
        state: Mapping[str, Any],
        config: RunnableConfig,
        resumes: tuple[Any, ...],
        stored: Mapping[str, Any] | None,
    ) -> Observable[SubgraphEvent]:
        saver = MemorySaver()  # the inner run's own, for this call
        inner_config = RunnableConfig(
            thread_id=_INNER_THREAD,
            scheduler=config.scheduler,
            context=config.context,
            recursion_limit=config.recursion_limit,
        )
        carried: list[Any] = []
        if stored is not None and resumes:
            # Resumed: put the inner run back where it stopped, and answer it.
            saver.put(
                new_checkpoint(
                    id=uuid.uuid4().hex,
                    thread_id=_INNER_THREAD,
                    seq=1,
                    values=stored["values"],
                    next=tuple(stored["next"]),
                    pending=stored["pending"],
                    run_id="resume",
                    source="interrupt",
                ),
                expected_head=None,
            )
            carried.extend(stored["updates"])
            source: Any = Command(resume=resumes[-1])
        else:
            source = dict(state)
        made: list[Any] = list(carried)  # every update of the inner run so far (kept if it stops again)
        waiting: list[Any] = list(carried)  # updates not yet handed to the parent in an event
        stopped: list[InterruptOutput] = []

        def on_updates(updates: tuple[Any, ...]) -> None:
            made.extend(updates)
            waiting.extend(updates)

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
                head = saver.get(_INNER_THREAD)
                assert head is not None
                inner_state = {
                    "values": dict(head.values),
                    "next": list(head.next),
                    "pending": dict(head.pending or {}),
                    "updates": list(made),
                }
                return rx.throw(NodeInterrupt(stopped[-1].value, subgraph=inner_state))
            if waiting:  # a resumed run that made no step of its own still hands over what it made before
                return rx.of(SubgraphEvent(self.name, None, tuple(waiting)))
            return rx.empty()

        run = inner_stream(self.graph, saver, source, inner_config, on_updates)
        return rx.concat(run.pipe(ops.filter(keep), ops.map(event)), rx.defer(lambda _: after()))
