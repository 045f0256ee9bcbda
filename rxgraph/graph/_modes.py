"""Stream modes: a run's outputs as ``values``, ``updates``, ``messages`` and ``custom`` payloads (the names
LangGraph's ``stream_mode`` uses). ``stream_modes`` is the one operator that maps them; ``CompiledGraph.stream(...,
mode=...)`` applies it, and it composes with any stream of run outputs (a ``ReactAgent``'s turn, a marble test's).

What each mode takes from the outputs:

- ``values``: ``NodeOutput.state`` once per superstep (the outputs of one superstep share their state object), after
  that superstep's other payloads; a run that stopped for a human ends with its state plus ``"__interrupt__"``.
- ``updates``: ``{node: NodeOutput.update}`` per finished node; a stop ends with ``{"__interrupt__": (...)}``.
- ``messages``: each chunk that is a message or a model's chunk, with where it comes from; the messages in the
  update of a node that streamed none (so a message is not told twice); inner nodes of subgraphs included.
- ``custom``: each ``CustomOutput``'s value (``RunInfo.write``), a subgraph's inner nodes' included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from reactivex import Observable, abc

from .._frozen import FrozenList
from ..errors import InvalidArgumentError, InvalidTypeError
from ..messages._types import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from ._outputs import CustomOutput, InterruptOutput, NodeOutput, RunOutput, StreamingOutput, SubgraphEvent

__all__ = ["STREAM_MODES", "StreamMode", "add_message_type", "check_modes", "stream_modes"]

StreamMode: TypeAlias = Literal["values", "updates", "messages", "custom"]
"""A stream mode's name (see ``stream_modes``)."""

STREAM_MODES: tuple[StreamMode, ...] = ("values", "updates", "messages", "custom")
"""Every stream mode, in the order ``check_modes`` names them."""

_message_types: tuple[type, ...] = (AssistantMessage, ToolMessage, UserMessage, SystemMessage)


def add_message_type(kind: type) -> None:
    """Have ``messages`` mode take chunks of type ``kind`` too (how ``rxgraph.agent`` adds its ``ChatChunk``, which
    this package cannot import)."""
    global _message_types
    if kind not in _message_types:
        _message_types = (*_message_types, kind)


def check_modes(mode: object) -> tuple[StreamMode, ...]:
    """The modes ``mode`` asks for, each once, in its order.

    Raises:
        InvalidTypeError: ``mode`` is neither a mode's name nor a list of them.
        InvalidArgumentError: an unknown name, or an empty list.
    """
    valid = ", ".join(repr(name) for name in STREAM_MODES)
    names: Sequence[object]
    if isinstance(mode, str):
        names = (mode,)
    elif isinstance(mode, list | tuple):
        names = mode
        if not names:
            raise InvalidArgumentError(f"mode is an empty list; give one or more of {valid}", argument="mode")
    else:
        raise InvalidTypeError(
            f"mode must be a stream mode's name or a list of them ({valid}), got {type(mode).__name__}",
            argument="mode",
        )
    chosen: list[StreamMode] = []
    for name in names:
        if not isinstance(name, str):
            raise InvalidTypeError(
                f"mode must be a stream mode's name or a list of them ({valid}), got a {type(name).__name__} in the "
                "list",
                argument="mode",
            )
        if name not in STREAM_MODES:
            raise InvalidArgumentError(f"unknown stream mode {name!r}; the modes are {valid}", argument="mode")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def stream_modes(mode: StreamMode | Sequence[StreamMode]) -> Callable[[Observable[RunOutput]], Observable[Any]]:
    """An operator that turns a run's outputs into the payloads of stream modes, as LangGraph's ``stream_mode``
    does: ``graph.stream(input, config).pipe(stream_modes("updates"))``.

    One mode (a string) emits its payloads bare; a list of modes emits ``(mode, payload)`` tuples, in the order the
    run made them. The payloads:

    - ``"values"``: the state (a dict) after each superstep, once per superstep, after its ``updates``. The input
      state is not emitted first (the run has no output for it). A run that stopped for a human ends with the state
      it keeps for the resume, plus ``"__interrupt__"``: a tuple of its ``PendingInterrupt``\\ s (as ``invoke``
      returns it).
    - ``"updates"``: ``{node: update}`` for each node that finished (``NodeOutput.update``); a run that stopped for a
      human ends with ``{"__interrupt__": (PendingInterrupt, ...)}``.
    - ``"messages"``: ``(message, metadata)`` for each chunk a node streams that is a message or a model's chunk (a
      ``ChatChunk``: a token), and for each message in the update of a node that streamed none. ``metadata`` is
      ``{"node": name, "path": (...), "langgraph_node": name}``: ``node`` the node that made it, ``path`` where that
      node is (a subgraph node's inner nodes are ``(subgraph, inner)``).
    - ``"custom"``: each value a node (or a tool it runs) wrote with ``RunInfo.write``, subgraphs' inner nodes
      included.

    A subgraph's inner outputs count in ``messages`` and ``custom`` only. Each subscription is its own: disposing it
    cancels (and rewinds) the run as any subscriber's would, and an error reaches it after the ``values`` of the
    last superstep that landed.

    Args:
        mode: a mode's name, or a list of them.

    Returns:
        The operator (``Observable[RunOutput] -> Observable[Any]``).

    Raises:
        InvalidTypeError: ``mode`` is neither a mode's name nor a list of them.
        InvalidArgumentError: an unknown mode, or an empty list.
    """
    modes = check_modes(mode)
    tagged = not isinstance(mode, str)

    def _operator(source: Observable[RunOutput]) -> Observable[Any]:
        def _subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> Any:
            payloads = _Payloads(modes, observer.on_next, tagged)

            def on_error(error: Exception) -> None:
                payloads.flush_values()
                observer.on_error(error)

            def on_completed() -> None:
                payloads.finish()
                observer.on_completed()

            return source.subscribe(payloads.take, on_error, on_completed, scheduler=scheduler)

        return Observable(_subscribe)

    return _operator


class _Payloads:
    """One subscription's mapping: what each output gives, and what waits for the end of its superstep."""

    __slots__ = ("_emit", "_streamed", "custom", "interrupts", "messages", "pending", "updates", "values")

    def __init__(self, modes: Sequence[StreamMode], on_next: Callable[[Any], None], tagged: bool) -> None:
        self.values = "values" in modes
        self.updates = "updates" in modes
        self.messages = "messages" in modes
        self.custom = "custom" in modes
        self._emit: Callable[[str, Any], None] = (
            (lambda name, payload: on_next((name, payload))) if tagged else (lambda _, payload: on_next(payload))
        )
        self.pending: Mapping[str, Any] | None = None  # the state of the superstep whose NodeOutputs are coming
        self.interrupts: list[InterruptOutput] = []
        self._streamed: set[tuple[str, ...]] = set()  # nodes (paths) that streamed a message in their running step

    def take(self, output: RunOutput) -> None:
        if self.pending is not None and not (type(output) is NodeOutput and output.state is self.pending):
            self.flush_values()
        if isinstance(output, NodeOutput):
            if self.messages:
                self._update_messages((output.node,), output)
            if self.updates:
                self._emit("updates", {output.node: output.update})
            if self.values:
                self.pending = output.state
        elif isinstance(output, StreamingOutput):
            chunk = output.chunk
            if isinstance(chunk, SubgraphEvent):
                self._inner(chunk)
            elif self.messages and isinstance(chunk, _message_types):
                self._message(chunk, (output.node,))
        elif isinstance(output, CustomOutput):
            if self.custom:
                self._emit("custom", output.value)
        elif isinstance(output, InterruptOutput):
            self.interrupts.append(output)

    def _inner(self, event: SubgraphEvent) -> None:
        inner = event.innermost
        if isinstance(inner, CustomOutput):
            if self.custom:
                self._emit("custom", inner.value)
        elif not self.messages:
            return
        elif isinstance(inner, StreamingOutput):
            if isinstance(inner.chunk, _message_types):
                self._message(inner.chunk, event.path)
        elif isinstance(inner, NodeOutput):
            self._update_messages(event.path, inner)

    def _message(self, message: Any, path: tuple[str, ...]) -> None:
        # The node and the subgraph nodes around it streamed a message: their updates' messages are not told again.
        self._streamed.update(path[:end] for end in range(1, len(path) + 1))
        self._emit("messages", (message, {"node": path[-1], "path": path, "langgraph_node": path[-1]}))

    def _update_messages(self, path: tuple[str, ...], output: NodeOutput) -> None:
        if path in self._streamed:
            self._streamed.discard(path)
            return
        found = False
        for message in _messages_in(output.update):
            found = True
            self._emit("messages", (message, {"node": path[-1], "path": path, "langgraph_node": path[-1]}))
        if found:  # the subgraph nodes around it will have the same messages in their updates
            self._streamed.update(path[:end] for end in range(1, len(path)))

    def flush_values(self) -> None:
        state, self.pending = self.pending, None
        if state is not None:
            self._emit("values", dict(state))

    def finish(self) -> None:
        self.flush_values()
        if not self.interrupts:
            return
        stops = tuple(output.interrupt for output in self.interrupts)
        if self.updates:
            self._emit("updates", {"__interrupt__": stops})
        if self.values:
            self._emit("values", {**self.interrupts[-1].state, "__interrupt__": stops})


def _messages_in(update: Any) -> Iterator[Any]:
    """The messages an update (or a tuple of updates: see ``NodeOutput.update``) holds as values: a message, or a
    list of them."""
    for one in update if isinstance(update, tuple) else (update,):
        if not isinstance(one, Mapping):
            continue
        for value in one.values():
            if isinstance(value, _message_types):
                yield value
            elif isinstance(value, list | tuple | FrozenList):
                yield from (item for item in value if isinstance(item, _message_types))
