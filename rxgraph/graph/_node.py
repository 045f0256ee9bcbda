"""A node: its action, how it is called, and how a streaming node's chunks become one state update."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, get_type_hints

from reactivex import Observable, abc

from .._arguments import check_scheduler
from ..errors import InvalidTypeError, InvalidUpdateError
from ._run_info import RunInfo

if TYPE_CHECKING:
    from ._config import RunnableConfig

__all__ = ["NodeAction", "NodeResult", "NodeSpec", "Reducer", "run_info_parameter"]

NodeResult: TypeAlias = Mapping[str, Any] | Observable[Any] | Awaitable[Any] | None
"""What an action returns: the update (a mapping, or None for no change), an Observable of chunks, or — from an
``async def`` action — a coroutine whose result is one of those."""

NodeAction: TypeAlias = Callable[..., NodeResult]
"""``action(state)`` or ``action(state, config)``, plain or ``async def``; ``state`` is a read-only mapping. A
parameter annotated ``RunInfo`` receives the run's ``RunInfo``."""

Reducer: TypeAlias = Callable[..., Mapping[str, Any] | None]
"""``reduce(chunks)`` or ``reduce(chunks, state)``: turns every chunk a streaming node emitted into the node's update
when its stream completes (``state`` is the state the node started from)."""


def run_info_parameter(function: Callable[..., Any]) -> str | None:
    """The name of ``function``'s parameter annotated ``RunInfo``, if it has one (the run passes it by keyword)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        hints = get_type_hints(function)
    except Exception:
        hints = {}
    for parameter in signature.parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if annotation is RunInfo or annotation == "RunInfo":
            return parameter.name
    return None


def _positional(function: Callable[..., Any], leave_out: str | None) -> int | None:
    """How many positional parameters ``function`` takes, ``leave_out`` aside; None for "any number"."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins and some C callables have none: call them with the first only
        return 1
    count = 0
    for parameter in signature.parameters.values():
        if parameter.name == leave_out:
            continue
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as the graph runs it.

    ``scheduler``: where the action is called (a thread pool for blocking work), or None for the run's own flow.
    ``run_info``: the name of the action's ``RunInfo`` parameter, if it declares one.
    """

    name: str
    action: NodeAction
    reduce: Reducer | None
    takes_config: bool
    reduce_takes_state: bool
    scheduler: abc.SchedulerBase | None = None
    run_info: str | None = None

    @classmethod
    def of(
        cls, name: str, action: NodeAction, reduce: Reducer | None, scheduler: abc.SchedulerBase | None = None
    ) -> NodeSpec:
        """Check and describe a node.

        Raises:
            InvalidTypeError: ``action`` or ``reduce`` is not callable, ``action`` takes no argument, or
                ``scheduler`` is not a reactivex scheduler.
        """
        if not callable(action):
            raise InvalidTypeError(
                f"node {name!r}: the action must be callable, got {type(action).__name__}", argument="action"
            )
        if reduce is not None and not callable(reduce):
            raise InvalidTypeError(
                f"node {name!r}: reduce must be callable, got {type(reduce).__name__}", argument="reduce"
            )
        check_scheduler(scheduler, argument="scheduler", owner=f"node {name!r}")
        run_info = run_info_parameter(action)
        positional = _positional(action, run_info)
        if positional == 0:
            raise InvalidTypeError(
                f"node {name!r}: the action must accept the state as its first argument: {action!r} takes none",
                argument="action",
            )
        reduce_positional = _positional(reduce, None) if reduce is not None else 1
        return cls(
            name=name,
            action=action,
            reduce=reduce,
            takes_config=positional is None or positional >= 2,
            reduce_takes_state=reduce_positional is None or reduce_positional >= 2,
            scheduler=scheduler,
            run_info=run_info,
        )

    def call(self, state: Mapping[str, Any], config: RunnableConfig, run: RunInfo) -> NodeResult:
        """Call the action with what it declares: the state, the config, the run."""
        if self.run_info is None:
            return self.action(state, config) if self.takes_config else self.action(state)
        extra = {self.run_info: run}
        return self.action(state, config, **extra) if self.takes_config else self.action(state, **extra)

    def updates_from_chunks(
        self, chunks: Sequence[Any], state: Mapping[str, Any]
    ) -> Sequence[Mapping[str, Any] | None]:
        """The updates to merge, in order, once the chunk stream completed.

        With a ``reduce`` function: its one result. Without one, every chunk must itself be an update (a mapping);
        they are merged one after the other, so ``APPEND`` keys collect the items of all chunks.

        Raises:
            InvalidUpdateError: a chunk that is not a mapping, with no ``reduce`` to make one.
        """
        if self.reduce is not None:
            return (self.reduce(chunks, state) if self.reduce_takes_state else self.reduce(chunks),)
        for index, chunk in enumerate(chunks):
            if not isinstance(chunk, Mapping):
                raise InvalidUpdateError(
                    f"node {self.name!r} streamed a {type(chunk).__name__} chunk (#{index}) and has no reduce function "
                    f"to turn its chunks into a state update; pass add_node({self.name!r}, action, reduce=...)",
                    node=self.name,
                )
        return chunks
