"""SqliteSaver specifics: durability, processes sharing a file, incremental storage, schema, damaged rows, caching."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, closing
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from _support import ScriptedChat, final_reply, tool_call_reply
from pydantic import BaseModel, ConfigDict, field_serializer

import rxgraph.checkpoint
from rxgraph import Checkpoint, CheckpointConflictError, FrozenList, RunnableConfig
from rxgraph._frozen import freeze
from rxgraph.checkpoint import Serde, SqliteSaver
from rxgraph.checkpoint._base import new_checkpoint
from rxgraph.checkpoint._sqlite_schema import MIGRATIONS
from rxgraph.errors import (
    CheckpointDecodeError,
    IncompatibleDatabaseError,
    InvalidArgumentError,
    SaverClosedError,
    SaverTimeoutError,
    SerializationError,
)
from rxgraph.messages import AssistantMessage, ToolCall, UserMessage, check_request

REPO = Path(__file__).resolve().parents[2]
CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


@pytest.fixture
def saver(db: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver(db) as opened:
        yield opened


def _raw(db: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(db, isolation_level=None))


def _user(text: str) -> dict[str, Any]:
    return {"messages": UserMessage(content=text)}


def _conversation(n_messages: int) -> list[Any]:
    return [
        UserMessage(content=f"question {i}") if i % 2 == 0 else AssistantMessage(content=f"answer {i}")
        for i in range(n_messages)
    ]


def _seed(saver: SqliteSaver, thread_id: str, n_messages: int) -> Checkpoint:
    checkpoint = Checkpoint(
        id=f"{thread_id}-seed",
        thread_id=thread_id,
        seq=1,
        values={"messages": _conversation(n_messages), "turns": n_messages // 2},
        run_id="seed",
        source="update",
    )
    return saver.put(checkpoint, expected_head=None)


# -- durability and processes --------------------------------------------------------------------------------------


def test_reopening_the_file_gives_the_same_checkpoints(db: Path) -> None:
    with SqliteSaver(db) as first:
        chat = ScriptedChat([tool_call_reply(), final_reply("a"), final_reply("b")], first)  # type: ignore[arg-type]
        chat.graph.invoke(_user("one"), CONFIG)
        chat.graph.invoke(_user("two"), CONFIG)
        written = first.list("t")
    with SqliteSaver(db) as second:
        assert second.list("t") == written
        assert second.get("t") == written[0]
        assert second.threads() == ["t"]
        assert second.stats.checkpoints_decoded == len(written)
    assert len(written) == 6


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name(script)), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_processes_racing_on_one_head_exactly_one_wins(saver: SqliteSaver, db: Path) -> None:
    root = _seed(saver, "t", 4)
    names = [f"p{i}" for i in range(4)]
    procs = [_spawn("_cas_worker.py", str(db), name) for name in names]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        for proc in procs:  # every worker has read the same head before any of them writes
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = {}
        for name, proc in zip(names, procs, strict=True):
            out, err = proc.communicate()
            assert proc.returncode == 0, err
            outcomes[name] = out.strip()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    winners = [name for name, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1
    assert sorted(o for o in outcomes.values() if o != "won") == [f"conflict {winners[0]}"] * 3
    head = saver.get("t")  # written by another process: the cache must not hide it
    assert head is not None and head.id == winners[0] and head.parent_id == root.id and head.seq == 2
    assert head.values["messages"][-1] == UserMessage(content=f"from {winners[0]}")
    assert [c.id for c in saver.list("t")] == [winners[0], root.id]


def test_a_cached_head_is_never_stale_and_is_refreshed_incrementally(db: Path) -> None:
    with SqliteSaver(db) as writer, SqliteSaver(db) as reader:
        _seed(writer, "t", 200)
        assert reader.get("t") is not None
        decoded = reader.stats.items_decoded
        assert decoded == 200
        assert reader.get("t") is reader.get("t")  # a cache hit while nothing changed
        assert reader.stats.checkpoints_decoded == 1
        chat = ScriptedChat([final_reply("new")], writer)  # type: ignore[arg-type]
        chat.graph.invoke(_user("more"), CONFIG)
        head = reader.get("t")
        assert (
            head is not None
            and head.seq == 3
            and head.values["messages"][-2:]
            == [
                UserMessage(content="more"),
                final_reply("new"),
            ]
        )
        assert reader.stats.items_decoded - decoded == 2  # only the new items were read
        assert head == writer.get("t")


def test_a_locked_database_makes_put_raise_instead_of_waiting_forever(db: Path) -> None:
    with SqliteSaver(db, timeout=0.05) as saver, _raw(db) as other:
        first = _seed(saver, "t", 2)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(SaverTimeoutError, match=r"stayed locked for more than 0\.05 s") as caught:
            saver.put(
                Checkpoint(id="x", thread_id="t", seq=2, parent_id=first.id, run_id="r", source="loop"),
                expected_head=first.id,
            )
        assert isinstance(caught.value, TimeoutError) and isinstance(caught.value.__cause__, sqlite3.OperationalError)
        head = saver.get("t")  # readers are not blocked by a writer in WAL mode
        assert head is not None and head.id == first.id
        other.execute("ROLLBACK")
        saver.put(
            Checkpoint(id="x", thread_id="t", seq=2, parent_id=first.id, run_id="r", source="loop"),
            expected_head=first.id,
        )


def test_a_locked_new_file_makes_opening_raise_with_the_same_note(db: Path) -> None:
    with _raw(db) as other:
        other.execute("BEGIN IMMEDIATE")  # another process is writing: the schema cannot be created yet
        with pytest.raises(SaverTimeoutError, match=re.escape(f"{db} stayed locked for more than 0.05 s")):
            SqliteSaver(db, timeout=0.05)
        other.execute("ROLLBACK")
    with SqliteSaver(db) as saver:
        assert saver.schema_version == 4


# -- incremental storage -------------------------------------------------------------------------------------------


def _step_cost(db: Path, n_messages: int, turns: int, *, reopen: bool = False) -> tuple[float, float, float]:
    """Bytes and items written per checkpoint, and pages the file grew by per checkpoint, over ``turns`` user turns
    on a thread that already holds ``n_messages`` messages. ``reopen``: run the turns on a second saver (as another
    process would), which has nothing cached."""
    with ExitStack() as stack:
        saver = stack.enter_context(SqliteSaver(db))
        _seed(saver, "t", n_messages)
        if reopen:
            saver = stack.enter_context(SqliteSaver(db))
        raw = stack.enter_context(_raw(db))
        before = saver.stats
        pages = raw.execute("PRAGMA page_count").fetchone()[0]
        chat = ScriptedChat([final_reply(f"reply {i}") for i in range(turns)], saver)  # type: ignore[arg-type]
        for i in range(turns):
            chat.graph.invoke(_user(f"turn {i}"), CONFIG)
        after = saver.stats
        grown = raw.execute("PRAGMA page_count").fetchone()[0] - pages
        head = saver.get("t")
        assert head is not None and len(head.values["messages"]) == n_messages + 2 * turns
    steps = after.puts - before.puts
    assert steps == 2 * turns
    return (
        (after.bytes_written - before.bytes_written) / steps,
        (after.items_written - before.items_written) / steps,
        grown / steps,
    )


def test_bytes_written_per_step_do_not_grow_with_the_conversation(tmp_path: Path) -> None:
    short_bytes, short_items, short_pages = _step_cost(tmp_path / "short.db", 20, 50)
    long_bytes, long_items, long_pages = _step_cost(tmp_path / "long.db", 2000, 50)
    assert short_items == long_items == 1.0  # the new message only; "turns" is an unchanged blob, reused by id
    assert long_bytes / short_bytes < 2, (short_bytes, long_bytes)
    assert long_pages <= 2 * short_pages + 0.5, (short_pages, long_pages)
    # A fresh process (nothing cached) reads the head once and then writes incrementally too.
    cold_bytes, cold_items, _ = _step_cost(tmp_path / "cold.db", 2000, 10, reopen=True)
    assert cold_items == 1.0 and cold_bytes / short_bytes < 2


def test_turns_on_the_saver_that_wrote_the_thread_decode_nothing(saver: SqliteSaver) -> None:
    _seed(saver, "t", 1000)
    chat = ScriptedChat([tool_call_reply(), final_reply("a"), final_reply("b")], saver)  # type: ignore[arg-type]
    chat.graph.invoke(_user("one"), CONFIG)
    chat.graph.invoke(_user("two"), CONFIG)
    stats = saver.stats
    assert stats.puts == 1 + 6 and stats.items_written == 1000 + 6
    assert (stats.checkpoints_decoded, stats.items_decoded, stats.blobs_decoded) == (0, 0, 0)


def test_a_parent_evicted_from_the_cache_is_read_back_and_still_extended(db: Path) -> None:
    # cache_size=1 and two threads taking turns: every put finds its parent evicted and reads it from disk.
    with SqliteSaver(db, cache_size=1) as saver:
        chats = {}
        for thread in ("a", "b"):
            _seed(saver, thread, 100)
            chats[thread] = ScriptedChat([final_reply(f"{thread}{i}") for i in range(5)], saver)  # type: ignore[arg-type]
        items = saver.stats.items_written
        for i in range(5):
            for thread, chat in chats.items():
                chat.graph.invoke(_user(f"{thread} turn {i}"), RunnableConfig(thread_id=thread))
        assert saver.stats.items_written - items == 2 * 2 * 5
    with SqliteSaver(db) as reopened:
        for thread in ("a", "b"):
            head = reopened.get(thread)
            assert head is not None and len(head.values["messages"]) == 110
            assert head.values["messages"][-1] == final_reply(f"{thread}4")


def test_a_rewind_to_an_earlier_state_costs_no_copy(saver: SqliteSaver) -> None:
    base = _seed(saver, "t", 500)
    grown = dict(base.values)
    grown["messages"] = base.values["messages"].extended([UserMessage(content="half a turn")])
    grown["turns"] = 251
    saver.put(
        new_checkpoint(id="g", thread_id="t", seq=2, parent_id=base.id, values=grown, run_id="r", source="loop"),
        expected_head=base.id,
    )
    before = saver.stats
    rewind = new_checkpoint(
        id="r", thread_id="t", seq=3, parent_id="g", values=base.values, run_id="r", source="rewind"
    )
    saver.put(rewind, expected_head="g")
    after = saver.stats
    assert (after.items_written, after.blobs_written) == (before.items_written, before.blobs_written)
    assert after.bytes_written - before.bytes_written < 400
    with SqliteSaver(saver.path) as reopened:
        head = reopened.get("t")
        assert head is not None and head.values == base.values and head.source == "rewind"


def test_lists_of_older_checkpoints_share_storage_when_read(saver: SqliteSaver, db: Path) -> None:
    chat = ScriptedChat([final_reply(str(i)) for i in range(20)], saver)  # type: ignore[arg-type]
    for i in range(20):
        chat.graph.invoke(_user(str(i)), CONFIG)
    with SqliteSaver(db) as reader:
        history = reader.list("t")
        assert len(history) == 40
        # Read oldest first, each list as an extension of the previous one: every item is read once.
        assert reader.stats.items_decoded == 40
        messages = [c.values["messages"] for c in history]
        assert all(isinstance(m, FrozenList) for m in messages)
        assert all(newer.shares_prefix_with(older) for newer, older in pairwise(messages))


def test_an_unregistered_value_is_refused_and_nothing_is_written(saver: SqliteSaver, db: Path) -> None:
    class Opaque:
        pass

    with pytest.raises(SerializationError, match=r"state key 'tool_state'.*Opaque"):
        saver.put(
            Checkpoint(
                id="a", thread_id="t", seq=1, values={"tool_state": {"x": Opaque()}}, run_id="r", source="input"
            ),
            expected_head=None,
        )
    with pytest.raises(SerializationError, match=r"state key 'messages' at \[1\].*Opaque"):
        saver.put(
            Checkpoint(id="a", thread_id="t", seq=1, values={"messages": ["ok", Opaque()]}, run_id="r", source="input"),
            expected_head=None,
        )
    with _raw(db) as raw:
        counts = [
            raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("checkpoints", "items", "blobs")
        ]
    assert counts == [0, 0, 0] and saver.get("t") is None


# -- schema --------------------------------------------------------------------------------------------------------


def test_the_file_is_in_wal_mode_and_records_its_schema_version(saver: SqliteSaver, db: Path) -> None:
    assert saver.schema_version == 4
    with _raw(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert dict(raw.execute("SELECT key, value FROM meta")) == {
            "format": "rxgraph.checkpoints",
            "schema_version": "4",
        }
        indexes = {
            row[0] for row in raw.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        }
        assert any("(thread_id, safe, seq)" in sql for sql in indexes)


def test_a_sqlite_file_of_another_application_is_refused_untouched(db: Path) -> None:
    with _raw(db) as raw:
        raw.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(IncompatibleDatabaseError, match=r"not an rxgraph checkpoint database.*users") as caught:
        SqliteSaver(db)
    assert caught.value.path == str(db) and isinstance(caught.value, ValueError)
    with _raw(db) as raw:
        assert [row[0] for row in raw.execute("SELECT name FROM sqlite_master")] == ["users"]
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_an_other_meta_table_is_not_mistaken_for_ours(db: Path) -> None:
    with _raw(db) as raw:
        raw.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    with pytest.raises(IncompatibleDatabaseError, match="not an rxgraph checkpoint database") as caught:
        SqliteSaver(db)
    assert caught.value.path == str(db)


def test_a_file_that_is_not_a_database_is_refused(db: Path) -> None:
    db.write_text("name,age\nada,36\n" * 100)
    with pytest.raises(IncompatibleDatabaseError, match="is not an SQLite database") as caught:
        SqliteSaver(db)
    assert caught.value.path == str(db)
    assert db.read_text().startswith("name,age")


def test_a_newer_schema_version_is_refused(db: Path) -> None:
    SqliteSaver(db).close()
    with _raw(db) as raw:
        raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(IncompatibleDatabaseError, match="schema version 99 was written by a newer rxgraph") as caught:
        SqliteSaver(db)
    assert caught.value.path == str(db)


def _as_version_1(db: Path) -> None:
    """Turn a file this code wrote into one a version-1 rxgraph wrote (no error or pending column)."""
    with _raw(db) as raw:
        raw.execute("ALTER TABLE checkpoints DROP COLUMN error")
        raw.execute("ALTER TABLE checkpoints DROP COLUMN pending")
        raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        raw.execute("DELETE FROM meta WHERE key NOT IN ('format', 'schema_version')")


def test_a_version_1_file_gains_the_error_column_and_reads_back_as_it_was(db: Path) -> None:
    with SqliteSaver(db) as saver:
        written = _seed(saver, "t", 4)
    _as_version_1(db)
    with SqliteSaver(db) as migrated:
        assert migrated.schema_version == 4
        head = migrated.get("t")
        assert head is not None and head.values == written.values and head.error is None and head.pending is None
        failed = Checkpoint(
            id="f", thread_id="t", seq=head.seq + 1, parent_id=head.id, values=head.values, run_id="r",
            source="error", error="ValueError: the model is down", pending={"interrupt": {"value": [1, "a"]}},
        )  # fmt: skip
        migrated.put(failed, expected_head=head.id)
    with SqliteSaver(db) as reopened:
        back = reopened.get("t")
        assert back is not None and back.source == "error" and back.error == "ValueError: the model is down"
        assert back.pending == {"interrupt": {"value": (1, "a")}}


def test_an_older_schema_version_is_migrated_once(db: Path) -> None:
    with SqliteSaver(db) as saver:
        _seed(saver, "t", 4)
    _as_version_1(db)
    with _raw(db) as raw:
        raw.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    with pytest.raises(IncompatibleDatabaseError, match="no migration from version 0") as caught:
        SqliteSaver(db)
    assert caught.value.path == str(db)
    ran: list[int] = []

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE added_by_migration (x)")
        conn.execute("SELECT no_such_column FROM meta")

    with pytest.raises(IncompatibleDatabaseError, match="migration from schema version 0 failed") as caught:
        SqliteSaver(db, migrations={0: broken})
    assert caught.value.path == str(db)

    def v0_to_v1(conn: sqlite3.Connection) -> None:
        ran.append(0)
        conn.execute("CREATE TABLE added_by_migration (x)")

    migrations = {**MIGRATIONS, 0: v0_to_v1}

    with _raw(db) as raw:  # the failed migration was rolled back entirely
        assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "0"
        assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'added_by_migration'").fetchone()[0] == 0
    with SqliteSaver(db, migrations=migrations) as migrated:
        assert migrated.schema_version == 4 and ran == [0]
        head = migrated.get("t")
        assert head is not None and len(head.values["messages"]) == 4
    with SqliteSaver(db, migrations=migrations):
        assert ran == [0]


# -- damaged rows --------------------------------------------------------------------------------------------------


def _half_turn(saver: SqliteSaver) -> ScriptedChat:
    """Turn 1 completes; turn 2's model fails after the tools node wrote: the head is unsafe."""
    chat = ScriptedChat([final_reply("hi"), tool_call_reply(), RuntimeError("model is down"), final_reply("ok")], saver)  # type: ignore[arg-type]
    chat.graph.invoke(_user("hello"), CONFIG)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke(_user("weather?"), CONFIG)
    return chat


def _garbage_manifest(raw: sqlite3.Connection, cid: str) -> None:
    raw.execute("UPDATE checkpoints SET manifest = 'not json' WHERE id = ?", (cid,))


def _dangling_item(raw: sqlite3.Connection, cid: str) -> None:
    raw.execute("""UPDATE checkpoints SET manifest = '{"messages": [999999, 4]}' WHERE id = ?""", (cid,))


def _bad_column(raw: sqlite3.Connection, cid: str) -> None:
    raw.execute("UPDATE checkpoints SET created_at = 'yesterday' WHERE id = ?", (cid,))


def _unknown_type(raw: sqlite3.Connection, cid: str) -> None:
    # A value of a model this process never registered (say, written by a newer version of the application).
    blob = raw.execute("""INSERT INTO blobs (value) VALUES ('{"$type": "gone.Model", "data": {}}')""").lastrowid
    raw.execute("UPDATE checkpoints SET manifest = json_set(manifest, '$.extra', ?) WHERE id = ?", (blob, cid))


@pytest.mark.parametrize("damage", [_garbage_manifest, _dangling_item, _bad_column, _unknown_type])
def test_a_damaged_checkpoint_raises_on_get_and_is_skipped_by_the_next_turn(
    db: Path, damage: Callable[[sqlite3.Connection, str], None], caplog: pytest.LogCaptureFixture
) -> None:
    with SqliteSaver(db) as saver:
        _half_turn(saver)
        head = saver.get("t")
        assert head is not None and not head.safe
        newest_safe = saver.latest_safe("t")
        assert newest_safe is not None and newest_safe.node == "__start__"
        older_safe = saver.latest_safe("t", before_seq=newest_safe.seq)
        assert older_safe is not None and older_safe.node == "model"
        damaged_id = newest_safe.id
    with _raw(db) as raw:
        damage(raw, damaged_id)
    with SqliteSaver(db) as saver:
        with pytest.raises(CheckpointDecodeError) as caught:
            saver.get("t", damaged_id)
        assert caught.value.thread_id == "t" and caught.value.checkpoint_id == damaged_id
        assert "'t'" in str(caught.value) and damaged_id in str(caught.value)
        with caplog.at_level(logging.WARNING, logger="rxgraph"):
            found = saver.latest_safe("t")
        assert found is not None and found.id == older_safe.id
        assert any(damaged_id in record.getMessage() for record in caplog.records)
        # The next user turn starts from the newest checkpoint that is safe *and* readable.
        chat = ScriptedChat([final_reply("fine")], saver)  # type: ignore[arg-type]
        chat.graph.invoke(_user("again"), CONFIG)
        request = chat.requests[-1]
        check_request(request)
        assert [m.role for m in request] == ["user", "assistant", "user"]
        first = min((c for c in saver.list("t", limit=2)), key=lambda c: c.seq)
        assert first.parent_id == older_safe.id and first.rolled_back_from == head.id


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE blobs SET value = '{'",
        "UPDATE items SET value = '1, 2' WHERE id = 2",  # would shift the items after it
        "UPDATE items SET prev_id = 4 WHERE id = 1",  # a cycle
        "UPDATE items SET prev_id = NULL WHERE id = 3",  # a chain shorter than the manifest says
    ],
)
def test_a_damaged_head_raises_instead_of_reading_as_nothing(db: Path, damage: str) -> None:
    with SqliteSaver(db) as saver:
        _seed(saver, "t", 4)
    with _raw(db) as raw:
        assert raw.execute(damage).rowcount == 1
    with SqliteSaver(db) as saver, pytest.raises(CheckpointDecodeError, match="t-seed"):
        saver.get("t")


# -- lifecycle -----------------------------------------------------------------------------------------------------


def test_close_and_context_manager(db: Path) -> None:
    with SqliteSaver(db) as saver:
        _seed(saver, "t", 2)
    with pytest.raises(SaverClosedError, match="closed") as caught:
        saver.get("t")
    assert isinstance(caught.value, RuntimeError)
    with pytest.raises(SaverClosedError):
        saver.put(Checkpoint(id="x", thread_id="u", seq=1, run_id="r", source="input"), expected_head=None)
    saver.close()  # closing twice is fine
    with SqliteSaver(db) as again:
        assert again.get("t") is not None


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"synchronous": "SOMETIMES"}, "synchronous"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"cache_size": 0}, "cache_size"),
    ],
)
def test_bad_constructor_arguments_are_refused_by_name(db: Path, kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidArgumentError, match=argument) as caught:
        SqliteSaver(db, **kwargs)
    assert caught.value.argument == argument and isinstance(caught.value, ValueError)
    assert not db.exists()  # refused before the file was touched


def test_errors_are_exported_from_one_place() -> None:
    assert not hasattr(rxgraph.checkpoint, "IncompatibleDatabaseError")
    assert not any(name.endswith("Error") for name in rxgraph.checkpoint.__all__)


def test_an_in_memory_database_works_for_one_process() -> None:
    with SqliteSaver(":memory:") as saver:
        chat = ScriptedChat([tool_call_reply(), final_reply()], saver)  # type: ignore[arg-type]
        chat.graph.invoke(_user("hi"), CONFIG)
        assert [c.node for c in reversed(saver.list("t"))] == ["__start__", "model", "tools", "model"]


def test_conflicts_leave_no_rows_behind(saver: SqliteSaver, db: Path) -> None:
    first = _seed(saver, "t", 10)
    longer = first.values["messages"].extended([UserMessage(content="x")])
    with pytest.raises(CheckpointConflictError):
        saver.put(
            Checkpoint(
                id="b", thread_id="t", seq=2, parent_id=first.id, values={"messages": longer}, run_id="r", source="loop"
            ),
            expected_head="someone-else",
        )
    with _raw(db) as raw:
        assert raw.execute("SELECT count(*) FROM items").fetchone()[0] == 10


# -- lists whose prefix only looks like the parent's -------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent_items", "child_items"),
    [
        ([1, 0], [True, False, 1]),
        ([1, 2], [1.0, 2.0, 3.5]),
        ([0.0], [-0.0, 1]),
        ([(1, 2), "x"], [FrozenList([1, 2]), "x", "y"]),
        ([FrozenList([1, 2])], [(1, 2), 3]),
        ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}, 3]),
    ],
)
def test_a_list_whose_prefix_is_only_equal_to_the_parents_is_stored_again(
    db: Path, parent_items: list[Any], child_items: list[Any]
) -> None:
    # Two separate FrozenLists, so nothing proves the prefix by shared storage: the saver has to compare items, and
    # items that are equal but would be stored differently must not count as the parent's.
    parent = Checkpoint(id="p", thread_id="t", seq=1, values={"xs": freeze(parent_items)}, run_id="r", source="input")
    child = Checkpoint(
        id="c", thread_id="t", seq=2, parent_id="p", values={"xs": freeze(child_items)}, run_id="r", source="loop"
    )
    assert child.values["xs"][: len(parent_items)] == parent.values["xs"]
    assert not child.values["xs"].shares_prefix_with(parent.values["xs"])
    for written, back in _write_then_reopen(db, parent, child):
        assert _typed(back.values["xs"]) == _typed(written.values["xs"])


def _write_then_reopen(db: Path, *chain: Checkpoint) -> list[tuple[Checkpoint, Checkpoint]]:
    """Put a chain of checkpoints (each a child of the one before), then read each back from a fresh saver on the
    file, newest first: (written, read back) pairs."""
    with SqliteSaver(db) as saver:
        head = None
        for checkpoint in chain:
            saver.put(checkpoint, expected_head=head)
            head = checkpoint.id
    with SqliteSaver(db) as reopened:
        pairs = []
        for written in reversed(chain):
            back = reopened.get(written.thread_id, written.id)
            assert back is not None
            pairs.append((written, back))
        return pairs


def _typed(value: Any) -> Any:
    """``value`` as a tree that tells types apart (and -0.0 from 0.0, and the order of a mapping's keys)."""
    if isinstance(value, Mapping):
        return (type(value).__name__, [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, FrozenList | list | tuple):
        return (type(value).__name__, [_typed(item) for item in value])
    if type(value) is float:
        return ("float", value.hex())
    return (type(value).__name__, value)


def test_a_rebuilt_list_with_the_very_same_items_still_shares_the_parents_rows(db: Path) -> None:
    messages = _conversation(50)
    with SqliteSaver(db) as saver:
        saver.put(
            Checkpoint(id="p", thread_id="t", seq=1, values={"m": messages}, run_id="r", source="input"),
            expected_head=None,
        )
        rebuilt = FrozenList([*messages, UserMessage(content="new")])  # same item objects, new storage
        before = saver.stats.items_written
        saver.put(
            Checkpoint(id="c", thread_id="t", seq=2, parent_id="p", values={"m": rebuilt}, run_id="r", source="loop"),
            expected_head="p",
        )
        assert saver.stats.items_written - before == 1
    with SqliteSaver(db) as reopened:
        back = reopened.get("t", "c")
        assert back is not None and back.values["m"] == [*messages, UserMessage(content="new")]


# -- text that UTF-8 cannot carry as it is ----------------------------------------------------------------------


def test_strings_with_lone_surrogates_are_stored_and_read_back_exactly(db: Path) -> None:
    halves = "\ud83d" + "\ude00"  # an emoji split across two streamed deltas: two code points
    values: dict[str, Any] = {
        "text": halves,
        "lone": "\udc80",
        "nested": {"delta": "\ud83d", "\ude00": [halves, ("\ud800",)]},
        "messages": [
            UserMessage(content="tell me a joke \ud83d"),
            AssistantMessage(content=halves, tool_calls=[ToolCall(id="c1", name="f", arguments='{"e": "\ud83d"}')]),
        ],
    }
    first = Checkpoint(id="a", thread_id="t", seq=1, values=values, run_id="r", source="input")
    grown = dict(first.values)
    grown["messages"] = first.values["messages"].extended([AssistantMessage(content="\ude00")])
    second = Checkpoint(id="b", thread_id="t", seq=2, parent_id="a", values=grown, run_id="r", source="loop")
    pairs = _write_then_reopen(db, first, second)
    for written, back in pairs:
        assert back.values == written.values
        assert _code_points(back.values) == _code_points(written.values)
    head = pairs[0][1]
    assert head.values["text"] != "😀" and len(head.values["text"]) == 2


def _code_points(value: Any) -> Any:
    if isinstance(value, str):
        return [ord(c) for c in value]
    if isinstance(value, AssistantMessage | UserMessage | ToolCall):
        return [type(value).__name__, [(k, _code_points(v)) for k, v in value]]
    if isinstance(value, Mapping):
        return [(_code_points(k), _code_points(v)) for k, v in value.items()]
    if isinstance(value, FrozenList | list | tuple):
        return [type(value).__name__, [_code_points(v) for v in value]]
    return value


def test_state_keys_with_surrogates_keep_their_code_points(db: Path) -> None:
    # Two code points that only look like an emoji, the emoji itself, a lone half, and a key named like the tag.
    values = {"\ud83d\ude00": 1, "😀": 2, "\ud83d": [3], "$wtf8": "x", "plain": 5}
    with SqliteSaver(db) as saver:
        saver.put(
            Checkpoint(id="a", thread_id="t", seq=1, values=values, run_id="r", source="input"),
            expected_head=None,
        )
    with SqliteSaver(db) as reopened:
        head = reopened.get("t")
        assert head is not None
        assert [_code_points(k) for k in head.values] == [_code_points(k) for k in values]
        assert dict(head.values) == values


# -- threads queueing for the connection -------------------------------------------------------------------------


def test_a_call_that_waits_too_long_for_the_connection_says_how_long_and_for_what(db: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    class Slow(BaseModel):
        model_config = ConfigDict(frozen=True)
        n: int

        @field_serializer("n")
        def _hold(self, n: int) -> int:  # runs inside put, while the put holds the saver's connection
            entered.set()
            release.wait(30)
            return n

    written: list[Checkpoint] = []
    with SqliteSaver(db, serde=Serde([Slow]), timeout=0.05) as saver:
        slow = Checkpoint(id="a", thread_id="t", seq=1, values={"x": Slow(n=1)}, run_id="r", source="input")
        holder = threading.Thread(target=lambda: written.append(saver.put(slow, expected_head=None)))
        holder.start()
        try:
            assert entered.wait(30)
            with pytest.raises(SaverTimeoutError) as caught:
                saver.get("t")
        finally:
            release.set()
            holder.join(30)
        assert isinstance(caught.value, TimeoutError)
        message = str(caught.value)
        assert re.search(r"this call waited \d+\.\d+ s for the saver's connection", message), message
        assert "other threads of this process were using it" in message
        assert "only this call was waiting for it" in message
        assert "another thread held" not in message  # no single holder is blamed
        assert written == [slow] and saver.get("t") == slow  # the slow put was not disturbed


def test_the_timeout_message_counts_the_calls_that_were_waiting(db: Path) -> None:
    held, release = threading.Event(), threading.Event()
    waiting = threading.Semaphore(0)

    class ObservedLock:
        """The saver's own lock, telling the test when a call starts to wait for it."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if blocking:
                waiting.release()
            return bool(self.inner.acquire(blocking, timeout))

        def release(self) -> None:
            self.inner.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc: object) -> None:
            self.release()

    def hold() -> None:
        with lock.inner:
            held.set()
            release.wait(30)

    with SqliteSaver(db, timeout=0.05) as saver:
        lock = ObservedLock(saver._lock)
        saver._lock = lock  # type: ignore[assignment]
        patient_result: list[list[str]] = []
        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(30)
        try:
            saver._lock_timeout = 60  # the first waiter is patient...
            patient = threading.Thread(target=lambda: patient_result.append(saver.threads()))
            patient.start()
            assert waiting.acquire(timeout=30)  # ...and is now waiting
            saver._lock_timeout = 0.05  # the second is not
            with pytest.raises(SaverTimeoutError, match="2 calls, this one included, were waiting for it"):
                saver.threads()
        finally:
            release.set()
            holder.join(30)
        patient.join(30)
        assert patient_result == [[]]
