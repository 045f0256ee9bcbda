"""How many statements ``SqliteSaver`` runs for a put, counted on its connection (SQLite's trace callback), and that
the put of one statement is exactly as safe as the transaction it stands for.

Each statement is a trip through SQLite that lets go of the GIL and takes it back; under an event loop's thread
that is busy, that is a switch between threads each time. A saver that gave the last row ids itself writes a put
as one statement; the first put of a saver, and any put after another connection wrote, runs a transaction of five
(``BEGIN IMMEDIATE``, one read of the head and the next free row ids, the new list items, the checkpoint's row,
``COMMIT``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rxgraph import END, START, Checkpoint, CheckpointConflictError, KeyStrategy, RunnableConfig, StateGraph
from rxgraph._frozen import freeze
from rxgraph.checkpoint import SqliteSaver
from rxgraph.errors import InvalidCheckpointError
from rxgraph.messages import AssistantMessage, UserMessage


class Statements:
    """The statements a connection ran. SQLite reports a statement again as each of its triggers' statements
    starts (with the same text): runs of one text are one statement."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, sql: str) -> None:
        sql = " ".join(sql.split())
        if not self.seen or self.seen[-1] != sql:
            self.seen.append(sql)

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen


def _kind(sql: str) -> str:
    return sql.split(" (")[0] if sql.startswith("INSERT") else sql.split()[0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "threads.db"


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch, db: Path) -> Iterator[tuple[SqliteSaver, Statements]]:
    statements = Statements()
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    with SqliteSaver(db) as saver:
        statements.take()
        yield saver, statements


def _answer(state: Any) -> dict[str, Any]:
    return {"messages": [AssistantMessage(content=f"answer {len(state['messages'])}")]}


def _chat(saver: SqliteSaver) -> Any:
    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("answer", _answer)
        .add_edge(START, "answer")
        .add_edge("answer", END)
        .compile(checkpointer=saver)
    )


def _put(saver: SqliteSaver, id: str, parent: Checkpoint | None, messages: list[Any]) -> Checkpoint:
    values = {"messages": list(parent.values["messages"]) + messages} if parent is not None else {"messages": messages}
    return saver.put(
        Checkpoint(
            id=id,
            thread_id="t",
            seq=1 if parent is None else parent.seq + 1,
            parent_id=None if parent is None else parent.id,
            values=freeze(values),
            run_id="r",
            source="loop",
        ),
        expected_head=None if parent is None else parent.id,
    )


def _first_of_another_thread(saver: SqliteSaver) -> None:
    """Thread "u"'s first checkpoint, of one message: one item row."""
    saver.put(
        Checkpoint(
            id="b1",
            thread_id="u",
            seq=1,
            values=freeze({"messages": [UserMessage(content="x")]}),
            run_id="r",
            source="loop",
        ),
        expected_head=None,
    )


def _rows(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with closing(sqlite3.connect(db)) as raw:
        raw.set_trace_callback(None)  # not the saver's statements
        return (
            raw.execute("SELECT id, prev_id FROM items ORDER BY id").fetchall(),
            raw.execute("SELECT id, seq FROM checkpoints ORDER BY seq").fetchall(),
        )


def test_the_first_put_runs_a_transaction_and_the_next_ones_one_statement_each(
    traced: tuple[SqliteSaver, Statements],
) -> None:
    saver, statements = traced
    graph = _chat(saver)
    config = RunnableConfig(thread_id="t")

    graph.invoke({"messages": [UserMessage(content="first")]}, config)

    kinds = [_kind(sql) for sql in statements.take()]
    assert kinds == [
        "SELECT",  # the run reads its base: the thread has none
        "BEGIN",  # the input's checkpoint: this saver does not know the next row ids yet
        "SELECT",
        "INSERT INTO items",
        "INSERT INTO checkpoints",
        "COMMIT",
        "INSERT INTO rxgraph_put",  # the node's: the head and the ids checked and the rows written in one statement
    ]

    graph.invoke({"messages": [UserMessage(content="second")]}, config)

    seen = statements.take()
    assert [_kind(sql) for sql in seen] == ["SELECT"] + ["INSERT INTO rxgraph_put"] * 2, seen
    # Only the columns a put gives a value are named (the trace shows the statement with its values): binding None
    # costs Python's sqlite3 module a raised and cleared AttributeError per parameter.
    assert all("NULL" not in sql for sql in seen[1:]), seen
    assert len(graph.get_state(config).values["messages"]) == 4
    items, checkpoints = _rows(Path(saver.path))
    assert [seq for _, seq in checkpoints] == [1, 2, 3, 4]
    assert items == [(1, None), (2, 1), (3, 2), (4, 3)]  # one chain, ids in turn


def test_a_put_after_another_connection_wrote_rows_takes_fresh_ids(
    traced: tuple[SqliteSaver, Statements], db: Path
) -> None:
    saver, statements = traced
    first = _put(saver, "a1", None, [UserMessage(content="one")])
    second = _put(saver, "a2", first, [AssistantMessage(content="two")])  # this saver now knows the next ids
    with SqliteSaver(db) as other:  # another process, say: its rows take the ids this saver would have given
        _first_of_another_thread(other)
    statements.take()

    third = _put(saver, "a3", second, [UserMessage(content="three")])

    kinds = [_kind(sql) for sql in statements.take()]
    assert kinds[0] == "INSERT INTO rxgraph_put"  # tried, refused by its check, nothing written
    assert kinds[1:] == ["BEGIN", "SELECT", "INSERT INTO items", "INSERT INTO checkpoints", "COMMIT"]
    items, _ = _rows(db)
    assert items == [(1, None), (2, 1), (3, None), (4, 2)]  # "u" took 3; "t"'s third message links to its second
    assert saver.get("t", third.id) is not None
    fresh = SqliteSaver(db)
    try:
        stored = fresh.get("t")
        assert stored is not None and [m.content for m in stored.values["messages"]] == ["one", "two", "three"]
    finally:
        fresh.close()


def _topic(saver: SqliteSaver, id: str, thread: str, parent: Checkpoint | None, topic: str) -> Checkpoint:
    """A checkpoint whose one value is a plain string: one blob row."""
    return saver.put(
        Checkpoint(
            id=id,
            thread_id=thread,
            seq=1 if parent is None else parent.seq + 1,
            parent_id=None if parent is None else parent.id,
            values=freeze({"topic": topic}),
            run_id="r",
            source="loop",
        ),
        expected_head=None if parent is None else parent.id,
    )


def test_a_put_after_another_connection_wrote_blobs_takes_fresh_blob_ids(
    traced: tuple[SqliteSaver, Statements], db: Path
) -> None:
    saver, statements = traced
    first = _topic(saver, "a1", "t", None, "one")
    second = _topic(saver, "a2", "t", first, "two")  # blob 2; this saver's next blob id is 3
    with SqliteSaver(db) as other:
        _topic(other, "b1", "u", None, "theirs")  # blob 3
    statements.take()

    _topic(saver, "a3", "t", second, "three")

    kinds = [_kind(sql) for sql in statements.take()]
    assert kinds[0] == "INSERT INTO rxgraph_put"  # tried, refused by its check, nothing written
    assert kinds[1:] == ["BEGIN", "SELECT", "INSERT INTO blobs", "INSERT INTO checkpoints", "COMMIT"]
    with closing(sqlite3.connect(db)) as raw:
        blobs = raw.execute("SELECT id, value FROM blobs ORDER BY id").fetchall()
    assert blobs == [(1, '"one"'), (2, '"two"'), (3, '"theirs"'), (4, '"three"')]
    with SqliteSaver(db) as fresh:
        ours, theirs = fresh.get("t"), fresh.get("u")
        assert ours is not None and ours.values["topic"] == "three"
        assert theirs is not None and theirs.values["topic"] == "theirs"


def test_ids_freed_by_another_connection_are_never_given_again(
    traced: tuple[SqliteSaver, Statements], db: Path
) -> None:
    saver, _ = traced
    first = _put(saver, "a1", None, [UserMessage(content="one")])  # item 1; this saver's next item id is 2
    with SqliteSaver(db) as other:
        _first_of_another_thread(other)  # item 2
        assert other.delete_thread("u") == 1  # item 2 freed: the floor rises to 2

    _put(saver, "a2", first, [AssistantMessage(content="two")])

    items, _ = _rows(db)
    assert items == [(1, None), (3, 1)]  # not 2, which a saver holding "u" cached may still refer to


def test_a_moved_head_is_a_conflict_and_writes_nothing(traced: tuple[SqliteSaver, Statements], db: Path) -> None:
    saver, statements = traced
    first = _put(saver, "a1", None, [UserMessage(content="one")])
    second = _put(saver, "a2", first, [AssistantMessage(content="two")])
    statements.take()
    with pytest.raises(CheckpointConflictError) as caught:
        _put(saver, "late", first, [AssistantMessage(content="late")])  # built on a1, but a2 is the head
    assert caught.value.actual_head == second.id
    assert _kind(statements.take()[0]) == "INSERT INTO rxgraph_put"
    with pytest.raises(CheckpointConflictError):  # the head's seq, but another head's id
        saver.put(
            Checkpoint(
                id="other-branch",
                thread_id="t",
                seq=second.seq + 1,
                parent_id=None,
                values=freeze({"messages": [UserMessage(content="elsewhere")]}),
                run_id="r",
                source="loop",
            ),
            expected_head="a-checkpoint-of-another-branch",
        )
    items, checkpoints = _rows(db)
    assert items == [(1, None), (2, 1)] and [seq for _, seq in checkpoints] == [1, 2]
    _put(saver, "a3", second, [UserMessage(content="three")])  # and the saver goes on
    assert _rows(db)[0] == [(1, None), (2, 1), (3, 2)]


def test_a_wrong_seq_and_a_duplicate_id_are_refused_as_by_the_transaction(
    traced: tuple[SqliteSaver, Statements], db: Path
) -> None:
    saver, _ = traced
    first = _put(saver, "a1", None, [UserMessage(content="one")])
    second = _put(saver, "a2", first, [AssistantMessage(content="two")])
    skipping = Checkpoint(
        id="skip",
        thread_id="t",
        seq=second.seq + 2,
        parent_id=second.id,
        values=second.values,
        run_id="r",
        source="loop",
    )
    with pytest.raises(InvalidCheckpointError, match="seq"):
        saver.put(skipping, expected_head=second.id)
    with pytest.raises(InvalidCheckpointError, match="a1"):
        _put(saver, "a1", second, [UserMessage(content="three")])  # the id of a stored checkpoint
    items, checkpoints = _rows(db)
    assert items == [(1, None), (2, 1)] and [seq for _, seq in checkpoints] == [1, 2]


def test_a_put_of_more_rows_than_the_statement_carries_runs_a_transaction(
    traced: tuple[SqliteSaver, Statements], db: Path
) -> None:
    saver, statements = traced
    first = _put(saver, "a1", None, [UserMessage(content="one")])
    statements.take()

    many = _put(saver, "a2", first, [AssistantMessage(content=f"part {i}") for i in range(9)])

    assert "BEGIN" in [_kind(sql) for sql in statements.take()]
    items, _ = _rows(db)
    assert items == [(1, None)] + [(i, i - 1) for i in range(2, 11)]
    _put(saver, "a3", many, [UserMessage(content="next")])  # the ids are known again: one statement
    assert [_kind(sql) for sql in statements.take()] == ["INSERT INTO rxgraph_put"]
    assert _rows(db)[0][-1] == (11, 10)
