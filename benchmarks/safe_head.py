"""safe_head: what it costs a new turn to find the checkpoint it starts from, when the head is not safe.

A new turn starts from the thread's newest *safe* checkpoint (one whose history can take a user message). This
measures a one-node chat turn (user message in, assistant message out) with the default policy
(``on_unsafe_head="rollback"``) when the thread's head is safe, and when the selection must skip 1 and 100 unsafe
checkpoints; the extra time over the safe case is the selection's cost. With ``MemorySaver`` and ``SqliteSaver``.

The unsafe checkpoints are made, untimed, before every timed turn: a second graph on the same saver and thread,
compiled with ``on_unsafe_head="ignore"``, takes an orphan tool message as input (so its input checkpoint ends
with a tool message, which is not safe) and then fails in its node: exactly one unsafe checkpoint per run. Every
variant makes the same number of such runs before its timed turn (those it does not need on a throwaway thread), so
all are timed after the same work. After the timed turn, the run's first checkpoint is checked to record the
skipped head (``rolled_back_from``).
The variants run interleaved, each on its own thread. rxgraph only: LangGraph has no such selection.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import Any

from rxgraph import END, START, CompiledGraph, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.graph._builder import UnsafeHeadPolicy
from rxgraph.messages import AssistantMessage, ToolMessage, UserMessage

from ._common import BenchResult, Figure, Sizes, interleave, median, ms, rxgraph_saver, timed

NAME = "safe_head"
SAVERS = ("memory", "sqlite")


class _NodeFailed(Exception):
    """Raised by the node that leaves an unsafe head behind."""


def _fail(state: Any) -> None:
    raise _NodeFailed("the node fails after the unsafe input was checkpointed")


def rxgraph_selection(
    saver: str, skips: tuple[int, ...], path: str, stack: ExitStack
) -> dict[str, Callable[[], float]]:
    """One trial per number of unsafe checkpoints to skip; each call makes them, then times one chat turn."""
    checkpointer = rxgraph_saver(saver, path, stack)

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": AssistantMessage(content="Hello again!")}

    def graph(node: Callable[[Any], Any], policy: UnsafeHeadPolicy) -> CompiledGraph:
        return (
            StateGraph({"messages": KeyStrategy.APPEND})
            .add_node("node", node)
            .add_edge(START, "node")
            .add_edge("node", END)
            .compile(checkpointer=checkpointer, on_unsafe_head=policy)
        )

    chat_graph = graph(chat, "rollback")
    breaker = graph(_fail, "ignore")
    orphan = {"messages": ToolMessage(tool_call_id="orphan", content="an answer to no call")}

    scratch = itertools.count()
    most = max(skips)

    def make_unsafe(config: RunnableConfig, count: int) -> None:
        for _ in range(count):
            with suppress(_NodeFailed):
                breaker.invoke(orphan, config)

    def trial_for(skip: int) -> Callable[[], float]:
        config = RunnableConfig(thread_id=f"skip-{skip}")
        chat_graph.invoke({"messages": UserMessage(content="Hi!")}, config)  # a safe head to start from

        def trial() -> float:
            make_unsafe(config, skip)
            # Every variant does the same untimed work before its timed turn (the rest on a throwaway thread), so
            # none is timed with colder caches than another.
            make_unsafe(RunnableConfig(thread_id=f"scratch-{next(scratch)}"), most - skip)
            head = checkpointer.get(f"skip-{skip}")
            assert head is not None
            if head.safe != (skip == 0):
                raise RuntimeError(f"skip {skip}: the head should {'' if skip == 0 else 'not '}be safe")
            seconds = timed(lambda: chat_graph.invoke({"messages": UserMessage(content="Hi?")}, config))
            first = checkpointer.list(f"skip-{skip}", limit=2)[-1]
            if (first.rolled_back_from == head.id) != (skip > 0):
                raise RuntimeError(f"skip {skip}: the turn did not start where the selection should have put it")
            return seconds

        return trial

    return {f"skip {skip}": trial_for(skip) for skip in skips}


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    result = BenchResult(NAME, "one-node chat turn when the head is safe, and when 1 or 100 unsafe heads are skipped")
    for saver in SAVERS:
        where = "MemorySaver" if saver == "memory" else "SqliteSaver"
        with ExitStack() as stack:
            path = os.path.join(workdir, "safe-head.sqlite")
            trials = rxgraph_selection(saver, sizes.safe_head_skips, path, stack)
            samples = interleave(trials, sizes.safe_head_repeats, warmup=sizes.warmup, collect=sizes.collect)
        result.samples[saver] = samples
        turn = {name: median(values) for name, values in samples.items()}
        baseline = turn["skip 0"]
        for skip in sizes.safe_head_skips:
            name = f"skip {skip}"
            what = "head safe" if skip == 0 else f"skipping {skip} unsafe checkpoint{'s' if skip > 1 else ''}"
            note = "" if skip == 0 else f"{ms(turn[name] - baseline):+.3f} ms over a safe head"
            result.figures.append(
                Figure(f"turn, {what}, {where}", "ms", ms(turn[name]), langgraph_note="no selection", note=note)
            )
    result.notes.append("rxgraph only: LangGraph starts every turn from the head, whatever it holds.")
    return result
