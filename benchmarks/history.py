"""history: how the cost of a chat turn, and the size of its SQLite file, grow with the conversation.

A one-node chat graph: each turn sends one user message in, and the node appends one assistant message (rxgraph:
``UserMessage`` / ``AssistantMessage`` on a ``KeyStrategy.APPEND`` "messages" key; LangGraph: ``HumanMessage`` /
``AIMessage`` with ``add_messages``). ``history_turns`` (1,000) turns on one thread, in memory and on SQLite; the
two systems take turns, turn by turn. Every turn is one timed ``invoke``; the figure at turn N is the median of the
turns within ``window`` of N. Code paths are warmed up on a throwaway thread and saver first.

At the end, the size of each SQLite database (with its ``-wal`` and ``-shm`` files) is taken twice: as the run
left it, and after ``PRAGMA wal_checkpoint(TRUNCATE)`` folded the WAL into the main file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.messages import AssistantMessage, UserMessage

from ._common import (
    NOT_INSTALLED,
    BenchResult,
    Figure,
    Sizes,
    Target,
    interleave,
    median_window,
    ms,
    rxgraph_saver,
    sqlite_size,
    timed,
)

NAME = "history"
SAVERS = ("memory", "sqlite")
ANSWER = "Sure. Here is a short answer to your question."


def rxgraph_chat(saver: str, path: str, stack: ExitStack) -> Callable[[], float]:
    """One timed rxgraph chat turn per call, on one thread; returns the turn's seconds."""
    checkpointer = rxgraph_saver(saver, path, stack)

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": AssistantMessage(content=ANSWER)}

    graph = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("chat", chat)
        .add_edge(START, "chat")
        .add_edge("chat", END)
        .compile(checkpointer=checkpointer)
    )
    config = RunnableConfig(thread_id="history")
    turns = itertools.count(1)

    def trial() -> float:
        update = {"messages": UserMessage(content=f"Question number {next(turns)}?")}
        return timed(lambda: graph.invoke(update, config))

    return trial


def langgraph_chat(saver: str, path: str, stack: ExitStack) -> Callable[[], float]:
    """The same chat graph in LangGraph; returns one turn's seconds per call."""
    import sqlite3
    from typing import Annotated, TypedDict

    import langgraph.graph as lg
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver
    from langgraph.graph.message import add_messages

    # The functional form on purpose: in a class body, `from __future__ import annotations` would leave strings
    # that LangGraph resolves against this module's globals, where the imports of this function are not.
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(content=ANSWER)]}

    checkpointer: Any
    if saver == "sqlite":
        connection = sqlite3.connect(path, check_same_thread=False)
        stack.callback(connection.close)
        checkpointer = LangGraphSqliteSaver(connection)
    else:
        checkpointer = InMemorySaver()
    builder = lg.StateGraph(State)
    builder.add_node("chat", chat)
    builder.add_edge(lg.START, "chat")
    builder.add_edge("chat", lg.END)
    graph = builder.compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": "history"}}
    turns = itertools.count(1)

    def trial() -> float:
        update = {"messages": [HumanMessage(content=f"Question number {next(turns)}?")]}
        return timed(lambda: graph.invoke(update, config))

    return trial


_FACTORIES = {"rxgraph": rxgraph_chat, "langgraph": langgraph_chat}


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    turns = sizes.history_turns
    result = BenchResult(NAME, f"per-turn time of a one-node chat graph over {turns} turns, and the SQLite file size")
    sides = ["rxgraph", "langgraph"] if langgraph else ["rxgraph"]
    marks = [m for m in sizes.history_marks if m <= turns]
    for saver in SAVERS:
        where = "in memory" if saver == "memory" else "SQLite"
        # Warm the code paths up on a throwaway saver, so the measured file holds only the measured thread.
        with ExitStack() as stack:
            warm = {
                side: _FACTORIES[side](saver, os.path.join(workdir, f"warmup-{side}.sqlite"), stack) for side in sides
            }
            interleave(warm, sizes.warmup * 5, collect=sizes.collect)
        paths = {side: os.path.join(workdir, f"history-{side}.sqlite") for side in sides}
        with ExitStack() as stack:
            trials = {side: _FACTORIES[side](saver, paths[side], stack) for side in sides}
            series = interleave(trials, turns, collect=sizes.collect, collect_every=10)
            sizes_on_disk = {side: sqlite_size(paths[side]) for side in sides} if saver == "sqlite" else {}
        sizes.collect()
        result.samples[saver] = series
        at: dict[str, dict[int, float]] = {
            side: {mark: median_window(series[side], mark, sizes.window) for mark in marks} for side in sides
        }
        for mark in marks:
            result.figures.append(
                Figure(
                    f"turn {mark}, {where}",
                    "ms",
                    ms(at["rxgraph"][mark]),
                    ms(at["langgraph"][mark]) if langgraph else None,
                    langgraph_note="" if langgraph else NOT_INSTALLED,
                )
            )
        first, last = marks[0], marks[-1]
        growth = {side: at[side][last] / at[side][first] for side in sides}
        result.figures.append(
            Figure(
                f"growth turn {last} / turn {first}, {where}",
                "x",
                growth["rxgraph"],
                growth.get("langgraph"),
                langgraph_note="" if langgraph else NOT_INSTALLED,
            )
        )
        result.targets.append(
            Target(
                f"history {where}: turn {last} <= 1.5x turn {first}",
                f"{ms(at['rxgraph'][first]):.3f} ms -> {ms(at['rxgraph'][last]):.3f} ms: {growth['rxgraph']:.2f}x",
                growth["rxgraph"] <= 1.5,
            )
        )
        if saver == "sqlite":
            mb = {side: size.after_checkpoint / 1e6 for side, size in sizes_on_disk.items()}
            before = {side: size.before_checkpoint / 1e6 for side, size in sizes_on_disk.items()}
            result.figures.append(
                Figure(
                    f"SQLite file after {turns} turns (WAL checkpointed)",
                    "MB",
                    mb["rxgraph"],
                    mb.get("langgraph"),
                    langgraph_note="" if langgraph else NOT_INSTALLED,
                )
            )
            result.figures.append(
                Figure(
                    f"SQLite file + WAL after {turns} turns, before the checkpoint",
                    "MB",
                    before["rxgraph"],
                    before.get("langgraph"),
                    langgraph_note="" if langgraph else NOT_INSTALLED,
                )
            )
            if turns >= 1000:
                result.targets.append(
                    Target(
                        f"SQLite file <= 10 MB after {turns} turns",
                        f"{mb['rxgraph']:.2f} MB",
                        mb["rxgraph"] <= 10,
                    )
                )
            else:
                result.targets.append(
                    Target("SQLite file <= 10 MB after 1,000 turns", f"{mb['rxgraph']:.2f} MB after {turns}", None)
                )
    return result
