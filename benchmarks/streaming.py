"""streaming: the cost of one streamed chunk, from a node to the subscriber.

One graph with one streaming node that emits ``stream_chunks`` (100,000) integers, no checkpointer:

- rxgraph: the node returns ``reactivex.from_iterable(range(n))`` and a ``reduce`` makes its update; the subscriber
  counts the ``StreamingOutput``s it receives;
- bare reactivex: ``from_iterable(range(n)).pipe(ops.map(lambda x: x))`` with a counting observer, the floor that a
  graph built on reactivex can reach;
- LangGraph, for reference: the node writes every chunk with ``get_stream_writer()`` and the caller counts what
  ``stream(..., stream_mode="custom")`` yields.

Each repetition times the whole run (subscription to completion) and checks that every chunk arrived. The three
alternate, repetition by repetition. The bare pipeline is the benchmark's floor: the table gives it beside rxgraph's
figures, and rxgraph's per-chunk cost in floors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import reactivex as rx
from reactivex import operators as ops

from rxgraph import END, START, StateGraph, StreamingOutput

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, interleave, median, timed

NAME = "streaming"


def _checked(count: list[int], chunks: int, who: str) -> None:
    if count[0] != chunks:
        raise RuntimeError(f"{who}: the subscriber received {count[0]} chunks, expected {chunks}")


def rxgraph_stream(chunks: int) -> Callable[[], float]:
    """One timed rxgraph run per call: a node streaming ``chunks`` chunks to a counting subscriber."""
    graph = (
        StateGraph()
        .add_node("stream", lambda state: rx.from_iterable(range(chunks)), reduce=lambda got: {"count": len(got)})
        .add_edge(START, "stream")
        .add_edge("stream", END)
        .compile()
    )

    def trial() -> float:
        count = [0]

        def on_next(output: Any) -> None:
            if isinstance(output, StreamingOutput):
                count[0] += 1

        seconds = timed(lambda: graph.stream({"count": 0}).subscribe(on_next))
        _checked(count, chunks, "rxgraph")
        return seconds

    return trial


def bare_stream(chunks: int) -> Callable[[], float]:
    """The same chunks through a bare reactivex pipeline (one ``map``), the floor for rxgraph."""
    source = rx.from_iterable(range(chunks)).pipe(ops.map(lambda x: x))

    def trial() -> float:
        count = [0]

        def on_next(_: Any) -> None:
            count[0] += 1

        seconds = timed(lambda: source.subscribe(on_next))
        _checked(count, chunks, "bare reactivex")
        return seconds

    return trial


def langgraph_stream(chunks: int) -> Callable[[], float]:
    """The same chunks written with LangGraph's stream writer and read with ``stream_mode="custom"``."""
    from typing import TypedDict

    import langgraph.graph as lg
    from langgraph.config import get_stream_writer

    class State(TypedDict, total=False):
        count: int

    def stream(state: Any) -> dict[str, Any]:
        write = get_stream_writer()
        for chunk in range(chunks):
            write(chunk)
        return {"count": chunks}

    builder = lg.StateGraph(State)
    builder.add_node("stream", stream)
    builder.add_edge(lg.START, "stream")
    builder.add_edge("stream", lg.END)
    graph = builder.compile()

    def trial() -> float:
        count = [0]

        def consume() -> None:
            for _ in graph.stream({"count": 0}, stream_mode="custom"):
                count[0] += 1

        seconds = timed(consume)
        _checked(count, chunks, "LangGraph")
        return seconds

    return trial


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    chunks = sizes.stream_chunks
    result = BenchResult(
        NAME,
        f"per-chunk cost of one node streaming {chunks} chunks to the subscriber",
        floor="the same chunks through a bare reactivex pipeline (from_iterable + one map) to a counting observer",
    )
    trials = {"rxgraph": rxgraph_stream(chunks), "bare": bare_stream(chunks)}
    if langgraph:
        trials["langgraph"] = langgraph_stream(chunks)
    samples = interleave(trials, sizes.stream_repeats, warmup=sizes.warmup, collect=sizes.collect)
    result.samples = samples
    per_chunk = {side: median(values) / chunks for side, values in samples.items()}
    lg = per_chunk.get("langgraph")
    note = "" if langgraph else NOT_INSTALLED
    result.figures.append(
        Figure(
            "per chunk",
            "ns",
            per_chunk["rxgraph"] * 1e9,
            lg * 1e9 if lg else None,
            langgraph_note=note,
            floor=per_chunk["bare"] * 1e9,
        )
    )
    result.figures.append(
        Figure(
            "chunks per second",
            "chunks/s",
            1 / per_chunk["rxgraph"],
            1 / lg if lg else None,
            langgraph_note=note,
            lower_is_better=False,
            floor=1 / per_chunk["bare"],
        )
    )
    over_bare = per_chunk["rxgraph"] / per_chunk["bare"]
    result.targets.append(
        Target(
            "streaming per chunk <= 2x the bare reactivex pipeline",
            f"{per_chunk['rxgraph'] * 1e9:.0f} ns vs {per_chunk['bare'] * 1e9:.0f} ns: {over_bare:.2f}x",
            over_bare <= 2,
        )
    )
    return result
