"""A node: its action, how it is called, and how a streaming node's chunks become one state update."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from reactivex import Observable

from ..errors import InvalidTypeError, InvalidUpdateError

if TYPE_CHECKING:
    from ._config import RunnableConfig

__all__ = ["NodeAction", "NodeResult", "NodeSpec", "Reducer"]

NodeResult: TypeAlias = Mapping[str, Any] | Observable[Any] | None
"""What an action returns: the update (a mapping, or None for no change), or an Observable of chunks."""

NodeAction: TypeAlias = Callable[..., NodeResult]
"""``action(state)`` or ``action(state, config)``; ``state`` is a read-only mapping."""

Reducer: TypeAlias = Callable[[Sequence[Any]], Mapping[str, Any] | None]
"""Turns every chunk a streaming node emitted into the node's update, when its chunk stream completes."""


def _takes_config(action: Callable[..., Any]) -> bool:
    try:
        signature = inspect.signature(action)
    except (TypeError, ValueError):  # builtins and some C callables have none: call them with the state only
        return False
    positional = 0
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
    if positional == 0:
        raise InvalidTypeError(
            f"a node action must accept the state as its first argument: {action!r} takes none", argument="action"
        )
    return positional >= 2


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as the graph runs it."""

    name: str
    action: NodeAction
    reduce: Reducer | None
    takes_config: bool

    @classmethod
    def of(cls, name: str, action: NodeAction, reduce: Reducer | None) -> NodeSpec:
        if not callable(action):
            raise InvalidTypeError(
                f"node {name!r}: the action must be callable, got {type(action).__name__}", argument="action"
            )
        if reduce is not None and not callable(reduce):
            raise InvalidTypeError(
                f"node {name!r}: reduce must be callable, got {type(reduce).__name__}", argument="reduce"
            )
        return cls(name, action, reduce, _takes_config(action))

    def call(self, state: Mapping[str, Any], config: RunnableConfig) -> NodeResult:
        return self.action(state, config) if self.takes_config else self.action(state)

    def updates_from_chunks(self, chunks: Sequence[Any]) -> Sequence[Mapping[str, Any] | None]:
        """The updates to merge, in order, once the chunk stream completed.

        With a ``reduce`` function: its one result. Without one, every chunk must itself be an update (a mapping);
        they are merged one after the other, so ``APPEND`` keys collect the items of all chunks.
        """
        if self.reduce is not None:
            return (self.reduce(chunks),)
        for index, chunk in enumerate(chunks):
            if not isinstance(chunk, Mapping):
                raise InvalidUpdateError(
                    f"node {self.name!r} streamed a {type(chunk).__name__} chunk (#{index}) and has no reduce function "
                    f"to turn its chunks into a state update; pass add_node({self.name!r}, action, reduce=...)",
                    node=self.name,
                )
        return chunks
