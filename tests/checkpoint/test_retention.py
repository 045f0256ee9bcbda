"""Retention (``prune``, ``delete_thread``) on every saver, and what the incremental savers free: exactly the rows no
remaining checkpoint reaches — lists share their chains, so an item stays while any kept list passes through it.
The contract's own retention checks run in test_contract.py."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _support import ScriptedChat, final_reply, tool_call_reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxgraph import Checkpoint, CheckpointSaver, FrozenList, RunnableConfig
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.checkpoint._base import new_checkpoint
from rxgraph.checkpoint._incremental import IncrementalStats, IncrementalStore, Row
from rxgraph.checkpoint._serde import default_serde
from rxgraph.errors import CheckpointNotFoundError
from rxgraph.messages import AssistantMessage, UserMessage, check_request

CONFIG = RunnableConfig(thread_id="t")


# -- on every saver, through a graph -------------------------------------------------------------------------------


def test_history_and_forks_after_a_prune(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([tool_call_reply(), final_reply("a"), final_reply("b"), final_reply("c")], saver)  # type: ignore[arg-type]
    for text in ("one", "two", "three"):
        chat.graph.invoke({"messages": UserMessage(content=text)}, CONFIG)
    everything = chat.graph.get_state_history(CONFIG)
    assert len(everything) == 8
    assert saver.prune("t", keep_last=3) == 5
    history = chat.graph.get_state_history(CONFIG)
    assert [s.checkpoint_id for s in history] == [s.checkpoint_id for s in everything[:3]]
    with pytest.raises(CheckpointNotFoundError):  # a pruned checkpoint cannot be forked from any more
        chat.graph.get_state(RunnableConfig(thread_id="t", checkpoint_id=everything[-1].checkpoint_id))
    forked = chat.graph.get_state(RunnableConfig(thread_id="t", checkpoint_id=everything[2].checkpoint_id))
    assert forked.values == everything[2].values
    chat.script.append(final_reply("d"))
    chat.graph.invoke({"messages": UserMessage(content="four")}, CONFIG)
    check_request(chat.requests[-1])
    assert [m.content for m in chat.requests[-1] if isinstance(m, UserMessage)] == ["one", "two", "three", "four"]


def test_a_deleted_thread_starts_afresh(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([final_reply("a"), final_reply("b")], saver)  # type: ignore[arg-type]
    chat.graph.invoke({"messages": UserMessage(content="one")}, CONFIG)
    other = RunnableConfig(thread_id="other")
    chat.graph.invoke({"messages": UserMessage(content="elsewhere")}, other)
    assert saver.delete_thread("t") == 2
    assert chat.graph.get_state_history(CONFIG) == [] and saver.threads() == ["other"]
    chat.script.append(final_reply("c"))
    chat.graph.invoke({"messages": UserMessage(content="again")}, CONFIG)
    assert chat.requests[-1] == [UserMessage(content="again")]
    assert [m.content for m in chat.graph.get_state(other).values["messages"]] == ["elsewhere", "b"]


# -- what the incremental savers free ------------------------------------------------------------------------------


@dataclass
class _Storage:
    """A saver on fresh storage, how to open another one on it, and a look at its rows."""

    open: Callable[[], CheckpointSaver]
    query: Callable[[str], list[tuple[Any, ...]]]

    def counts(self) -> tuple[int, int, int]:
        return tuple(self.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("checkpoints", "items", "blobs"))  # type: ignore[return-value]

    def reachable(self) -> tuple[int, int, int]:
        """The counts the rows would have if exactly what the checkpoints reach were stored."""
        prev = dict(self.query("SELECT id, prev_id FROM items"))
        items: set[int] = set()
        blobs: set[int] = set()
        manifests = [row[0] for row in self.query("SELECT manifest FROM checkpoints")]
        for manifest in manifests:
            for ref in json.loads(manifest).values():
                if isinstance(ref, int):
                    blobs.add(ref)
                    continue
                tail = ref[0]
                while tail is not None and tail not in items:
                    items.add(tail)
                    tail = prev[tail]
        return len(manifests), len(items), len(blobs)


@contextmanager
def _sqlite_storage(path: Path) -> Iterator[_Storage]:
    """Savers on the SQLite file ``path``, all closed at the end."""
    opened: list[SqliteSaver] = []

    def open_saver() -> CheckpointSaver:
        opened.append(SqliteSaver(path))
        return opened[-1]

    def query(text: str) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(path)) as conn:
            return conn.execute(text).fetchall()

    try:
        yield _Storage(open_saver, query)
    finally:
        for saver in opened:
            saver.close()


@contextmanager
def _postgres_storage(dsn: str, schema: str) -> Iterator[_Storage]:
    """Savers on the PostgreSQL schema ``schema``, all closed at the end."""
    import psycopg
    from psycopg import sql

    opened: list[PostgresSaver] = []

    def open_saver() -> CheckpointSaver:
        opened.append(PostgresSaver(dsn, schema=schema, max_connections=2))
        return opened[-1]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (sql.Identifier(schema).as_string(conn),))
        try:
            yield _Storage(open_saver, lambda text: conn.execute(text.encode()).fetchall())
        finally:
            for saver in opened:
                saver.close()


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Storage]:
    if request.param == "sqlite":
        with _sqlite_storage(tmp_path / "checkpoints.db") as made:
            yield made
    else:
        server, schema = request.getfixturevalue("postgres_server"), request.getfixturevalue("postgres_schema")
        with _postgres_storage(server, schema) as made:
            yield made


def _put(saver: CheckpointSaver, seq: int, parent: str | None, safe: bool = True, **values: Any) -> Checkpoint:
    checkpoint = new_checkpoint(
        id=f"c{seq}", thread_id="t", seq=seq, parent_id=parent, values=values, run_id="r", source="loop", safe=safe
    )
    head = saver.get("t")
    return saver.put(checkpoint, expected_head=head.id if head is not None else None)


def test_prune_frees_exactly_what_no_remaining_checkpoint_reaches(storage: _Storage) -> None:
    saver = storage.open()
    m = [UserMessage(content=f"m{i}") for i in range(8)]
    base = FrozenList(m[:3])
    c1 = _put(saver, 1, None, messages=base, note="first")
    c2 = _put(saver, 2, "c1", safe=False, messages=base.extended(m[3:5]), note="second")  # a failed turn's branch
    _put(saver, 3, "c1", messages=base.extended([m[5]]), note=c1.values["note"])  # the next turn, from the base
    _put(saver, 4, "c3", safe=False, messages=FrozenList(m), note="rebuilt")  # a list not sharing the chain
    _put(saver, 5, "c4", messages=c2.values["messages"], note=c1.values["note"])  # a rewind to older values
    written = {c.id: c.values for c in saver.list("t")}
    assert storage.counts() == storage.reachable() == (5, 3 + 2 + 1 + 8, 3)
    assert saver.prune("t", keep_last=1) == 4  # the head is the newest safe checkpoint too
    # Left: c5's list (base + m3, m4: the chain of c2's branch) and its note (c1's blob). Freed: c3's item, c4's
    # rebuilt list of 8 and the blobs "second" (c2's own) and "rebuilt".
    assert storage.counts() == storage.reachable() == (1, 5, 1)
    assert storage.open().get("t", "c5") is not None
    assert storage.open().list("t")[0].values == written["c5"]
    c6 = _put(saver, 6, "c5", messages=written["c5"]["messages"].extended([m[7]]), note="sixth")
    assert storage.counts() == storage.reachable() == (2, 6, 2)
    assert saver.delete_thread("t") == 2
    assert storage.counts() == (0, 0, 0)
    assert storage.open().get("t", c6.id) is None


def test_ids_of_freed_rows_are_never_given_again(storage: _Storage) -> None:
    saver = storage.open()
    reader = storage.open()
    _put(saver, 1, None, messages=FrozenList([UserMessage(content="old")]), note="old")
    assert reader.get("t") is not None  # caches the rows' ids, as another process would
    highest = max(row[0] for row in storage.query("SELECT id FROM items UNION SELECT id FROM blobs"))
    saver.delete_thread("t")  # frees the newest rows of the database
    _put(saver, 1, None, messages=FrozenList([UserMessage(content="new")]), note="new")
    assert min(row[0] for row in storage.query("SELECT id FROM items UNION SELECT id FROM blobs")) > highest
    head = reader.get("t")
    assert head is not None and head.values == {"messages": [UserMessage(content="new")], "note": "new"}


def test_a_thread_written_again_under_the_same_ids_is_not_taken_for_the_old_one(storage: _Storage) -> None:
    saver, other = storage.open(), storage.open()
    _put(saver, 1, None, messages=FrozenList([UserMessage(content="old")]), note="old")
    old = other.get("t")  # caches the first "c1"
    assert old is not None
    saver.delete_thread("t")
    _put(saver, 1, None, messages=FrozenList([UserMessage(content="new")]), note="new")
    # A child of "c1" from what `other` cached, as a run that started before the delete writes it: the head is
    # "c1" again, but not the one whose rows `other` knows.
    values = {"messages": old.values["messages"].extended([UserMessage(content="child")]), "note": old.values["note"]}
    child = new_checkpoint(id="c2", thread_id="t", seq=2, parent_id="c1", values=values, run_id="r", source="loop")
    other.put(child, expected_head="c1")
    assert storage.counts() == storage.reachable() == (2, 1 + 2, 2)
    head = storage.open().get("t")
    assert head is not None and head.values == child.values
    again = other.get("t", "c1")  # and reads of "c1" give the new one
    assert again is not None and again.values["note"] == "new"


def test_prune_while_another_saver_rewinds_to_the_pruned_state(storage: _Storage) -> None:
    saver, other = storage.open(), storage.open()
    first = FrozenList([UserMessage(content="hi")])
    _put(saver, 1, None, messages=first, note="kept by the rewind")
    _put(saver, 2, "c1", safe=False, messages=first.extended([AssistantMessage(content="half")]), note="x")
    _put(saver, 3, "c2", messages=FrozenList([UserMessage(content="other")]), note="y")
    base = other.get("t", "c1")
    assert base is not None
    assert saver.prune("t", keep_last=1) == 2  # c1's rows are freed; `other` still has them cached
    _put(other, 4, "c3", messages=base.values["messages"], note=base.values["note"])
    assert storage.counts() == storage.reachable()
    head = storage.open().get("t")
    assert head is not None and head.values == base.values


# -- random histories, pruned ---------------------------------------------------------------------------------------

_STEP = st.tuples(
    st.sampled_from(["extend", "extend", "branch", "rewind", "rebuild", "note"]),
    st.integers(0, 30),  # which earlier checkpoint a branch or a rewind starts from
    st.booleans(),  # safe
)


@st.composite
def _histories(draw: st.DrawFn) -> tuple[list[tuple[str, int, bool]], list[int]]:
    steps = draw(st.lists(_STEP, min_size=1, max_size=12))
    prunes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    return steps, prunes


def _play(saver: CheckpointSaver, steps: list[tuple[str, int, bool]]) -> dict[str, Any]:
    """Write a history whose lists extend, branch from, rewind to and rebuild earlier ones; return its values."""
    written: list[Checkpoint] = []
    for seq, (how, pick, safe) in enumerate(steps, start=1):
        parent = written[-1] if written else None
        values: dict[str, Any] = dict(parent.values) if parent is not None else {"messages": FrozenList(), "note": 0}
        earlier = written[pick % len(written)] if written else None
        message = UserMessage(content=f"m{seq}")
        if how == "extend":
            values["messages"] = values["messages"].extended([message])
        elif how == "branch" and earlier is not None:
            values["messages"] = earlier.values["messages"].extended([message])
            parent = earlier
        elif how == "rewind" and earlier is not None:
            values = dict(earlier.values)
        elif how == "rebuild":
            values["messages"] = FrozenList([*values["messages"], message])
        else:
            values["note"] = seq
        checkpoint = new_checkpoint(
            id=f"c{seq}", thread_id="t", seq=seq, parent_id=parent.id if parent is not None else None,
            values=values, run_id="r", source="loop", safe=safe,
        )  # fmt: skip
        written.append(saver.put(checkpoint, expected_head=written[-1].id if written else None))
    return {c.id: c.values for c in written}


def _check_random_history(storage: _Storage, steps: list[tuple[str, int, bool]], prunes: list[int]) -> None:
    saver = storage.open()
    other = storage.open()
    written = _play(saver, steps)
    assert storage.counts() == storage.reachable()
    for round_, keep_last in enumerate(prunes):
        seen = {c.id: c.values for c in other.list("t")}  # another saver has what is left cached
        assert seen == {cid: written[cid] for cid in seen}
        saver.prune("t", keep_last=keep_last)
        assert storage.counts() == storage.reachable()
        for checkpoint in storage.open().list("t"):
            assert checkpoint.values == written[checkpoint.id]
        # The other saver writes on, with the very values it read of a checkpoint that may be gone now.
        head = other.get("t")
        assert head is not None
        target = sorted(seen)[(round_ + keep_last) % len(seen)]
        checkpoint = new_checkpoint(
            id=f"c{head.seq + 1}", thread_id="t", seq=head.seq + 1, parent_id=head.id, values=seen[target],
            run_id="r", source="rewind",
        )  # fmt: skip
        other.put(checkpoint, expected_head=head.id)
        written[checkpoint.id] = written[target]
        fresh = storage.open().get("t")
        assert fresh is not None and fresh.values == written[target]
    assert storage.counts() == storage.reachable()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_histories())
def test_random_histories_pruned_keep_every_remaining_value_and_free_the_rest_sqlite(
    history: tuple[list[tuple[str, int, bool]], list[int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    with _sqlite_storage(tmp_path_factory.mktemp("history") / "checkpoints.db") as storage:
        _check_random_history(storage, *history)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_histories())
def test_random_histories_pruned_keep_every_remaining_value_and_free_the_rest_postgres(
    history: tuple[list[tuple[str, int, bool]], list[int]], postgres_server: str, postgres_schema: str
) -> None:
    # A schema per example: the test's fixtures are made once for all of them.
    with _postgres_storage(postgres_server, f"{postgres_schema}_{uuid.uuid4().hex[:8]}") as storage:
        _check_random_history(storage, *history)


# -- SQLite files written before retention --------------------------------------------------------------------------


def test_rows_a_version_2_file_may_share_between_threads_are_never_freed(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    with SqliteSaver(db) as saver:
        for thread in ("a", "b"):
            saver.put(
                Checkpoint(
                    id=f"{thread}1", thread_id=thread, seq=1, values={"note": thread}, run_id="r", source="input"
                ),
                expected_head=None,
            )
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        # As a version-2 saver could write it: thread b's checkpoint shares thread a's blob.
        blob_a = json.loads(raw.execute("SELECT manifest FROM checkpoints WHERE id = 'a1'").fetchone()[0])["note"]
        raw.execute("UPDATE checkpoints SET manifest = ? WHERE id = 'b1'", (json.dumps({"note": blob_a}),))
        raw.execute("ALTER TABLE checkpoints DROP COLUMN pending")  # as version 2 had it
        raw.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        raw.execute("DELETE FROM meta WHERE key NOT IN ('format', 'schema_version')")
    with SqliteSaver(db) as migrated:
        assert migrated.schema_version == 4
        assert migrated.delete_thread("a") == 1
        b = migrated.get("b")
        assert b is not None and b.values == {"note": "a"}
        migrated.put(
            Checkpoint(id="c1", thread_id="c", seq=1, values={"note": "new"}, run_id="r", source="input"),
            expected_head=None,
        )
        with closing(sqlite3.connect(db)) as raw:
            blobs = raw.execute("SELECT count(*) FROM blobs").fetchone()[0]
            assert dict(raw.execute("SELECT key, value FROM meta")).get("legacy_row_ids") == "2"
        assert migrated.delete_thread("c") == 1  # rows written since the migration are freed as usual
        with closing(sqlite3.connect(db)) as raw:
            assert raw.execute("SELECT count(*) FROM blobs").fetchone()[0] == blobs - 1


# -- reads racing a retention ---------------------------------------------------------------------------------------


class _RowsPrunedMidRead:
    """Rows of a checkpoint whose blob went missing between reading its row and its values, as when another
    process prunes it meanwhile; ``exists`` says whether its row is still there when looked at again."""

    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.row: Row = (
            "c1",
            "t",
            1,
            None,
            None,
            "[]",
            "r",
            "loop",
            datetime.now(UTC).isoformat(),
            1,
            None,
            None,
            '{"x":7}',
            None,
            None,
        )

    def head(self, thread_id: str) -> Row | None:
        return self.row if self.exists else None

    def by_id(self, checkpoint_id: str) -> Row | None:
        return self.row if self.exists else None

    def page(self, thread_id: str, before_seq: int | None, limit: int | None) -> list[Row]:
        return [self.row]

    def newest_safe(self, thread_id: str, before_seq: int | None) -> Row | None:
        return self.row if before_seq is None else None

    def blobs(self, ids: list[int]) -> list[tuple[int, str]]:
        return []

    def walk(self, tail: int, count: int) -> list[tuple[int | None, str]]:
        return []

    def count_rows(self, blob_ids: list[int], item_ids: list[int]) -> int:
        return 0


def test_a_checkpoint_pruned_while_it_is_read_is_not_taken_for_damage() -> None:
    store = IncrementalStore(default_serde, 8, IncrementalStats(), ())
    gone = _RowsPrunedMidRead(exists=False)
    assert store.list(gone, "t", None, None) == []
    assert store.latest_safe(gone, "t", None) is None
    from rxgraph.errors import CheckpointDecodeError

    with pytest.raises(CheckpointDecodeError, match="blob 7 is missing"):  # still there: it is damaged
        store.list(_RowsPrunedMidRead(exists=True), "t", None, None)
