"""Worker process for test_crash: chat turns on an SQLite checkpoint file until it is killed.

Usage: ``python _crash_worker.py DB_PATH MODE K``. Every checkpoint write is announced on stdout (``put <seq>``
before, ``stored <seq>`` after), so the test knows where the process was when it killed it. ``MODE``:

- ``run``: keep going; the test kills it after reading ``K`` lines, wherever it then is;
- ``pause``: after the ``K``-th stored checkpoint print ``paused`` and block (the kill lands between two writes);
- ``txn``: in the ``K``-th write, once its rows are being inserted (inside the transaction, before ``COMMIT``; for
  a put of one statement, once the statement holds the write lock and its trigger writes the rows), print
  ``in-transaction`` and block (the kill lands in the middle of the write).

The test imports :func:`build_graph` to run its own turns on the same file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from itertools import count
from typing import Any

from rxgraph import END, START, Checkpoint, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.checkpoint import SqliteSaver
from rxgraph.graph import CompiledGraph
from rxgraph.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage

THREAD = "crash"
CONFIG = RunnableConfig(thread_id=THREAD)
TOOLS = " [use tools]"


def user_turn(turn: int) -> str:
    """The worker's ``turn``-th message of a session: two of every three use tools."""
    return f"worker turn {turn}" + (TOOLS if turn % 3 != 2 else "")


def session_writes_safe(writes: int) -> list[bool]:
    """Whether each of the first ``writes`` checkpoints a worker session writes is safe, in order: a tool turn writes
    START (safe), model with calls (unsafe), tools (unsafe: ends with a tool message), model (safe)."""
    flags: list[bool] = []
    turn = 0
    while len(flags) < writes:
        flags += [True, False, False, True] if user_turn(turn).endswith(TOOLS) else [True, True]
        turn += 1
    return flags[:writes]


def build_graph(saver: SqliteSaver, on_request: Callable[[list[Any]], None] | None = None) -> CompiledGraph:
    """model <-> tools. A user message ending with ``TOOLS`` gets two tool calls (answered in one tools step), then
    an answer; any other gets an answer straight away."""

    def model(state: Any) -> dict[str, Any]:
        messages = state["messages"]
        if on_request is not None:
            on_request(list(messages))
        last, n = messages[-1], len(messages)
        if isinstance(last, UserMessage) and last.content.endswith(TOOLS):
            calls = [
                ToolCall(id=f"c{n}a", name="clock", arguments="{}"),
                ToolCall(id=f"c{n}b", name="dice", arguments="{}"),
            ]
            return {"messages": AssistantMessage(tool_calls=calls)}
        return {"messages": AssistantMessage(content=f"answer after {n} messages")}

    def tools(state: Any) -> dict[str, Any]:
        last = state["messages"][-1]
        return {
            "messages": [ToolMessage(tool_call_id=c.id, name=c.name, content=f"{c.name}: ok") for c in last.tool_calls]
        }

    def route(state: Any) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AssistantMessage) and last.tool_calls else END

    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("model", model)
        .add_node("tools", tools)
        .add_edge(START, "model")
        .add_conditional_edges("model", route)
        .add_edge("tools", "model")
        .compile(checkpointer=saver)
    )


class _AnnouncingSaver(SqliteSaver):
    def __init__(self, path: str, mode: str, k: int) -> None:
        super().__init__(path)
        self.mode, self.k, self.writes = mode, k, 0
        self.reports = 0  # SQLite's reports of the K-th write's one statement: itself, then its trigger's
        if mode == "txn":
            assert self._conn is not None
            self._conn.set_trace_callback(self._on_statement)

    def _on_statement(self, sql: str) -> None:
        if self.writes != self.k:
            return
        if sql.startswith("INSERT INTO rxgraph_put"):
            self.reports += 1
        if sql.startswith("INSERT INTO checkpoints") or self.reports == 2:
            print("in-transaction", flush=True)
            sys.stdin.readline()  # blocks until the test kills us

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        self.writes += 1
        print(f"put {checkpoint.seq}", flush=True)
        stored = super().put(checkpoint, expected_head=expected_head)
        print(f"stored {checkpoint.seq}", flush=True)
        if self.mode == "pause" and self.writes == self.k:
            print("paused", flush=True)
            sys.stdin.readline()
        return stored


def main(path: str, mode: str, k: int) -> None:
    graph = build_graph(_AnnouncingSaver(path, mode, k))
    for turn in count():
        graph.invoke({"messages": UserMessage(content=user_turn(turn))}, CONFIG)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
