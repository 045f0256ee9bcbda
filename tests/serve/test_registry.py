"""The server's thread and run records: one contract, run on every registry (in memory, in a SQLite checkpoint file,
in a PostgreSQL schema), then what the database registries add (records that outlive the registry object and are
shared between objects, schema versions, values that are not JSON), and which registry each saver gets."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from rxgraph import Checkpoint, CheckpointSaver, MemorySaver, SqliteSaver
from rxgraph.checkpoint import PostgresSaver
from rxgraph.errors import IncompatibleDatabaseError, InvalidArgumentError, SaverClosedError
from rxgraph.serve._registries import registry_for
from rxgraph.serve._registry import MemoryRegistry, Registry, RunRecord, ThreadRecord
from rxgraph.serve._registry_sqlite import SqliteRegistry
from rxgraph.testing import DelegatingSaver

REPO = Path(__file__).resolve().parents[2]
REGISTRY_KINDS = ("memory", "sqlite", "postgres")
DURABLE_KINDS = ("sqlite", "postgres")

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def thread(thread_id: str, owner: str | None = "alice", minute: int = 0, **metadata: Any) -> ThreadRecord:
    return ThreadRecord(thread_id, owner, metadata, created_at=at(minute), updated_at=at(minute))


def run(run_id: str, thread_id: str = "t1", minute: int = 0, **changes: Any) -> RunRecord:
    record = RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        assistant_id="agent",
        owner="alice",
        status="pending",
        kwargs={"input": {"messages": [{"role": "user", "content": "hi"}]}, "stream_mode": ["values"]},
        metadata={"from": "test"},
        multitask_strategy="enqueue",
        created_at=at(minute),
        updated_at=at(minute),
    )
    return replace(record, **changes)


@dataclass
class Store:
    """One database (or, for ``memory``, one registry) of records; ``open`` gives a registry on it, a new object for
    a database, closed when the test ends."""

    kind: str
    open: Callable[[], Registry]
    set_version: Callable[[int], None]
    """Writes a schema version into the records' meta table (a database only)."""


def _store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: list[Registry] = []

    def keep(registry: Registry) -> Registry:
        opened.append(registry)
        return registry

    if kind == "memory":
        shared = MemoryRegistry()
        yield Store(kind, lambda: shared, lambda version: None)
    elif kind == "sqlite":
        path = tmp_path / "checkpoints.db"
        SqliteSaver(path).close()  # the registry keeps its records in a saver's file

        def set_sqlite_version(version: int) -> None:
            with closing(sqlite3.connect(path)) as conn, conn:
                conn.execute("UPDATE rxgraph_server_meta SET value = ? WHERE key = 'schema_version'", (str(version),))

        yield Store(kind, lambda: keep(SqliteRegistry(path)), set_sqlite_version)
    else:
        import psycopg
        from psycopg import sql

        from rxgraph.serve._registry_postgres import PostgresRegistry

        server: str = request.getfixturevalue("postgres_server")
        schema: str = request.getfixturevalue("postgres_schema")

        def set_postgres_version(version: int) -> None:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("UPDATE {}.rxgraph_server_meta SET value = %s WHERE key = 'schema_version'").format(
                        sql.Identifier(schema)
                    ),
                    (str(version),),
                )

        yield Store(kind, lambda: keep(PostgresRegistry(server, schema=schema)), set_postgres_version)
    for registry in opened:
        registry.close()


@pytest.fixture(params=REGISTRY_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from _store(request.param, request, tmp_path)


@pytest.fixture(params=DURABLE_KINDS)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from _store(request.param, request, tmp_path)


@pytest.fixture
def registry(store: Store) -> Registry:
    return store.open()


def canonical(value: Any) -> str:
    """JSON text that tells 1 from 1.0 from true, as ``==`` does not."""
    return json.dumps(value, sort_keys=True)


# -- the contract: threads -------------------------------------------------------------------------------------------


def test_a_created_thread_reads_back_and_its_id_cannot_be_taken_again(registry: Registry) -> None:
    first = thread("t1", topic="weather")

    assert registry.create_thread(first) == first
    assert registry.create_thread(thread("t1", owner="mallory", topic="other")) is None
    assert registry.get_thread("t1") == first
    assert registry.get_thread("missing") is None


def test_threads_lists_an_owners_threads_newest_first_and_none_lists_everyone(registry: Registry) -> None:
    for record in (thread("a1", "alice", 1), thread("b1", "bob", 5), thread("a3", "alice", 3), thread("n", None, 4)):
        registry.create_thread(record)
    registry.create_thread(thread("a2", "alice", 2))  # created later, but older

    assert [r.thread_id for r in registry.threads("alice")] == ["a3", "a2", "a1"]
    assert [r.thread_id for r in registry.threads("bob")] == ["b1"]
    assert registry.threads("nobody") == []
    assert [r.thread_id for r in registry.threads(None)] == ["b1", "n", "a3", "a2", "a1"]


def test_update_merges_the_metadata_keeps_a_key_set_to_none_and_touches_updated_at(registry: Registry) -> None:
    registry.create_thread(thread("t1", topic="weather", lang="en", nested={"a": 1}))

    updated = registry.update_thread("t1", {"lang": None, "nested": {"b": 2}, "new": [1]})

    expected = {"topic": "weather", "lang": None, "nested": {"b": 2}, "new": [1]}
    assert updated is not None and updated.metadata == expected
    assert updated.created_at == at(0) and updated.updated_at > at(0)
    assert registry.get_thread("t1") == updated
    assert registry.update_thread("missing", {"x": 1}) is None
    assert registry.get_thread("missing") is None


def test_deleting_a_thread_deletes_its_runs_and_says_whether_it_was_there(registry: Registry) -> None:
    registry.create_thread(thread("t1"))
    registry.create_thread(thread("t2"))
    registry.put_run(run("r1", "t1"))
    registry.put_run(run("r2", "t1", 1))
    registry.put_run(run("r3", "t2"))

    assert registry.delete_thread("t1") is True
    assert registry.get_thread("t1") is None
    assert registry.runs("t1") == [] and registry.get_run("r1") is None and registry.get_run("r2") is None
    assert registry.get_thread("t2") is not None and registry.get_run("r3") == run("r3", "t2")
    assert registry.delete_thread("t1") is False


# -- the contract: runs ----------------------------------------------------------------------------------------------


def test_a_put_run_reads_back_and_a_second_put_replaces_it(registry: Registry) -> None:
    registry.put_run(run("r1"))
    assert registry.get_run("r1") == run("r1")

    running = run("r1", status="running", updated_at=at(5))
    registry.put_run(running)

    assert registry.get_run("r1") == running
    assert registry.runs("t1") == [running]
    assert registry.get_run("missing") is None


def test_runs_lists_a_threads_runs_newest_first(registry: Registry) -> None:
    for record in (run("r1", "t1", 1), run("r3", "t1", 3), run("x", "t2", 2), run("r2", "t1", 2)):
        registry.put_run(record)

    assert [r.run_id for r in registry.runs("t1")] == ["r3", "r2", "r1"]
    assert [r.run_id for r in registry.runs("t2")] == ["x"]
    assert registry.runs("none") == []


def test_set_status_changes_the_status_and_updated_at_and_leaves_a_deleted_run_deleted(registry: Registry) -> None:
    registry.put_run(run("r1"))

    changed = registry.set_status("r1", "success")

    assert changed is not None and changed.status == "success" and changed.updated_at > at(0)
    assert changed == replace(run("r1"), status="success", updated_at=changed.updated_at)
    assert registry.get_run("r1") == changed
    assert registry.delete_run("r1") is True
    assert registry.delete_run("r1") is False
    assert registry.set_status("r1", "error") is None
    assert registry.get_run("r1") is None


def test_unicode_and_nested_json_round_trip_exactly(registry: Registry) -> None:
    metadata = {
        "名前": 'Zoë 🚀 — «quotes» "and" \\backslashes\\\n\ttabs',
        "nested": {"list": [1, 2.5, 1.0, -0.001, True, False, None, {"deep": ["ü", [], {}]}], "empty": {}},
        "big": 2**62 + 1,
        "": "empty key",
    }
    registry.create_thread(thread("t-✓", owner="ówner", **metadata))
    registry.put_run(run("r-✓", "t-✓", kwargs={"input": metadata}, metadata=metadata))

    got = registry.get_thread("t-✓")
    got_run = registry.get_run("r-✓")
    assert got is not None and got.owner == "ówner" and canonical(got.metadata) == canonical(metadata)
    assert got_run is not None
    assert canonical(got_run.kwargs) == canonical({"input": metadata})
    assert canonical(got_run.metadata) == canonical(metadata)
    assert [r.thread_id for r in registry.threads("ówner")] == ["t-✓"]


def test_times_read_back_as_the_same_instants(registry: Registry) -> None:
    elsewhere = datetime(2025, 6, 1, 9, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    registry.create_thread(ThreadRecord("t1", None, {}, created_at=elsewhere, updated_at=elsewhere))

    got = registry.get_thread("t1")

    assert got is not None and got.created_at == elsewhere and got.updated_at == elsewhere
    assert got.created_at.utcoffset() is not None


def test_of_concurrent_creates_of_one_thread_exactly_one_wins(store: Store) -> None:
    registries = [store.open() for _ in range(4)]
    start = threading.Barrier(len(registries))
    won: list[ThreadRecord | None] = [None] * len(registries)

    def create(i: int) -> None:
        start.wait()
        won[i] = registries[i].create_thread(thread("t1", owner=f"user-{i}"))

    workers = [threading.Thread(target=create, args=(i,)) for i in range(len(registries))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    winners = [record for record in won if record is not None]
    assert len(winners) == 1
    assert registries[0].get_thread("t1") == winners[0]


# -- database registries ---------------------------------------------------------------------------------------------


def test_records_survive_reopening(durable: Store) -> None:
    first = durable.open()
    first.create_thread(thread("t1", topic="kept"))
    first.put_run(run("r1", status="running"))
    first.close()

    again = durable.open()

    assert again.get_thread("t1") == thread("t1", topic="kept")
    assert again.get_run("r1") == run("r1", status="running")


def test_two_registries_on_one_database_see_each_others_writes(durable: Store) -> None:
    one, other = durable.open(), durable.open()

    one.create_thread(thread("t1"))
    assert other.create_thread(thread("t1", owner="bob")) is None
    updated = other.update_thread("t1", {"seen": True})
    other.put_run(run("r1"))
    one.set_status("r1", "success")

    assert one.get_thread("t1") == updated
    got = other.get_run("r1")
    assert got is not None and got.status == "success"
    assert one.delete_thread("t1") is True
    assert other.get_thread("t1") is None and other.get_run("r1") is None


def test_registries_opened_at_once_on_a_new_database_all_work(durable: Store) -> None:
    start = threading.Barrier(3)
    opened: list[Registry] = []
    failed: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(durable.open())
        except BaseException as error:
            failed.append(error)

    workers = [threading.Thread(target=open_one) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert failed == []
    opened[0].create_thread(thread("t1"))
    assert all(registry.get_thread("t1") == thread("t1") for registry in opened)


def test_records_of_a_newer_schema_are_refused(durable: Store) -> None:
    durable.open().create_thread(thread("t1"))
    durable.set_version(99)

    with pytest.raises(IncompatibleDatabaseError, match="newer rxgraph"):
        durable.open()


def test_metadata_that_is_not_json_and_naive_times_are_refused_and_nothing_is_written(durable: Store) -> None:
    registry = durable.open()

    with pytest.raises(InvalidArgumentError, match="metadata must be JSON"):
        registry.create_thread(thread("t1", value=float("nan")))
    with pytest.raises(InvalidArgumentError, match="kwargs must be JSON"):
        registry.put_run(run("r1", kwargs={"when": datetime.now(UTC)}))
    with pytest.raises(InvalidArgumentError, match="time zone"):
        registry.create_thread(ThreadRecord("t1", None, {}, created_at=datetime(2025, 1, 1)))

    assert registry.get_thread("t1") is None and registry.get_run("r1") is None


def test_a_closed_registry_raises_saver_closed_error(durable: Store) -> None:
    registry = durable.open()
    registry.close()
    registry.close()  # closing again does nothing

    with pytest.raises(SaverClosedError):
        registry.get_thread("t1")


def test_a_sqlite_registry_refuses_a_file_that_is_not_a_checkpoint_file(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE users (id INTEGER)")

    with pytest.raises(IncompatibleDatabaseError, match="open a SqliteSaver on the file first"):
        SqliteRegistry(path)
    with pytest.raises(IncompatibleDatabaseError, match="open a SqliteSaver on the file first"):
        SqliteRegistry(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()

    with closing(sqlite3.connect(path)) as conn, conn:
        assert [row[0] for row in conn.execute("SELECT name FROM sqlite_master")] == ["users"]


def test_a_postgres_registry_refuses_jsonb_s_nul_character_and_writes_nothing(
    postgres_server: str, postgres_schema: str
) -> None:
    from rxgraph.serve._registry_postgres import PostgresRegistry

    registry = PostgresRegistry(postgres_server, schema=postgres_schema)
    try:
        with pytest.raises(InvalidArgumentError, match="U\\+0000"):
            registry.create_thread(thread("t1", text="a\x00b"))
        assert registry.get_thread("t1") is None
    finally:
        registry.close()


# -- registry_for ----------------------------------------------------------------------------------------------------


class OwnSaver(CheckpointSaver):
    """A user's saver (that stores in a MemorySaver, here)."""

    def __init__(self) -> None:
        self.store = MemorySaver()

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return self.store.get(thread_id, checkpoint_id)

    def list(self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None) -> list[Checkpoint]:
        return self.store.list(thread_id, limit=limit, before_seq=before_seq)

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        return self.store.put(checkpoint, expected_head=expected_head)

    def threads(self) -> list[str]:
        return self.store.threads()


def test_a_memory_saver_a_private_sqlite_database_and_a_users_own_saver_get_a_memory_registry() -> None:
    assert isinstance(registry_for(MemorySaver()), MemoryRegistry)
    assert isinstance(registry_for(DelegatingSaver(MemorySaver())), MemoryRegistry)
    assert isinstance(registry_for(OwnSaver()), MemoryRegistry)
    with SqliteSaver(":memory:") as private:
        assert isinstance(registry_for(private), MemoryRegistry)


def test_a_sqlite_saver_gets_a_registry_in_its_file_which_it_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.db"
    saver = SqliteSaver(path)
    registry = registry_for(DelegatingSaver(DelegatingSaver(saver)))  # a wrapped saver: the one it wraps
    try:
        assert isinstance(registry, SqliteRegistry) and registry.path == str(path)
        registry.create_thread(thread("t1"))
    finally:
        registry.close()
        saver.close()

    with SqliteSaver(path) as reopened:  # the saver still takes its file
        records = SqliteRegistry(path)
        try:
            assert records.get_thread("t1") == thread("t1")
            assert reopened.threads() == []
        finally:
            records.close()


def test_a_postgres_saver_gets_a_registry_on_its_pool_and_schema(postgres_server: str, postgres_schema: str) -> None:
    from psycopg_pool import ConnectionPool

    from rxgraph.serve._registry_postgres import PostgresRegistry

    # A pool of the user's, whose connections are not in autocommit mode: each call still commits.
    with ConnectionPool(postgres_server, min_size=1, max_size=2, open=True) as pool:
        saver = PostgresSaver(pool, schema=postgres_schema)
        registry = registry_for(DelegatingSaver(saver))
        try:
            assert isinstance(registry, PostgresRegistry) and registry.schema == postgres_schema
            registry.create_thread(thread("t1"))
            registry.put_run(run("r1"))
            registry.close()  # leaves the pool open, for the saver
            assert saver.threads() == [] and not pool.closed
        finally:
            saver.close()
        with pytest.raises(SaverClosedError):
            _ = saver.pool

    with PostgresSaver(postgres_server, schema=postgres_schema) as reopened:  # the saver still takes its schema
        records = registry_for(reopened)
        try:
            assert records.get_thread("t1") == thread("t1") and records.get_run("r1") == run("r1")
            assert reopened.threads() == []
        finally:
            records.close()


def test_registry_for_works_without_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = sys.modules['psycopg_pool'] = None  # any import of them fails\n"
        "from rxgraph import MemorySaver, SqliteSaver\n"
        "from rxgraph.serve._registries import registry_for\n"
        f"with SqliteSaver({str(tmp_path / 'cp.db')!r}) as saver:\n"
        "    registry = registry_for(saver)\n"
        "    assert type(registry).__name__ == 'SqliteRegistry', registry\n"
        "    registry.close()\n"
        "assert type(registry_for(MemorySaver())).__name__ == 'MemoryRegistry'\n"
        "assert not [name for name, module in sys.modules.items() if module and name.startswith('psycopg')]\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr


class _TwoLanes(MemoryRegistry):
    lanes = 2


@pytest.mark.parametrize(("registry", "together"), [(MemoryRegistry(), False), (_TwoLanes(), True)])
def test_the_server_makes_at_most_lanes_registry_calls_at_once(registry: Registry, together: bool) -> None:
    """Two calls that can only finish together (they meet at a barrier): with one lane the second waits for the
    first, which gives up at the barrier; with two, they meet."""
    import asyncio

    from rxgraph.serve._relay import LocalRelay
    from rxgraph.serve._runs import RunManager

    manager = RunManager(registry, lambda thread_id: None, LocalRelay())
    barrier = threading.Barrier(2, timeout=1.0)

    def meet() -> bool:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return False
        return True

    async def both() -> list[bool]:
        return list(await asyncio.gather(manager.records(meet), manager.records(meet)))

    assert asyncio.run(both()) == [together, together]


def test_a_cancelled_caller_waits_for_its_registry_call_which_keeps_its_lane() -> None:
    """A run's task cancelled (Task.cancel, as RunManager.cancel does) while its record is being written: the
    cancel waits until the write is done (so a later write of the same record cannot be overtaken by it), and the
    write keeps its lane until then (one lane: the next call starts after it)."""
    import asyncio

    from rxgraph.serve._relay import LocalRelay
    from rxgraph.serve._runs import RunManager

    manager = RunManager(MemoryRegistry(), lambda thread_id: None, LocalRelay())  # one lane
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(60)
        order.append("slow")

    async def main() -> bool:
        task = asyncio.ensure_future(manager.records(slow))
        assert await asyncio.to_thread(started.wait, 60)
        task.cancel()
        later = asyncio.ensure_future(manager.records(order.append, "later"))
        for _ in range(50):  # the loop turns; a caller that did not wait would be done after one or two
            await asyncio.sleep(0)
        waited = not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await later
        return waited

    assert asyncio.run(main())
    assert order == ["slow", "later"]


def test_a_run_cancelled_twice_has_its_task_cancelled_once_and_a_later_rollback_counts() -> None:
    """A second cancel of a run (another client's, a newer run's) must not cancel its task again: that would cut
    short the rewind (or the record of its end) the first cancel is waiting for. Asked for a rollback, it still
    rolls back."""
    import asyncio

    from rxgraph.serve._relay import LocalRelay
    from rxgraph.serve._runs import ActiveRun, EventLog, RunManager

    manager = RunManager(MemoryRegistry(), lambda thread_id: None, LocalRelay())

    async def main() -> tuple[int, str | None]:
        active = ActiveRun(run("r1"), EventLog(), False)
        active.task = asyncio.ensure_future(asyncio.Event().wait())
        manager.cancel(active, "interrupt")
        manager.cancel(active, "interrupt")
        manager.cancel(active, "rollback")
        requests = active.task.cancelling()
        with pytest.raises(asyncio.CancelledError):
            await active.task
        return requests, active.cancel_action

    assert asyncio.run(main()) == (1, "rollback")


def test_concurrent_writes_are_committed_together_each_kept_or_refused_alone(tmp_path: Path) -> None:
    """Eight threads write at once (the server's lanes); their writes share commits. One write that fails (a run
    without a thread) raises in its own thread and is undone alone: every other write is there, the failed one not."""
    SqliteSaver(tmp_path / "w.db").close()
    registry = SqliteRegistry(tmp_path / "w.db")
    start = threading.Barrier(8)
    failures: dict[int, BaseException] = {}

    def writer(lane: int) -> None:
        start.wait(10)
        for i in range(25):
            record = run(f"r{lane}-{i}", thread_id=f"t{lane}")
            if (lane, i) == (3, 7):
                record = replace(record, thread_id=None)  # type: ignore[arg-type]  # NOT NULL: this write fails
            try:
                registry.put_run(record)
                registry.set_status(record.run_id, "running")
            except sqlite3.IntegrityError as error:
                failures[lane] = error

    try:
        threads = [threading.Thread(target=writer, args=(lane,)) for lane in range(8)]
        for each in threads:
            each.start()
        for each in threads:
            each.join(30)
        assert list(failures) == [3]
        stored = {r.run_id: r.status for t in range(8) for r in registry.runs(f"t{t}")}
        assert len(stored) == 8 * 25 - 1 and "r3-7" not in stored
        assert set(stored.values()) == {"running"}
    finally:
        registry.close()


class _Queue(list[Any]):
    """The registry's queue of writes, telling a waiting test when a write joined it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def append(self, item: Any) -> None:
        with self.changed:
            super().append(item)
            self.changed.notify_all()


def _batch(registry: SqliteRegistry, *writes: Callable[[], None]) -> list[BaseException | None]:
    """Make ``writes`` from threads of their own while another call holds the connection, so that they queue (in
    this order) and are committed as one batch; what each raised."""
    queue = _Queue()
    registry._queued = queue
    errors: list[BaseException | None] = [None] * len(writes)

    def write(index: int) -> None:
        try:
            writes[index]()
        except BaseException as error:
            errors[index] = error

    threads = [threading.Thread(target=write, args=(index,)) for index in range(len(writes))]
    with registry._connection():
        for queued, each in enumerate(threads, start=1):
            each.start()
            with queue.changed:  # one at a time: the batch keeps the order of ``writes``
                assert queue.changed.wait_for(lambda: len(queue) == queued, timeout=10)  # noqa: B023
    for each in threads:
        each.join(10)
    return errors


def test_a_write_takes_one_statement_and_a_batch_takes_savepoints_only_when_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write alone is its one statement, a transaction by itself; a batch of writes is BEGIN, the writes, COMMIT;
    savepoints (a failed write undone alone) are taken only when a write of the batch failed. Each statement is a
    trip through SQLite that lets go of the GIL."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: statements.append(sql.split()[0]))
        return conn

    SqliteSaver(tmp_path / "w.db").close()
    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    no_thread = replace(run("bad"), thread_id=None)  # NOT NULL: this write fails
    with closing(SqliteRegistry(tmp_path / "w.db")) as registry:
        statements.clear()
        registry.put_run(run("r1"))
        assert statements == ["INSERT"]
        statements.clear()
        with pytest.raises(sqlite3.IntegrityError):
            registry.put_run(no_thread)  # type: ignore[arg-type]
        assert statements == ["INSERT"]  # and nothing written: SQLite undid the statement

        statements.clear()
        assert _batch(registry, lambda: registry.put_run(run("r2")), lambda: registry.put_run(run("r3"))) == [None] * 2
        assert statements == ["BEGIN", "INSERT", "INSERT", "COMMIT"]

        statements.clear()
        errors = _batch(registry, lambda: registry.put_run(run("r4")), lambda: registry.put_run(no_thread))  # type: ignore[arg-type]
        assert errors[0] is None and isinstance(errors[1], sqlite3.IntegrityError)
        written_once = ["BEGIN", "INSERT", "INSERT", "ROLLBACK"]
        each_alone = ["BEGIN", "SAVEPOINT", "INSERT", "RELEASE", "SAVEPOINT", "INSERT", "ROLLBACK", "RELEASE", "COMMIT"]
        assert statements == written_once + each_alone
        assert {r: registry.get_run(r) is not None for r in ("r1", "r2", "r3", "r4", "bad")} == {
            "r1": True,
            "r2": True,
            "r3": True,
            "r4": True,
            "bad": False,
        }


def test_a_registry_call_sees_the_callers_context_and_the_manager_works_again_after_close() -> None:
    """The registry's calls run on threads of the run manager's own: with the caller's context vars (a request's
    logging or tracing context), and, after ``close`` let those threads go, on new ones (a lifespan run again)."""
    import asyncio
    import contextvars

    from rxgraph.serve._relay import LocalRelay
    from rxgraph.serve._runs import RunManager

    request = contextvars.ContextVar("request", default="none")
    manager = RunManager(MemoryRegistry(), lambda thread_id: None, LocalRelay())

    def seen() -> tuple[str, bool]:
        return request.get(), threading.current_thread() is threading.main_thread()

    async def lifespan(name: str) -> tuple[str, bool]:
        manager.open()
        request.set(name)
        try:
            return await manager.records(seen)
        finally:
            await manager.close()

    assert asyncio.run(lifespan("first")) == ("first", False)
    assert asyncio.run(lifespan("second")) == ("second", False)
