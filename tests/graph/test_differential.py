"""The runner against a reference runner made of reactivex operators only (``tests/_reference_runner.py``).

Each case is a graph (chains, loops, conditional edges, a fan-out of branches into a join — by edges or by
``Send``, with a branch that may take one more step so that the join waits across supersteps; synchronous,
streaming, failing and thread-pool nodes; nodes that return a ``Command`` going to a node, to ``END`` or by ``Send``,
some routing only that way; keys that append, merge, replace or use a reducer function — given as a mapping, or as a
``TypedDict`` state with closed keys, a private key only some nodes and routes read, input and output schemas) and a
two-turn scenario on one thread: a first turn run to its end, then a second turn cut as the case says — a dispose at
a tick (before or after that tick's events), ``timeout``, ``take_until``, ``take``, or a dispose from ``on_next`` —
in virtual time, synchronously, or with nodes completing on a real thread pool. Both runners must give the same
outputs (at the same ticks), the same terminal signal, the same checkpoints (with their pending work) and the same
head.

Cases are generated deterministically (``derandomize``, each from a seed); each test counts what it compared and
checks that it compared enough, so the tests can run alone and in any order.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal

import pytest
import reactivex as rx
from _reference_runner import reference_stream
from _support import StepPath
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from reactivex import operators as ops
from reactivex.abc import DisposableBase
from reactivex.disposable import Disposable
from reactivex.scheduler import CurrentThreadScheduler
from reactivex.testing import TestScheduler
from typing_extensions import TypedDict

from rxgraph import (
    END,
    START,
    Checkpoint,
    CheckpointSaver,
    Command,
    CompiledGraph,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    RunnableConfig,
    SaverClosedError,
    Send,
    StateGraph,
    StreamingOutput,
)
from rxgraph.testing import DelegatingSaver

Mode = Literal["virtual", "sync", "pool"]
Kind = Literal[
    "update", "none", "marbles", "marbles_reduce", "iterable", "raise", "stream_error", "pool", "command", "stray"
]
Goto = Literal["ahead", "end", "send"]


@dataclass(frozen=True)
class NodeCase:
    kind: Kind
    chunks: int  # chunks a streaming node emits
    gap: int  # ticks between them (marbles)
    # A "command" node returns Command(update=..., goto=...), a "marbles_reduce" node with a goto reduces to one: to
    # where its edge leads (again), to END, a Send to a node further on (see build: never a cycle of Sends); one
    # alone, or a list. ``only``: a chain node with no edge out, routing by its command alone (destinations declared).
    goto: tuple[Goto, ...] = ()
    update: bool = True  # the command has an update
    only: bool = False


@dataclass(frozen=True)
class Case:
    mode: Mode
    nodes: tuple[NodeCase, ...]
    skip_on_odd: bool  # node i routes to i+2 instead of i+1 when the visit count is odd
    loop_to: int | None  # the last node loops back here ...
    loops: int  # ... while fewer than this many visits
    recursion_limit: int
    cancel: tuple[str, float]  # (how, when) for the second turn: see _observe
    branches: tuple[NodeCase, ...] = ()  # n0 fans out to these, which join into n1 (or END) ...
    send: bool = False  # ... by Send items from a route instead of edges
    tail: NodeCase | None = None  # b0 goes on to c0, which joins in its stead: the join waits one superstep more
    max_concurrency: int | None = None
    on_error: Literal["keep", "rewind"] = "keep"  # crash cases run under the agents' policy, which undoes them
    typed: bool = False  # the state is _State, with _Private's key, _Taken as input, _Shown as output

    def cut(self, how: str, when: float) -> Case:
        return dataclasses.replace(self, cancel=(how, when))


# -- building the case's graph ---------------------------------------------------------------------------------


class _State(TypedDict, total=False):
    """A typed case's state: the strategies of the mapping the other cases use, as annotations; its keys are closed
    (a "stray" node's update fails the run)."""

    log: Annotated[list[str], KeyStrategy.APPEND]
    by: Annotated[dict[str, int], KeyStrategy.MERGE]
    hits: Annotated[int, operator.add]  # a reducer function's key starts from int(): operator.add needs no None
    visits: int
    item: int  # what a Send's payload brings to the branches, which read _State


class _Private(TypedDict, total=False):
    """What odd chain nodes and the routes of even ones read: the visits, and ``secret``, which no other class
    declares — a private key, written by chain nodes, kept by the checkpoints, shown by no output."""

    visits: int
    secret: str


class _Taken(TypedDict, total=False):
    """A typed case's input schema."""

    log: Annotated[list[str], KeyStrategy.APPEND]


class _Shown(TypedDict, total=False):
    """A typed case's output schema: ``hits`` and ``by`` are in the checkpoints, not in the outputs."""

    log: Annotated[list[str], KeyStrategy.APPEND]
    visits: int


Target = str | tuple[Literal["send"], str]
"""Where a command goes, resolved: a node, ``END``, or ``("send", node)`` for a ``Send`` to that node."""


_COMMANDED_CALLS = 4
"""A node's command goes somewhere in its first calls only (then ``goto=()``), counted over the graph's turns: a
command that sends back into a join closes a cycle no route counts, which would otherwise run to the recursion
limit."""


def _goto(targets: Sequence[Target], visits: int, calls: int) -> Any:
    """A ``Command``'s ``goto`` for ``targets`` at a node's call number ``calls``: one alone as it is, several as a
    list (a ``Send`` carries an item)."""
    if calls > _COMMANDED_CALLS:
        return ()
    resolved = [
        Send(target[1], {"item": 7, "visits": visits}) if isinstance(target, tuple) else target for target in targets
    ]
    return resolved[0] if len(resolved) == 1 else resolved


def _node_action(
    name: str,
    case: NodeCase,
    pool: ThreadPoolExecutor | None,
    effects: list[str],
    *,
    branch: bool = False,
    goto: Sequence[Target] = (),
    typed: bool = False,
) -> Callable[..., Any]:
    """Node ``n{i}``, or a branch ``b{i}`` / ``c0`` (which writes only keys with a strategy: branches of one
    superstep may not both write a plain key). A branch run by a ``Send`` logs the item its payload carries, a node
    that sees the private key logs it. In a typed case, the effects say which keys each call was given."""

    def pulled(updates: list[dict[str, Any]]) -> Any:
        for number, update in enumerate(updates):
            effects.append(f"{name} pulled {number}")  # a side effect the subscriber cannot see
            yield update

    calls = [0]

    def command(update: dict[str, Any], visits: int) -> Command[Any]:
        effects.append(f"{name} commands")
        return Command(update=update if case.update else None, goto=_goto(goto, visits, calls[0]))

    def action(state: Mapping[str, Any]) -> Any:
        calls[0] += 1
        effects.append(f"{name} called on {','.join(sorted(state))}" if typed else f"{name} called")
        visits = state.get("visits", 0) + 1
        label = name if state.get("item") is None else f"{name}#{state['item']}"
        if state.get("secret") is not None:
            label += f"<{state['secret']}>"
        secret = {"secret": name} if typed else {}
        if branch:
            update = {"log": label, "hits": 1, "by": {name: visits}}
            if case.kind == "update":
                return update
            if case.kind == "command":
                return command(update, visits)
            if case.kind == "pool":
                assert pool is not None
                return _on_the_pool(pool, update)
        if case.kind == "update":
            return {"log": name, "visits": visits, "hits": 1, **secret}
        if case.kind == "command":
            return command({"log": label, "visits": visits, **secret}, visits)
        if case.kind == "stray":  # a key the typed state does not declare
            return {"log": name, "stray": visits}
        if case.kind == "none":
            return None
        if case.kind == "raise":
            raise ValueError(f"{name} failed")
        updates = [{"log": f"{label}.{i}"} for i in range(case.chunks)] + ([] if branch else [{"visits": visits}])
        if not updates:
            updates = [{"log": label}]
        if case.kind == "iterable":
            return rx.from_iterable(pulled(updates))
        if case.kind == "pool":
            assert pool is not None
            return _on_the_pool(pool, {"log": name, "visits": visits})
        frame = "-" * case.gap
        letters = "abcdefghij"[: len(updates)]
        lookup = dict(zip(letters, updates, strict=True))
        ending = "#" if case.kind == "stream_error" else "|"
        return rx.from_marbles(frame + frame.join(letters) + ending, timespan=1.0, lookup=lookup, error=KeyError(name))

    return action


def _on_the_pool(pool: ThreadPoolExecutor, update: dict[str, Any]) -> rx.Observable[dict[str, Any]]:
    """An update computed on a pool thread, whose completion always arrives on that thread, after the subscribing
    thread finished what it was doing: the job finishes only once the subscription has registered for it, and the
    subscribing thread's trampoline has run the action that subscribed.

    Otherwise the threads race, and the runners' outputs differ as the races do: a parallel superstep's merge, still
    handing out its branches on the subscribing thread, could see the first branch's completion first and start the
    next branch there instead of on the pool thread; a node's items, pulled in a trampoline there, can be stopped by a
    cancel between two items, and not on the pool thread, where no trampoline runs."""
    registered = threading.Event()
    future = pool.submit(lambda: (registered.wait(60), update)[1])

    def subscribe(observer: Any, scheduler: Any = None) -> DisposableBase:
        def done(finished: Future[dict[str, Any]]) -> None:
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                observer.on_error(error)
                return
            observer.on_next(finished.result())
            observer.on_completed()

        future.add_done_callback(done)
        CurrentThreadScheduler.singleton().schedule(lambda *_: registered.set())
        return Disposable(future.cancel)

    return rx.create(subscribe)


def _reduce(chunks: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    logs = [c["log"] for c in chunks if "log" in c]
    visits = [c["visits"] for c in chunks if "visits" in c]
    return {"log": "+".join(logs), **({"visits": visits[-1]} if visits else {})}


def _count(current: int | None, update: int) -> int:
    return (current or 0) + update


def _reads(function: Callable[..., Any], schema: type) -> None:
    """Annotate ``function``'s first parameter (``state``) with ``schema``: the part of the state it is given."""
    function.__annotations__ = {"state": schema}


def build(case: Case, saver: CheckpointSaver, pool: ThreadPoolExecutor | None, effects: list[str]) -> CompiledGraph:
    typed = case.typed
    if typed:
        graph = StateGraph(_State, input_schema=_Taken, output_schema=_Shown)
    else:
        graph = StateGraph({"log": KeyStrategy.APPEND, "by": KeyStrategy.MERGE, "hits": _count})
    names = [f"n{i}" for i in range(len(case.nodes))]
    branches = [f"b{i}" for i in range(len(case.branches))]
    after = names[1] if len(names) > 1 else END  # where the branches join

    def send_to(name: str) -> str | None:
        """Where ``name``'s command sends a payload: a chain node to the last branch, a branch to the one before it,
        b0 to c0 or to a failing last branch (which sends nothing), so that Sends never make a cycle, and their count
        stays small."""
        if name in names:
            last = branches[-1] if branches else names[-1]
            return last if last != name else None
        if name == "c0":
            return None
        index = branches.index(name)
        if index > 0:
            return branches[index - 1]
        if case.tail is not None:
            return "c0"
        failing = len(branches) > 1 and case.branches[-1].kind in _FAILING
        return branches[-1] if failing else None

    def ahead_of(name: str) -> str:
        """Where ``name``'s edges lead when no route chooses otherwise: a command going "ahead" goes there too."""
        if name in names:
            index = names.index(name)
            if index == 0 and branches:
                return branches[0]
            return names[index + 1] if index + 1 < len(names) else END
        return "c0" if name == "b0" and case.tail is not None else after

    def targets(name: str, node: NodeCase) -> list[Target]:
        sent = send_to(name)
        return [
            ahead_of(name) if g == "ahead" else ("send", sent) if g == "send" and sent is not None else END
            for g in node.goto
        ]

    def add(name: str, node: NodeCase, *, branch: bool = False, reads: type = _State, only: bool = False) -> None:
        goto = targets(name, node)
        action = _node_action(name, node, pool, effects, branch=branch, goto=goto, typed=typed)
        if typed:
            _reads(action, reads)
        reduce: Callable[..., Any] | None = None
        if node.kind == "marbles_reduce":
            reduced = [0]

            def to_command(chunks: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> Command[Any]:
                reduced[0] += 1
                return Command(update=_reduce(chunks), goto=_goto(goto, state.get("visits", 0) + 1, reduced[0]))

            reduce = to_command if goto else _reduce
        destinations = [target if isinstance(target, str) else target[1] for target in goto] if only else None
        graph.add_node(name, action, reduce=reduce, destinations=destinations)

    def only(index: int, node: NodeCase) -> bool:
        """Whether chain node ``index`` routes by its command alone (n0 of a fan-out keeps its way out)."""
        return node.only and bool(node.goto) and not (branches and index == 0)

    for index, (name, node) in enumerate(zip(names, case.nodes, strict=True)):
        add(name, node, reads=_Private if index % 2 else _State, only=only(index, node))
    graph.add_edge(START, names[0])
    for name, node in zip(branches, case.branches, strict=True):
        add(name, node, branch=True)
    if branches:
        if case.send:

            def fan_out(state: Mapping[str, Any]) -> list[Send]:
                if typed:
                    effects.append(f"route {names[0]} on {','.join(sorted(state))}")
                return [Send(b, {"item": i, "visits": state.get("visits", 0)}) for i, b in enumerate(branches)]

            if typed:
                _reads(fan_out, _State)
            graph.add_conditional_edges(names[0], fan_out)
        else:
            for branch in branches:
                graph.add_edge(names[0], branch)
        joined = list(branches)
        if case.tail is not None:
            add("c0", case.tail, branch=True)
            graph.add_edge("b0", "c0")
            joined[0] = "c0"
        graph.add_edge(joined, after) if len(joined) > 1 else graph.add_edge(joined[0], after)
    for index, name in enumerate(names):
        if branches and index == 0:
            continue  # its way out is the fan-out
        if only(index, case.nodes[index]):
            continue  # its way out is its command
        ahead = names[index + 1] if index + 1 < len(names) else END
        skip = names[index + 2] if index + 2 < len(names) else END
        last = index == len(names) - 1

        def route(
            state: Mapping[str, Any], ahead: str = ahead, skip: str = skip, last: bool = last, name: str = name
        ) -> str:
            if typed:
                effects.append(f"route {name} on {','.join(sorted(state))}")
            visits = state.get("visits", 0)
            if last and case.loop_to is not None and visits < case.loops:
                return names[case.loop_to]
            return skip if case.skip_on_odd and visits % 2 else ahead

        if typed:
            _reads(route, _State if index % 2 else _Private)
        graph.add_conditional_edges(name, route)
    return graph.compile(checkpointer=saver, max_concurrency=case.max_concurrency, on_error=case.on_error)


# -- observing one scenario -------------------------------------------------------------------------------------


class _MortalSaver(DelegatingSaver):
    """A real saver whose writes fail while its process is "dead": a crash is a dispose during which nothing the
    run writes lands, not even its rewind (its slot is freed, as a killed process's lock is)."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.dead = False

    def die_while(self, dispose: Callable[[], None]) -> None:
        self.dead = True
        try:
            dispose()
        finally:
            self.dead = False

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        if self.dead:
            raise SaverClosedError("the process died", thread_id=checkpoint.thread_id)
        return self.inner.put(checkpoint, expected_head=expected_head)


Runner = Callable[[CompiledGraph, Mapping[str, Any], RunnableConfig], rx.Observable[NodeOutput]]


def _real(graph: CompiledGraph, input: Mapping[str, Any], config: RunnableConfig) -> rx.Observable[NodeOutput]:
    return graph.stream(input, config)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "FrozenList":
        return [_plain(v) for v in value]
    return value


def _one_turn(
    stream: rx.Observable[NodeOutput],
    turn: int,
    cancel: tuple[str, float],
    scheduler: TestScheduler | None,
    record: Callable[[int, NodeOutput], None],
    seen: list[Any],
    effects: list[str],
    saver: _MortalSaver,
) -> None:
    """Subscribe one turn, cut it as ``cancel`` says, and wait until it has ended."""
    ended = threading.Event()
    subscription: list[DisposableBase] = []
    how, when = cancel
    count = [0]
    trigger: rx.subject.Subject[None] = rx.subject.Subject()
    terminal: list[str] = []

    def on_next(output: NodeOutput) -> None:
        record(turn, output)
        count[0] += 1
        if count[0] == int(when) and how == "dispose_on_next":
            subscription[0].dispose()
        if count[0] == int(when) and how == "take_until_on_next":
            trigger.on_next(None)

    def finished() -> None:
        seen.append(
            (turn, scheduler.clock if scheduler is not None else None, "end", terminal[0] if terminal else "cancelled")
        )
        effects.append(f"turn {turn} ended")
        ended.set()

    if how == "take":
        stream = stream.pipe(ops.take(int(when)))
    elif how == "timeout":
        stream = stream.pipe(ops.timeout(when, scheduler=scheduler))
    elif how == "take_until":
        stream = stream.pipe(ops.take_until(rx.timer(when, scheduler=scheduler)))
    elif how == "take_until_on_next":
        stream = stream.pipe(ops.take_until(trigger))
    stream = stream.pipe(
        ops.do_action(
            on_error=lambda e: terminal.append(f"error {type(e).__name__}"),
            on_completed=lambda: terminal.append("completed"),
        ),
        ops.finally_action(finished),
    )

    def subscribe(*_: Any) -> None:
        subscription.append(stream.subscribe(on_next, lambda e: None))

    if scheduler is not None:
        start = scheduler.clock
        subscribe()
        due = start + when
        if how == "dispose_at":
            scheduler.schedule_absolute(due, lambda *_: subscription[0].dispose())
        elif how == "crash_at":
            scheduler.schedule_absolute(due, lambda *_: saver.die_while(subscription[0].dispose))
        elif how == "dispose_late":
            scheduler.schedule_absolute(
                due, lambda *_: scheduler.schedule_absolute(due, lambda *_: subscription[0].dispose())
            )
        scheduler.advance_to(start + 1000)
    else:
        # Subscribed inside a trampoline action, as from any operator: subscribe() returns before the run
        # starts, so on_next can dispose the subscription it returned.
        CurrentThreadScheduler.singleton().schedule(subscribe)
    assert ended.wait(60), f"turn {turn} never ended"


def _observe(case: Case, runner: Runner) -> dict[str, Any]:
    pool = ThreadPoolExecutor(max_workers=2) if case.mode == "pool" else None
    saver = _MortalSaver(MemorySaver())
    effects: list[str] = []
    graph = build(case, saver, pool, effects)
    scheduler = TestScheduler() if case.mode == "virtual" else None
    config = RunnableConfig(thread_id="t", scheduler=scheduler, recursion_limit=case.recursion_limit)
    seen: list[Any] = []
    seq_of: dict[str | None, int | None] = {None: None}

    def record(turn: int, output: NodeOutput) -> None:
        tick = scheduler.clock if scheduler is not None else None
        if isinstance(output, StreamingOutput):
            seen.append((turn, tick, "chunk", output.node, _plain(output.chunk)))
        else:
            seen.append((turn, tick, "node", output.node, _plain(dict(output.state)), output.checkpoint_id))

    turns = [(1, ("none", 0.0)), (2, case.cancel)]
    if case.cancel[0] == "crash_at":
        turns.append((3, ("none", 0.0)))  # the turn after the crash: it must undo the dead one first
    for turn, cancel in turns:
        stream = runner(graph, {"log": f"turn {turn}"}, config)
        _one_turn(stream, turn, cancel, scheduler, record, seen, effects, saver)
    if pool is not None:
        pool.shutdown(wait=True)  # late completions of a cut turn have had every chance to (not) write
    checkpoints = list(reversed(saver.list("t")))
    for checkpoint in checkpoints:
        seq_of[checkpoint.id] = checkpoint.seq
    seen = [(*item[:-1], seq_of.get(item[-1], "?")) if item[2] == "node" else item for item in seen]
    history = [
        (c.seq, seq_of.get(c.parent_id), c.node, c.source, c.next, _plain(c.pending), _plain(dict(c.values)), c.safe)
        for c in checkpoints
    ]
    head = saver.get("t")
    return {
        "outputs": seen,
        "history": history,
        "head": _plain(dict(head.values)) if head else None,
        "effects": effects,
    }


# -- generating cases -------------------------------------------------------------------------------------------

_VIRTUAL_KINDS: tuple[Kind, ...] = (
    "update", "none", "marbles", "marbles_reduce", "iterable", "command", "raise", "stream_error", "stray"
)  # fmt: skip
_SYNC_KINDS: tuple[Kind, ...] = ("update", "none", "iterable", "command", "raise", "stray")
_POOL_KINDS: tuple[Kind, ...] = ("pool", "iterable", "pool", "iterable", "update", "command", "raise", "stray")
_FAILING: tuple[Kind, ...] = ("raise", "stream_error", "stray")  # "stray" fails in a typed case only


def _node_case(rng: random.Random, kinds: Sequence[Kind], chunks: int, chain: bool = True) -> NodeCase:
    """A node; a command (or a reduce to one) goes somewhere, and a chain node's may be its only way out."""
    kind = rng.choice(kinds)
    goto: tuple[Goto, ...] = ()
    if kind in ("command", "marbles_reduce"):
        goto = tuple(rng.choice(("ahead", "end", "send")) for _ in range(rng.randint(0, 2)))
    only = chain and bool(goto) and rng.random() < 0.5
    if only and "ahead" not in goto:
        goto = ("ahead", *goto)  # the chain goes on by the command alone
    update = rng.random() < 0.5 if kind == "command" else True
    return NodeCase(kind, rng.randint(0, chunks), rng.randint(1, 3), goto, update=update, only=only)


def _case(mode: Mode, rng: random.Random) -> Case:
    kinds = {"virtual": _VIRTUAL_KINDS, "sync": _SYNC_KINDS, "pool": _POOL_KINDS}[mode]
    working = [k for k in kinds if k not in _FAILING]

    def kind() -> list[Kind]:  # failing nodes are rarer than the rest, so most cases run to their cancel point
        return working if rng.random() < 0.5 else list(kinds)

    nodes = tuple(_node_case(rng, kind(), 3) for _ in range(rng.randint(1, 4)))
    branches = [_node_case(rng, working, 2, chain=False) for _ in range(rng.randint(1, 3) if rng.random() < 0.5 else 0)]
    if branches and rng.random() < 0.4:
        # The last branch fails: a parallel superstep that fails after some branches finished keeps their updates,
        # and often the first one is a command that sends: its goto is kept with it.
        branches[-1] = _node_case(rng, [k for k in kinds if k in ("raise", "stream_error")], 2, chain=False)
        if len(branches) > 1 and rng.random() < 0.5:
            goto: tuple[Goto, ...] = rng.choice([("send",), ("send", "ahead"), ("end", "send")])
            branches[0] = NodeCase("command", 0, 1, goto, update=rng.random() < 0.5)
    if mode == "virtual":
        how = rng.choice(["dispose_at", "dispose_late", "timeout", "take_until", "take", "crash_at"])
    else:
        how = rng.choice(["take", "dispose_on_next", "take_until_on_next"])
    return Case(
        mode=mode,
        nodes=nodes,
        skip_on_odd=rng.random() < 0.5,
        loop_to=rng.randrange(len(nodes)) if rng.random() < 0.5 else None,
        loops=rng.randint(1, 4),
        recursion_limit=rng.choice([6, 25]),
        cancel=(how, 0.0),
        branches=tuple(branches),
        send=bool(branches) and rng.random() < 0.5,
        # The step after b0 may fail too: the failure's record then keeps the join's progress.
        tail=_node_case(rng, kind(), 2, chain=False) if branches and rng.random() < 0.5 else None,
        # On a real pool, branches running at once interleave as the threads please: one at a time there, so that
        # both runners' outputs can be compared event by event.
        max_concurrency=1 if mode == "pool" else rng.choice([None, None, 1, 2]) if branches else None,
        on_error="rewind" if how == "crash_at" else "keep",
        typed=rng.random() < 0.5,
    )


def cases(mode: Mode) -> st.SearchStrategy[Case]:
    """A graph and a way to cut its second turn; ``cut_points`` then tries that way at every point.

    Hypothesis draws a seed, and the case is made from it with ``random.Random``: every choice is as likely in every
    example, whatever was drawn before it. (Drawn by hypothesis itself, the later choices of a case — the fan-out,
    the typed state — often got their simplest value, and how many cases had them swung from seed to seed.)"""
    return st.integers(0, 2**32 - 1).map(lambda seed: _case(mode, random.Random(seed)))


def cut_points(case: Case) -> list[Case]:
    """The case cut at every point of its second turn where something happens (and between those points); for a
    long turn (a loop that runs to the recursion limit), at most ``_MOST_CUTS`` of them, spread over it."""
    uncut = _observe(case.cut("none", 0.0), _real)
    second = [o for o in uncut["outputs"] if o[0] == 2 and o[2] != "end"]
    how = case.cancel[0]
    if how in ("take", "dispose_on_next", "take_until_on_next"):
        return _spread([case.cut(how, float(k)) for k in range(1, len(second) + 1)])
    start = uncut["outputs"][[o[0] for o in uncut["outputs"]].index(2) - 1][1] if second else 0.0
    ticks = sorted({0.0, *(o[1] - start for o in second if o[1] is not None)})
    if how == "timeout":
        gaps = sorted({b - a for a, b in itertools.pairwise(ticks) if b > a})
        return _spread([case.cut(how, gap / 2) for gap in gaps] or [case.cut(how, 0.5)])
    halves = [(a + b) / 2 for a, b in itertools.pairwise(ticks)]
    points = sorted({*ticks, *halves, ticks[-1] + 1})
    return _spread([case.cut(how, t) for t in points if how != "take_until" or t > 0])


_MOST_CUTS = 40


def _spread(cuts: list[Case]) -> list[Case]:
    """``cuts``, or ``_MOST_CUTS`` of them evenly spread (the first and the last among them) when there are more."""
    if len(cuts) <= _MOST_CUTS:
        return cuts
    step = (len(cuts) - 1) / (_MOST_CUTS - 1)
    return [cuts[round(i * step)] for i in range(_MOST_CUTS)]


@dataclass
class Compared:
    """What one test compared: cut cases, and how many of them had a parallel superstep, a ``Send`` payload kept
    in a checkpoint, a join kept waiting in one, a node's command, a finished branch kept by a failed superstep
    (with a command among its updates, one whose goto has a ``Send``), a typed state, a node that saw the private
    key, an update the typed state refused."""

    cases: int = 0
    parallel: int = 0
    sends_kept: int = 0
    joins_kept: int = 0
    commands: int = 0
    done_kept: int = 0
    commands_kept: int = 0
    sends_in_kept: int = 0
    typed: int = 0
    private_seen: int = 0
    refused: int = 0


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "database": None}


def _compare_generated(mode: Mode, max_examples: int) -> Compared:
    """Compare both runners on ``max_examples`` generated cases of ``mode``, each cut at every point."""
    compared = Compared()

    @settings(max_examples=max_examples, derandomize=True, **_SETTINGS)  # type: ignore[arg-type]
    @given(cases(mode))
    def compare(case: Case) -> None:
        for cut in cut_points(case):
            observed = _same(cut)
            pending = [entry[5] or {} for entry in observed["history"]]
            done = [kept for p in pending for updates in p.get("done", {}).values() for kept in updates]
            compared.cases += 1
            compared.parallel += bool(case.branches)
            compared.sends_kept += any("send" in p for p in pending)
            compared.joins_kept += any("joins" in p for p in pending)
            compared.commands += any(effect.endswith(" commands") for effect in observed["effects"])
            compared.done_kept += bool(done)
            compared.commands_kept += any(kept[0] == "command" for kept in done)
            goto_kept = [target for kept in done if kept[0] == "command" for target in kept[2]]
            compared.sends_in_kept += any(isinstance(target, list) for target in goto_kept)
            compared.typed += case.typed
            compared.private_seen += any(
                "<" in item for entry in observed["history"] for item in entry[6].get("log", ())
            )
            ended = [o[3] for o in observed["outputs"] if o[2] == "end"]
            stray = any(node.kind == "stray" for node in case.nodes)
            compared.refused += case.typed and stray and "error InvalidUpdateError" in ended

    compare()
    print(f"differential, {mode}: {compared}")
    return compared


def _same(case: Case) -> dict[str, Any]:
    """Both runners' observations of ``case``, which must be equal (returns the reference's)."""
    expected = _observe(case, reference_stream)
    actual = _observe(case, _real)
    assert actual["outputs"] == expected["outputs"], f"the outputs differ (runner, then reference) in {case}"
    assert actual["history"] == expected["history"], f"the checkpoints differ (runner, then reference) in {case}"
    assert actual["head"] == expected["head"], f"the heads differ (runner, then reference) in {case}"
    # The same node calls, the same items pulled.
    assert actual["effects"] == expected["effects"], f"the side effects differ (runner, then reference) in {case}"
    return expected


def _at_least(compared: Compared, **minimum: int) -> None:
    """The cases are generated deterministically: fewer than these would mean the generation lost its reach."""
    short = {name: getattr(compared, name) for name, least in minimum.items() if getattr(compared, name) < least}
    assert not short, f"too few compared cases {short} (at least {minimum}): {compared}"


def test_the_runner_matches_the_reference_in_virtual_time(step_path: StepPath) -> None:
    compared = _compare_generated("virtual", 70)
    _at_least(compared, cases=360, parallel=170, sends_kept=150, joins_kept=70, commands=110, typed=180)
    _at_least(compared, done_kept=2, private_seen=20, refused=10)
    step_path.check()


def test_the_runner_matches_the_reference_on_synchronous_graphs(step_path: StepPath) -> None:
    compared = _compare_generated("sync", 100)
    _at_least(compared, cases=245, parallel=140, sends_kept=100, joins_kept=80, commands=145, typed=125)
    _at_least(compared, done_kept=6, commands_kept=3, sends_in_kept=2, private_seen=10, refused=10)
    step_path.check()


def test_the_runner_matches_the_reference_with_nodes_on_a_thread_pool(step_path: StepPath) -> None:
    compared = _compare_generated("pool", 50)
    _at_least(compared, cases=210, parallel=130, sends_kept=85, joins_kept=70, commands=80, typed=90)
    _at_least(compared, done_kept=14, commands_kept=3, private_seen=5)
    step_path.check()


def test_the_reference_itself_stops_a_synchronous_run_with_take() -> None:
    # The oracle must be able to disagree: it runs the same graph and is cut the same way.
    case = Case("sync", (NodeCase("update", 0, 1),) * 3, False, None, 1, 25, ("take", 1.0))
    observed = _observe(case, reference_stream)
    assert [o[3] for o in observed["outputs"] if o[0] == 2 and o[2] == "node"] == ["n0"]
    assert observed["history"][-1][3] == "rewind"
    head = {"log": ["turn 1", "n0", "n1", "n2"], "visits": 3, "hits": 3}
    assert MappingProxyType(observed["head"] or {}) == head


def test_the_reference_itself_keeps_send_payloads_and_a_waiting_join() -> None:
    # What the reference writes, checked by hand: n0 sends to b0 and b1; b0 goes on to c0, so the join of c0 and b1
    # into n1 waits one superstep with b1 arrived.
    update = NodeCase("update", 0, 1)
    case = Case("sync", (update, update), False, None, 1, 25, ("none", 0.0), (update, update), True, update)
    first_turn = [entry for entry in _observe(case, reference_stream)["history"] if "turn 2" not in entry[6]["log"]]
    sends = {"send": [[0, {"item": 0, "visits": 1}], [1, {"item": 1, "visits": 1}]]}
    assert [(entry[2], entry[4], entry[5]) for entry in first_turn] == [
        ("__start__", ("n0",), None),
        ("n0", ("b0", "b1"), sends),
        ("b0,b1", ("c0",), {"joins": {"0": ["b1"]}}),
        ("c0", ("n1",), None),
        ("n1", (), None),
    ]
    assert first_turn[-1][6] == {
        "log": ["turn 1", "n0", "b0#0", "b1#1", "c0", "n1"],
        "visits": 2,
        "hits": 5,
        "by": {"b0": 2, "b1": 2, "c0": 2},
    }


def test_the_reference_itself_follows_commands() -> None:
    # What the reference writes, checked by hand: a's edge leads to b; its command names b again (run once), sends
    # to c twice (a task each), and goes to END (nothing).
    graph = StateGraph({"log": KeyStrategy.APPEND})
    goto = ["b", Send("c", 1), END, "b", Send("c", 2)]
    graph.add_node("a", lambda s: Command(update={"log": "a"}, goto=goto)).add_edge(START, "a").add_edge("a", "b")
    graph.add_node("b", lambda s: {"log": "b"}).add_node("c", lambda n: Command(update={"log": f"c{n}"}))
    app = graph.add_edge("b", END).add_edge("c", END).compile(MemorySaver())
    outputs: list[NodeOutput] = []
    reference_stream(app, {"log": "in"}, RunnableConfig(thread_id="t")).subscribe(outputs.append)
    assert [(o.node, list(o.state["log"])) for o in outputs] == [
        ("a", ["in", "a"]),
        ("b", ["in", "a", "b", "c1", "c2"]),
        ("c", ["in", "a", "b", "c1", "c2"]),
        ("c", ["in", "a", "b", "c1", "c2"]),
    ]
    history = [(c.node, c.next, _plain(c.pending)) for c in reversed(app.checkpointer.list("t"))]
    assert history == [
        ("__start__", ("a",), None),
        ("a", ("b", "c", "c"), {"send": [[1, 1], [2, 2]]}),
        ("b,c", (), None),
    ]


def _both(app: Callable[[], CompiledGraph], inputs: Sequence[Any]) -> dict[str, Any]:
    """Both runners' events and checkpoints for ``inputs`` (one turn each) on a graph ``app()`` makes afresh for
    each, which must be equal (returns the reference's)."""

    def observe(stream: Runner) -> dict[str, Any]:
        graph, events = app(), []
        for input in inputs:
            stream(graph, input, RunnableConfig(thread_id="t")).subscribe(
                lambda o: events.append((type(o).__name__, o.node, _plain(dict(o.state)))),
                lambda error: events.append(("error", type(error).__name__)),
                lambda: events.append(("completed",)),
            )
        assert graph.checkpointer is not None
        history = [
            (c.node, c.source, c.next, _plain(c.pending), _plain(dict(c.values)))
            for c in reversed(graph.checkpointer.list("t"))
        ]
        return {"events": events, "history": history}

    expected = observe(reference_stream)
    assert observe(_real) == expected
    return expected


@pytest.mark.parametrize(
    ("command", "ends"),
    [
        (Command(goto="nowhere"), "RouteError"),  # neither a node nor END
        (Command(goto=Send(END, 1)), "RouteError"),  # a Send goes to a node
        (Command(update={"log": "a"}, resume="yes"), "InvalidUpdateError"),  # resume= answers interrupts, as input
        (Command(update={"log": "a"}, goto=[Send("b", 1), "b", "b"]), None),  # b once, and b on the payload
        (Command(), None),  # nothing to update, nowhere to go: the run ends after a
    ],
    ids=["unknown-node", "send-to-end", "resume", "send-and-node", "empty"],
)
def test_a_nodes_command_is_followed_or_refused_alike(command: Command[Any], ends: str | None) -> None:
    def app() -> CompiledGraph:
        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", lambda s: command, destinations=["b"])
        graph.add_node("b", lambda s: {"log": f"b {s if isinstance(s, int) else 'on the state'}"})
        graph.add_edge("b", END)
        return graph.add_edge(START, "a").compile(MemorySaver())

    observed = _both(app, [{"log": "in"}])
    assert observed["events"][-1] == (("error", ends) if ends else ("completed",))


def test_a_typed_state_refuses_an_input_key_and_an_update_key_it_does_not_declare_alike() -> None:
    def app() -> CompiledGraph:
        graph = StateGraph(_State, input_schema=_Taken, output_schema=_Shown)
        graph.add_node("a", lambda s: {"log": "a", "visits": len(s.get("log", ())), "stray": 1})
        return graph.add_edge(START, "a").add_edge("a", END).compile(MemorySaver())

    observed = _both(app, [{"log": "in", "visits": 3}, {"log": "in"}])
    # visits is a key of the state, not of the input; stray is no key of the graph
    assert [e for e in observed["events"] if e[0] == "error"] == [("error", "InvalidUpdateError")] * 2
    assert observed["history"] == [  # the refused input wrote nothing; the refused update is recorded
        ("__start__", "input", ("a",), None, {"log": ["in"]}),
        (None, "error", ("a",), None, {"log": ["in"]}),
    ]


def test_the_reference_itself_shows_the_output_keys_and_gives_each_reader_its_keys() -> None:
    # What the reference gives and shows, checked by hand: n0 reads _State, n1 and the route out of n0 read _Private
    # (the private key with the visits), the route out of n1 reads _State; the outputs show _Shown's keys only, the
    # checkpoints keep every key (hits counts from int()'s 0).
    update = NodeCase("update", 0, 1)
    case = Case("sync", (update, update), False, None, 1, 25, ("none", 0.0), typed=True)
    observed = _observe(case, reference_stream)
    first = observed["effects"][: observed["effects"].index("turn 1 ended")]
    assert first == [
        "n0 called on log",
        "route n0 on secret,visits",
        "n1 called on secret,visits",
        "route n1 on hits,log,visits",
    ]
    assert [o[3:5] for o in observed["outputs"] if o[0] == 1 and o[2] == "node"] == [
        ("n0", {"log": ["turn 1", "n0"], "visits": 1}),
        ("n1", {"log": ["turn 1", "n0", "n1"], "visits": 2}),
    ]
    end_of_first = next(entry for entry in observed["history"] if entry[2] == "n1")
    assert end_of_first[6] == {"log": ["turn 1", "n0", "n1"], "visits": 2, "hits": 2, "secret": "n1"}


def test_the_reference_refuses_what_it_does_not_model() -> None:
    class Model(BaseModel):
        log: Annotated[list[str], KeyStrategy.APPEND] = []

    pydantic_state = StateGraph(Model).add_node("a", lambda s: None).add_edge(START, "a").add_edge("a", END)
    with pytest.raises(NotImplementedError, match="pydantic"):
        reference_stream(pydantic_state.compile(), {"log": "in"}, RunnableConfig())

    def unannotated(state: Any) -> None:  # in a graph with a private key, it reads _State's keys: not in its signature
        return None

    private = StateGraph(_State).add_node("a", unannotated).add_node("b", _reading_private)
    private = private.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    with pytest.raises(NotImplementedError, match="node 'a' reads a class"):
        reference_stream(private.compile(), {"log": "in"}, RunnableConfig())


def _reading_private(state: _Private) -> None:
    return None


@pytest.mark.parametrize("command", [False, True], ids=["update", "command"])
@pytest.mark.parametrize("finished_first", [True, False], ids=["sibling-finished", "sibling-after"])
def test_a_failed_superstep_keeps_its_finished_branches_and_its_resume_runs_the_rest_in_both(
    finished_first: bool, command: bool
) -> None:
    # Pending writes, after LangGraph's test_pending_writes_resume: a branch that finished before its sibling failed
    # is not run again by the resume; its update is merged as it was, in task order — a command's goto followed then.
    # Both runners, compared.
    def observe(stream: Callable[[CompiledGraph, Any, RunnableConfig], rx.Observable[Any]]) -> dict[str, Any]:
        calls: list[str] = []

        def branch(name: str, fails: bool) -> Callable[[Any], Any]:
            def action(state: Any) -> Any:
                calls.append(name)
                if fails and calls.count(name) == 1:
                    raise ConnectionError(f"{name} failed")
                if command and not fails:
                    return Command(update={"log": name}, goto=[Send("extra", "p"), END])
                return {"log": name}

            return action

        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("split", lambda s: {"log": "split"})
        first, second = ("ok", "bad") if finished_first else ("bad", "ok")
        graph.add_node(first, branch(first, first == "bad")).add_node(second, branch(second, second == "bad"))
        graph.add_edge(START, "split").add_edge("split", first).add_edge("split", second)
        app = graph.add_edge([first, second], "done").add_node("done", lambda s: {"log": "done"})
        app = app.add_node("extra", lambda payload: {"log": f"extra {payload}"}).add_edge("extra", END)
        app = app.add_edge("done", END).compile(MemorySaver())
        config = RunnableConfig(thread_id="t")
        events: list[Any] = []
        for input in ({"log": "in"}, None):
            stream(app, input, config).subscribe(
                lambda o: events.append((type(o).__name__, o.node)),
                lambda error: events.append(("error", str(error))),
                lambda: events.append(("completed",)),
            )
        history = [
            (c.seq, c.node, c.source, c.next, _plain(c.pending or {}), _plain(dict(c.values)))
            for c in reversed(app.checkpointer.list("t"))
        ]
        return {"events": events, "history": history, "calls": calls}

    real = observe(lambda app, input, config: app.stream(input, config))
    reference = observe(reference_stream)
    assert (real["events"], real["history"], real["calls"]) == (
        reference["events"],
        reference["history"],
        reference["calls"],
    )
    order = ["ok", "bad"] if finished_first else ["bad", "ok"]
    then = ["done", "extra p"] if command else ["done"]  # the join's task, then the command's Send
    assert real["history"][-1][5]["log"] == ["in", "split", *order, *then]  # task order, whatever ran when
    error_record = next(entry for entry in real["history"] if entry[2] == "error")
    kept = ["command", {"log": "ok"}, [["send", "extra", "p"], END]] if command else ["update", {"log": "ok"}]
    assert error_record[4].get("done") == ({"0": [kept]} if finished_first else None)
    assert real["calls"].count("ok") == 1  # never run twice: kept when it had finished, run by the resume if not
