"""How a run moves from one superstep to the next: pure functions from a position and what happened to the next
position. No I/O, no threads, no clock.

A run stands at a ``Position`` between supersteps: the state, the tasks of the next superstep, the joins waiting for
more of their sources, the stop it must make before going on (an ``interrupt_before`` / ``interrupt_after``, or a
node's ``interrupt()``), and the inner state of the next superstep's subgraph tasks. A checkpoint is a position
written down: ``Position.next_nodes`` is its ``next`` and ``Position.pending()`` its ``pending``. Every checkpoint a
run writes, and the one ``update_state`` writes, is a position these functions made:

- ``after_input``: new input — merge it into the base's values and route from ``START``;
- ``after_superstep``: a superstep ended — merge its tasks' updates in task order, route out of its nodes (and to
  where their ``Command``s go), count the joins, and see whether the run stops after it or before the next one;
- ``after_resume``: no input (or a ``Command``) — read the base checkpoint's position back and take up its pending work;
- ``after_update``: ``update_state`` — merge values from outside a run, optionally as a node's output;
- ``Position.with_progress`` (a subgraph task finished an inner step) and ``Position.stopped_at`` (the run stops
  inside the superstep it is at).

The run (``_run.py``) decides *when* to move and writes what these functions return; they decide *what* it moves to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, NamedTuple, cast

from .._frozen import freeze
from ..checkpoint._base import Checkpoint, CheckpointSource
from ..errors import InvalidArgumentError, InvalidUpdateError, RouteError, ThreadNotFoundError
from ._constants import END, START
from ._edges import JoinProgress, Send, Task, task_node
from ._interrupt import Command, ParentCommand, PendingInterrupt
from ._spec import GraphSpec
from ._state import as_update

__all__ = [
    "Position",
    "Resumed",
    "after_command",
    "after_input",
    "after_resume",
    "after_step",
    "after_superstep",
    "after_update",
    "check_resumable",
    "plain_update",
    "position_of",
]

_NO_JOINS: JoinProgress = MappingProxyType({})
_NO_PROGRESS: Mapping[int, Mapping[str, Any]] = MappingProxyType({})
_NO_DONE: Mapping[int, tuple[Any, ...]] = MappingProxyType({})
_NO_ANSWERS: Mapping[int, PendingInterrupt] = MappingProxyType({})
_new_tuple = tuple.__new__

Updates = Sequence[tuple[str, Sequence[Mapping[str, Any] | Command[Any] | None]]]
"""What a superstep's tasks returned: ``(node, its updates)`` per task, in task order (a ``Command`` among them
updates the state with its ``update`` and adds its ``goto`` to the next superstep)."""


class Position(NamedTuple):
    """Where a run stands between two supersteps (and, while a superstep runs, the position it started from).

    Immutable (a run moves by taking a new one); a named tuple, as one is made for every superstep.

    Attributes:
        state: the state's values.
        tasks: the tasks of the next superstep; none when the run is over.
        joins: the joins that have some of their sources, by the join's index in the graph.
        stop: the stop the run makes here instead of running ``tasks``, if one.
        progress: the inner state of the subgraph tasks of ``tasks``, by task index (a subgraph that saved its
            progress goes on from there).
        done: the updates of the tasks of ``tasks`` that finished in a superstep that then failed or stopped for a
            human, by task index: the superstep runs again without them, and merges their updates as they were.
        others: the questions other tasks of the superstep asked besides ``stop`` (several nodes of one superstep
            called ``interrupt()``), in task order.
    """

    state: Mapping[str, Any]
    tasks: tuple[Task, ...] = ()
    joins: JoinProgress = _NO_JOINS
    stop: PendingInterrupt | None = None
    progress: Mapping[int, Mapping[str, Any]] = _NO_PROGRESS
    done: Mapping[int, tuple[Any, ...]] = _NO_DONE
    others: tuple[PendingInterrupt, ...] = ()

    @property
    def next_nodes(self) -> tuple[str, ...]:
        """A checkpoint's ``next`` here: the node of each task (a ``Send``'s too), in order."""
        tasks = self.tasks
        for task in tasks:
            if type(task) is not str:
                return tuple(task_node(task) for task in tasks)
        return tasks  # type: ignore[return-value]  # (every task a node's name: the tasks are the names)

    def pending(self) -> dict[str, Any] | None:
        """A checkpoint's ``pending`` here: the payloads of ``Send`` tasks (by their index in ``next``), the joins
        that are waiting, the stop, the subgraph tasks' progress, the finished tasks' updates. None when there is
        nothing."""
        pending: dict[str, Any] = {}
        tasks = self.tasks
        for task in tasks:
            if type(task) is not str:
                pending["send"] = [[index, task.arg] for index, task in enumerate(tasks) if type(task) is Send]
                break
        if self.joins:
            pending["joins"] = {str(index): sorted(sources) for index, sources in self.joins.items()}
        if self.stop is not None:
            pending["interrupt"] = self.stop.to_pending()
        if self.others:
            pending["interrupts"] = [other.to_pending() for other in self.others]
        if self.progress:
            pending["subgraph"] = {str(index): inner for index, inner in sorted(self.progress.items())}
        if self.done:
            pending["done"] = {
                str(index): [_stored(update) for update in updates] for index, updates in sorted(self.done.items())
            }
        return pending or None

    def with_done(self, done: Mapping[int, tuple[Any, ...]]) -> Position:
        """This position, with the tasks in ``done`` (index: updates) finished (see ``done``)."""
        return self._replace(done=MappingProxyType({**self.done, **done})) if done else self

    def with_progress(self, index: int, inner: Mapping[str, Any]) -> Position:
        """This position, with task ``index`` (a subgraph) having reached the inner state ``inner``."""
        return self._replace(progress=MappingProxyType({**self.progress, index: inner}))

    def stopped_at(self, stop: PendingInterrupt, others: tuple[PendingInterrupt, ...] = ()) -> Position:
        """This position, stopped by ``stop`` (and ``others``, more questions of its superstep): the superstep runs
        again when the thread is resumed (but its ``done`` tasks)."""
        return self._replace(stop=stop, others=others)

    @property
    def stops(self) -> tuple[PendingInterrupt, ...]:
        """Every stop here: ``stop`` and ``others``, in task order."""
        return (self.stop, *self.others) if self.stop is not None else ()


def check_resumable(
    base: Checkpoint | None, *, has_saver: bool, thread_id: str | None, command: Command[Any] | None
) -> Checkpoint:
    """Refuse a run without input that has nothing to resume: no saver or thread, no checkpoint, or a ``Command``
    for a thread that waits on no interrupt (or one with a subgraph node's ``graph=``). Returns ``base``, the
    checkpoint it resumes.

    Raises:
        InvalidArgumentError: no checkpointer or thread; a ``Command`` but no pending interrupt, or with ``graph=``.
        ThreadNotFoundError: the thread has no checkpoint.
    """
    if command is not None and command.graph is not None:
        raise InvalidArgumentError(
            "a Command as a run's input resumes an interrupted thread with resume= (and may steer it with update= "
            "and goto=); graph= is what a subgraph's node says to its parent",
            argument="input",
        )
    if not has_saver:
        raise InvalidArgumentError(
            "stream(None) or a Command resumes a thread's run from its checkpoint: the graph needs a "
            "checkpointer (compile(checkpointer=...)) and the config a thread",
            argument="input",
        )
    if base is None:
        raise ThreadNotFoundError(
            f"thread {thread_id!r} has no checkpoint, so there is no run to resume; start it with input "
            "(stream(input, config))",
            thread_id=thread_id or "",
        )
    if command is not None and not (base.pending and "interrupt" in base.pending):
        raise InvalidArgumentError(
            f"thread {thread_id!r} has no pending interrupt (checkpoint {base.id!r}): a Command resumes an "
            "interrupted run (this one may have been answered already); start a turn with input instead",
            argument="input",
        )
    return base


def position_of(checkpoint: Checkpoint | None) -> Position:
    """The position a checkpoint wrote down (an empty one for no checkpoint)."""
    if checkpoint is None:
        return Position(MappingProxyType({}))
    pending = checkpoint.pending or {}
    tasks: list[Task] = list(checkpoint.next)
    for index, arg in pending.get("send", ()):
        tasks[index] = Send(checkpoint.next[index], arg)
    joins = {int(index): frozenset(sources) for index, sources in pending.get("joins", {}).items()}
    stored = pending.get("interrupt")
    progress = {int(index): inner for index, inner in (pending.get("subgraph") or {}).items()}
    done = {
        int(index): tuple(_read(update) for update in updates) for index, updates in pending.get("done", {}).items()
    }
    return Position(
        dict(checkpoint.values),
        tuple(tasks),
        MappingProxyType(joins) if joins else _NO_JOINS,
        PendingInterrupt.from_pending(stored) if stored is not None else None,
        MappingProxyType(progress) if progress else _NO_PROGRESS,
        MappingProxyType(done) if done else _NO_DONE,
        tuple(PendingInterrupt.from_pending(other) for other in pending.get("interrupts", ())),
    )


def _stored(update: Mapping[str, Any] | Command[Any] | None) -> list[Any]:
    """A finished task's update as ``pending["done"]`` keeps it: ``["update", values]``, or for a ``Command``
    ``["command", values, goto]`` with each ``Send`` of ``goto`` as ``["send", node, arg]``."""
    if not isinstance(update, Command):
        return ["update", freeze(as_update(update))]
    goto = update.goto
    targets = (goto,) if isinstance(goto, str | Send) else goto
    return [
        "command",
        freeze(as_update(update.update)),
        [["send", target.node, freeze(target.arg)] if isinstance(target, Send) else target for target in targets],
    ]


def _read(stored: Sequence[Any]) -> Mapping[str, Any] | Command[Any] | None:
    if stored[0] == "update":
        return cast("Mapping[str, Any] | None", stored[1])
    goto = [Send(target[1], target[2]) if not isinstance(target, str) else target for target in stored[2]]
    return Command(update=stored[1], goto=goto)


def after_input(spec: GraphSpec, values: Mapping[str, Any], input: Mapping[str, Any]) -> Position:
    """A turn with new input: ``input`` merged into ``values`` (the base's), routed from ``START``. Joins and an
    interrupt the base was waiting on are left behind.

    Raises:
        InvalidUpdateError: the input does not fit the state's strategies.
        RouteError: a route out of ``START`` returned something that is not one of its labels.
    """
    spec.schema.check_input(input)
    state = spec.schema.merge(values, input, origin="input")
    tasks, joins = spec.advance((START,), state)
    return Position(state, tasks, joins, _stop_before(spec, tasks))


def after_superstep(spec: GraphSpec, at: Position, finished: Updates) -> Position:
    """The position after the superstep that ran from ``at``: its tasks' updates (``finished``, in task order)
    merged into the state, the ways out of its nodes and the joins followed, and the stop after it (or before the
    next one), if the graph makes one.

    Raises:
        InvalidUpdateError: an update does not fit, or two tasks wrote a key that has no reducer.
        RouteError: a route returned something that is not one of its labels.
    """
    schema = spec.schema
    goto: list[tuple[str, Command[Any]]] = []
    if len(finished) == 1:
        name, updates = finished[0]
        state: Mapping[str, Any] = at.state
        for one in updates:
            if isinstance(one, Command):
                goto.append((name, one))
                one = _update_of(name, one)
            state = schema.merge(state, one, node=name)  # errors name the node
        nodes: tuple[str, ...] = (name,)
    else:
        plain: list[tuple[str, Sequence[Mapping[str, Any] | None]]] = []
        for name, updates in finished:
            for one in updates:
                if isinstance(one, Command):
                    break
            else:  # the common case: no command among them
                plain.append((name, cast("Sequence[Mapping[str, Any] | None]", updates)))
                continue
            goto.extend((name, one) for one in updates if isinstance(one, Command))
            plain.append((name, [_update_of(name, one) if isinstance(one, Command) else one for one in updates]))
        state = schema.merge_superstep(at.state, plain)
        nodes = tuple(dict.fromkeys(name for name, _ in finished))
    tasks, joins = spec.advance(nodes, state, at.joins)
    if goto:
        tasks = _with_goto(spec, tasks, goto)
    return Position(state, tasks, joins, _stop_after(spec, nodes, tasks), _NO_PROGRESS)


def after_step(spec: GraphSpec, at: Position, node: str, update: dict[str, Any] | None) -> Position:
    """``after_superstep(spec, at, ((node, (update,)),))`` for the commonest superstep: one node that returned a plain
    update (a ``dict``, or None), from a position with no subgraph progress. The same position, with less work: an
    empty update keeps the state itself (states are never changed in place), and a node whose only way out is an edge
    takes its next tasks from ``GraphSpec.static_next``.

    Raises:
        InvalidUpdateError: the update does not fit the state's strategies.
        RouteError: a route returned something that is not one of its labels.
    """
    state = spec.schema.merge(at.state, update, node=node) if update else at.state
    tasks = spec.static_next.get(node)
    if tasks is None:
        tasks, joins = spec.advance((node,), state, at.joins)
    else:
        joins = at.joins
    stop = _stop_after(spec, (node,), tasks) if spec.interrupt_after or spec.interrupt_before else None
    # Position(state, tasks, joins, stop), without the named tuple's Python-level __new__ (one per step).
    return _new_tuple(Position, (state, tasks, joins, stop, _NO_PROGRESS, _NO_DONE, ()))


def plain_update(update: Mapping[str, Any] | Command[Any] | None) -> Mapping[str, Any] | None:
    """What an update merges into the state: a ``Command``'s ``update``, or the update itself (a pydantic model's
    fields, for a model)."""
    return as_update(update.update if isinstance(update, Command) else update)  # type: ignore[no-any-return]


def _update_of(node: str, command: Command[Any]) -> Mapping[str, Any] | None:
    if command.graph == Command.PARENT:
        raise ParentCommand(node, command)
    if command.resume is not None:
        raise InvalidUpdateError(
            f"node {node!r} returned a Command with resume=: a node's Command updates the state (update=) and says "
            "where to go (goto=); resume= answers an interrupt, as the input of a run",
            node=node,
        )
    return command.update


def _with_goto(spec: GraphSpec, tasks: tuple[Task, ...], goto: list[tuple[str, Command[Any]]]) -> tuple[Task, ...]:
    """``tasks`` (what the edges lead to), then what the nodes' commands go to: a node named again runs once, every
    ``Send`` is a task of its own, ``END`` adds nothing.

    Raises:
        RouteError: a command goes to something that is neither a node, ``END`` nor a ``Send`` to a node.
    """
    all_tasks = list(tasks)
    seen = {task for task in tasks if type(task) is str}
    for node, command in goto:
        targets = command.goto
        for target in (targets,) if isinstance(targets, str | Send) else targets:
            name = target.node if isinstance(target, Send) else target
            if name not in spec.nodes and not (name == END and not isinstance(target, Send)):
                raise RouteError(
                    f"node {node!r} returned Command(goto={target!r}), which is neither a node of the graph nor "
                    f"END; nodes: {sorted(spec.nodes)}",
                    node=node,
                    label=target,
                )
            if isinstance(target, Send):
                all_tasks.append(target)
            elif target != END and target not in seen:
                seen.add(target)
                all_tasks.append(target)
    return tuple(all_tasks)


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a run without input takes up from its base checkpoint.

    Attributes:
        at: the position it goes on from.
        answering: the interrupts inside nodes that this run answers (with their answers so far and the new one; a
            question left unanswered, with its answers so far), by task index.
        record: the ``(node, source)`` of a checkpoint to write before the run goes on, if one: the stop after a
            node moved on to a stop before the next superstep (``(None, "interrupt")``), or the run stopped after its
            last node and is over (``(node, "loop")``).
    """

    at: Position
    answering: Mapping[int, PendingInterrupt] = field(default_factory=lambda: _NO_ANSWERS)
    record: tuple[str | None, CheckpointSource] | None = None


def after_resume(spec: GraphSpec, base: Checkpoint, answer: Any = None) -> Resumed:
    """Take up ``base``'s pending superstep: the one it stopped before, after or inside (then ``answer`` is the
    answer to the node's ``interrupt()``), or the one a failed run left to run again."""
    at = position_of(base)
    waiting, asked = at.stop, at.stops
    if waiting is None:
        return Resumed(at)
    at = at._replace(stop=None, others=())
    if waiting.when == "inside":
        return Resumed(at, answering=_answers(base.thread_id, asked, answer))
    if waiting.when == "after":
        stop = _stop_before(spec, at.tasks)
        if stop is not None:  # the next superstep has a stop before it too: the run stops there
            return Resumed(at._replace(stop=stop), record=(None, "interrupt"))
        if not at.tasks:  # it stopped after the last node: answered, the run is over, and the thread says so
            return Resumed(at._replace(progress=_NO_PROGRESS), record=(waiting.node, "loop"))
    return Resumed(at)


def after_command(
    spec: GraphSpec, base: Checkpoint | None, command: Command[Any], *, has_saver: bool, thread_id: str | None
) -> Resumed:
    r"""A run steered from outside by a ``Command`` with ``update=`` or ``goto=`` (LangGraph's command input):
    ``update`` is merged into the base's values as input is, then the run goes to ``goto``'s nodes (or ``Send`` tasks);
    without ``goto``, it takes up the thread's pending superstep (answering its interrupt with ``resume=``, if it
    waits on one). The position is recorded as the run's input (``(START, "input")``).

    Raises:
        InvalidArgumentError: no checkpointer or thread; or no ``goto`` and nothing to resume (see
            ``check_resumable``).
        ThreadNotFoundError: no ``goto``, and the thread has no checkpoint.
        InvalidUpdateError: the update does not fit the state's strategies.
        RouteError: ``goto`` names a node the graph does not have.
    """
    if command.graph is not None or not has_saver:
        check_resumable(base, has_saver=has_saver, thread_id=thread_id, command=command)
    update = as_update(command.update) if command.update is not None else {}
    spec.schema.check_input(update)
    if command.goto:
        goto = command.goto
        targets = tuple((goto,) if isinstance(goto, str | Send) else goto)
        for target in targets:
            name = target.node if isinstance(target, Send) else target
            if name not in spec.nodes:
                raise RouteError(
                    f"the run's input Command(goto={target!r}) names no node of the graph; nodes: {sorted(spec.nodes)}",
                    node=START,
                    label=target,
                )
        state = spec.schema.merge(base.values if base is not None else {}, update, origin="input")
        return Resumed(Position(state, targets, _NO_JOINS, _stop_before(spec, targets)), record=(START, "input"))
    waiting = base is not None and base.pending is not None and "interrupt" in base.pending
    resuming = check_resumable(base, has_saver=has_saver, thread_id=thread_id, command=command if waiting else None)
    resumed = after_resume(spec, resuming, command.resume if waiting else None)
    state = spec.schema.merge(resumed.at.state, update, origin="input")
    return replace(resumed, at=resumed.at._replace(state=state), record=(START, "input"))


def _answers(thread_id: str, asked: tuple[PendingInterrupt, ...], answer: Any) -> Mapping[int, PendingInterrupt]:
    """The questions ``asked`` (of one superstep) with their answers so far and ``answer``, by task index: one
    question takes ``answer`` itself (or ``{its id: answer}``); several take a mapping of their ids to answers, and a
    question it leaves out is asked again.

    Raises:
        InvalidArgumentError: several questions and ``answer`` is not a mapping of some of their ids, or it names an
            id that is not pending.
    """
    ids = {question.id: question for question in asked}
    if isinstance(answer, Mapping) and answer and all(key in ids for key in answer):
        chosen = dict(answer)
    elif len(asked) == 1:
        chosen = {asked[0].id: answer}
    else:
        raise InvalidArgumentError(
            f"thread {thread_id!r} waits on {len(asked)} interrupts ({sorted(ids)}): answer them with "
            "Command(resume={interrupt_id: answer, ...}) (one left out is asked again)",
            argument="input",
        )
    return MappingProxyType(
        {
            question.task: replace(question, resumes=(*question.resumes, freeze(chosen[question.id])))
            if question.id in chosen
            else question
            for question in asked
        }
    )


def after_update(
    spec: GraphSpec, base: Checkpoint | None, values: Mapping[str, Any] | None, as_node: str | None
) -> Position:
    """``update_state``: ``values`` merged into ``base``'s. As ``as_node``'s output, the graph's ways out of that
    node decide the next superstep (the base's joins count it); as ``END``'s, nothing follows (an interrupt the base
    waited on is dropped); otherwise the base's next superstep and the stop it waits on stay.

    Raises:
        InvalidUpdateError: ``values`` does not fit the state's strategies.
        RouteError: a route out of ``as_node`` returned something that is not one of its labels.
    """
    at = position_of(base)
    state = spec.schema.merge(at.state, values, origin="update_state")
    if as_node is None:
        return at._replace(state=state)
    if as_node == END:
        return Position(state)  # the run is over: no next superstep, no joins, no stop
    tasks, joins = spec.advance((as_node,), state, at.joins)
    return Position(state, tasks, joins)


def _stop_before(spec: GraphSpec, tasks: tuple[Task, ...]) -> PendingInterrupt | None:
    before = spec.interrupt_before
    if before:
        for index, task in enumerate(tasks):
            name = task_node(task)
            if name in before:
                return PendingInterrupt(name, "before", task=index)
    return None


def _stop_after(spec: GraphSpec, finished: tuple[str, ...], tasks: tuple[Task, ...]) -> PendingInterrupt | None:
    after = spec.interrupt_after
    if after:
        for index, name in enumerate(finished):
            if name in after:
                return PendingInterrupt(name, "after", task=index)
    return _stop_before(spec, tasks)
