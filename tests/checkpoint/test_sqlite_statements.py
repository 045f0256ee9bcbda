"""How many statements a turn on ``SqliteSaver`` runs, counted on the saver's connection (SQLite's trace callback).

Each statement is a trip through SQLite that lets go of the GIL and takes it back; under an event loop's thread
that is busy, that is a switch between threads each time. A put on a thread with a head runs five: ``BEGIN
IMMEDIATE``, one read (the head for the compare-and-set, and the next free row ids), the new list items, the
checkpoint's row, ``COMMIT``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.checkpoint import SqliteSaver
from rxgraph.messages import AssistantMessage, UserMessage


class Statements:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, sql: str) -> None:
        self.seen.append(" ".join(sql.split()))

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[SqliteSaver, Statements]]:
    statements = Statements()
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    with SqliteSaver(tmp_path / "threads.db") as saver:
        yield saver, statements


def _answer(state: Any) -> dict[str, Any]:
    return {"messages": [AssistantMessage(content=f"answer {len(state['messages'])}")]}


def test_a_put_on_a_thread_with_a_head_runs_five_statements(traced: tuple[SqliteSaver, Statements]) -> None:
    saver, statements = traced
    graph = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("answer", _answer)
        .add_edge(START, "answer")
        .add_edge("answer", END)
        .compile(checkpointer=saver)
    )
    config = RunnableConfig(thread_id="t")
    graph.invoke({"messages": [UserMessage(content="first")]}, config)  # the thread has a head from here on
    statements.take()

    graph.invoke({"messages": [UserMessage(content="second")]}, config)

    seen = statements.take()
    transactions: list[list[str]] = []  # the statements of each, after its BEGIN
    current: list[str] | None = None
    for sql in seen:
        if sql == "BEGIN IMMEDIATE":
            current = []
        elif current is not None:
            current.append(sql)
            if sql == "COMMIT":
                transactions.append(current)
                current = None
    puts = [t for t in transactions if any(s.startswith("INSERT INTO checkpoints") for s in t)]
    assert len(puts) == 2, seen  # the input's checkpoint and the node's
    for put in puts:
        kinds = [sql.split(" (")[0] if sql.startswith("INSERT") else sql.split()[0] for sql in put]
        assert kinds == ["SELECT", "INSERT INTO items", "INSERT INTO checkpoints", "COMMIT"], put
