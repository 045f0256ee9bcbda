"""``SqliteRegistry``: the server's thread and run records in the SQLite file of its ``SqliteSaver``.

The records live in tables of their own beside the checkpoints (``rxgraph_server_threads``, ``rxgraph_server_runs``,
and ``rxgraph_server_meta`` for their schema version): the saver never reads them, and their names cannot meet its
tables. Times are ISO 8601 text in UTC, of one width (so the text sorts as the times do); metadata and a run's
options are JSON text.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from ..checkpoint._schema import FORMAT, check_not_newer, migrate
from ..errors import IncompatibleDatabaseError, InvalidArgumentError, SaverClosedError, SaverTimeoutError
from ._registry import Registry, RunRecord, RunStatus, ThreadRecord, now

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SqliteRegistry"]

_R = TypeVar("_R")

SCHEMA_VERSION = 1
"""The version of the records' tables this code writes (in ``rxgraph_server_meta``, apart from the saver's own)."""

MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}
"""Version ``v`` -> the migration of the records' tables from ``v`` to ``v + 1``, run in the transaction that opens
the file (it must not commit)."""

# rowid is the tie-break of "newest first": of two records created in the same microsecond, the one inserted later.
_SCHEMA = (
    "CREATE TABLE rxgraph_server_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE rxgraph_server_threads (
        thread_id TEXT PRIMARY KEY,
        owner TEXT,
        metadata TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX rxgraph_server_threads_owner ON rxgraph_server_threads (owner, created_at)",
    "CREATE INDEX rxgraph_server_threads_created ON rxgraph_server_threads (created_at)",
    """CREATE TABLE rxgraph_server_runs (
        run_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        assistant_id TEXT NOT NULL,
        owner TEXT,
        status TEXT NOT NULL,
        kwargs TEXT NOT NULL,
        metadata TEXT NOT NULL,
        multitask_strategy TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX rxgraph_server_runs_thread ON rxgraph_server_runs (thread_id, created_at)",
)

_THREAD = "thread_id, owner, metadata, created_at, updated_at"
_RUN = "run_id, thread_id, assistant_id, owner, status, kwargs, metadata, multitask_strategy, created_at, updated_at"
_PUT_RUN = f"""
    INSERT INTO rxgraph_server_runs ({_RUN}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (run_id) DO UPDATE SET
        thread_id = excluded.thread_id, assistant_id = excluded.assistant_id, owner = excluded.owner,
        status = excluded.status, kwargs = excluded.kwargs, metadata = excluded.metadata,
        multitask_strategy = excluded.multitask_strategy, created_at = excluded.created_at,
        updated_at = excluded.updated_at"""


class SqliteRegistry(Registry):
    """The server's records in an rxgraph checkpoint file (one a ``SqliteSaver`` has opened), on a connection of
    their own: several registries, savers and processes may share the file.

    Threads share the connection under a lock. A write (a record created, put, its status set, deleted) is committed
    with the writes other threads made meanwhile, in one transaction, each undone alone if it fails; ``update_thread``
    and ``delete_thread`` are one ``BEGIN IMMEDIATE`` transaction each. A call that waits ``timeout`` seconds for
    another writer of the file (twice that for another thread of this process) raises ``SaverTimeoutError``; after
    ``close``, ``SaverClosedError``.
    """

    lanes = 8
    """Calls made at once: the writes of concurrent calls are committed together (one transaction, the file's
    write lock taken once), so several lanes share the cost of each commit rather than queue for one each."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        """Open the file and check (when missing, create) the records' tables.

        Args:
            path: the file of a ``SqliteSaver``.
            timeout: seconds a call waits for the file's write lock before it raises.

        Raises:
            InvalidArgumentError: ``timeout`` is not positive.
            IncompatibleDatabaseError: the file is not an rxgraph checkpoint file (open a ``SqliteSaver`` on it
                first: it creates one), or its records' tables are newer than this code; nothing was written.
            SaverTimeoutError: another connection held the write lock for ``timeout`` seconds while the tables were
                being created.
        """
        if not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout}", argument="timeout")
        self._path = os.fspath(path)
        self._timeout = timeout
        if self._path != ":memory:" and not os.path.exists(self._path):
            raise IncompatibleDatabaseError(self._not_checkpoints(), path=self._path)  # connecting would create it
        conn = sqlite3.connect(self._path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            self._prepare(conn)
            # The saver made the file WAL (which the file keeps); this connection's durability is the saver's default.
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()
        self._queued: list[_Write] = []  # writes waiting for the next commit, under _queue_lock
        self._queue_lock = threading.Lock()

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SqliteRegistry({self._path!r})"

    def close(self) -> None:
        """Close the connection once a call in progress has finished; closing again does nothing."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- threads -----------------------------------------------------------------------------------------------

    def create_thread(self, record: ThreadRecord) -> ThreadRecord | None:
        row = _thread_row(record)

        def create(conn: sqlite3.Connection) -> ThreadRecord | None:
            cursor = conn.execute(
                f"INSERT INTO rxgraph_server_threads ({_THREAD}) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (thread_id) DO NOTHING",
                row,
            )
            return record if cursor.rowcount == 1 else None

        return self._write(create)

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {_THREAD} FROM rxgraph_server_threads WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        return None if row is None else _thread(row)

    def threads(self, owner: str | None) -> builtins.list[ThreadRecord]:
        with self._connection() as conn:
            if owner is None:
                rows = conn.execute(
                    f"SELECT {_THREAD} FROM rxgraph_server_threads ORDER BY created_at DESC, rowid DESC"
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_THREAD} FROM rxgraph_server_threads WHERE owner = ? "
                    "ORDER BY created_at DESC, rowid DESC",
                    (owner,),
                ).fetchall()
        return [_thread(row) for row in rows]

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> ThreadRecord | None:
        # Merged here, not with SQLite's json_patch, which would remove the keys set to None.
        with self._connection() as conn, self._writing(conn):
            row = conn.execute(
                f"SELECT {_THREAD} FROM rxgraph_server_threads WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            if row is None:
                return None
            record = _thread(row)
            changed = replace(record, metadata={**record.metadata, **metadata}, updated_at=now())
            conn.execute(
                "UPDATE rxgraph_server_threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
                (_json(changed.metadata, "metadata"), _stamp(changed.updated_at), thread_id),
            )
            return changed

    def delete_thread(self, thread_id: str) -> bool:
        with self._connection() as conn, self._writing(conn):
            conn.execute("DELETE FROM rxgraph_server_runs WHERE thread_id = ?", (thread_id,))
            return conn.execute("DELETE FROM rxgraph_server_threads WHERE thread_id = ?", (thread_id,)).rowcount > 0

    # -- runs --------------------------------------------------------------------------------------------------

    def put_run(self, record: RunRecord) -> None:
        row = _run_row(record)
        self._write(lambda conn: conn.execute(_PUT_RUN, row))

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT {_RUN} FROM rxgraph_server_runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else _run(row)

    def runs(self, thread_id: str) -> builtins.list[RunRecord]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_RUN} FROM rxgraph_server_runs WHERE thread_id = ? ORDER BY created_at DESC, rowid DESC",
                (thread_id,),
            ).fetchall()
        return [_run(row) for row in rows]

    def set_status(self, run_id: str, status: RunStatus) -> RunRecord | None:
        # One statement: a run deleted meanwhile stays deleted (a read, then a put, would bring it back).
        rows = self._write(
            lambda conn: conn.execute(
                f"UPDATE rxgraph_server_runs SET status = ?, updated_at = ? WHERE run_id = ? RETURNING {_RUN}",
                (status, _stamp(now()), run_id),
            ).fetchall()
        )
        return _run(rows[0]) if rows else None

    def delete_run(self, run_id: str) -> bool:
        return bool(
            self._write(
                lambda conn: conn.execute("DELETE FROM rxgraph_server_runs WHERE run_id = ?", (run_id,)).rowcount > 0
            )
        )

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _write(self, statement: Callable[[sqlite3.Connection], _R]) -> _R:
        """Run ``statement`` (one write) and commit it: queued, then committed in one transaction with the writes
        other threads queued meanwhile. The first caller to hold the connection commits every write queued then;
        a write that fails is rolled back alone and raises in its caller's thread: the batch is written once as it
        is, and only when one of its writes fails, again with a savepoint for each (two statements more a write,
        each a trip through SQLite that lets go of the GIL, which the common case does without). A batch of one
        write is that write's statement alone, which SQLite makes a transaction of its own: each write is one
        statement, run to its end (a ``RETURNING`` fetched whole)."""
        write = _Write(statement)
        with self._queue_lock:
            self._queued.append(write)
        try:
            with self._connection() as conn:
                if not write.done:  # not committed by an earlier caller: this one commits what is queued
                    with self._queue_lock:
                        batch, self._queued = self._queued, []
                    try:
                        if len(batch) == 1:
                            batch[0].run_by_itself(conn)
                        else:
                            try:
                                with self._writing(conn):
                                    for queued in batch:
                                        queued.run(conn)
                            except _OneFailed:  # (rolled back) written again, each write in a savepoint of its own
                                with self._writing(conn):
                                    for queued in batch:
                                        queued.run_alone(conn)
                    except BaseException as error:  # the transaction failed (the file stayed locked): none was made
                        failure: BaseException = error
                        if isinstance(error, sqlite3.OperationalError) and _is_busy(error):
                            failure = self._timed_out(error)
                        for queued in batch:
                            queued.failed(failure)
                    finally:
                        for queued in batch:
                            queued.done = True
        except BaseException:  # the connection was not had (closed, or held too long): the write is not made
            with self._queue_lock:
                if write in self._queued:
                    self._queued.remove(write)
            raise
        return cast(_R, write.result())

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held for the ``with`` block (waiting at most twice ``timeout`` for another thread's
        call, which itself waits at most ``timeout`` for the file)."""
        if not self._lock.acquire(timeout=2 * self._timeout):
            raise SaverTimeoutError(
                f"{self!r}: another thread of this process held the registry's connection for more than "
                f"{2 * self._timeout:g} s; nothing was done. Retry, or open the registry with a longer timeout"
            )
        try:
            if self._conn is None:
                raise SaverClosedError(f"{self!r} is closed; open a new SqliteRegistry on {self._path!r}")
            try:
                yield self._conn
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise
                raise self._timed_out(error) from error
        finally:
            self._lock.release()

    @contextmanager
    def _writing(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One write transaction for the ``with`` block, its lock taken first (so that what the block reads stays
        true until it writes); committed when the block ends, rolled back when it raises."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _not_checkpoints(self) -> str:
        return (
            f"{self._path} is not an rxgraph checkpoint file; the server keeps its records beside the checkpoints: "
            "open a SqliteSaver on the file first"
        )

    def _timed_out(self, error: sqlite3.OperationalError) -> SaverTimeoutError:
        # SQLite says only "database is locked": say which file, and for how long it was waited on.
        return SaverTimeoutError(
            f"{self._path} stayed locked for more than {self._timeout:g} s (another connection, or another process, "
            "was writing to it); nothing was written. Retry, or open the registry with a longer timeout"
        )

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check the file and the records' tables; create them, or migrate them, when needed."""
        version = self._read_version(conn)
        if version == SCHEMA_VERSION:
            return
        check_not_newer(version, SCHEMA_VERSION, where=f"{self._path} (server records)", path=self._path)
        try:
            with self._writing(conn):
                # Under the write lock: look again (another process may have done it meanwhile).
                version = self._read_version(conn)
                if version is None:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO rxgraph_server_meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                    return
                check_not_newer(version, SCHEMA_VERSION, where=f"{self._path} (server records)", path=self._path)
                migrate(
                    conn,
                    version,
                    SCHEMA_VERSION,
                    MIGRATIONS,
                    record=lambda new: conn.execute(
                        "UPDATE rxgraph_server_meta SET value = ? WHERE key = 'schema_version'", (str(new),)
                    ),
                    errors=(sqlite3.Error,),
                    where=f"{self._path} (server records)",
                    path=self._path,
                )
        except sqlite3.OperationalError as error:
            if not _is_busy(error):
                raise
            raise self._timed_out(error) from error

    def _read_version(self, conn: sqlite3.Connection) -> int | None:
        """The records' schema version; ``None`` before their tables exist. Raises for a file that is not an rxgraph
        checkpoint file: tables of ours in a file of someone else's would also make a ``SqliteSaver`` refuse it."""
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            marked = (
                "meta" in tables
                and conn.execute("SELECT 1 FROM meta WHERE key = 'format' AND value = ?", (FORMAT,)).fetchone()
            )
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and _is_busy(error):
                raise self._timed_out(error) from error
            marked = False  # not an SQLite database at all
        if not marked:
            raise IncompatibleDatabaseError(self._not_checkpoints(), path=self._path)
        if "rxgraph_server_meta" not in tables:
            return None
        row = conn.execute("SELECT value FROM rxgraph_server_meta WHERE key = 'schema_version'").fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise IncompatibleDatabaseError(
                f"{self._path}: rxgraph_server_meta has no valid schema_version ({row!r})", path=self._path
            ) from None


class _OneFailed(Exception):
    """A write of a batch written without savepoints raised: the batch's transaction is rolled back."""


class _Write:
    """One write of a group commit: its statement, then its result or the error it raised."""

    __slots__ = ("_error", "_statement", "_value", "done")

    def __init__(self, statement: Callable[[sqlite3.Connection], Any]) -> None:
        self._statement = statement
        self._value: Any = None
        self._error: BaseException | None = None
        self.done = False

    def run(self, conn: sqlite3.Connection) -> None:
        """Within the batch's transaction, as it is: a failure is ``_OneFailed`` (the batch is then written again,
        each write alone)."""
        try:
            self._value = self._statement(conn)
        except BaseException as error:
            raise _OneFailed from error

    def run_by_itself(self, conn: sqlite3.Connection) -> None:
        """Outside any transaction: the write's one statement is then a transaction of its own, written whole or
        not at all, with no ``BEGIN``, ``COMMIT`` or savepoint around it. A file that stayed locked raises (as a
        batch's ``BEGIN IMMEDIATE`` does); any other failure is the write's own."""
        try:
            self._value = self._statement(conn)
        except sqlite3.OperationalError as error:
            if _is_busy(error):
                raise
            self._error = error
        except Exception as error:
            self._error = error

    def run_alone(self, conn: sqlite3.Connection) -> None:
        """Within the batch's transaction, in a savepoint of its own: a failure undoes this write only."""
        conn.execute("SAVEPOINT write")
        try:
            self._value = self._statement(conn)
        except BaseException as error:
            conn.execute("ROLLBACK TO write")
            self._error = error
        finally:
            conn.execute("RELEASE write")

    def failed(self, error: BaseException) -> None:
        self._error = error

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def _is_busy(error: sqlite3.OperationalError) -> bool:
    """Whether SQLite gave up waiting for another connection's lock (its busy timeout passed)."""
    return "locked" in str(error) or "busy" in str(error)


# -- rows ----------------------------------------------------------------------------------------------------------


def _stamp(moment: datetime) -> str:
    """A time as ISO 8601 text in UTC, always with microseconds: one width, so that the text sorts as the times."""
    if moment.utcoffset() is None:
        raise InvalidArgumentError(
            f"a record's times must have a time zone (datetime.now(UTC)), got {moment!r}", argument="record"
        )
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _json(value: Mapping[str, Any], what: str) -> str:
    """JSON text of a record's ``metadata`` or ``kwargs``; ASCII escapes keep every string exact (lone surrogates
    included)."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"a record's {what} must be JSON: {error}", argument=what) from error


def _thread_row(record: ThreadRecord) -> tuple[Any, ...]:
    return (
        record.thread_id,
        record.owner,
        _json(record.metadata, "metadata"),
        _stamp(record.created_at),
        _stamp(record.updated_at),
    )


def _thread(row: tuple[Any, ...]) -> ThreadRecord:
    thread_id, owner, metadata, created_at, updated_at = row
    return ThreadRecord(
        thread_id=thread_id,
        owner=owner,
        metadata=json.loads(metadata),
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
    )


def _run_row(record: RunRecord) -> tuple[Any, ...]:
    return (
        record.run_id,
        record.thread_id,
        record.assistant_id,
        record.owner,
        record.status,
        _json(record.kwargs, "kwargs"),
        _json(record.metadata, "metadata"),
        record.multitask_strategy,
        _stamp(record.created_at),
        _stamp(record.updated_at),
    )


def _run(row: tuple[Any, ...]) -> RunRecord:
    run_id, thread_id, assistant_id, owner, status, kwargs, metadata, strategy, created_at, updated_at = row
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        assistant_id=assistant_id,
        owner=owner,
        status=cast(RunStatus, status),
        kwargs=json.loads(kwargs),
        metadata=json.loads(metadata),
        multitask_strategy=strategy,
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
    )
