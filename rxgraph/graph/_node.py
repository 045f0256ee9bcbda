"""A node: its action, how it is called (under its policies, if it has any), and how a streaming node's chunks
become one state update."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, cast, get_args, get_origin, get_type_hints

from pydantic import BaseModel
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable
from reactivex.scheduler import TimeoutScheduler

from .._arguments import check_scheduler
from ..errors import InvalidTypeError, InvalidUpdateError, NodeInterrupt
from ..rx._awaitable import from_awaitable
from ._interrupt import CallScope, Command, current_call, enter_scope, leave_scope, scoped
from ._policies import NodeRetry, RetryPolicy, check_retry, check_timeout, run_attempts
from ._run_info import RunInfo

if TYPE_CHECKING:
    from ._config import RunnableConfig

__all__ = [
    "LATER",
    "STREAM",
    "UPDATE",
    "NodeAction",
    "NodeResult",
    "NodeSpec",
    "Reducer",
    "ResultKind",
    "SubgraphResult",
    "classify",
    "run_info_parameter",
]

NodeResult: TypeAlias = Mapping[str, Any] | Observable[Any] | Awaitable[Any] | None
"""What an action returns: the update (a mapping, or None for no change), an Observable of chunks, or — from an
``async def`` action — a coroutine whose result is one of those."""

NodeAction: TypeAlias = Callable[..., NodeResult]
"""``action(state)`` or ``action(state, config)``, plain or ``async def``; ``state`` is a read-only mapping. A
parameter annotated ``RunInfo`` receives the run's ``RunInfo``."""

Reducer: TypeAlias = Callable[..., Mapping[str, Any] | None]
"""``reduce(chunks)`` or ``reduce(chunks, state)``: turns every chunk a streaming node emitted into the node's update
when its stream completes (``state`` is the state the node started from)."""


class SubgraphResult(Protocol):
    """A subgraph node's action, as far as its node needs it: what the parent merges when it finished."""

    def result(
        self, state: Mapping[str, Any], chunks: Sequence[Any]
    ) -> Sequence[Mapping[str, Any] | Command[Any] | None]: ...


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


def _destinations(name: str, action: object, declared: Sequence[str] | None) -> tuple[str, ...]:
    """Where node ``name`` may go with a ``Command``: ``declared`` (``add_node(destinations=...)``), else what its
    return annotation says (``-> Command[Literal["a", "b"]]``), else nowhere.

    Raises:
        InvalidTypeError: ``declared`` is not a list of node names.
    """
    if declared is not None:
        if isinstance(declared, str) or not all(isinstance(target, str) for target in declared):
            raise InvalidTypeError(
                f"node {name!r}: destinations must be a list of node names, got {declared!r}", argument="destinations"
            )
        return tuple(dict.fromkeys(declared))
    try:
        returned = get_type_hints(action).get("return")
    except Exception:
        return ()
    if get_origin(returned) is not Command:
        return ()
    (names,) = get_args(returned) or (None,)
    if get_origin(names) is not Literal:
        return ()
    return tuple(dict.fromkeys(str(target) for target in get_args(names)))


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
    ``retry``, ``timeout``: the node's policies (see ``StateGraph.add_node``); with either, ``call`` returns the
    stream of the node's attempts, and ``updates_from_chunks`` reads the last attempt's chunks only.
    """

    name: str
    action: NodeAction
    reduce: Reducer | None
    takes_config: bool
    reduce_takes_state: bool
    scheduler: abc.SchedulerBase | None = None
    run_info: str | None = None
    retry: tuple[RetryPolicy, ...] | None = None
    timeout: float | None = None  # seconds
    subgraph: bool = False  # a compiled graph: its chunks are SubgraphEvents carrying the updates
    destinations: tuple[str, ...] = ()  # where a Command it returns may send the run, declared or annotated
    reads: Callable[[Mapping[str, Any]], Any] | None = None  # what the action receives of the state, if not all of it
    # Called straight from the run's own flow, as it is: no scheduler, no RunInfo, no policies, not a subgraph (the
    # run's direct step, see ``Run._direct_step``).
    direct: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        plain = self.scheduler is None and self.run_info is None and self.retry is None and self.timeout is None
        object.__setattr__(self, "direct", plain and not self.subgraph)

    @classmethod
    def of(
        cls,
        name: str,
        action: NodeAction,
        reduce: Reducer | None,
        scheduler: abc.SchedulerBase | None = None,
        *,
        retry: RetryPolicy | Sequence[RetryPolicy] | None = None,
        timeout: float | timedelta | None = None,
        subgraph: bool = False,
        destinations: Sequence[str] | None = None,
    ) -> NodeSpec:
        """Check and describe a node (``subgraph``: the action runs a compiled graph and streams ``SubgraphEvent``s).

        Raises:
            InvalidTypeError: ``action`` or ``reduce`` is not callable, ``action`` takes no argument, ``scheduler``
                is not a reactivex scheduler, ``retry`` is not a ``RetryPolicy`` (or a list of them), or ``timeout``
                is neither None, a number of seconds nor a ``timedelta``.
            InvalidArgumentError: ``timeout`` is not a positive, finite time, or ``retry`` is an empty list.
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
        policies = check_retry(retry, node=name)
        seconds = check_timeout(timeout, node=name)
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
            retry=policies,
            timeout=seconds,
            subgraph=subgraph,
            destinations=_destinations(name, action, destinations),
        )

    def call(self, state: Mapping[str, Any], config: RunnableConfig, run: RunInfo) -> NodeResult:
        """Call the action with what it declares: the state, the config, the run.

        A node with a policy is not called here: it returns the stream of its attempts (``run_attempts``), each
        calling the action on the node's scheduler (if it has one) when it starts, its waits timed on the run's
        scheduler. An attempt's update — the action returned a mapping or None — is its one chunk
        (``_ReturnedUpdate``).
        """
        if self.retry is None and self.timeout is None:
            return self._call(state, config, run)
        # Every attempt calls the action afresh: in an interrupt() scope of its own, with this call's answers.
        return run_attempts(
            functools.partial(self._attempt_in_scope, current_call(), state, config, run),
            node=self.name,
            retry=self.retry,
            timeout=self.timeout,
            timers=config.scheduler or TimeoutScheduler.singleton(),
            caller=self.scheduler,
        )

    def _attempt_in_scope(
        self, call: CallScope, state: Mapping[str, Any], config: RunnableConfig, run: RunInfo
    ) -> abc.ObservableBase[Any]:
        token = enter_scope(call)
        try:
            return _as_chunks(self.name, scoped(self._call(state, config, run), call, self.name), run)
        finally:
            leave_scope(token)

    def _call(self, state: Mapping[str, Any], config: RunnableConfig, run: RunInfo) -> NodeResult:
        if self.reads is not None:
            state = self.reads(state)
        if self.run_info is None:
            return self.action(state, config) if self.takes_config else self.action(state)
        extra = {self.run_info: run}
        return self.action(state, config, **extra) if self.takes_config else self.action(state, **extra)

    def updates_from_chunks(
        self, chunks: Sequence[Any], state: Mapping[str, Any]
    ) -> Sequence[Mapping[str, Any] | Command[Any] | None]:
        """The updates to merge, in order, once the chunk stream completed.

        With a ``reduce`` function: its one result. Without one, every chunk must itself be an update (a mapping);
        they are merged one after the other, so ``APPEND`` keys collect the items of all chunks. For a node with a
        policy, only the chunks after the last ``NodeRetry`` count (the attempt that completed), and an attempt that
        returned its update is that update.

        Raises:
            InvalidUpdateError: a chunk that is not a mapping, with no ``reduce`` to make one.
        """
        if self.retry is not None or self.timeout is not None:
            chunks = _last_attempt(chunks)
            if len(chunks) == 1 and isinstance(chunks[0], _ReturnedUpdate):
                return (chunks[0].update,)
        if self.subgraph:  # the subgraph's result: its final values of the keys its run wrote
            return cast("SubgraphResult", self.action).result(state, chunks)
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


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _ReturnedUpdate(Mapping[str, Any]):
    """The update an attempt of a node with a policy returned (a mapping, or None), streamed as that attempt's one
    chunk: the subscriber sees it as a read-only mapping (empty for None), and the tail takes ``update`` as it is."""

    __slots__ = ("update",)

    def __init__(self, update: Mapping[str, Any] | Command[Any] | None) -> None:
        self.update = update

    def _view(self) -> Mapping[str, Any]:
        update = self.update.update if isinstance(self.update, Command) else self.update
        return update if update is not None else _EMPTY

    def __getitem__(self, key: str) -> Any:
        return self._view()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())

    def __repr__(self) -> str:
        return repr(dict(self))


def _emit_one(value: Any) -> Observable[Any]:
    """An Observable that emits ``value`` and completes, at once, on the subscribing thread."""

    def _subscribe(observer: abc.ObserverBase[Any], _: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        observer.on_next(value)
        observer.on_completed()
        return Disposable()

    return Observable(_subscribe)


def _as_chunks(name: str, result: Any, run: RunInfo) -> abc.ObservableBase[Any]:
    """An attempt's result as its chunk stream: an update as one ``_ReturnedUpdate``, an Observable as it is, an
    awaitable awaited on the run's loop and then taken the same way."""
    kind = classify(name, result)
    if kind is UPDATE:
        return _emit_one(_ReturnedUpdate(result))
    if kind is STREAM:
        return cast(abc.ObservableBase[Any], result)
    # (Every ObservableBase reactivex makes is an Observable: the cast only tells flat_map's overloads.)
    return from_awaitable(result, run.loop).pipe(
        ops.flat_map(lambda awaited: cast(Observable[Any], _as_chunks(name, awaited, run)))
    )


_UPDATES = (Mapping, Command, BaseModel)  # what a node's update may be (besides None): a model stands for its fields

ResultKind = Literal["update", "stream", "later"]
UPDATE: ResultKind = "update"
STREAM: ResultKind = "stream"
LATER: ResultKind = "later"


def classify(name: str, result: object) -> ResultKind:
    """What calling node ``name``'s action gave: its update (a mapping, None, or a ``Command``), a stream of chunks (an
    Observable), or a result that comes later (an awaitable: an ``async def`` action's coroutine). The one place
    that decides it, for a node's first call, for an attempt of a node with a policy, and for what a later result
    turned out to be.

    Raises:
        NodeInterrupt: the action returned one (an ``async def`` node may stop the run that way).
        InvalidUpdateError: the result is none of those.
    """
    if result is None or isinstance(result, _UPDATES):
        return UPDATE
    # An Observable is awaitable too (reactivex gives it __await__): it is a chunk stream, checked first.
    if isinstance(result, abc.ObservableBase):
        return STREAM
    if inspect.isawaitable(result):
        return LATER
    if isinstance(result, NodeInterrupt):
        raise result  # the attempt stops the run (never retried: see RetryPolicy.retries)
    raise InvalidUpdateError(
        f"node {name!r} returned a {type(result).__name__}; an action returns a mapping (the update), None, an "
        "Observable of chunks, or (async def) a coroutine of one of those",
        node=name,
    )


def _last_attempt(chunks: Sequence[Any]) -> Sequence[Any]:
    """The chunks after the last ``NodeRetry``: those of the attempt that completed."""
    for index in range(len(chunks) - 1, -1, -1):
        if isinstance(chunks[index], NodeRetry):
            return chunks[index + 1 :]
    return chunks
