"""What a run emits (``RunOutput``: ``NodeOutput``, ``StreamingOutput``, ``CustomOutput``, ``InterruptOutput``) and
what ``get_state`` returns (``StateSnapshot``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..checkpoint._base import Checkpoint

from ._interrupt import Command, PendingInterrupt
from ._state import as_update

__all__ = [
    "CustomOutput",
    "InterruptOutput",
    "NodeOutput",
    "RunOutput",
    "StateSnapshot",
    "StreamingOutput",
    "SubgraphEvent",
    "node_update",
]


class RunOutput:
    """What a run emits: a ``NodeOutput`` when a node finished, a ``StreamingOutput`` for each chunk a node
    streams, a ``CustomOutput`` for each value a node writes (``RunInfo.write``), an ``InterruptOutput`` when it stops
    for a human. ``node`` is the node, ``state`` a read-only view of the state (after the node, for a ``NodeOutput``;
    the one the node started from, for a ``StreamingOutput`` or a ``CustomOutput``). Outputs are immutable and compare
    by value."""

    # Plain slots behind read-only properties rather than frozen dataclasses: a frozen dataclass's __init__ costs
    # about four times as much, and a StreamingOutput is built for every chunk a node streams.
    __slots__ = ("_node", "_state")

    _node: str
    _state: Mapping[str, Any]

    @property
    def node(self) -> str:
        return self._node

    @property
    def state(self) -> Mapping[str, Any]:
        return self._state

    def _fields(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, RunOutput)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # the state is a mapping: outputs are not hashable


class NodeOutput(RunOutput):
    """A node finished: its update is merged into ``state`` and, with a checkpointer, persisted.

    ``checkpoint_id`` is the checkpoint written for this step (``None`` without a checkpointer). ``update`` is what
    the node wrote in this step (see ``node_update``); two outputs compare by node, state and checkpoint id only, so
    an output built by hand without an update equals the run's.
    """

    __slots__ = ("_checkpoint_id", "_update")
    __match_args__ = ("node", "state")

    _checkpoint_id: str | None
    _update: Any

    def __init__(
        self, node: str, state: Mapping[str, Any], *, checkpoint_id: str | None = None, update: Any = None
    ) -> None:
        self._node = node
        self._state = state
        self._checkpoint_id = checkpoint_id
        self._update = update

    @property
    def checkpoint_id(self) -> str | None:
        return self._checkpoint_id

    @property
    def update(self) -> Any:
        """The node's update in this step, as the node made it: the mapping it returned (a ``Command``'s
        ``update``), None when it returned None or made no update, or a tuple of its updates, in order, when it made
        several (a streaming node whose chunks are updates; a subgraph node, whose inner nodes' updates are merged).
        What ``updates`` stream mode emits, under the node's name."""
        return self._update

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._checkpoint_id)

    def __repr__(self) -> str:
        return f"NodeOutput(node={self._node!r}, state={self._state!r}, checkpoint_id={self._checkpoint_id!r})"


class StreamingOutput(RunOutput):
    """One chunk a node streamed while it runs; ``state`` is the state the node started from. A chunk is not
    checkpointed: its node's ``NodeOutput`` follows once the stream completed."""

    __slots__ = ("_chunk",)
    __match_args__ = ("node", "state", "chunk")

    _chunk: Any

    def __init__(self, node: str, state: Mapping[str, Any], chunk: Any) -> None:
        self._node = node
        self._state = state
        self._chunk = chunk

    @property
    def chunk(self) -> Any:
        return self._chunk

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._chunk)

    def __repr__(self) -> str:
        return f"StreamingOutput(node={self._node!r}, chunk={self._chunk!r})"


class CustomOutput(RunOutput):
    """A value a node (or a tool it runs) wrote with ``RunInfo.write`` while it ran: ``value`` as it was written,
    ``state`` the state the node started from. It goes to the subscriber only: it is never part of the node's update,
    and never checkpointed."""

    __slots__ = ("_value",)
    __match_args__ = ("node", "state", "value")

    _value: Any

    def __init__(self, node: str, state: Mapping[str, Any], value: Any) -> None:
        self._node = node
        self._state = state
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._value)

    def __repr__(self) -> str:
        return f"CustomOutput(node={self._node!r}, value={self._value!r})"


class InterruptOutput(RunOutput):
    """The run stopped for a human: the last output of an interrupted run (which then completes).

    ``interrupt`` says where (``node``, ``when``) and what the node asked (``value``); ``state`` is the state the
    thread keeps for the resume. Resume with ``stream(Command(resume=answer), config)``.
    """

    __slots__ = ("_interrupt",)
    __match_args__ = ("node", "state", "interrupt")

    _interrupt: PendingInterrupt

    def __init__(self, node: str, state: Mapping[str, Any], interrupt: PendingInterrupt) -> None:
        self._node = node
        self._state = state
        self._interrupt = interrupt

    @property
    def interrupt(self) -> PendingInterrupt:
        return self._interrupt

    @property
    def value(self) -> Any:
        """What the node asked (``interrupt.value``)."""
        return self._interrupt.value

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._interrupt)

    def __repr__(self) -> str:
        return f"InterruptOutput(node={self._node!r}, interrupt={self._interrupt!r})"


def node_update(updates: Sequence[Any]) -> Any:
    """``NodeOutput.update`` of a node that made ``updates`` in one step (each a mapping, None, a pydantic model or a
    ``Command``): the one update (a ``Command``'s ``update``, a model's fields), None for none, a tuple of them for
    several."""
    if len(updates) == 1:
        update = updates[0]
        return update if update is None or type(update) is dict else _one_update(update)
    if not updates:
        return None
    return tuple(_one_update(update) for update in updates)


def _one_update(update: Any) -> Any:
    return as_update(update.update if isinstance(update, Command) else update)


@dataclass(frozen=True, slots=True)
class SubgraphEvent:
    """What a subgraph node streams: one output of its inner run (``StreamingOutput(node, state, chunk=event)`` in
    the parent's stream). ``output`` is the inner ``NodeOutput``, ``StreamingOutput`` or ``CustomOutput`` (None for the
    last event of a resumed inner run that emitted nothing, or for its ``Command.PARENT``); ``updates`` are the
    updates the inner step made. When the subgraph node finishes, the parent merges the subgraph's final values of
    the keys these updates wrote (see ``StateGraph.add_node``), then ``command``: the
    ``Command(graph=Command.PARENT)`` one of the subgraph's nodes returned, which ended its run.
    """

    node: str
    output: RunOutput | None
    updates: tuple[Mapping[str, Any] | None, ...] = ()
    command: Command[Any] | None = None

    @property
    def path(self) -> tuple[str, ...]:
        """Where the output comes from: the subgraph node, then the nodes inside it (nested subgraphs too)."""
        inner = self.output
        if inner is None:
            return (self.node,)
        if isinstance(inner, StreamingOutput) and isinstance(inner.chunk, SubgraphEvent):
            return (self.node, *inner.chunk.path)
        return (self.node, inner.node)

    @property
    def innermost(self) -> RunOutput | None:
        """The output at the end of ``path`` (through nested subgraphs)."""
        inner = self.output
        while isinstance(inner, StreamingOutput) and isinstance(inner.chunk, SubgraphEvent):
            inner = inner.chunk.output
        return inner


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A thread's state at one checkpoint. For a thread with no checkpoint, ``values`` is empty and the rest None."""

    values: Mapping[str, Any]
    next: tuple[str, ...] = ()
    checkpoint: Checkpoint | None = None

    @property
    def checkpoint_id(self) -> str | None:
        return self.checkpoint.id if self.checkpoint is not None else None

    @property
    def parent_id(self) -> str | None:
        return self.checkpoint.parent_id if self.checkpoint is not None else None

    @property
    def interrupt(self) -> PendingInterrupt | None:
        """The interrupt the thread waits on at this checkpoint, if one (the first, when several nodes of one
        superstep asked: see ``interrupts``). Resume it with ``Command``."""
        pending = self.checkpoint.pending if self.checkpoint is not None else None
        stored = pending.get("interrupt") if pending else None
        return PendingInterrupt.from_pending(stored) if stored is not None else None

    @property
    def interrupts(self) -> tuple[PendingInterrupt, ...]:
        """Every interrupt the thread waits on at this checkpoint, in task order: several when several nodes of one
        superstep called ``interrupt()``. Answer them with ``Command(resume={interrupt.id: answer, ...})``."""
        first = self.interrupt
        if first is None:
            return ()
        pending = self.checkpoint.pending if self.checkpoint is not None else None
        others = (pending or {}).get("interrupts", ())
        return (first, *(PendingInterrupt.from_pending(other) for other in others))
