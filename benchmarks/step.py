"""step: the cost of one graph step.

A chain of ``step_nodes`` (200) no-op nodes, run from START to END in one run; the per-step time is the run's time
divided by the number of nodes. Three ways, each run on a new thread id (a conversation of its own):

- no checkpointer;
- the in-memory saver (rxgraph ``MemorySaver``, LangGraph ``InMemorySaver``): one checkpoint per step;
- SQLite (rxgraph ``SqliteSaver``, LangGraph's ``SqliteSaver`` from langgraph-checkpoint-sqlite), each on a fresh
  file in a temporary directory.

rxgraph writes each checkpoint synchronously before the next step runs. LangGraph runs with its default durability
(``"async"``: a checkpoint is written on a background thread while the next step runs), which favours LangGraph on
this 2-core machine. Repetitions alternate between the two systems.

The floor (no checkpointer only): the same chain run by a bare Python loop doing the least a graph must do per step,
and nothing else — call the node's action (the same no-op function) with the state, merge its update into a new
dict (``{**state, **(update or {})}``), and take the next node from a dict of edges (``next_node[node]``) until it is
END. No validation, no channels or reducers, no events, no recursion limit, no thread or run context. It alternates
with the no-checkpointer runs of the other two, and the table gives rxgraph's per-step time in floors.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from rxgraph import END, START, MemorySaver, RunnableConfig, StateGraph
from rxgraph.checkpoint._base import CheckpointSaver
from rxgraph.checkpoint._sqlite import SqliteSaver

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, interleave, median, timed, us

NAME = "step"
SAVERS = ("none", "memory", "sqlite")
_LABELS = {
    "none": "no checkpointer",
    "memory": "in-memory saver (MemorySaver / InMemorySaver)",
    "sqlite": "SQLite saver (SqliteSaver, both)",
}


def _noop(state: Any) -> None:
    return None


def rxgraph_runner(nodes: int, saver: str, workdir: str, stack: ExitStack) -> Callable[[], object]:
    """One rxgraph run of the chain per call, each on a new thread id (a new conversation)."""
    checkpointer: CheckpointSaver | None = None
    if saver == "memory":
        checkpointer = MemorySaver()
    elif saver == "sqlite":
        sqlite_saver = SqliteSaver(os.path.join(workdir, "rxgraph-step.sqlite"))
        stack.callback(sqlite_saver.close)
        checkpointer = sqlite_saver
    builder = StateGraph()
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        builder.add_node(name, _noop)
    builder.add_edge(START, names[0])
    for source, target in itertools.pairwise(names):
        builder.add_edge(source, target)
    builder.add_edge(names[-1], END)
    graph = builder.compile(checkpointer=checkpointer)
    threads = itertools.count()

    def run_once() -> object:
        return graph.invoke({"x": 1}, RunnableConfig(thread_id=f"step-{next(threads)}", recursion_limit=nodes + 1))

    return run_once


def bare_runner(nodes: int) -> Callable[[], object]:
    """The floor: the same chain of no-op actions run by a bare loop, once per call."""
    names = [f"n{i}" for i in range(nodes)]
    actions: dict[str, Callable[[Any], Any]] = dict.fromkeys(names, _noop)
    next_node = dict(itertools.pairwise([*names, END]))

    def run_chain(state: dict[str, Any]) -> dict[str, Any]:
        node = names[0]
        while node != END:
            update = actions[node](state)
            state = {**state, **(update or {})}
            node = next_node[node]
        return state

    return lambda: run_chain({"x": 1})


def langgraph_runner(nodes: int, saver: str, workdir: str, stack: ExitStack) -> Callable[[], object]:
    """The same chain in LangGraph, one run per call, each on a new thread id."""
    import sqlite3
    from typing import TypedDict

    import langgraph.graph as lg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver

    class State(TypedDict, total=False):
        x: int

    def noop(state: Any) -> dict[str, Any]:
        return {}

    checkpointer: Any = None
    if saver == "memory":
        checkpointer = InMemorySaver()
    elif saver == "sqlite":
        connection = sqlite3.connect(os.path.join(workdir, "langgraph-step.sqlite"), check_same_thread=False)
        stack.callback(connection.close)
        checkpointer = LangGraphSqliteSaver(connection)
    builder = lg.StateGraph(State)
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        builder.add_node(name, noop)
    builder.add_edge(lg.START, names[0])
    for source, target in itertools.pairwise(names):
        builder.add_edge(source, target)
    builder.add_edge(names[-1], lg.END)
    graph = builder.compile(checkpointer=checkpointer)
    threads = itertools.count()

    def run_once() -> object:
        config: Any = {"recursion_limit": nodes + 1, "configurable": {"thread_id": f"step-{next(threads)}"}}
        return graph.invoke({"x": 1}, config)

    return run_once


def _timed(run_once: Callable[[], object]) -> Callable[[], float]:
    """A trial of ``interleave``: one run per call, returning its seconds."""
    return lambda: timed(run_once)


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    nodes = sizes.step_nodes
    result = BenchResult(
        NAME,
        f"per-step time, a chain of {nodes} no-op nodes in one run",
        floor="a bare Python loop over the same no-op actions (call, merge into a new dict, next node from a dict)",
    )
    per_step: dict[str, dict[str, float]] = {}
    for saver in SAVERS:
        with ExitStack() as stack:
            trials = {"rxgraph": _timed(rxgraph_runner(nodes, saver, workdir, stack))}
            if saver == "none":
                trials["bare"] = _timed(bare_runner(nodes))
            if langgraph:
                trials["langgraph"] = _timed(langgraph_runner(nodes, saver, workdir, stack))
            samples = interleave(trials, sizes.step_repeats, warmup=sizes.warmup, collect=sizes.collect)
        result.samples[saver] = samples
        per_step[saver] = {side: median(values) / nodes for side, values in samples.items()}
        result.figures.append(
            Figure(
                f"per step, {_LABELS[saver]}",
                "us",
                us(per_step[saver]["rxgraph"]),
                us(per_step[saver]["langgraph"]) if langgraph else None,
                langgraph_note="" if langgraph else NOT_INSTALLED,
                floor=us(per_step[saver]["bare"]) if "bare" in per_step[saver] else None,
            )
        )
    memory = result.figures[1]
    if memory.ratio is not None:
        measured = f"{memory.rxgraph:.1f} us vs {memory.langgraph:.1f} us per step: {memory.ratio:.3f}x"
        met: bool | None = memory.ratio <= 0.1
    else:
        measured, met = f"{memory.rxgraph:.1f} us per step; LangGraph {NOT_INSTALLED}", None
    result.targets.append(Target("step with the in-memory saver <= 1/10 of LangGraph's", measured, met))
    result.notes.append(
        "LangGraph uses its default durability ('async': checkpoints are written on a background thread while the "
        "next step runs); rxgraph writes every checkpoint before the next step."
    )
    return result
