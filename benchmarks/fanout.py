"""fanout: the cost of one branch of a parallel superstep (fan-out and join).

START -> ``split`` -> ``fanout_branches`` (100) branches -> ``collect`` -> END, in two shapes:

- edges: 100 nodes ``b0``..``b99``, each with a static edge from ``split``, and a join
  ``add_edge(["b0", ..., "b99"], "collect")``;
- send: a conditional edge after ``split`` returns ``Send("work", {"i": i})`` for each branch, one ``work`` node
  runs over every payload, then ``work -> collect``.

Every branch returns ``{"results": [i]}`` into a key that appends (rxgraph ``KeyStrategy.APPEND``, LangGraph
``Annotated[list, operator.add]``), and ``collect`` sorts the list into ``out``. Each run is checked: ``out`` must be
``[0, ..., n - 1]`` on both systems, or the benchmark fails.

The per-branch figure is (median run time with n branches - median run time with 1 branch) / (n - 1), so what the
graph costs around the branches (START, ``split``, ``collect``, the run itself) cancels out. Both systems run in this
process with sync ``invoke``, each run on a fresh thread, without a checkpointer and with the in-memory one (rxgraph
``MemorySaver``, LangGraph ``InMemorySaver``); the four runs (two systems, n and 1 branches) alternate repetition by
repetition. Each system runs the branches of a superstep its own default way: rxgraph calls plain sync nodes one
after another on the thread that runs the superstep; LangGraph hands them to its thread pool. LangGraph runs with its
default durability (``"async"``).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypedDict

from rxgraph import END, START, KeyStrategy, MemorySaver, RunnableConfig, Send, StateGraph

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, interleave, median, timed, us

NAME = "fanout"
SHAPES = ("edges", "send")
SAVERS = ("none", "memory")
_SHAPE_LABELS = {"edges": "static edges + join", "send": "Send to one node"}
_SAVER_LABELS = {"none": "no checkpointer", "memory": "in-memory saver"}

Build = Callable[[str, int, str], Callable[[], float]]


def check_collected(result: Mapping[str, Any], branches: int, who: str) -> None:
    """Fail the benchmark unless the run collected exactly one item from every branch."""
    expected = list(range(branches))
    got = list(result.get("out", ()))
    if got != expected:
        raise RuntimeError(f"{who}: a run with {branches} branches collected {got}, expected {expected}")


def _split(state: Any) -> None:
    return None


def _collect(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"out": sorted(state["results"])}


def _branch(i: int) -> Callable[[Any], dict[str, Any]]:
    def branch(state: Any) -> dict[str, Any]:
        return {"results": [i]}

    return branch


def _work(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"results": [payload["i"]]}


def _fan_out(builder: Any, shape: str, branches: int, send: Callable[[str, Any], Any]) -> None:
    """split -> the branches -> collect, on either library's builder (their methods for this are alike): ``edges``,
    one node per branch and a join; ``send``, one node sent every payload."""
    builder.add_node("collect", _collect)
    if shape == "edges":
        names = [f"b{i}" for i in range(branches)]
        for i, name in enumerate(names):
            builder.add_node(name, _branch(i))
            builder.add_edge("split", name)
        builder.add_edge(names, "collect")
    else:
        builder.add_node("work", _work)
        builder.add_conditional_edges("split", lambda state: [send("work", {"i": i}) for i in range(branches)])
        builder.add_edge("work", "collect")


def rxgraph_fanout(shape: str, branches: int, saver: str) -> Callable[[], float]:
    """One timed rxgraph run of the fan-out per call, each on a new thread; returns the run's seconds."""
    builder = StateGraph({"results": KeyStrategy.APPEND})
    builder.add_node("split", _split)
    _fan_out(builder, shape, branches, Send)
    builder.add_edge(START, "split").add_edge("collect", END)
    graph = builder.compile(checkpointer=MemorySaver() if saver == "memory" else None)
    threads = itertools.count()

    def trial() -> float:
        config = RunnableConfig(thread_id=f"fanout-{next(threads)}")
        out: list[Mapping[str, Any]] = []
        seconds = timed(lambda: out.append(graph.invoke({"results": []}, config)))
        check_collected(out[0], branches, f"rxgraph ({shape}, {saver})")
        return seconds

    return trial


class LangGraphState(TypedDict, total=False):
    """LangGraph's state for the fan-out (at module level: LangGraph reads its annotations from this module)."""

    results: Annotated[list[int], operator.add]
    out: list[int]


def langgraph_fanout(shape: str, branches: int, saver: str) -> Callable[[], float]:
    """The same fan-out in LangGraph; returns one run's seconds per call."""
    import langgraph.graph as lg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Send as LangGraphSend

    def split(state: Any) -> dict[str, Any]:
        return {}

    builder: Any = lg.StateGraph(LangGraphState)
    builder.add_node("split", split)
    _fan_out(builder, shape, branches, LangGraphSend)
    builder.add_edge(lg.START, "split")
    builder.add_edge("collect", lg.END)
    graph = builder.compile(checkpointer=InMemorySaver() if saver == "memory" else None)
    threads = itertools.count()

    def trial() -> float:
        config: Any = {"configurable": {"thread_id": f"fanout-{next(threads)}"}}
        out: list[Mapping[str, Any]] = []
        seconds = timed(lambda: out.append(graph.invoke({"results": []}, config)))
        check_collected(out[0], branches, f"LangGraph ({shape}, {saver})")
        return seconds

    return trial


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    branches = sizes.fanout_branches
    if branches < 2:
        raise ValueError(f"fanout needs at least 2 branches to compare with 1, got fanout_branches={branches}")
    result = BenchResult(NAME, f"per-branch time, a fan-out of {branches} branches joined into one node")
    systems: dict[str, Build] = {"rxgraph": rxgraph_fanout}
    if langgraph:
        systems["langgraph"] = langgraph_fanout
    for shape in SHAPES:
        for saver in SAVERS:
            trials = {f"{side} x{n}": build(shape, n, saver) for side, build in systems.items() for n in (branches, 1)}
            samples = interleave(trials, sizes.fanout_repeats, warmup=sizes.warmup, collect=sizes.collect)
            result.samples[f"{shape}, {saver}"] = samples
            per_branch = {
                side: (median(samples[f"{side} x{branches}"]) - median(samples[f"{side} x1"])) / (branches - 1)
                for side in systems
            }
            figure = Figure(
                f"per branch, {_SHAPE_LABELS[shape]}, {_SAVER_LABELS[saver]}",
                "us",
                us(per_branch["rxgraph"]),
                us(per_branch["langgraph"]) if langgraph else None,
                langgraph_note="" if langgraph else NOT_INSTALLED,
            )
            result.figures.append(figure)
            if figure.ratio is not None:
                measured = f"{figure.rxgraph:.1f} us vs {figure.langgraph:.1f} us per branch: {figure.ratio:.3f}x"
                met: bool | None = figure.ratio <= 0.1
            else:
                measured, met = f"{figure.rxgraph:.1f} us per branch; LangGraph {NOT_INSTALLED}", None
            result.targets.append(
                Target(f"fan-out branch ({shape}, {_SAVER_LABELS[saver]}) <= 1/10 of LangGraph's", measured, met)
            )
    result.notes.append(
        "per branch = (median run with n branches - median run with 1) / (n - 1); rxgraph calls sync branches one "
        "after another on the run's thread, LangGraph on its thread pool; LangGraph uses its default durability "
        "('async')."
    )
    return result
