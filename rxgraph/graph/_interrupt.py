"""Human in the loop: ``interrupt(value)`` in a node, ``Command(resume=...)`` to go on, and the ``PendingInterrupt`` a
checkpoint keeps for it (the rest of a checkpoint's pending work is ``_transition.Position``'s)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import CoroutineType
from typing import Any, ClassVar, Generic, Literal, TypeVar

from .._frozen import freeze
from ..errors import InterruptSwallowedError, InvalidArgumentError, InvalidUpdateError, NodeInterrupt
from ._edges import Send

__all__ = [
    "NO_CALL",
    "CallScope",
    "Command",
    "DirectCalls",
    "InterruptWhen",
    "ParentCommand",
    "PendingInterrupt",
    "call_finished",
    "current_call",
    "enter_scope",
    "in_node_call",
    "interrupt",
    "leave_scope",
    "returned",
    "scoped",
]

N = TypeVar("N")
"""The node names a node's ``Command`` may go to (``Command[Literal["a", "b"]]``), for its annotation."""

InterruptWhen = Literal["before", "after", "inside"]
"""Where a run stopped: before a node (``interrupt_before``), after one (``interrupt_after``), or inside one that
called ``interrupt(value)``."""


@dataclass(frozen=True, slots=True)
class Command(Generic[N]):
    """A command: what ``stream`` takes, in place of input, to resume an interrupted thread — or what a node returns
    to update the state and say where the run goes next, in one step.

    - ``resume`` (input only) is the answer to the pending interrupt: inside a node that called
      ``interrupt(value)``, that call returns it when the node runs again. For a stop before or after a node
      (``interrupt_before`` / ``interrupt_after``) the run just goes on, and ``resume`` is not used.
    - ``update`` (from a node) is the node's update, merged as any node's.
    - ``goto`` (from a node) names what runs next, besides what the node's edges lead to: a node, ``END``, a
      ``Send``, or a list of those (each ``Send`` a task of its own, a node named twice run once). A node that routes
      only this way declares where it may go — ``add_node(..., destinations=[...])``, or its return annotation
      ``-> Command[Literal["a", "b"]]`` — so that the graph can be checked and drawn.
    - ``graph=Command.PARENT`` (from a node of a subgraph) sends the command to the parent graph: the subgraph's run
      ends there, the parent merges the subgraph's result and then ``update`` with its own strategies, and ``goto``
      names the parent's nodes (declare them as the subgraph node's ``destinations`` if it has no edge out).

    Raises:
        InvalidArgumentError: ``graph`` is neither None nor ``Command.PARENT``.
    """

    resume: Any = None
    update: Mapping[str, Any] | None = None
    goto: str | Send | Sequence[str | Send] = ()
    graph: str | None = None

    PARENT: ClassVar[str] = "__parent__"
    """``Command(graph=Command.PARENT, ...)``: the command is for the graph this subgraph runs in."""

    def __post_init__(self) -> None:
        if self.graph is not None and self.graph != Command.PARENT:
            raise InvalidArgumentError(
                f"Command(graph=...) takes None (this graph) or Command.PARENT, got {self.graph!r}", argument="graph"
            )


class ParentCommand(InvalidUpdateError):
    """A node returned ``Command(graph=Command.PARENT)``: the run ends, and the subgraph node running it hands the
    command to the parent. Seen by a user only when the graph is not running as a subgraph."""

    def __init__(self, node: str, command: Command[Any]) -> None:
        super().__init__(
            f"node {node!r} returned Command(graph=Command.PARENT), but its graph is not running as a subgraph: "
            "there is no parent graph to send it to",
            node=node,
        )
        self.command = command


@dataclass(frozen=True, slots=True)
class PendingInterrupt:
    """An interrupt the thread waits on (``StateSnapshot.interrupt``, ``InterruptOutput``).

    ``node`` is the node it is about, ``when`` where the run stopped, ``value`` what the node asked (None for a stop
    before or after a node), ``task`` the index of the node's task in its superstep, and ``resumes`` the answers it
    was given so far (a node that calls ``interrupt()`` several times gets them back in order). For a subgraph node
    whose inner run stopped, ``subgraph`` is that run's state — its values, next superstep, pending work and the
    updates it made so far — kept here, in the parent's checkpoint, so that the resume goes on inside it.
    """

    node: str
    when: InterruptWhen
    value: Any = None
    task: int = 0
    resumes: tuple[Any, ...] = ()
    subgraph: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        """A stable id for this question: its task's index, its node, and which ``interrupt()`` call of the node it
        is (or ``before`` / ``after``). ``Command(resume={id: answer, ...})`` answers several pending interrupts."""
        which = str(len(self.resumes)) if self.when == "inside" else self.when
        return f"{self.task}:{self.node}:{which}"

    def to_pending(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "when": self.when,
            "value": self.value,
            "task": self.task,
            "resumes": list(self.resumes),
            **({"subgraph": self.subgraph} if self.subgraph is not None else {}),
        }

    @classmethod
    def from_pending(cls, stored: Mapping[str, Any]) -> PendingInterrupt:
        return cls(
            node=stored["node"],
            when=stored["when"],
            value=stored.get("value"),
            task=int(stored.get("task", 0)),
            resumes=tuple(stored.get("resumes", ())),
            subgraph=stored.get("subgraph"),
        )


@dataclass(frozen=True, slots=True)
class CallScope:
    """What one node call knows beyond its state: the answers to its ``interrupt()`` calls (a resumed node), the
    inner state of the subgraph it goes on with, and how a subgraph saves its progress in the parent's thread
    (``save(inner_node, inner_state)``)."""

    resumes: tuple[Any, ...] = ()
    subgraph: Mapping[str, Any] | None = None
    save: Callable[[str, Mapping[str, Any]], None] | None = None


NO_CALL = CallScope()


class _Scope:
    """The ``interrupt()`` calls of one node call: what it was given, how many answers it used, and whether one of
    them stopped it (raised ``NodeInterrupt``).

    Made for every node call, so made cheaply: no ``__init__``, the class's values stand until ``interrupt()`` (or
    ``_scope_of``) sets the instance's own."""

    call: CallScope = NO_CALL
    used: int = 0
    asked: bool = False
    active: bool = True  # a call's own scope is active while it is set; a ``DirectCalls`` scope only during a call


def _scope_of(call: CallScope) -> _Scope:
    scope = _Scope()
    if call is not NO_CALL:
        scope.call = call
    return scope


_scope: ContextVar[_Scope | None] = ContextVar("rxgraph_interrupt_scope", default=None)


def interrupt(value: Any = None) -> Any:
    """Stop the run here and ask for ``value``'s answer; when the run is resumed with ``Command(resume=answer)``,
    the node runs again from its start and this call returns ``answer``.

    Call it in a node's action (plain or ``async def``; an ``async def`` node may also return ``NodeInterrupt(value)``),
    or in code run in a context copied during the call (``contextvars.copy_context()``) while the node's work goes
    on: a stream the node returned, say. Once the node returned its update, the call is over there too.
    The run ends with an ``InterruptOutput``; the thread's head is the state before the node's
    superstep, with the interrupt pending (``get_state(config).interrupt``). A node that calls ``interrupt``
    several times gets each answer back in order when it is resumed; what it did before the call runs again on
    every resume, so keep side effects after it (or idempotent).

    Let the ``NodeInterrupt`` it raises leave the node: a node that catches it (``except Exception`` around the call)
    and returns anyway would go on as if the human had answered, so the run fails instead, with
    ``InterruptSwallowedError`` naming the node.

    Raises:
        NodeInterrupt: always, unless the run is resuming this call, which returns the answer.
        InvalidArgumentError: called outside a node's action.
    """
    scope = _scope.get()
    if scope is None or not scope.active:
        raise InvalidArgumentError(
            "interrupt() is called from a node's action while the graph runs it (not from a thread or a task the "
            "node started: return NodeInterrupt(value) from the node instead)",
            argument="value",
        )
    index = scope.used
    if index < len(scope.call.resumes):
        scope.used += 1
        return scope.call.resumes[index]
    scope.asked = True
    raise NodeInterrupt(freeze(value), index=index)


def enter_scope(call: CallScope = NO_CALL) -> Any:
    """Open the scope of one node call; returns the token ``leave_scope`` takes."""
    return _scope.set(_scope_of(call))


def call_finished() -> None:
    """The node call whose scope is open now is over, nothing of it goes on later: ``interrupt()`` is refused, and
    ``in_node_call()`` is False, in the contexts copied during it from now on."""
    scope = _scope.get()
    if scope is not None:
        scope.active = False


def leave_scope(token: Any) -> None:
    _scope.reset(token)


def returned(node: str) -> None:
    """The action of ``node`` returned, in the scope open now: refuse it if an ``interrupt()`` of this call stopped
    it and the ``NodeInterrupt`` was caught.

    Raises:
        InterruptSwallowedError: the node caught the ``NodeInterrupt`` of its ``interrupt()`` call.
    """
    scope = _scope.get()
    if scope is not None and scope.asked:
        raise _swallowed(node)


def _swallowed(node: str) -> InterruptSwallowedError:
    return InterruptSwallowedError(
        f"node {node!r} called interrupt() and then returned: the NodeInterrupt it raised was caught (an "
        "`except Exception` around the call?), which would run the node on as if the human had answered. Let "
        "it propagate: catch narrower exceptions, or re-raise NodeInterrupt",
        node=node,
    )


class DirectCalls:
    """The ``interrupt()`` scope of the node calls of a run's direct steps (see ``Run._drive``) over one stretch of
    its drive loop: what the general path does for a call that answers nothing (``enter_scope(NO_CALL)``,
    ``scoped``, ``call_finished`` for a plain update, ``leave_scope``), with the context var set once for the
    stretch instead of twice per call.

    The scope is active only while a node is called: between two calls (the run landing a step, its subscriber
    taking an output) ``interrupt()`` is refused and ``in_node_call()`` is False, as with no scope, and so in the
    contexts copied during a call that returned a plain update. A call that raises, or returns more than a plain
    update (a stream, a coroutine: work that goes on after the call, maybe in a context copied during it), keeps
    the scope as its own, active, and the context var gets back the value it had before; the next call sets a
    fresh one. So does ``close()``, which ends the stretch.
    """

    __slots__ = ("_scope", "_token")

    def __init__(self) -> None:
        self._scope: _Scope | None = None
        self._token: Token[_Scope | None] | None = None

    def call(self, node: str, action: Callable[..., Any], state: Any, config: Any = None) -> Any:
        """``action(state)`` (``action(state, config)`` when a config is given) for node ``node``, in the scope,
        which answers nothing (``NO_CALL``), its result checked.

        Raises:
            InterruptSwallowedError: the node caught the ``NodeInterrupt`` of its ``interrupt()`` call.
            Exception: what the action raised.
        """
        scope = self._scope
        if scope is None:
            scope = self._scope = _Scope()
            self._token = _scope.set(scope)
        else:
            scope.active = True
        try:
            result = action(state) if config is None else action(state, config)
        except BaseException:
            self.close()  # (the scope stays active in the contexts copied during the call, as a call's own does)
            raise
        if scope.asked:
            self.close()
            raise _swallowed(node)
        if result is None or type(result) is dict:
            scope.active = False
            return result
        self.close()  # work that goes on after the call keeps the scope, active, in the contexts copied during it
        if type(result) is CoroutineType:
            return _in_scope(result, NO_CALL, node)
        return result

    def close(self) -> None:
        """The stretch ended: the context var has the value it had before it again."""
        if self._token is not None:
            _scope.reset(self._token)
            self._token = None
        self._scope = None


async def _in_scope(coroutine: Coroutine[Any, Any, Any], call: CallScope, node: str) -> Any:
    token = _scope.set(_scope_of(call))
    try:
        result = await coroutine
        returned(node)
        return result
    finally:
        _scope.reset(token)


def scoped(result: Any, call: CallScope, node: str) -> Any:
    """What node ``node``'s call returned, checked: a coroutine wrapped so that its body runs in a scope of its own
    (an ``async def`` node's body runs later, on the run's loop, outside the call's scope), checked when it returns;
    any other result checked now (see ``returned``).

    Raises:
        InterruptSwallowedError: the node caught the ``NodeInterrupt`` of its ``interrupt()`` call.
    """
    if inspect.iscoroutine(result):
        return _in_scope(result, call, node)
    scope = _scope.get()  # returned(node), inlined: this runs for every node call
    if scope is not None and scope.asked:
        returned(node)
    return result


def in_node_call() -> bool:
    """Whether this code runs inside a node's call (its action, on the thread or task the run called it in)."""
    scope = _scope.get()
    return scope is not None and scope.active


def current_call() -> CallScope:
    """The scope of the node call running now (for a node whose attempts run later, each in a scope of its own)."""
    scope = _scope.get()
    return scope.call if scope is not None else NO_CALL
