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

import contextvars
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import reactivex as rx
from reactivex import Observable, abc
from reactivex import operators as ops

from .._frozen import FrozenList
from ..checkpoint._base import new_checkpoint
from ..checkpoint._memory import MemorySaver
from ..errors import NodeInterrupt
from ._compiled import CompiledGraph, inner_stream, spec_of
from ._config import RunnableConfig
from ._interrupt import CallScope, Command, ParentCommand, current_call
from ._outputs import InterruptOutput, NodeOutput, RunOutput, SubgraphEvent
from ._state import KeyReducer, KeyStrategy, StateSchema
from ._writer import new_id

__all__ = ["SubgraphNode"]

_INNER_THREAD = "subgraph"


class SubgraphNode:
    """The action of a node that runs ``graph`` (built by ``StateGraph.add_node`` for a ``CompiledGraph``)."""

    def __init__(self, name: str, graph: CompiledGraph, parent: StateSchema | None = None) -> None:
        self.name = name
        self.graph = graph
        self.spec = spec_of(graph)  # what it runs, for drawing
        self.parent = parent if parent is not None else StateSchema()  # the strategies its result is merged with

    def under(self, parent: StateSchema) -> SubgraphNode:
        """This node in a compiled parent whose state has ``parent``'s strategies."""
        return SubgraphNode(self.name, self.graph, parent)

    def result(
        self, state: Mapping[str, Any], chunks: Sequence[Any]
    ) -> Sequence[Mapping[str, Any] | Command[Any] | None]:
        """What the parent merges when the subgraph finished, given the state the node started from and what it
        streamed: the subgraph's final values of the keys its run wrote, among its output keys and the parent's,
        then the ``Command.PARENT`` one of its nodes returned, if one did.

        Its final value of a key goes over as it is, but for a key the parent appends to (``KeyStrategy.APPEND``)
        whose final list starts with the list the subgraph was given: then only the items after those go over,
        so that what the parent already had is not appended twice. A reducer function receives the final value,
        once.
        """
        made: list[Any] = []
        commands: list[Command[Any]] = []
        for chunk in chunks:
            if isinstance(chunk, SubgraphEvent):
                made.extend(chunk.updates)
                if chunk.command is not None:
                    commands.append(chunk.command)
        inner = self.spec.schema
        given = inner.taken_in(state)
        final = self._values(given, made)
        shown, parent_keys = inner.output_keys, self.parent.keys
        result: dict[str, Any] = {}
        for update in made:
            for key in update or ():
                if key in result or (shown is not None and key not in shown):
                    continue
                if parent_keys is not None and key not in parent_keys:
                    continue
                result[key] = _handed_over(final[key], given.get(key), self.parent.strategy(key))
        handed: list[Mapping[str, Any] | Command[Any] | None] = [result] if result else []
        handed.extend(Command(update=command.update, goto=command.goto) for command in commands)
        return handed

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> Observable[SubgraphEvent]:
        call = current_call()  # read now: the scope is the node call's
        return rx.defer(lambda _: self._run(state, config, call))

    def _values(self, state: Mapping[str, Any], updates: Any) -> Mapping[str, Any]:
        """The inner state after ``updates``: the inner run's input (this node's state) and each update it made,
        merged with the subgraph's key strategies — what is kept is only the updates, never the inner history."""
        schema = self.spec.schema
        values = schema.merge({}, schema.taken_in(state), origin="input")
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
                    id=new_id(),
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
            source = self.spec.schema.taken_in(state)
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

        def to_parent(error: Exception, _: Any) -> Observable[SubgraphEvent]:
            if not isinstance(error, ParentCommand):
                return rx.throw(error)
            # A node of the subgraph sent a command to this graph: the inner run ended there.
            return rx.of(SubgraphEvent(self.name, None, tuple(waiting), command=error.command))

        inner = inner_stream(self.graph, saver, source, inner_config, on_updates, shown_thread=config.thread_id)
        # concat subscribes the inner run later (on the trampoline): in the context vars of this call, so that it
        # runs inside the node's (its OpenTelemetry span is the node's child).
        context = contextvars.copy_context()

        def _subscribe(observer: abc.ObserverBase[RunOutput], scheduler: abc.SchedulerBase | None = None) -> Any:
            return context.copy().run(inner.subscribe, observer, scheduler=scheduler)

        run = Observable(_subscribe)
        return rx.concat(run.pipe(ops.filter(keep), ops.map(event)), rx.defer(lambda _: after())).pipe(
            ops.catch(to_parent)
        )


def _handed_over(final: Any, given: Any, strategy: KeyStrategy | KeyReducer) -> Any:
    """What the parent merges of one key: the subgraph's final value, or, for a key the parent appends to, the
    items the subgraph added after the list it was given."""
    if strategy is KeyStrategy.APPEND and isinstance(final, FrozenList) and isinstance(given, Sequence):
        start = len(given)
        if isinstance(given, FrozenList) and final.shares_prefix_with(given):  # known without comparing items
            return final[start:]
        if not isinstance(given, str) and len(final) >= start and list(final[:start]) == list(given):
            return final[start:]
    return final
