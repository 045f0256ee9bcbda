"""``StateGraph``: declare nodes and edges, then ``compile()`` into a runnable ``CompiledGraph``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Self

from ..errors import GraphValidationError
from ._config import MultitaskPolicy
from ._constants import END, RESERVED_NAMES, START
from ._edges import Branch, Route
from ._node import NodeAction, NodeSpec, Reducer
from ._state import KeyStrategy, StateSchema

UnsafeHeadPolicy = Literal["rollback", "error", "ignore"]
CancelPolicy = Literal["rewind", "keep"]

if TYPE_CHECKING:
    from ..checkpoint._base import CheckpointSaver
    from ._compiled import CompiledGraph

__all__ = ["StateGraph"]


class StateGraph:
    """A graph under construction.

    ``StateGraph({"messages": KeyStrategy.APPEND})`` declares how updates merge into the state; keys not listed are
    replaced. Nodes are functions of the state; edges say which node runs next. Every method returns the graph, so
    calls can be chained.
    """

    def __init__(self, schema: Mapping[str, KeyStrategy] | None = None) -> None:
        self._schema = StateSchema(schema)
        self._nodes: dict[str, NodeSpec] = {}
        self._edges: list[tuple[str, str]] = []
        self._conditional: list[Branch] = []

    def add_node(self, name: str, action: NodeAction, *, reduce: Reducer | None = None) -> Self:
        """Add a node.

        ``action(state)`` or ``action(state, config)`` returns the node's update (a mapping, or None for no change) or
        an Observable of chunks. Chunks reach the subscriber as ``StreamingOutput`` while the node runs; when the
        stream completes, ``reduce(chunks)`` gives the update. Without ``reduce``, each chunk must be a mapping and
        is merged as an update in turn.
        """
        if not isinstance(name, str) or not name:
            raise GraphValidationError(f"a node name must be a non-empty string, got {name!r}")
        if name in RESERVED_NAMES:
            raise GraphValidationError(f"{name!r} is reserved (START and END are not nodes); choose another name")
        if name in self._nodes:
            raise GraphValidationError(f"a node named {name!r} already exists; node names must be unique")
        self._nodes[name] = NodeSpec.of(name, action, reduce)
        return self

    def add_edge(self, source: str, target: str) -> Self:
        """After ``source`` (a node or ``START``) runs ``target`` (a node or ``END``)."""
        self._edges.append((source, target))
        return self

    def add_conditional_edges(
        self, source: str, route: Route, path_map: Mapping[Hashable, str] | Sequence[str] | None = None
    ) -> Self:
        """After ``source``, ``route(state)`` chooses what runs next.

        With ``path_map`` (a mapping), the route returns one of its keys; with a list of node names it returns one of
        them; without, it returns a node name or ``END``.
        """
        if not callable(route):
            raise GraphValidationError(f"the route of {source!r} must be callable, got {type(route).__name__}")
        mapping: Mapping[Hashable, str] | None
        if path_map is None:
            mapping = None
        elif isinstance(path_map, Mapping):
            mapping = dict(path_map)
        elif isinstance(path_map, str):
            raise GraphValidationError(f"the path map of {source!r} must be a mapping or a list of names, not a string")
        else:
            mapping = {name: name for name in path_map}
        self._conditional.append(Branch(source, route=route, path_map=mapping))
        return self

    def compile(
        self,
        checkpointer: CheckpointSaver | None = None,
        *,
        on_unsafe_head: UnsafeHeadPolicy = "rollback",
        on_cancel: CancelPolicy = "rewind",
        messages_key: str | None = "messages",
        multitask: MultitaskPolicy = "enqueue",
    ) -> CompiledGraph:
        """Check the graph and freeze it into a ``CompiledGraph``.

        - ``checkpointer``: where the thread's checkpoints go (none: runs keep no state between them).
        - ``on_unsafe_head``: what a run with new input does when the thread's head holds a history that cannot take
          a new user message (a half turn left by a crash, an error, or an older version): ``"rollback"`` starts
          from the newest safe checkpoint, ``"error"`` fails the run with ``UnsafeHistoryError``, ``"ignore"``
          starts from the head anyway.
        - ``on_cancel``: what happens to the thread when a subscriber cancels a run (dispose, ``take``,
          ``take_until``, ``timeout``): ``"rewind"`` writes a new head equal to the state before the run, so the
          turn is as if it never happened; ``"keep"`` leaves whatever the run had written.
        - ``messages_key``: the state key holding the chat history the safety rules apply to (None: no rules).
        - ``multitask``: what a run does when another run holds its thread (one run per thread at a time, among the
          graphs sharing this checkpointer in this process): ``"enqueue"`` starts it once the other has ended,
          ``"reject"`` fails it with ``ThreadBusyError``, ``"interrupt"`` cancels the other (which is rewound, and
          whose subscriber gets ``RunInterruptedError``) and starts once it has. ``RunnableConfig(multitask=...)``
          overrides it per run.

        Raises ``GraphValidationError`` naming the problem (unknown node in an edge, no edge from START, a node with
        no way out, several ways out of one node).
        """
        from ._compiled import CompiledGraph

        return CompiledGraph(
            schema=self._schema,
            nodes=dict(self._nodes),
            branches=self._validate(),
            checkpointer=checkpointer,
            on_unsafe_head=on_unsafe_head,
            on_cancel=on_cancel,
            messages_key=messages_key,
            multitask=multitask,
        )

    def _validate(self) -> dict[str, Branch]:
        nodes = self._nodes
        if not nodes:
            raise GraphValidationError("the graph has no nodes; add one with add_node() and an edge from START")
        sources = set(nodes) | {START}
        targets = set(nodes) | {END}
        branches: dict[str, Branch] = {}

        def claim(branch: Branch) -> None:
            if branch.source not in sources:
                what = "END has no outgoing edges" if branch.source == END else f"unknown node {branch.source!r}"
                raise GraphValidationError(f"edge from {branch.source!r}: {what}; nodes: {sorted(nodes)}")
            if branch.source in branches:
                raise GraphValidationError(
                    f"{branch.source!r} has more than one way out (several edges, or an edge and a route); "
                    "a node leads to one node, or to a route that picks one"
                )
            for target in branch.targets() or ():
                if target not in targets:
                    what = "START cannot be a target" if target == START else f"unknown node {target!r}"
                    raise GraphValidationError(f"edge {branch.source!r} -> {target!r}: {what}; nodes: {sorted(nodes)}")
            branches[branch.source] = branch

        for source, target in self._edges:
            claim(Branch(source, target=target))
        for branch in self._conditional:
            claim(branch)
        if START not in branches:
            raise GraphValidationError("no edge from START: add add_edge(START, <first node>)")
        dead_ends = sorted(set(nodes) - set(branches))
        if dead_ends:
            raise GraphValidationError(
                f"node(s) {dead_ends} have no outgoing edge; add an edge to the next node or to END"
            )
        return branches
