"""``StateGraph``: declare nodes and edges, then ``compile()`` into a runnable ``CompiledGraph``."""

from __future__ import annotations

import warnings
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Self

from reactivex import abc

from .._arguments import check_scheduler
from .._deprecated import deprecation_message
from ..checkpoint._base import CheckpointSaver
from ..errors import GraphValidationError, InvalidArgumentError, InvalidTypeError
from ._compiled import CompiledGraph
from ._config import CancelPolicy, ErrorPolicy, MultitaskPolicy, TurnPolicy, UnsafeHeadPolicy
from ._constants import END, RESERVED_NAMES, START
from ._edges import Branch, Join, Route
from ._node import NodeAction, NodeSpec, Reducer
from ._policies import RetryPolicy
from ._spec import GraphSpec
from ._state import KeyReducer, KeyStrategy, StateSchema
from ._subgraph import SubgraphNode
from ._typed import StateDeclaration, node_schema

__all__ = ["StateGraph"]


class StateGraph:
    """A graph under construction.

    ``StateGraph({"messages": KeyStrategy.APPEND})`` declares how updates merge into the state; keys not listed are
    replaced. Nodes are functions of the state; edges say which node runs next. Every method returns the graph, so
    calls can be chained.
    """

    def __init__(
        self,
        state_schema: Mapping[str, KeyStrategy | KeyReducer] | type | None = None,
        *,
        input_schema: type | None = None,
        output_schema: type | None = None,
        schema: Mapping[str, KeyStrategy | KeyReducer] | None = None,
    ) -> None:
        """Args:
            state_schema: the state's keys and how updates merge into them. A mapping of key strategies
                (``{"messages": KeyStrategy.APPEND}``: keys not listed are replaced, any key is taken); or a class
                that declares the keys — a ``TypedDict`` or a pydantic model, each key's strategy written as
                ``Annotated[type, strategy]`` (a ``KeyStrategy`` or a reducer function, such as ``operator.add``).
                A graph whose state is a class refuses updates to keys it does not declare; with a pydantic model,
                the values an update brings in are validated (and coerced) with the model's field types, and nodes
                and routes receive the state as an instance of the model. A reducer function of a class's key starts
                from its type's empty value (``list()`` for ``Annotated[list, operator.add]``).
            input_schema: a class naming the keys a run's input may bring (default: the state's keys); an input with
                another key is refused. A subgraph takes these keys of its parent's state.
            output_schema: a class naming the keys a run's outputs show (default: the state's keys): ``invoke``'s
                result, each output's ``state``, and what a subgraph hands its parent. Keys it leaves out are
                private: nodes read and write them, the thread keeps them (``get_state`` shows them), the outputs do
                not.
            schema: the former name of ``state_schema`` (deprecated).

        Raises:
            InvalidTypeError: a schema that is none of those, a key that is not a string, or a strategy that is not
                a ``KeyStrategy`` or a reducer function.
        """
        if schema is not None:
            warnings.warn(
                deprecation_message("StateGraph(schema=...)", "StateGraph(state_schema) or its first argument"),
                DeprecationWarning,
                stacklevel=2,
            )
            state_schema = schema
        self._declared = StateDeclaration(state_schema, input_schema, output_schema)
        self._nodes: dict[str, NodeSpec] = {}
        self._edges: list[tuple[str, str]] = []
        self._joins: list[Join] = []
        self._conditional: list[Branch] = []
        self._reads: dict[str, type | None] = {}  # the class each node reads the state as, if one
        self._route_reads: list[type | None] = []  # the same for each route of self._conditional

    def add_node(
        self,
        name: str,
        action: NodeAction | CompiledGraph,
        *,
        reduce: Reducer | None = None,
        scheduler: abc.SchedulerBase | None = None,
        retry: RetryPolicy | Sequence[RetryPolicy] | None = None,
        timeout: float | timedelta | None = None,
        destinations: Sequence[str] | None = None,
        input_schema: type | None = None,
    ) -> Self:
        """Add a node.

        ``action(state)`` or ``action(state, config)`` returns the node's update (a mapping, or None for no change) or
        an Observable of chunks. Chunks reach the subscriber as ``StreamingOutput`` while the node runs; when the
        stream completes, ``reduce(chunks)`` (or ``reduce(chunks, state)``) gives the update. Without ``reduce``,
        each chunk must be a mapping and is merged as an update in turn. An ``async def`` action is awaited on the
        run's event loop (see ``RunInfo.loop``); disposing the run cancels it. An action that declares a parameter
        annotated ``RunInfo`` receives the run's (its thread, id, ``context``, and the ``cancelled`` event).

        With ``retry`` or ``timeout`` the node always streams: an attempt that returns its update (a mapping or None)
        streams it as its one chunk, a read-only mapping (empty for None), before the ``NodeOutput``. Disposing the
        run disposes the running attempt and a pending backoff; no attempt starts after it.

        A ``CompiledGraph`` as the action is a subgraph: its run is this node's step. It starts from this graph's
        state (or a ``Send``'s payload), its outputs stream as ``SubgraphEvent`` chunks (with their ``path``), and the
        updates its nodes made are merged into this graph's state, with this graph's key strategies, when it ends.
        Its checkpoints are the parent's: after each inner step the parent's thread gets a checkpoint under the
        node's namespace (``node`` ``"sub/inner"``, the parent's state unchanged, the inner step and updates in its
        ``pending``), so a resume after a failure or a crash goes on inside the subgraph from its last step, an
        interrupt inside it resumes into it, and a cancel rewinds it with the parent's turn.

        Args:
            name: a name no other node has (not ``START`` or ``END``).
            action: the node's function, or a ``CompiledGraph`` (a subgraph).
            reduce: turns a streaming node's chunks into its update.
            scheduler: where to call the action — a ``ThreadPoolScheduler`` for blocking work (an HTTP call, a
                database query), so that it never runs on the thread that delivers the run's events (an asyncio
                loop, say). Default: the graph's ``node_scheduler`` (``compile``), else the run's own flow.
            retry: call the action again when it fails (``RetryPolicy``: attempts, backoff, which errors). Before
                each new attempt the node streams a ``NodeRetry`` chunk — the subscriber gets
                ``StreamingOutput(node, state, chunk=NodeRetry(attempt, error, delay))`` and should discard what
                the node streamed before it — then waits ``delay`` seconds on the run's scheduler. Only the chunks
                after the last ``NodeRetry`` make the update (``reduce`` never sees a ``NodeRetry``). The last
                error, or one ``retry_on`` does not retry, fails the run. A list of policies: the first whose
                ``retry_on`` takes the error decides (see ``RetryPolicy``).
            destinations: the nodes (or ``END``) a ``Command(goto=...)`` the action returns may go to; default: what
                its return annotation says (``-> Command[Literal["a", "b"]]``). A node that routes only with commands
                needs them in place of an outgoing edge; they are checked by ``compile`` and drawn.
            input_schema: the part of the state the action reads, a ``TypedDict`` or pydantic model class; default:
                the class annotating its first parameter (``def node(state: Private)``), else the whole state. Its
                keys are the state's too: keys no other schema declares are private to the nodes that read them
                (never in the outputs). A pydantic class is received as an instance, a ``TypedDict`` as a read-only
                mapping of its keys.
            timeout: seconds (or a ``timedelta``) each attempt may take, from its start to its update or its
                stream's end; an attempt still running then is disposed and fails with ``NodeTimeoutError``, which
                the default ``RetryPolicy`` retries. Timed on the run's scheduler.

        Returns:
            This graph.

        Raises:
            GraphValidationError: the name is empty, reserved or taken.
            InvalidTypeError: ``action`` or ``reduce`` is not callable, ``action`` takes no argument, ``retry`` is
                not a ``RetryPolicy`` or a list of them, or ``timeout`` is not a number or a ``timedelta``.
            InvalidArgumentError: ``timeout`` is not a positive, finite time, or ``retry`` is an empty list.
        """
        if not isinstance(name, str) or not name:
            raise GraphValidationError(f"a node name must be a non-empty string, got {name!r}", node=str(name))
        if name in RESERVED_NAMES:
            raise GraphValidationError(
                f"{name!r} is reserved (START and END are not nodes); choose another name", node=name
            )
        if name in self._nodes:
            raise GraphValidationError(f"a node named {name!r} already exists; node names must be unique", node=name)
        subgraph = isinstance(action, CompiledGraph)
        if subgraph and reduce is not None:
            raise InvalidTypeError(
                f"node {name!r} runs a subgraph, whose updates are its nodes' own: it takes no reduce",
                argument="reduce",
            )
        reads = input_schema if input_schema is not None or isinstance(action, CompiledGraph) else node_schema(action)
        if reads is not None:
            self._declared.read_by_node(reads)
        spec = NodeSpec.of(
            name,
            SubgraphNode(name, action) if isinstance(action, CompiledGraph) else action,
            reduce,
            scheduler,
            retry=retry,
            timeout=timeout,
            subgraph=subgraph,
            destinations=destinations,
        )
        self._reads[name] = reads
        self._nodes[name] = spec
        return self

    def add_edge(self, source: str | Sequence[str], target: str) -> Self:
        """After ``source`` (a node or ``START``) runs ``target`` (a node or ``END``). Checked by ``compile``.

        Several edges out of one node run their targets together, in one superstep, concurrently (see
        ``compile(max_concurrency=)``). A list of sources is a join: ``add_edge(["b", "c"], "d")`` runs ``d`` once
        both ``b`` and ``c`` have finished, in the superstep after the last of them.

        Returns:
            This graph.

        Raises:
            GraphValidationError: ``source`` is an empty list, or a list naming a node twice.
        """
        if isinstance(source, str):
            self._edges.append((source, target))
            return self
        sources = tuple(source)
        if not sources or len(set(sources)) != len(sources):
            raise GraphValidationError(
                f"a join needs distinct source nodes, got {list(sources)!r}", node=str(sources[0] if sources else "")
            )
        if len(sources) == 1:
            self._edges.append((sources[0], target))
        else:
            self._joins.append(Join(sources, target))
        return self

    def add_conditional_edges(
        self, source: str, route: Route, path_map: Mapping[Hashable, str] | Sequence[str] | None = None
    ) -> Self:
        """After ``source``, ``route(state)`` chooses what runs next.

        With ``path_map`` (a mapping), the route returns one of its keys; with a list of node names it returns one of
        them; without, it returns a node name or ``END``. It may return a list of those to run several nodes in the
        next superstep, and ``Send(node, arg)`` items to run a node over a payload of its own (map-reduce). A route
        that returns anything else fails the run with ``RouteError``.

        Args:
            source: the node (or ``START``) the route follows.
            route: ``route(state) -> label``, called with the state ``source`` produced (as its first parameter's
                annotation says, when that is a ``TypedDict`` or pydantic class: see ``add_node``'s ``input_schema``).
            path_map: labels to node names, or the node names the route may return.

        Returns:
            This graph.

        Raises:
            GraphValidationError: ``route`` is not callable, or ``path_map`` is a string.
        """
        if not callable(route):
            raise GraphValidationError(
                f"the route of {source!r} must be callable, got {type(route).__name__}", node=source
            )
        mapping: Mapping[Hashable, str] | None
        if path_map is None:
            mapping = None
        elif isinstance(path_map, Mapping):
            mapping = dict(path_map)
        elif isinstance(path_map, str):
            raise GraphValidationError(
                f"the path map of {source!r} must be a mapping or a list of names, not a string", node=source
            )
        else:
            mapping = {name: name for name in path_map}
        reads = node_schema(route)
        if reads is not None:
            self._declared.read_by_node(reads)
        self._conditional.append(Branch(source, route=route, path_map=mapping))
        self._route_reads.append(reads)
        return self

    def compile(
        self,
        checkpointer: CheckpointSaver | None = None,
        *,
        policy: TurnPolicy | None = None,
        on_unsafe_head: UnsafeHeadPolicy | None = None,
        on_cancel: CancelPolicy | None = None,
        multitask: MultitaskPolicy | None = None,
        on_error: ErrorPolicy | None = None,
        messages_key: str | None = "messages",
        node_scheduler: abc.SchedulerBase | None = None,
        interrupt_before: Collection[str] = (),
        interrupt_after: Collection[str] = (),
        max_concurrency: int | None = None,
    ) -> CompiledGraph:
        """Check the graph and freeze it into a ``CompiledGraph``.

        Args:
            checkpointer: where the thread's checkpoints go (none: runs keep no state between them).
            policy: how turns begin and end (``TurnPolicy``: ``on_unsafe_head``, ``on_cancel``, ``multitask``, with
                their defaults); the three keywords below override single fields of it.
            on_unsafe_head: ``"rollback"`` (default), ``"error"`` or ``"ignore"`` — see ``TurnPolicy``.
            on_cancel: ``"rewind"`` (default) or ``"keep"`` — see ``TurnPolicy``.
            multitask: ``"enqueue"`` (default), ``"reject"`` or ``"interrupt"`` — what a run does when another run
                holds its thread (one run per thread at a time, among the graphs sharing this checkpointer in this
                process); ``RunnableConfig(multitask=...)`` overrides it per run.
            on_error: ``"keep"`` (default) or ``"rewind"`` — what a failed run leaves behind (see ``TurnPolicy``).
            messages_key: the state key holding the chat history the safety rules apply to (None: no rules).
            node_scheduler: where to call every node that has no ``scheduler`` of its own (see ``add_node``).
            interrupt_before: nodes the run stops before: it ends with an ``InterruptOutput`` and the thread's state
                says the interrupt is pending, until ``stream(Command(resume=...), config)`` runs the node.
            interrupt_after: nodes the run stops after, once their superstep's checkpoint is written.
            max_concurrency: the most tasks of one superstep that run at the same time (None: all of them).

        Returns:
            The compiled graph.

        Raises:
            GraphValidationError: the graph is malformed (an unknown node in an edge or a join, no edge from START, a
                node with no way out), or an interrupt names an unknown node, naming the problem.
            InvalidArgumentError: a policy that is not one of its choices, an empty ``messages_key``, or a
                ``max_concurrency`` below 1.
            InvalidTypeError: ``checkpointer`` is not a ``CheckpointSaver``.
        """
        if checkpointer is not None and not isinstance(checkpointer, CheckpointSaver):
            raise InvalidTypeError(
                f"checkpointer must be a CheckpointSaver, got {type(checkpointer).__name__}", argument="checkpointer"
            )
        if messages_key is not None and not (isinstance(messages_key, str) and messages_key):
            raise InvalidArgumentError(
                f"messages_key must be a non-empty string or None, got {messages_key!r}", argument="messages_key"
            )
        check_scheduler(node_scheduler, argument="node_scheduler")
        if max_concurrency is not None and (type(max_concurrency) is not int or max_concurrency < 1):
            raise InvalidArgumentError(
                f"max_concurrency must be an int >= 1 or None, got {max_concurrency!r}", argument="max_concurrency"
            )
        before = self._interrupt_nodes(interrupt_before, "interrupt_before")
        after = self._interrupt_nodes(interrupt_after, "interrupt_after")
        turns = (policy or TurnPolicy()).with_overrides(
            on_unsafe_head=on_unsafe_head, on_cancel=on_cancel, multitask=multitask, on_error=on_error
        )
        schema = self._declared.schema()
        nodes = {name: self._bound(node, schema, node_scheduler) for name, node in self._nodes.items()}
        conditional = [
            replace(branch, reads=self._declared.reader_of(reads, schema))
            for branch, reads in zip(self._conditional, self._route_reads, strict=True)
        ]
        spec = GraphSpec(
            schema=schema,
            nodes=MappingProxyType(nodes),
            branches=MappingProxyType(self._validate(conditional)),
            checkpointer=checkpointer,
            policy=turns,
            messages_key=messages_key,
            joins=tuple(self._joins),
            interrupt_before=before,
            interrupt_after=after,
            max_concurrency=max_concurrency,
        )
        return CompiledGraph(spec)

    def _bound(self, node: NodeSpec, schema: StateSchema, node_scheduler: abc.SchedulerBase | None) -> NodeSpec:
        """``node`` as the compiled graph runs it: on ``node_scheduler`` if it has no scheduler of its own, given the
        state as its input schema says, and, for a subgraph, handing its result over with this graph's
        strategies."""
        changes: dict[str, Any] = {}
        if node.scheduler is None and node_scheduler is not None:
            changes["scheduler"] = node_scheduler
        if isinstance(node.action, SubgraphNode):
            changes["action"] = node.action.under(schema)
        else:
            reads = self._declared.reader_of(self._reads.get(node.name), schema)
            if reads is not None:
                changes["reads"] = reads
        return replace(node, **changes) if changes else node

    def _interrupt_nodes(self, names: Collection[str], argument: str) -> frozenset[str]:
        if isinstance(names, str):
            raise GraphValidationError(f"{argument} takes a list of node names, not a string: [{names!r}]", node=names)
        unknown = sorted(str(name) for name in names if name not in self._nodes)
        if unknown:
            raise GraphValidationError(
                f"{argument} names unknown node(s) {unknown}; nodes: {sorted(self._nodes)}", node=unknown[0]
            )
        return frozenset(names)

    def _validate(self, conditional: Sequence[Branch]) -> dict[str, tuple[Branch, ...]]:
        nodes = self._nodes
        if not nodes:
            raise GraphValidationError("the graph has no nodes; add one with add_node() and an edge from START")
        sources = set(nodes) | {START}
        targets = set(nodes) | {END}
        branches: dict[str, list[Branch]] = {}

        def check_target(source: str, target: str) -> None:
            if target not in targets:
                what = "START cannot be a target" if target == START else f"unknown node {target!r}"
                raise GraphValidationError(
                    f"edge {source!r} -> {target!r}: {what}; nodes: {sorted(nodes)}", node=source
                )

        def claim(branch: Branch) -> None:
            if branch.source not in sources:
                what = "END has no outgoing edges" if branch.source == END else f"unknown node {branch.source!r}"
                raise GraphValidationError(
                    f"edge from {branch.source!r}: {what}; nodes: {sorted(nodes)}", node=branch.source
                )
            for target in branch.targets() or ():
                check_target(branch.source, target)
            branches.setdefault(branch.source, []).append(branch)

        for source, target in dict.fromkeys(self._edges):  # the same edge twice is one edge
            claim(Branch(source, target=target))
        for branch in conditional:
            claim(branch)
        for join in self._joins:
            for source in join.sources:
                if source not in nodes:
                    raise GraphValidationError(
                        f"join {list(join.sources)} -> {join.target!r}: {source!r} is not a node; nodes: "
                        f"{sorted(nodes)}",
                        node=source,
                    )
            check_target(str(join.sources), join.target)
        if START not in branches:
            raise GraphValidationError("no edge from START: add add_edge(START, <first node>)", node=START)
        joined = {source for join in self._joins for source in join.sources}
        commanding = {name for name, node in nodes.items() if node.destinations}
        for name in sorted(commanding):
            for target in nodes[name].destinations:
                check_target(name, target)
        dead_ends = sorted(set(nodes) - set(branches) - joined - commanding)
        if dead_ends:
            raise GraphValidationError(
                f"node(s) {dead_ends} have no outgoing edge; add an edge to the next node or to END (or, for a node "
                "that routes with Command(goto=...), its destinations)",
                node=dead_ends[0],
            )
        return {source: tuple(ways) for source, ways in branches.items()}
