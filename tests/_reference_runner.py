"""A reference runner built only from reactivex operators: the run as the design states it, with no shortcut.

::

    stream  = defer(start), started in an action on the run's scheduler (or the trampoline)   cold; base read then
              .do_action(terminated)  |> raise the cancelled flag, then dispose  |> finally_action(rewind if cut)
    start   = read the base, check and merge the input, write the input checkpoint; steps(first superstep)
    step N  = defer(action(state)).do_action(keep).map(StreamingOutput) ++ defer(tail)      one task
    step N  = from_iterable(defer(action_i(state_i)).do_action(keep_i).map(StreamingOutput) for each task)
              .merge(max_concurrent) ++ defer(superstep tail)                                several tasks, or a Send
    tail    = merge (in task order), route (edges, then commands), write (guarded by the cancelled flag);
              of(NodeOutput...) ++ defer(steps)                          outputs show the output keys only

The machinery between steps (``concat``, ``defer``) runs on the current thread's trampoline, node streams on the
run's scheduler. ``tests/graph/test_differential.py`` checks the real runner (``rxgraph/graph/_run.py``, one
purpose-built observer per step) against this one.

What a run decides is written here again, plainly, from the documented rules — so that a wrong answer in the
runner's own code is not also the reference's answer:

- ``merge_update``: one update into the state, key by key (``REPLACE``, ``APPEND``, ``MERGE``, a reducer function —
  the user's own function is called, as it is part of the graph — starting from its class's empty value); a key a
  class state does not declare is refused;
- ``merge_superstep``: a superstep's updates in task order, a key without a reducer written by one node only;
- ``split_update``: what a node's ``Command`` brings — its ``update`` to merge, its ``goto`` to follow (``resume=``
  refused);
- ``updates_of``: the updates a streaming node's chunks make (its ``reduce``, or each chunk);
- ``next_tasks``: the routing — fixed edges, route functions and their path maps, ``Send`` items, joins waiting
  across supersteps, then the commands' ``goto`` (a node named again runs once, each ``Send`` is a task, ``END``
  adds nothing, anything else is a ``RouteError``);
- ``pending_work`` and ``work_of``: the pending work a checkpoint holds (``Send`` payloads, joins' progress) and
  the tasks it describes; ``finished_work`` and ``done_of``: the finished branches of a failed superstep it keeps
  (updates, and commands with their ``goto``), and read back;
- ``check_input``, ``shown``, ``keys_read_by`` and ``read_as``: the typed state's key sets — the keys an input may
  bring, the keys the outputs show (the thread keeps every key), and the part of the state (or of a ``Send``'s
  payload) a node or route receives: the keys of the ``TypedDict`` its first parameter is annotated with;
- ``undo_a_dead_run``: how a run that never ended is recognised and undone before the next turn.

What it still shares with the runner, and why:

- the graph as compiled (``graph._spec``), read as data only: the nodes, the declared key strategies and where a
  reducer function's key starts, the state's key sets (``keys``, ``input_keys``, ``output_keys``: which keys are
  private is decided by compiling the classes), each node's ways out (target, route function, path map, in the
  order the builder keeps), the joins' sources and targets, the policies. Building the graph is ``StateGraph``'s
  part, checked by its own tests; the rules above read it and never call its methods (``advance``, ``next_tasks``,
  ``merge``, ``shown``...). The compiled readers (``NodeSpec.reads``, ``Branch.reads``) are only looked at to refuse
  a reader the reference cannot name from a signature;
- ``NodeSpec.call``, with its ``reads`` left out: it calls the user's action with what the action declares (the
  part of the state this module decided, config, ``RunInfo``); that is the user's code, run the same way on both
  sides;
- ``choose_base``: which checkpoint a turn starts from (``tests/graph/test_choose_base.py`` checks it);
- ``ThreadWriter``: the guarded compare-and-set write, ``record_error`` and the rewind. Both runners must drive the
  one writer: the test compares what the saver holds, and the writer is how anything gets there (its ``seq``,
  parents, ``safe``); it is handed the values, ``next`` and pending work this module computed;
- the public types (``Send``, ``FrozenList``, ``FrozenDict``, ``KeyStrategy``, outputs, errors).

The reference models what the generated graphs use: no interrupts, no node policies (retry, timeout), no node
schedulers, no subgraphs (nor ``Command(graph=...)``), no pydantic schemas (validation, model instances), and no
node or route that reads a class its signature does not name (``add_node(input_schema=...)``, or an unannotated one
in a class state with private keys). ``reference_stream`` refuses a graph that uses any of them rather than guess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import reactivex as rx
import typing_extensions
from pydantic import BaseModel
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable
from reactivex.scheduler import CurrentThreadScheduler, ImmediateScheduler

from rxgraph import (
    END,
    START,
    CheckpointConflictError,
    CheckpointSaver,
    Command,
    CompiledGraph,
    FrozenDict,
    FrozenList,
    GraphRecursionError,
    InvalidUpdateError,
    KeyStrategy,
    NodeOutput,
    RouteError,
    SaverClosedError,
    Send,
    StreamingOutput,
)
from rxgraph.graph._choose_base import BaseChoice, choose_base
from rxgraph.graph._run_info import RunInfo
from rxgraph.graph._writer import ThreadWriter
from rxgraph.rx._awaitable import background_loop

__all__ = [
    "Keys",
    "check_input",
    "done_of",
    "finished_work",
    "keys_read_by",
    "merge_superstep",
    "merge_update",
    "next_tasks",
    "pending_work",
    "read_as",
    "reference_stream",
    "shown",
    "split_update",
    "undo_a_dead_run",
    "updates_of",
    "work_of",
]

Task = str | Send
"""A task of a superstep: a node run on the state, or a ``Send`` (a node run on a payload)."""

Waiting = dict[int, frozenset[str]]
"""For each join (by its position in the graph's joins) that is waiting, the sources that finished so far."""


# -- the rules, written again -----------------------------------------------------------------------------------


def frozen(value: Any) -> Any:
    """``value`` with its lists as ``FrozenList`` and its dicts as ``FrozenDict``, all the way down."""
    if isinstance(value, list | FrozenList):
        return FrozenList([frozen(item) for item in value])
    if isinstance(value, Mapping):
        return FrozenDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, set | frozenset):
        return frozenset(frozen(item) for item in value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):  # a named tuple is kept as it is
        return tuple(frozen(item) for item in value)
    return value


@dataclass(frozen=True)
class Keys:
    """What the reference reads of the compiled state schema, as data: each key's strategy, where a reducer
    function's key starts (a class's ``Annotated[int, operator.add]`` starts from ``int()``), and three key sets —
    the keys the state may hold (None: any key, a mapping schema), those a run's input may bring (None: the state's),
    those the outputs show (None: all)."""

    strategies: Mapping[str, Any]
    initial: Mapping[str, Any]
    declared: frozenset[str] | None
    input: frozenset[str] | None
    output: frozenset[str] | None

    @classmethod
    def of(cls, schema: Any) -> Keys:
        return cls(
            dict(schema.strategies),
            dict(getattr(schema, "_initial", None) or {}),
            schema.keys,
            schema.input_keys,
            schema.output_keys,
        )


def check_input(keys: Keys, input: Mapping[str, Any]) -> None:
    """Refuse an input that brings a key the graph's input does not take (its input schema's keys, else the state's
    keys; any key for a mapping schema)."""
    taken = keys.input if keys.input is not None else keys.declared
    if taken is None:
        return
    unknown = sorted(str(key) for key in input if key not in taken)
    if unknown:
        raise InvalidUpdateError(f"input: {unknown} are not keys the graph's input takes ({sorted(taken)})")


def shown(keys: Keys, state: Any) -> Any:
    """What an output (``NodeOutput``, ``StreamingOutput``) shows of ``state``: the output keys only, when the graph
    has an output schema or private keys; the state itself otherwise."""
    if keys.output is None or not isinstance(state, Mapping):
        return state
    return MappingProxyType({key: value for key, value in state.items() if key in keys.output})


def _read_class(function: Callable[..., Any]) -> type | None:
    """The class annotating ``function``'s first parameter, if it is a ``TypedDict`` or a pydantic model."""
    try:
        return _read_class_of(function)
    except TypeError:  # a callable object that cannot be hashed: not cached
        return _read_class_of.__wrapped__(function)


@functools.lru_cache(maxsize=512)
def _read_class_of(function: Callable[..., Any]) -> type | None:
    # Only the first parameter's annotation is resolved (a string under ``from __future__ import annotations``).
    try:
        if inspect.isfunction(function):
            code = function.__code__
            first = code.co_varnames[0] if code.co_argcount else None
        else:
            first = next(iter(inspect.signature(function).parameters), None)
        hint = getattr(function, "__annotations__", {}).get(first) if first is not None else None
        if isinstance(hint, str):
            hint = eval(hint, getattr(function, "__globals__", {}))  # as typing.get_type_hints does
    except Exception:  # no signature, or an annotation that does not resolve: it declares nothing
        return None
    if typing_extensions.is_typeddict(hint) or (isinstance(hint, type) and issubclass(hint, BaseModel)):
        return hint  # type: ignore[no-any-return]
    return None


def keys_read_by(function: Callable[..., Any]) -> frozenset[str] | None:
    """The keys a node's action or a route reads: those of the ``TypedDict`` its first parameter is annotated with.
    None: it declares nothing, and gets the state as it is."""
    declared = _read_class(function)
    if declared is None:
        return None
    return declared.__required_keys__ | declared.__optional_keys__  # type: ignore[attr-defined, no-any-return]


def read_as(keys: frozenset[str] | None, state: Any) -> Any:
    """What a node or route that reads ``keys`` receives of ``state`` (or of a ``Send``'s payload): those keys only."""
    if keys is None or not isinstance(state, Mapping):
        return state
    return MappingProxyType({key: value for key, value in state.items() if key in keys})


def merge_update(
    keys: Keys, state: Mapping[str, Any], update: Any, origin: str, node: str | None = None
) -> dict[str, Any]:
    """A new state: ``update`` merged into ``state`` key by key, each key as its strategy says.

    A key the state does not declare (a class state's keys are closed) is refused. REPLACE (a key with no strategy
    too): the new value. APPEND: the old items (none if absent; an old value that is not a list counts as its items
    if a tuple, else as one item), then the update's items if it is a list or tuple, else the update as one item.
    MERGE: the old mapping (empty if absent or not a mapping) with the update's keys set over it; the update must be
    a mapping. A function: ``function(old, update)``, ``old`` being the key's start (see ``Keys``) or None if absent.
    """
    new = dict(state)
    if update is None:
        return new
    if not isinstance(update, Mapping):
        raise InvalidUpdateError(f"{origin}: an update must be a mapping, got {type(update).__name__}", node=node)
    for key, value in update.items():
        if not isinstance(key, str):
            raise InvalidUpdateError(f"{origin}: state keys must be strings, got {key!r}", node=node)
        if keys.declared is not None and key not in keys.declared:
            raise InvalidUpdateError(f"{origin}: {key!r} is not a key of the state", node=node)
        strategy = keys.strategies.get(key, KeyStrategy.REPLACE)
        if strategy is KeyStrategy.REPLACE:
            new[key] = frozen(value)
        elif strategy is KeyStrategy.APPEND:
            old = new.get(key, [])
            old_items = list(old) if isinstance(old, list | tuple | FrozenList) else [old]
            new_items = list(value) if isinstance(value, list | tuple | FrozenList) else [value]
            new[key] = FrozenList([frozen(item) for item in old_items + new_items])
        elif strategy is KeyStrategy.MERGE:
            if not isinstance(value, Mapping):
                raise InvalidUpdateError(f"{origin}: key {key!r} is MERGE and got a {type(value).__name__}", node=node)
            old = new.get(key)
            merged = dict(old) if isinstance(old, Mapping) else {}
            for inner_key, inner_value in value.items():
                merged[inner_key] = frozen(inner_value)
            new[key] = FrozenDict(merged)
        else:
            try:
                reduced = strategy(new[key] if key in new else keys.initial.get(key), value)
            except Exception as error:
                raise InvalidUpdateError(f"{origin}: the reducer of {key!r} raised {error!r}", node=node) from error
            new[key] = frozen(reduced)
    return new


def merge_superstep(
    keys: Keys, state: Mapping[str, Any], results: Sequence[tuple[str, Sequence[Any]]]
) -> dict[str, Any]:
    """A new state: every task's updates (``(node, updates)`` in task order; a ``Command``'s values, see
    ``split_update``), merged one after the other in that order. A key with no strategy (REPLACE) may be written by
    one node only in a superstep."""
    writer_of: dict[str, str] = {}
    for node, updates in results:
        for update in updates:
            for key in update if isinstance(update, Mapping) else ():
                if keys.strategies.get(key, KeyStrategy.REPLACE) is not KeyStrategy.REPLACE:
                    continue
                if writer_of.setdefault(key, node) != node:
                    raise InvalidUpdateError(
                        f"nodes {writer_of[key]!r} and {node!r} both wrote {key!r}, which has no reducer", node=node
                    )
    new = dict(state)
    for node, updates in results:
        for update in updates:
            new = merge_update(keys, new, update, f"node {node!r}", node)
    return new


def split_update(node: str, update: Any) -> tuple[Any, list[Any]]:
    """What one of a node's updates brings: the values to merge, and where it sends the run besides its edges — a
    ``Command``'s ``update`` and its ``goto`` as a list (one target alone is a list of one), a plain update and
    nowhere. A node's command answers no interrupt: ``resume=`` in it fails the run."""
    if not isinstance(update, Command):
        return update, []
    if update.graph is not None:
        raise NotImplementedError("the reference runner does not model subgraphs (Command(graph=...))")
    if update.resume is not None:
        raise InvalidUpdateError(
            f"node {node!r}: a node's Command updates and routes; resume= is a run's input", node=node
        )
    goto = update.goto
    return update.update, [goto] if isinstance(goto, str | Send) else list(goto)


def updates_of(node: Any, chunks: Sequence[Any], state: Mapping[str, Any]) -> Sequence[Any]:
    """The updates a node's chunk stream makes: its ``reduce`` over all the chunks (given the state too when it
    takes two arguments), or, without one, each chunk in turn (each must be a mapping)."""
    if node.reduce is not None:
        return [node.reduce(chunks, state) if node.reduce_takes_state else node.reduce(chunks)]
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            raise InvalidUpdateError(f"node {node.name!r} streamed a {type(chunk).__name__}", node=node.name)
    return list(chunks)


def name_of(task: Task) -> str:
    return task.node if isinstance(task, Send) else task


def _targets_of_way(way: Any, state: Mapping[str, Any], nodes: Mapping[str, Any]) -> list[Task]:
    """What one way out of a node (a fixed edge, or a route with or without a path map) leads to, END left out."""
    if way.target is not None:
        return [] if way.target == END else [way.target]
    answer = way.route(read_as(keys_read_by(way.route), state))
    labels = list(answer) if isinstance(answer, list | tuple) else [answer]
    found: list[Task] = []
    for label in labels:
        if isinstance(label, Send):
            if label.node not in nodes:
                raise RouteError(f"{way.source!r} sent to unknown node {label.node!r}", node=way.source, label=label)
            found.append(label)
            continue
        if way.path_map is not None:
            try:
                target = way.path_map[label]
            except (KeyError, TypeError):
                raise RouteError(
                    f"{way.source!r} chose {label!r}, not in its map", node=way.source, label=label
                ) from None
        elif isinstance(label, str) and (label in nodes or label == END):
            target = label
        else:
            raise RouteError(f"{way.source!r} chose {label!r}, not a node", node=way.source, label=label)
        if target != END:
            found.append(target)
    return found


def next_tasks(
    graph: Any,
    finished: Sequence[str],
    state: Mapping[str, Any],
    waiting: Mapping[int, frozenset[str]],
    goto: Sequence[tuple[str, Any]] = (),
) -> tuple[tuple[Task, ...], Waiting]:
    """The next superstep's tasks after the nodes in ``finished`` (or ``START``) ran, given the state they made, and
    the joins still waiting after it.

    In order: each finished node's ways out, in the order the graph keeps them; then each join that every one of its
    sources has now reached (in this superstep or an earlier one since it last fired); then where the nodes'
    commands go (``goto``: ``(node, target)`` in task order): a node, a ``Send`` to a node, or ``END`` (nothing).
    A node named twice runs once; every ``Send`` is a task of its own. A join reached by only some of its sources
    remembers them. A route's label or a command's target that leads nowhere is a ``RouteError``.
    """
    view = MappingProxyType(dict(state))
    tasks: list[Task] = []

    def add(task: Task) -> None:
        if isinstance(task, Send) or task not in tasks:
            tasks.append(task)

    for name in finished:
        for way in graph.branches.get(name, ()):
            for task in _targets_of_way(way, view, graph.nodes):
                add(task)
    still_waiting: Waiting = dict(waiting)
    for index, join in enumerate(graph.joins):
        arrived = {name for name in finished if name in join.sources}
        if not arrived:
            continue
        reached = set(still_waiting.get(index, frozenset())) | arrived
        if reached == set(join.sources):
            still_waiting.pop(index, None)
            if join.target != END:
                add(join.target)
        else:
            still_waiting[index] = frozenset(reached)
    for node, target in goto:
        name = target.node if isinstance(target, Send) else target
        if isinstance(name, str) and name in graph.nodes:
            add(target)
        elif not (isinstance(target, str) and target == END):
            raise RouteError(f"{node!r} commanded goto={target!r}, not a node", node=node, label=target)
    return tuple(tasks), still_waiting


def pending_work(tasks: Sequence[Task], waiting: Mapping[int, frozenset[str]]) -> dict[str, Any] | None:
    """What a checkpoint keeps besides ``next``: ``send``, each ``Send``'s ``[position in next, payload]``;
    ``joins``, each waiting join's sources so far (sorted), by its position as a string. None when there is none."""
    pending: dict[str, Any] = {}
    sends = [[position, task.arg] for position, task in enumerate(tasks) if isinstance(task, Send)]
    if sends:
        pending["send"] = sends
    if waiting:
        pending["joins"] = {str(index): sorted(sources) for index, sources in waiting.items()}
    return pending or None


def finished_work(finished: Mapping[int, Sequence[Any]]) -> dict[str, Any]:
    """What a checkpoint keeps of the branches that finished in a superstep that then failed: ``done``, each
    branch's updates by its position as a string — ``["update", values]``, or for a ``Command``
    ``["command", values, goto]``, its goto a list whose ``Send`` items are ``["send", node, payload]``."""

    def kept(update: Any) -> list[Any]:
        if not isinstance(update, Command):
            return ["update", frozen(update)]
        goto = update.goto
        targets = [goto] if isinstance(goto, str | Send) else list(goto)
        written = [["send", t.node, frozen(t.arg)] if isinstance(t, Send) else t for t in targets]
        return ["command", frozen(update.update), written]

    return {"done": {str(index): [kept(u) for u in updates] for index, updates in finished.items()}}


def done_of(pending: Mapping[str, Any] | None) -> dict[int, tuple[Any, ...]]:
    """The finished branches' updates a checkpoint's ``pending`` keeps (``finished_work`` read back)."""

    def update_of(kept: Sequence[Any]) -> Any:
        if kept[0] == "update":
            return kept[1]
        goto = [t if isinstance(t, str) else Send(t[1], t[2]) for t in kept[2]]
        return Command(update=kept[1], goto=goto)

    stored = (pending or {}).get("done", {})
    return {int(index): tuple(update_of(kept) for kept in updates) for index, updates in stored.items()}


def work_of(next_nodes: Sequence[str], pending: Mapping[str, Any] | None) -> tuple[tuple[Task, ...], Waiting]:
    """The tasks and waiting joins a checkpoint's ``next`` and ``pending`` describe (``pending_work`` read back)."""
    pending = pending or {}
    if pending.get("interrupt") is not None or pending.get("subgraph"):
        raise NotImplementedError("the reference runner does not model interrupts or subgraphs")
    tasks: list[Task] = list(next_nodes)
    for position, arg in pending.get("send", []):
        tasks[position] = Send(next_nodes[position], arg)
    waiting = {int(index): frozenset(sources) for index, sources in pending.get("joins", {}).items()}
    return tuple(tasks), waiting


def _refuse_what_is_not_modelled(spec: Any) -> None:
    if spec.interrupt_before or spec.interrupt_after:
        raise NotImplementedError("the reference runner does not model interrupt_before / interrupt_after")
    if spec.schema.model is not None or getattr(spec.schema, "_validators", None):
        raise NotImplementedError("the reference runner does not model pydantic schemas (validation, model instances)")
    for node in spec.nodes.values():
        if node.retry is not None or node.timeout is not None or node.scheduler is not None or node.subgraph:
            raise NotImplementedError(f"node {node.name!r}: the reference runner does not model its options")
    readers = [(f"node {n.name!r}", n.action, n.reads) for n in spec.nodes.values()]
    readers += [
        (f"the route of {w.source!r}", w.route, w.reads) for ws in spec.branches.values() for w in ws if w.route
    ]
    for what, function, compiled_reader in readers:
        declared = _read_class(function)
        if declared is not None and issubclass(declared, BaseModel):
            raise NotImplementedError(f"{what} reads a pydantic model: the reference runner does not model it")
        if compiled_reader is not None and declared is None:
            # add_node(input_schema=...), or a class state with private keys and an action that declares nothing:
            # the class it reads is not in the compiled graph, and the reference does not guess it.
            raise NotImplementedError(f"{what} reads a class its signature does not name: annotate its state")


# -- the run ----------------------------------------------------------------------------------------------------


def reference_stream(graph: CompiledGraph, input: Mapping[str, Any] | None, config: Any) -> Observable[NodeOutput]:
    """What ``graph.stream(input, config)`` does, from reactivex operators only (no run slots: one run at a time)."""
    spec = graph._spec  # the graph as compiled, read as data
    _refuse_what_is_not_modelled(spec)
    keys = Keys.of(spec.schema)
    # Each action is called with the part of the state the reference decided it reads (not the compiled reader).
    actions = {name: dataclasses.replace(node, reads=None) for name, node in spec.nodes.items()}
    reads = {name: keys_read_by(node.action) for name, node in spec.nodes.items()}

    def call(name: str, state: Any, run_config: Any, info: RunInfo) -> Any:
        return actions[name].call(read_as(reads[name], state), run_config, info)

    def per_subscription(subscribe_scheduler: abc.SchedulerBase | None) -> Observable[NodeOutput]:
        run_scheduler = config.scheduler or subscribe_scheduler
        run_config = (
            config if run_scheduler is config.scheduler else config.model_copy(update={"scheduler": run_scheduler})
        )
        writer = ThreadWriter(config.thread_id, spec.checkpointer, spec.messages_key)
        trampoline = CurrentThreadScheduler.singleton()
        terminated = [False]
        current: list[tuple[tuple[Task, ...], Waiting]] = [((), {})]  # the superstep to run, for a failure
        finished_now: list[dict[int, Sequence[Any]]] = [{}]  # its branches that finished, for a failure
        resumed_done: list[dict[int, tuple[Any, ...]]] = [{}]  # the branches a resume does not run again
        info = RunInfo(
            thread_id=config.thread_id, run_id=writer.run_id, context=config.context, loop_of=background_loop
        )

        def commit(state: dict[str, Any], node: str, source: Any, tasks: tuple[Task, ...], waiting: Waiting) -> Any:
            next_nodes = tuple(name_of(task) for task in tasks)
            return writer.commit(
                state, node=node, next_nodes=next_nodes, source=source, pending=pending_work(tasks, waiting)
            )

        def start(_: abc.SchedulerBase | None) -> Observable[NodeOutput]:
            base = None
            if writer.saver is not None and writer.thread_id is not None:
                if spec.policy.on_error == "rewind" and spec.policy.on_cancel == "rewind":
                    undo_a_dead_run(writer.saver, writer.thread_id, spec.messages_key)
                choice = choose_base(
                    writer.saver,
                    writer.thread_id,
                    checkpoint_id=run_config.checkpoint_id,
                    has_input=input is not None,
                    on_unsafe_head=spec.policy.on_unsafe_head,
                )
                writer.start(choice)
                base = choice.base
            state: dict[str, Any] = dict(base.values) if base is not None else {}
            if input is None:
                tasks, waiting = work_of(base.next, base.pending) if base is not None else ((), {})
                resumed_done[0] = done_of(base.pending if base is not None else None)
                return steps(tasks, state, 0, waiting)
            check_input(keys, input)
            state = merge_update(keys, state, input, "input")
            tasks, waiting = next_tasks(spec, (START,), state, {})
            commit(state, START, "input", tasks, waiting)
            return steps(tasks, state, 0, waiting)

        def steps(tasks: tuple[Task, ...], state: dict[str, Any], count: int, waiting: Waiting) -> Observable[Any]:
            if not tasks:
                return rx.empty()
            # What a failure from here on records: the superstep that did not land, so a resume runs it again (but
            # for the branches that finished, whose updates it keeps).
            current[0] = (tasks, waiting)
            finished_now[0] = {}
            if count >= run_config.recursion_limit:
                limit = run_config.recursion_limit
                name = name_of(tasks[0])
                return rx.throw(GraphRecursionError(f"reached {limit=}", limit=limit, next_node=name))
            if len(tasks) == 1 and not isinstance(tasks[0], Send):
                return rx.defer(lambda _: step(tasks[0], state, count + 1, waiting))  # type: ignore[arg-type]
            return rx.defer(lambda _: superstep(tasks, state, count + 1, waiting))

        def superstep(tasks: tuple[Task, ...], state: dict[str, Any], count: int, waiting: Waiting) -> Observable[Any]:
            view = MappingProxyType(state)
            results: list[Sequence[Any]] = [() for _ in tasks]
            done, resumed_done[0] = resumed_done[0], {}  # only the first superstep of a resume has any

            def branch(index: int, task: Task) -> Observable[Any]:
                def start_branch(_: Any) -> Observable[Any]:
                    # The run failed, or was cancelled, while the merge was still starting branches: no more. (A
                    # cancel usually stops the merge itself, but not when it lands on another thread while the
                    # finished branch's subscription is still being made: reactivex's merge then takes that branch's
                    # completion and starts the next one.)
                    if terminated[0] or writer.cancelled:
                        return rx.empty(scheduler=ImmediateScheduler.singleton())
                    name = name_of(task)
                    node = spec.nodes[name]
                    state_of: Any = frozen(task.arg) if isinstance(task, Send) else view
                    if index in done:  # finished before the superstep failed: its updates as they were
                        results[index] = finished_now[0][index] = done[index]
                        return rx.empty(scheduler=ImmediateScheduler.singleton())
                    result = call(name, state_of, run_config, info)
                    if result is None or isinstance(result, Mapping | Command):
                        # No chunks: the branch is done when its action returns, and frees its place at once.
                        results[index] = finished_now[0][index] = (result,)
                        return rx.empty(scheduler=ImmediateScheduler.singleton())
                    if not isinstance(result, abc.ObservableBase):
                        return rx.throw(TypeError(f"node {name!r} returned a {type(result).__name__}"))
                    chunks: list[Any] = []

                    def completed() -> None:
                        results[index] = updates_of(node, chunks, state_of)
                        finished_now[0][index] = results[index]

                    return on_run_scheduler(result).pipe(
                        ops.do_action(chunks.append),
                        ops.map(lambda c: StreamingOutput(name, shown(keys, state_of), c)),
                        ops.do_action(on_completed=completed),
                    )

                return rx.defer(start_branch)

            branches = rx.from_iterable(
                [branch(i, task) for i, task in enumerate(tasks)], scheduler=ImmediateScheduler.singleton()
            )
            limit = spec.max_concurrency or len(tasks)
            merged = branches.pipe(ops.merge(max_concurrent=limit))
            return rx.concat(merged, rx.defer(lambda _: superstep_tail(tasks, state, results, count, waiting)))

        def superstep_tail(
            tasks: tuple[Task, ...],
            state: dict[str, Any],
            results: list[Sequence[Any]],
            count: int,
            waiting: Waiting,
        ) -> Observable[Any]:
            if writer.cancelled:
                return rx.empty()
            finished_now[0] = {}  # every branch finished: a failure from here on is the superstep's, run again whole
            try:
                split = [
                    (name_of(task), [split_update(name_of(task), update) for update in updates])
                    for task, updates in zip(tasks, results, strict=True)
                ]
                state = merge_superstep(keys, state, [(name, [values for values, _ in both]) for name, both in split])
                goto = [(name, target) for name, both in split for _, targets in both for target in targets]
                finished = tuple(dict.fromkeys(name_of(task) for task in tasks))
                following, waiting = next_tasks(spec, finished, state, waiting, goto)
            except (InvalidUpdateError, RouteError) as error:
                return rx.throw(error)
            checkpoint = commit(state, ",".join(finished), "loop", following, waiting)
            if checkpoint is None and writer.saver is not None:
                return rx.empty()
            view = shown(keys, MappingProxyType(state))
            checkpoint_id = checkpoint.id if checkpoint else None
            outputs = [NodeOutput(name_of(task), view, checkpoint_id=checkpoint_id) for task in tasks]
            return rx.concat(
                rx.from_iterable(outputs, scheduler=ImmediateScheduler.singleton()),
                rx.defer(lambda _: steps(following, state, count, waiting)),
            )

        def step(name: str, state: dict[str, Any], count: int, waiting: Waiting) -> Observable[Any]:
            node = spec.nodes[name]
            view = MappingProxyType(state)
            result = call(name, view, run_config, info)
            chunks: list[Any] = []
            updates: Callable[[], Sequence[Any]]
            if result is None or isinstance(result, Mapping | Command):
                stream: Observable[Any] = rx.empty()
                updates = lambda: (result,)  # noqa: E731
            elif isinstance(result, abc.ObservableBase):
                stream = on_run_scheduler(result)
                updates = lambda: updates_of(node, chunks, view)  # noqa: E731
            else:
                return rx.throw(TypeError(f"node {name!r} returned a {type(result).__name__}"))
            seen = shown(keys, view)
            forwarded = stream.pipe(ops.do_action(chunks.append), ops.map(lambda c: StreamingOutput(name, seen, c)))
            return rx.concat(forwarded, rx.defer(lambda _: tail(name, state, updates(), count, waiting)))

        def tail(name: str, state: dict[str, Any], updates: Sequence[Any], count: int, waiting: Waiting) -> Any:
            if writer.cancelled:
                return rx.empty()
            try:
                goto: list[tuple[str, Any]] = []
                for update in updates:
                    values, targets = split_update(name, update)
                    goto += [(name, target) for target in targets]
                    state = merge_update(keys, state, values, f"node {name!r}", name)
                following, waiting = next_tasks(spec, (name,), state, waiting, goto)
            except (InvalidUpdateError, RouteError) as error:
                return rx.throw(error)
            checkpoint = commit(state, name, "loop", following, waiting)
            if checkpoint is None and writer.saver is not None:
                return rx.empty()
            view = shown(keys, MappingProxyType(state))
            output = NodeOutput(name, view, checkpoint_id=checkpoint.id if checkpoint else None)
            return rx.concat(
                rx.return_value(output, scheduler=ImmediateScheduler.singleton()),
                rx.defer(lambda _: steps(following, state, count, waiting)),
            )

        def on_run_scheduler(source: abc.ObservableBase[Any]) -> Observable[Any]:
            # The node's stream gets the run's scheduler; the concat machinery around it keeps the trampoline.
            return Observable(lambda observer, _: source.subscribe(observer, scheduler=run_scheduler))

        def machinery(observer: abc.ObserverBase[NodeOutput], _: abc.SchedulerBase | None) -> abc.DisposableBase:
            return rx.defer(start).subscribe(observer, scheduler=trampoline)

        def mark_terminated(*_: Any) -> None:
            terminated[0] = True

        def record_failure(error: Exception) -> None:
            # As the runner does: stop writing, then rewind or keep-and-record, as on_error says.
            terminated[0] = True
            writer.mark_cancelled()
            if not writer.started:
                return
            text = f"{type(error).__name__}: {error}"
            with contextlib.suppress(CheckpointConflictError, SaverClosedError):
                if spec.policy.on_error == "rewind":
                    writer.rewind(error=text)
                else:
                    tasks, waiting = current[0]
                    pending = pending_work(tasks, waiting)
                    if finished_now[0] and len(tasks) > 1:  # a parallel superstep: its finished branches stay done
                        pending = {**(pending or {}), **finished_work(dict(sorted(finished_now[0].items())))}
                    writer.record_error(text, next_nodes=tuple(name_of(task) for task in tasks), pending=pending)

        def rewind_if_cut() -> None:
            if terminated[0] or spec.policy.on_cancel == "keep":
                writer.close()
                return
            # Another writer moved the head (leave it), or the process "died" (nothing of it lands any more).
            with contextlib.suppress(CheckpointConflictError, SaverClosedError):
                writer.rewind()

        def start_later(observer: abc.ObserverBase[NodeOutput], _: abc.SchedulerBase | None) -> abc.DisposableBase:
            # Start in an action on the run's scheduler (or the trampoline), and subscribe the machinery inside a
            # running trampoline, so that its work is queued until its subscription is held (subscribe_on would
            # do the first, but also dispose later, on the scheduler: not how a run stops).
            held = SerialDisposable()

            def inside(*_: Any) -> None:
                held.disposable = Observable(machinery).subscribe(observer)

            scheduled = (run_scheduler or trampoline).schedule(lambda *_: trampoline.schedule(inside))
            return CompositeDisposable(scheduled, held)

        run = Observable(start_later).pipe(ops.do_action(on_error=record_failure, on_completed=mark_terminated))
        return _flag_before_dispose(run, writer).pipe(ops.finally_action(rewind_if_cut))

    # Not rx.defer: it hands its factory an ImmediateScheduler when the subscriber gave none, and "none" matters.
    return Observable(lambda observer, scheduler: per_subscription(scheduler).subscribe(observer, scheduler=scheduler))


def undo_a_dead_run(saver: CheckpointSaver, thread_id: str, messages_key: str | None) -> None:
    """The rule as the design states it, from the whole history: a head that names a next superstep, waits on no
    human and is a step's (or the input's) was left by a run that never ended; put back the state that run's first
    checkpoint started from."""
    history = saver.list(thread_id)
    if not history:
        return
    head = history[0]
    if head.source not in ("input", "loop") or not head.next or (head.pending or {}).get("interrupt") is not None:
        return
    by_id = {c.id: c for c in history}
    first = head
    while first.parent_id in by_id and by_id[first.parent_id].run_id == head.run_id:
        first = by_id[first.parent_id]
    base = by_id.get(first.parent_id) if first.parent_id is not None else None
    if first.parent_id is not None and base is None:
        return
    writer = ThreadWriter(thread_id, saver, messages_key, run_id=head.run_id)
    writer.start(BaseChoice(head, base, rewind_to=base))
    with contextlib.suppress(CheckpointConflictError):
        writer.rewind(error="dead")


def _flag_before_dispose(source: Observable[NodeOutput], writer: ThreadWriter) -> Observable[NodeOutput]:
    """On dispose: raise the run's cancelled flag, then dispose upstream (harmless after a terminal event)."""

    def subscribe(observer: abc.ObserverBase[NodeOutput], scheduler: abc.SchedulerBase | None) -> abc.DisposableBase:
        inner = source.subscribe(observer, scheduler=scheduler)

        def dispose() -> None:
            writer.mark_cancelled()
            inner.dispose()

        return Disposable(dispose)

    return Observable(subscribe)
