"""PostgresSaver specifics: schema and versions, processes sharing a database, incremental storage, damaged rows,
timeouts, the pool, and rxgraph without psycopg. The contract itself runs in test_contract.py."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _support import ScriptedChat, final_reply, tool_call_reply
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from rxgraph import Checkpoint, CheckpointConflictError, RunnableConfig
from rxgraph.checkpoint import PostgresSaver
from rxgraph.errors import (
    CheckpointDecodeError,
    IncompatibleDatabaseError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidTypeError,
    SaverClosedError,
    SaverTimeoutError,
    SerializationError,
)
from rxgraph.messages import AssistantMessage, UserMessage, check_request

REPO = Path(__file__).resolve().parents[2]
CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture
def saver(postgres_server: str, postgres_schema: str) -> Iterator[PostgresSaver]:
    with PostgresSaver(postgres_server, schema=postgres_schema) as opened:
        yield opened


@pytest.fixture
def raw(postgres_server: str, postgres_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own, with the test's schema first on its search path."""
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (sql.Identifier(postgres_schema).as_string(conn),))
        yield conn


def _count(raw: psycopg.Connection[Any], table: str) -> int:
    row = raw.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


def _user(text: str) -> dict[str, Any]:
    return {"messages": UserMessage(content=text)}


def _seed(saver: PostgresSaver, thread_id: str, n_messages: int) -> Checkpoint:
    messages = [
        UserMessage(content=f"question {i}") if i % 2 == 0 else AssistantMessage(content=f"answer {i}")
        for i in range(n_messages)
    ]
    checkpoint = Checkpoint(
        id=f"{thread_id}-seed",
        thread_id=thread_id,
        seq=1,
        values={"messages": messages, "turns": n_messages // 2},
        run_id="seed",
        source="update",
    )
    return saver.put(checkpoint, expected_head=None)


def _with_password(dsn: str) -> str:
    return make_conninfo(dsn, password="s3cret-pw")  # trust authentication ignores it


# -- schema --------------------------------------------------------------------------------------------------------


def test_the_schema_records_its_format_and_version_and_indexes_safe_checkpoints(
    saver: PostgresSaver, postgres_server: str, raw: psycopg.Connection[Any]
) -> None:
    assert saver.schema_version == 2
    assert dict(raw.execute("SELECT key, value FROM meta").fetchall()) == {
        "format": "rxgraph.checkpoints",
        "schema_version": "2",
    }
    # This schema's only: another test's schema dropped meanwhile would fail the view ("could not open relation").
    query = "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'checkpoints'"
    indexes = [row[0] for row in raw.execute(query, (saver.schema,))]
    assert any("(thread_id, seq) WHERE safe" in definition for definition in indexes), indexes
    with PostgresSaver(postgres_server, schema=saver.schema) as again:  # opening it again changes nothing
        assert again.schema_version == 2


def test_the_default_schema_is_rxgraph(postgres_dsn: str) -> None:
    with PostgresSaver(postgres_dsn) as saver, psycopg.connect(postgres_dsn) as conn:
        assert saver.schema == "rxgraph"
        _seed(saver, "t", 2)
        assert conn.execute("SELECT count(*) FROM rxgraph.checkpoints").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_tables_of_another_application_are_refused_untouched(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    raw.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(postgres_schema)))
    raw.execute("CREATE TABLE checkpoints (thread_id text, checkpoint jsonb)")  # another library's table
    with pytest.raises(IncompatibleDatabaseError, match="not an rxgraph checkpoint store") as caught:
        PostgresSaver(_with_password(postgres_server), schema=postgres_schema)
    assert "checkpoints" in str(caught.value) and isinstance(caught.value, ValueError)
    assert caught.value.path is not None and "s3cret" not in caught.value.path and "s3cret" not in str(caught.value)
    assert conninfo_to_dict(caught.value.path)["dbname"] == conninfo_to_dict(postgres_server)["dbname"]
    tables = [row[0] for row in raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    assert tables == ["checkpoints"]
    raw.execute("DROP TABLE checkpoints")
    raw.execute("CREATE TABLE meta (key text, value text)")
    raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    with pytest.raises(IncompatibleDatabaseError, match="not an rxgraph checkpoint store"):
        PostgresSaver(postgres_server, schema=postgres_schema)


def test_a_newer_schema_version_is_refused(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    PostgresSaver(postgres_server, schema=postgres_schema).close()
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(IncompatibleDatabaseError, match="schema version 99 was written by a newer rxgraph") as caught:
        PostgresSaver(_with_password(postgres_server), schema=postgres_schema)
    assert caught.value.path is not None and "s3cret" not in caught.value.path


def test_an_older_schema_version_is_migrated_once_and_a_failed_migration_changes_nothing(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        _seed(saver, "t", 4)
    raw.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    with pytest.raises(IncompatibleDatabaseError, match="no migration from version 0"):
        PostgresSaver(postgres_server, schema=postgres_schema)

    def broken(conn: psycopg.Connection[Any]) -> None:
        conn.execute("CREATE TABLE added_by_migration (x int)")
        conn.execute("SELECT no_such_column FROM meta")

    with pytest.raises(IncompatibleDatabaseError, match="migration from schema version 0 failed"):
        PostgresSaver(postgres_server, schema=postgres_schema, migrations={0: broken})
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("0",)
    assert raw.execute("SELECT to_regclass('added_by_migration')").fetchone() == (None,)
    ran: list[int] = []

    def v0_to_v1(conn: psycopg.Connection[Any]) -> None:
        ran.append(0)
        conn.execute("CREATE TABLE added_by_migration (x int)")  # unqualified: the saver's schema

    for _ in range(2):
        with PostgresSaver(
            postgres_server, schema=postgres_schema, migrations={0: v0_to_v1, 1: _drop_nothing}
        ) as migrated:
            assert migrated.schema_version == 2 and ran == [0]
            head = migrated.get("t")
            assert head is not None and len(head.values["messages"]) == 4
    assert raw.execute("SELECT to_regclass('added_by_migration')").fetchone() != (None,)


def _drop_nothing(conn: psycopg.Connection[Any]) -> None:
    """A version 1 -> 2 migration for a schema that has version 2's columns already."""


def test_a_version_1_schema_gains_the_pending_column_and_keeps_its_checkpoints(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        _seed(saver, "t", 4)
    raw.execute("ALTER TABLE checkpoints DROP COLUMN pending")
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with PostgresSaver(postgres_server, schema=postgres_schema) as migrated:
        assert migrated.schema_version == 2
        head = migrated.get("t")
        assert head is not None and len(head.values["messages"]) == 4 and head.pending is None
        migrated.put(
            head.model_copy(update={"id": "p", "seq": head.seq + 1, "parent_id": head.id, "pending": {"k": [1]}}),
            expected_head=head.id,
        )
        again = migrated.get("t")
        assert again is not None and again.pending == {"k": [1]}


def test_a_database_that_is_not_utf8_is_refused(postgres_server: str, _postgres_admin: Any) -> None:
    name = f"latin_{os.getpid()}_{threading.get_ident() % 10000}"
    admin = _postgres_admin.conn
    admin.execute(
        sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'").format(
            sql.Identifier(name)
        )
    )
    _postgres_admin.databases.append(name)
    with pytest.raises(IncompatibleDatabaseError, match="not UTF8"):
        PostgresSaver(make_conninfo(postgres_server, dbname=name))


# -- processes -----------------------------------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_processes_racing_on_one_head_exactly_one_wins(
    saver: PostgresSaver, postgres_server: str, postgres_schema: str
) -> None:
    root = _seed(saver, "t", 4)
    names = [f"p{i}" for i in range(4)]
    worker = str(Path(__file__).with_name("_cas_worker.py"))
    procs = [_spawn(worker, postgres_server, name, postgres_schema) for name in names]
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
            out, err = proc.communicate(timeout=60)
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


_HOLD_THE_HEAD = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1])
conn.execute("SELECT set_config('search_path', %s, false)", (sys.argv[2],))
conn.execute("UPDATE heads SET head_seq = head_seq WHERE thread_id = 't'")  # a writer in the middle of its put
print("in-transaction", flush=True)
sys.stdin.readline()
"""


def test_a_writer_killed_in_its_transaction_holds_nothing_up(
    saver: PostgresSaver, postgres_server: str, postgres_schema: str
) -> None:
    first = _seed(saver, "t", 2)
    proc = _spawn("-c", _HOLD_THE_HEAD, postgres_server, postgres_schema)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in-transaction", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()  # SIGKILL: the server sees the connection drop and rolls its transaction back
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    nxt = Checkpoint(id="b", thread_id="t", seq=2, parent_id=first.id, values=first.values, run_id="r", source="loop")
    assert saver.put(nxt, expected_head=first.id) == nxt  # waits for the server to notice, well within the timeout


# -- incremental storage -------------------------------------------------------------------------------------------


def _step_cost(saver: PostgresSaver, thread_id: str, n_messages: int, turns: int) -> tuple[float, float]:
    """Bytes and items written per checkpoint over ``turns`` user turns on a thread of ``n_messages`` messages."""
    _seed(saver, thread_id, n_messages)
    before = saver.stats
    chat = ScriptedChat([final_reply(f"reply {i}") for i in range(turns)], saver)  # type: ignore[arg-type]
    for i in range(turns):
        chat.graph.invoke(_user(f"turn {i}"), RunnableConfig(thread_id=thread_id))
    after = saver.stats
    head = saver.get(thread_id)
    assert head is not None and len(head.values["messages"]) == n_messages + 2 * turns
    steps = after.puts - before.puts
    assert steps == 2 * turns
    return (after.bytes_written - before.bytes_written) / steps, (after.items_written - before.items_written) / steps


def test_bytes_and_rows_written_per_step_do_not_grow_with_the_conversation(
    saver: PostgresSaver, postgres_server: str, raw: psycopg.Connection[Any]
) -> None:
    short_bytes, short_items = _step_cost(saver, "short", 20, 20)
    items = _count(raw, "items")
    long_bytes, long_items = _step_cost(saver, "long", 2000, 20)
    assert short_items == long_items == 1.0  # the new message only; "turns" is an unchanged blob, reused by id
    assert long_bytes / short_bytes < 2, (short_bytes, long_bytes)
    assert _count(raw, "items") - items == 2000 + 40 and _count(raw, "blobs") == 2
    # A fresh saver (another process: nothing cached) reads the head once and then writes incrementally too.
    with PostgresSaver(postgres_server, schema=saver.schema) as cold:
        cold_bytes, cold_items = _step_cost(cold, "cold", 2000, 5)
    assert cold_items == 1.0 and cold_bytes / short_bytes < 2


def test_turns_on_the_saver_that_wrote_the_thread_decode_nothing(saver: PostgresSaver) -> None:
    _seed(saver, "t", 1000)
    chat = ScriptedChat([tool_call_reply(), final_reply("a"), final_reply("b")], saver)  # type: ignore[arg-type]
    chat.graph.invoke(_user("one"), CONFIG)
    chat.graph.invoke(_user("two"), CONFIG)
    stats = saver.stats
    assert stats.puts == 1 + 6 and stats.items_written == 1000 + 6
    assert (stats.checkpoints_decoded, stats.items_decoded, stats.blobs_decoded) == (0, 0, 0)


def test_a_head_moved_by_another_saver_is_read_incrementally(saver: PostgresSaver, postgres_server: str) -> None:
    with PostgresSaver(postgres_server, schema=saver.schema) as reader:
        _seed(saver, "t", 200)
        assert reader.get("t") is not None and reader.stats.items_decoded == 200
        chat = ScriptedChat([final_reply("new")], saver)  # type: ignore[arg-type]
        chat.graph.invoke(_user("more"), CONFIG)
        head = reader.get("t")
        assert head is not None and head == saver.get("t") and head.seq == 3
        assert reader.stats.items_decoded == 202  # only the new items were read


def test_a_refused_put_leaves_no_rows_behind(saver: PostgresSaver, raw: psycopg.Connection[Any]) -> None:
    first = _seed(saver, "t", 10)
    longer = first.values["messages"].extended([UserMessage(content="x")])

    def child(cid: str, seq: int, **values: Any) -> Checkpoint:
        return Checkpoint(id=cid, thread_id="t", seq=seq, parent_id=first.id, values=values, run_id="r", source="loop")

    with pytest.raises(CheckpointConflictError):
        saver.put(child("b", 2, messages=longer, x=1), expected_head="someone-else")
    with pytest.raises(InvalidCheckpointError, match="has seq 3, expected 2"):
        saver.put(child("b", 3, messages=longer, x=1), expected_head=first.id)

    class Opaque:
        pass

    with pytest.raises(SerializationError, match=r"state key 'x'.*Opaque"):
        saver.put(child("b", 2, messages=longer, x=Opaque()), expected_head=first.id)
    assert (_count(raw, "items"), _count(raw, "blobs"), _count(raw, "checkpoints")) == (10, 1, 1)
    assert raw.execute("SELECT head_id, head_seq FROM heads").fetchall() == [(first.id, 1)]


# -- damaged rows --------------------------------------------------------------------------------------------------


def test_a_damaged_checkpoint_raises_on_get_and_is_skipped_by_the_next_turn(
    saver: PostgresSaver, postgres_server: str, raw: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    chat = ScriptedChat([final_reply("hi"), tool_call_reply(), RuntimeError("model is down")], saver)  # type: ignore[arg-type]
    chat.graph.invoke(_user("hello"), CONFIG)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke(_user("weather?"), CONFIG)
    head = saver.get("t")
    newest_safe = saver.latest_safe("t")
    assert head is not None and not head.safe and newest_safe is not None
    older_safe = saver.latest_safe("t", before_seq=newest_safe.seq)
    assert older_safe is not None
    raw.execute("UPDATE checkpoints SET manifest = 'not json' WHERE id = %s", (newest_safe.id,))
    with PostgresSaver(postgres_server, schema=saver.schema) as fresh:
        with pytest.raises(CheckpointDecodeError) as caught:
            fresh.get("t", newest_safe.id)
        assert caught.value.thread_id == "t" and caught.value.checkpoint_id == newest_safe.id
        with caplog.at_level(logging.WARNING, logger="rxgraph"):
            found = fresh.latest_safe("t")
        assert found is not None and found.id == older_safe.id
        assert any(newest_safe.id in record.getMessage() for record in caplog.records)
        again = ScriptedChat([final_reply("fine")], fresh)  # type: ignore[arg-type]
        again.graph.invoke(_user("again"), CONFIG)
        check_request(again.requests[-1])
        assert [m.role for m in again.requests[-1]] == ["user", "assistant", "user"]


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE blobs SET value = '{'",
        "UPDATE items SET value = '1, 2' WHERE id = (SELECT min(id) + 1 FROM items)",  # would shift the items after it
        "UPDATE items SET prev_id = (SELECT max(id) FROM items) WHERE id = (SELECT min(id) FROM items)",  # a cycle
        "UPDATE items SET prev_id = NULL WHERE id = (SELECT min(id) + 2 FROM items)",  # shorter than the manifest says
    ],
)
def test_a_damaged_head_raises_instead_of_reading_as_nothing(
    saver: PostgresSaver, postgres_server: str, raw: psycopg.Connection[Any], damage: str
) -> None:
    _seed(saver, "t", 4)
    assert raw.execute(damage).rowcount == 1
    with (
        PostgresSaver(postgres_server, schema=saver.schema) as fresh,
        pytest.raises(CheckpointDecodeError, match="t-seed"),
    ):
        fresh.get("t")


# -- timeouts, the pool, closing -----------------------------------------------------------------------------------


def test_a_head_row_locked_too_long_makes_put_raise_instead_of_waiting_forever(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    with PostgresSaver(postgres_server, schema=postgres_schema, timeout=0.2) as saver:
        first = _seed(saver, "t", 2)
        nxt = Checkpoint(id="x", thread_id="t", seq=2, parent_id=first.id, run_id="r", source="loop")
        with raw.transaction():
            raw.execute("SELECT * FROM heads WHERE thread_id = 't' FOR UPDATE")  # another writer of the thread
            with pytest.raises(SaverTimeoutError, match="held a lock") as caught:
                saver.put(nxt, expected_head=first.id)
            assert isinstance(caught.value, TimeoutError)
            assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
            head = saver.get("t")  # readers wait for no one
            assert head is not None and head.id == first.id
        saver.put(nxt, expected_head=first.id)


def test_a_pool_with_no_free_connection_makes_calls_raise(postgres_server: str, postgres_schema: str) -> None:
    with ConnectionPool(postgres_server, min_size=1, max_size=1, open=True) as pool:
        with PostgresSaver(pool, schema=postgres_schema, timeout=0.2) as saver:
            _seed(saver, "t", 2)
            with pool.connection():  # the only connection is taken
                for call in (lambda: saver.get("t"), saver.threads):
                    with pytest.raises(SaverTimeoutError, match="every connection of the pool was in use"):
                        call()
            assert saver.threads() == ["t"]
        assert not pool.closed  # the caller's pool outlives the saver
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_close_and_context_manager(postgres_server: str, postgres_schema: str) -> None:
    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        _seed(saver, "t", 2)
    with pytest.raises(SaverClosedError, match="closed") as caught:
        saver.get("t")
    assert isinstance(caught.value, RuntimeError)
    with pytest.raises(SaverClosedError):
        saver.put(Checkpoint(id="x", thread_id="u", seq=1, run_id="r", source="input"), expected_head=None)
    saver.close()  # closing twice is fine
    assert saver.stats.puts == 1
    with PostgresSaver(postgres_server, schema=postgres_schema) as again:
        assert again.get("t") is not None


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"timeout": 0}, "timeout"),
        ({"cache_size": 0}, "cache_size"),
        ({"max_connections": 0}, "max_connections"),
        ({"schema": ""}, "schema"),
    ],
)
def test_bad_constructor_arguments_are_refused_by_name(
    postgres_server: str, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=argument) as caught:
        PostgresSaver(postgres_server, **kwargs)
    assert caught.value.argument == argument


def test_something_else_than_a_connection_string_or_a_pool_is_refused() -> None:
    with pytest.raises(InvalidTypeError, match="ConnectionPool") as caught:
        PostgresSaver(42)  # type: ignore[arg-type]
    assert caught.value.argument == "conninfo_or_pool"


def test_a_server_that_cannot_be_reached_says_why() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once the socket is closed
    with pytest.raises(psycopg.OperationalError):
        PostgresSaver(f"postgresql://postgres@127.0.0.1:{port}/rxgraph", timeout=1)


# -- rxgraph without psycopg ---------------------------------------------------------------------------------------


def test_rxgraph_imports_without_psycopg_and_the_saver_says_what_is_missing() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = sys.modules['psycopg_pool'] = None  # any import of them fails\n"
        "import rxgraph, rxgraph.checkpoint\n"
        "from rxgraph.checkpoint import PostgresSaver\n"
        "try:\n"
        "    PostgresSaver('postgresql://nowhere/db')\n"
        "except rxgraph.ConfigurationError as error:\n"
        "    assert \"pip install 'rxgraph[postgres]'\" in str(error), error\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
        "assert not [name for name, module in sys.modules.items() if module and name.startswith('psycopg')]\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
