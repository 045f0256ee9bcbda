"""``SqliteSaver``: checkpoints in an SQLite file (stdlib ``sqlite3``), incremental and safe across processes.

Storage is incremental (see :mod:`rxgraph.checkpoint._incremental`, which this saver shares with ``PostgresSaver``):
a checkpoint row holds a manifest, lists are chains of rows in ``items`` to which a step adds only its new items,
and other values are rows of ``blobs`` shared between checkpoints.

Values are JSON through :class:`~rxgraph.checkpoint.Serde` (no pickle). Each ``put`` is one transaction that
holds SQLite's write lock while it checks the thread's head and writes only if it is the expected one, so the
compare-and-set holds across threads and processes sharing the file: a ``BEGIN IMMEDIATE`` transaction that reads
the head and the next free row ids first, or, once the saver knows those ids from its own last put, one statement
whose trigger checks the head and the ids and writes the rows (see ``_PUT_TRIGGER``); the transaction when that
check fails. ``prune`` and ``delete_thread`` are one ``BEGIN IMMEDIATE`` transaction too.
"""

from __future__ import annotations

import builtins
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import count
from typing import Literal

from ..errors import IncompatibleDatabaseError, InvalidArgumentError, SaverClosedError, SaverTimeoutError
from ._base import Checkpoint
from ._incremental import (
    COLUMNS,
    IncrementalSaver,
    IncrementalStats,
    IncrementalStore,
    Plan,
    Ref,
    Retention,
    Row,
    checkpoint_row,
)
from ._serde import Serde, default_serde
from ._sqlite_schema import Migration, prepare
from ._sqlite_transaction import locked_error, write_transaction
from .contract import check_limit, check_prune, check_put, duplicate_id

__all__ = ["SqliteSaver", "SqliteSaverStats"]


_MAX_SEQ = 2**63 - 1
_IN_CHUNK = 500  # ids per "IN (...)" query, well under SQLite's limit on bound parameters

_SELECT_HEAD = f"SELECT {COLUMNS} FROM checkpoints WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
_SELECT_HEAD_ID = "SELECT id, seq, manifest FROM checkpoints WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
_SELECT_BY_ID = f"SELECT {COLUMNS} FROM checkpoints WHERE id = ?"
_SELECT_PAGE = f"SELECT {COLUMNS} FROM checkpoints WHERE thread_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
_SELECT_SAFE = (
    f"SELECT {COLUMNS} FROM checkpoints WHERE thread_id = ? AND safe = 1 AND seq < ? ORDER BY seq DESC LIMIT 1"
)
_INSERT_CHECKPOINT = f"INSERT INTO checkpoints ({COLUMNS}) VALUES ({', '.join('?' * COLUMNS.count(','))}, ?)"
_FLOOR = "IFNULL((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'row_id_floor'), 0)"
_LEGACY = "IFNULL((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'legacy_row_ids'), 0)"
# A put's first read, in its transaction: the thread's head (id, seq, manifest; NULLs when it has none) and the ids
# the next rows of items and of blobs take: above every id in use, and above the floor, which retention raises to the
# highest id it has seen, so that an id freed is never given again (another saver may have it cached). One statement,
# not two: each is a trip through SQLite that lets go of the GIL and takes it back, which costs most when another
# thread (an event loop's) is waiting for it.
_HEAD_AND_NEXT_IDS = f"""
SELECT head.id, head.seq, head.manifest, next.item, next.blob
FROM (
    SELECT MAX(IFNULL((SELECT MAX(id) FROM items), 0), floor) + 1 AS item,
           MAX(IFNULL((SELECT MAX(id) FROM blobs), 0), floor) + 1 AS blob
    FROM (SELECT {_FLOOR} AS floor)
) AS next
LEFT JOIN ({_SELECT_HEAD_ID}) AS head ON true"""
# A put in one statement, for a saver that knows the next free row ids (it gave the last ones itself): an insert into
# a view of its own connection, whose trigger checks what the put's transaction would read — the thread's head (its
# id, its seq, its manifest when the plan relies on it) and that the ids are still above every id in use and above
# the floor — and writes the rows, or stops with _STALE and writes nothing. A write statement takes SQLite's write
# lock before it runs (a trigger's writes count as the statement's), so the check and the writes are one atomic step,
# as under BEGIN IMMEDIATE. One statement instead of five: each is a trip through SQLite that lets go of the GIL.
_STALE = "rxgraph: stale head or row ids"
_SLOTS = 4  # the blobs, and the list items, a put of one statement can carry; a bigger put takes the transaction
_SLOT_COLUMNS = ", ".join(
    [f"b{i}" for i in range(_SLOTS)] + [f"i{i}" for i in range(_SLOTS)] + [f"p{i}" for i in range(_SLOTS)]
)
_NEW_ROWS = " UNION ALL ".join
# One column of the thread's head, in the trigger: a scalar subquery (an index seek) per column, not a join with the
# head row, which SQLite copies into a temporary table first (a zeroed page, more than the seeks cost).
_HEAD_COLUMN = "SELECT {} FROM checkpoints WHERE thread_id = NEW.thread_id ORDER BY seq DESC LIMIT 1"
# The view's columns: a checkpoint's row, what the trigger checks it against, and the slots of its new rows. A put
# names those it gives a value (_put_statement).
_PUT_COLUMNS = (
    *COLUMNS.split(", "),
    "expected_head",
    "head_manifest",
    "first_blob",
    "first_item",
    *_SLOT_COLUMNS.split(", "),
)
_PUT_VIEW = f"CREATE TEMP VIEW rxgraph_put AS SELECT {', '.join(f'NULL AS {column}' for column in _PUT_COLUMNS)}"
_PUT_TRIGGER = f"""
CREATE TEMP TRIGGER rxgraph_put_rows INSTEAD OF INSERT ON rxgraph_put BEGIN
    SELECT RAISE(ABORT, '{_STALE}')
    WHERE ({_HEAD_COLUMN.format("id")}) IS NOT NEW.expected_head
        OR IFNULL(({_HEAD_COLUMN.format("seq")}), 0) != NEW.seq - 1
        OR (NEW.head_manifest IS NOT NULL AND ({_HEAD_COLUMN.format("manifest")}) IS NOT NEW.head_manifest)
        OR (NEW.b0 IS NOT NULL AND NEW.first_blob <= MAX(IFNULL((SELECT MAX(id) FROM blobs), 0), {_FLOOR}))
        OR (NEW.i0 IS NOT NULL AND NEW.first_item <= MAX(IFNULL((SELECT MAX(id) FROM items), 0), {_FLOOR}));
    INSERT INTO blobs (id, value)
    {_NEW_ROWS(f"SELECT NEW.first_blob + {i}, NEW.b{i} WHERE NEW.b{i} IS NOT NULL" for i in range(_SLOTS))};
    INSERT INTO items (id, prev_id, value)
    {_NEW_ROWS(f"SELECT NEW.first_item + {i}, NEW.p{i}, NEW.i{i} WHERE NEW.i{i} IS NOT NULL" for i in range(_SLOTS))};
    INSERT INTO checkpoints ({COLUMNS}) VALUES ({", ".join(f"NEW.{column}" for column in COLUMNS.split(", "))});
END"""
_UNUSED = (None,) * _SLOTS


@functools.cache
def _put_statement(given: tuple[bool, ...]) -> str:
    """The one-statement put that names the view's columns ``given`` a value (in ``_PUT_COLUMNS``' order); the
    others are NULL in the trigger's ``NEW``, as if bound to None. Binding None is not free: Python's sqlite3
    module asks its adapters about each None (and bytes) parameter, which raises and clears an AttributeError
    (CPython 3.11), and the NULLs of a put's unused slots and columns cost more instructions than the rest of it."""
    columns = [column for column, present in zip(_PUT_COLUMNS, given, strict=True) if present]
    return f"INSERT INTO rxgraph_put ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


_Written = tuple[dict[str, Ref], Row, int, int, int]  # refs, row, payload bytes, items and blobs inserted
_RAISE_FLOOR = f"""
INSERT INTO meta (key, value)
SELECT 'row_id_floor', MAX(IFNULL((SELECT MAX(id) FROM items), 0), IFNULL((SELECT MAX(id) FROM blobs), 0), {_FLOOR})
WHERE true
ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
_SELECT_HISTORY = "SELECT id, seq, safe, created_at, manifest FROM checkpoints WHERE thread_id = ? ORDER BY seq DESC"
_DELETE_CHECKPOINTS = "DELETE FROM checkpoints WHERE thread_id = ? AND seq IN (SELECT value FROM json_each(?))"
# Rows written by schema version 2, which shared rows between threads, are never freed (ids up to legacy_row_ids).
_FREE_BLOBS = f"DELETE FROM blobs WHERE id IN (SELECT value FROM json_each(?)) AND id > {_LEGACY}"
# The items reached from the dropped lists' tails and not from the kept ones': kept lists pass through the items of
# every shorter list they extend, so that is what no remaining checkpoint reaches. UNION (not UNION ALL) visits a
# chain shared by many tails once, and stops a damaged (cyclic) one.
_FREE_ITEMS = f"""
WITH RECURSIVE
    live(id) AS (
        SELECT value FROM json_each(?)
        UNION
        SELECT items.prev_id FROM items JOIN live ON items.id = live.id WHERE items.prev_id IS NOT NULL
    ),
    dead(id) AS (
        SELECT value FROM json_each(?)
        UNION
        SELECT items.prev_id FROM items JOIN dead ON items.id = dead.id
        WHERE items.prev_id IS NOT NULL AND items.prev_id NOT IN live
    )
DELETE FROM items WHERE id IN (SELECT id FROM dead EXCEPT SELECT id FROM live) AND id > {_LEGACY}"""
_COUNT_ROWS = """
SELECT (SELECT count(*) FROM blobs WHERE id IN (SELECT value FROM json_each(?)))
    + (SELECT count(*) FROM items WHERE id IN (SELECT value FROM json_each(?)))"""
# Walks a list back from its tail, at most `?` items; ordered oldest first. The depth bound also stops a damaged
# (cyclic) chain.
_WALK = """
WITH RECURSIVE chain(id, prev_id, value, depth) AS (
    SELECT id, prev_id, value, 1 FROM items WHERE id = ?
    UNION ALL
    SELECT items.id, items.prev_id, items.value, chain.depth + 1
    FROM items JOIN chain ON items.id = chain.prev_id
    WHERE chain.depth < ?
)
SELECT prev_id, value FROM chain ORDER BY depth DESC
"""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""Values of SQLite's ``synchronous`` setting (see ``SqliteSaver``)."""


@dataclass(slots=True)
class SqliteSaverStats(IncrementalStats):
    """Counters of one ``SqliteSaver`` since it was opened (for tests, benchmarks and monitoring); ``stats`` gives
    a copy.

    ``bytes_written`` is the size of the payload a saver inserted: the characters of every JSON value, manifest and
    text column, plus 8 per integer column. SQLite adds its own page and index overhead on top.
    """


class SqliteSaver(IncrementalSaver):
    """A checkpoint saver on an SQLite file; several threads and several processes may share one file.

    ``schema_version`` is the file's schema version once opened (created or migrated if needed). Close the saver
    (or use it as a context manager) when done; a closed saver raises ``SaverClosedError``. A call that waits
    longer than twice ``timeout`` for another thread of this process, or a ``put`` that finds the file locked by
    another connection or process for ``timeout`` seconds, raises ``SaverTimeoutError`` naming the file.

    Threads share one connection, used under a lock: SQLite runs one writer at a time anyway, and one connection
    lets every thread share the cache, so the parent of a ``put`` is never re-read from disk.
    Open one saver per process (do not carry one across ``fork``); processes coordinate through SQLite's locks.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        serde: Serde | None = None,
        timeout: float = 5.0,
        synchronous: Synchronous = "NORMAL",
        cache_size: int = 256,
        migrations: Mapping[int, Migration] | None = None,
    ) -> None:
        """Open (and when new, create) the database file.

        Args:
            path: the database file; ``":memory:"`` for a private database that lives as long as the saver.
            serde: the type registry for values; default :data:`~rxgraph.checkpoint.default_serde`.
            timeout: seconds a call waits for a lock held by another thread or process before it raises.
            synchronous: SQLite's durability setting: ``"NORMAL"`` (with WAL) survives a killed process;
                ``"FULL"`` also a power cut, at the cost of a disk flush per ``put``.
            cache_size: how many checkpoints (and ``4 * cache_size`` values) are kept in memory.
            migrations: ``{version: callable(connection)}``, overriding the registered schema migrations.

        Raises:
            InvalidArgumentError: ``synchronous``, ``timeout`` or ``cache_size`` has a value it cannot have
                (``argument`` names it); nothing was opened.
            IncompatibleDatabaseError: the file is not an rxgraph checkpoint database, has a newer schema, or
                could not be migrated (``path`` is the file); nothing was written to it.
            sqlite3.OperationalError: the file stayed locked by another process for ``timeout`` seconds while
                its schema was being created or migrated (a note says so).
        """
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise InvalidArgumentError(
                f"synchronous must be 'OFF', 'NORMAL', 'FULL' or 'EXTRA', got {synchronous!r}", argument="synchronous"
            )
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout}", argument="timeout")
        if cache_size < 1:
            raise InvalidArgumentError(f"cache_size must be >= 1, got {cache_size}", argument="cache_size")
        self._path = os.fspath(path)
        self._serde = default_serde if serde is None else serde
        self._timeout = timeout
        conn = sqlite3.connect(self._path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            self.schema_version = prepare(conn, self._path, migrations, timeout=timeout)
            if self._path != ":memory:":
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise IncompatibleDatabaseError(
                        f"{self._path}: could not switch to WAL mode (got {mode!r})", path=self._path
                    )
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute(_PUT_VIEW)  # this connection's own (TEMP): nothing in the file changes
            conn.execute(_PUT_TRIGGER)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        # Waits for another thread's call, which itself may wait up to `timeout` on SQLite's lock.
        self._lock = threading.Lock()
        self._lock_timeout = 2 * timeout
        self._waiting = 0  # calls blocked on _lock right now (counted only once a call has to wait)
        self._waiting_lock = threading.Lock()
        self._counters = SqliteSaverStats()
        # The ids the next new rows of items and of blobs take, as far as this saver knows: known after a put of
        # its own, checked by the next put in the statement that writes (see _put_at_once).
        self._next_ids: tuple[int, int] | None = None
        self._store = IncrementalStore(self._serde, cache_size, self._counters, (sqlite3.Error,))

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def stats(self) -> SqliteSaverStats:
        """This saver's counters since it was opened (still readable once it is closed).

        Returns:
            A copy, which later calls do not change.
        """
        with self._lock:
            return replace(self._counters)

    def close(self) -> None:
        """Close the connection and drop the caches, once any call in progress has finished.

        Later calls of the contract raise ``SaverClosedError``; closing again does nothing. Raises nothing.
        """
        with self._lock:
            conn, self._conn = self._conn, None
            self._store.clear()
        if conn is not None:
            conn.close()

    def __repr__(self) -> str:
        return f"SqliteSaver({self._path!r})"

    # -- the contract ------------------------------------------------------------------------------------------

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        with self._locked() as conn:
            return self._store.get(_SqliteRows(conn), thread_id, checkpoint_id)

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        check_limit(limit)
        with self._locked() as conn:
            return self._store.list(_SqliteRows(conn), thread_id, limit, before_seq)

    def threads(self) -> builtins.list[str]:
        with self._locked() as conn:
            return [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        """The newest safe checkpoint (``seq < before_seq`` when given), found with one indexed query.

        A checkpoint that cannot be decoded is skipped with a warning: it cannot be the base of a new turn.
        """
        with self._locked() as conn:
            return self._store.latest_safe(_SqliteRows(conn), thread_id, before_seq)

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        store = self._store
        with self._locked() as conn:
            rows = _SqliteRows(conn)
            plan = store.plan(checkpoint, store.parent(rows, checkpoint.parent_id), expected_head)
            written = self._put_at_once(conn, checkpoint, expected_head, plan)
            if written is None:
                written = self._put_in_transaction(conn, rows, checkpoint, expected_head, plan)
            refs, row, size, items, blobs = written
            # Only now (committed) may the new rows be referred to by later writes.
            store.stored(checkpoint, refs, row, written=size, items=items, blobs=blobs)
            return checkpoint

    def _put_at_once(
        self, conn: sqlite3.Connection, checkpoint: Checkpoint, expected_head: str | None, plan: Plan
    ) -> _Written | None:
        """The put as one statement (see ``_PUT_TRIGGER``), when this saver knows the next free row ids and the put
        fits the statement's slots and reuses no row of another checkpoint than the head; None when it did not
        write (it could not, or the head or the ids were not what it took them for): the transaction's turn."""
        next_ids = self._next_ids
        if next_ids is None or plan.borrowed_blobs or plan.borrowed_items or len(plan.blobs) > _SLOTS:
            return None
        if sum(len(texts) for _, _, texts, _ in plan.chains) > _SLOTS:
            return None
        next_item, next_blob = next_ids
        refs, blob_rows, item_rows, written = plan.assign(count(next_blob), count(next_item))
        row, row_bytes = checkpoint_row(checkpoint, refs, plan.pending)
        free = _SLOTS - len(item_rows)
        params = (
            *row,
            expected_head,
            plan.head_manifest,
            next_blob,
            next_item,
            *[text for _, text in blob_rows],
            *_UNUSED[: _SLOTS - len(blob_rows)],
            *[text for _, _, text in item_rows],
            *_UNUSED[:free],
            *[prev_id for _, prev_id, _ in item_rows],
            *_UNUSED[:free],
        )
        try:
            given = tuple(param is not None for param in params)
            conn.execute(_put_statement(given), [param for param in params if param is not None])
        except sqlite3.IntegrityError as error:
            if str(error) == _STALE:  # another connection wrote, or a retention raised the floor: nothing written
                self._next_ids = None
                return None
            if "checkpoints.id" in str(error):
                raise duplicate_id(checkpoint) from error
            raise
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            raise locked_error(self._path, self._timeout) from error
        self._next_ids = (next_item + len(item_rows), next_blob + len(blob_rows))
        return refs, row, written + row_bytes, len(item_rows), len(blob_rows)

    def _put_in_transaction(
        self,
        conn: sqlite3.Connection,
        rows: _SqliteRows,
        checkpoint: Checkpoint,
        expected_head: str | None,
        plan: Plan,
    ) -> _Written:
        """The put in a write transaction that reads the head and the next free row ids first."""
        store = self._store
        self._next_ids = None  # known again once this transaction has read them
        with write_transaction(conn, self._path, self._timeout):
            head_id, head_seq, manifest, next_item, next_blob = conn.execute(
                _HEAD_AND_NEXT_IDS, (checkpoint.thread_id,)
            ).fetchone()
            self._next_ids = (next_item, next_blob)  # still right if this put writes nothing
            # A duplicate id is refused by the table's unique index, below: one query less per put.
            head = None if head_id is None else (head_id, head_seq)
            check_put(checkpoint, expected_head=expected_head, head=head)
            plan = store.confirm(plan, rows, checkpoint, expected_head, manifest)
            refs, blob_rows, item_rows, written = plan.assign(count(next_blob), count(next_item))
            if blob_rows:
                conn.executemany("INSERT INTO blobs (id, value) VALUES (?, ?)", blob_rows)
            if item_rows:
                conn.executemany("INSERT INTO items (id, prev_id, value) VALUES (?, ?, ?)", item_rows)
            row, row_bytes = checkpoint_row(checkpoint, refs, plan.pending)
            try:
                conn.execute(_INSERT_CHECKPOINT, row)
            except sqlite3.IntegrityError as error:
                if "checkpoints.id" not in str(error):
                    raise
                raise duplicate_id(checkpoint) from error
        self._next_ids = (next_item + len(item_rows), next_blob + len(blob_rows))
        return refs, row, written + row_bytes, len(item_rows), len(blob_rows)

    # -- retention ---------------------------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> int:
        """``CheckpointSaver.delete_thread``, in one write transaction: the thread's checkpoints, and the items and
        blobs only they used. ``SaverTimeoutError`` when another writer held the file for ``timeout`` seconds."""
        return self._retain(thread_id, everything=True)

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        """``CheckpointSaver.prune``, in one write transaction: the checkpoints ``select_pruned`` picks, and the
        items and blobs no remaining checkpoint uses. The file keeps its size (SQLite reuses the free pages for later
        writes; ``VACUUM`` gives them back)."""
        check_prune(keep_last, before)
        return self._retain(thread_id, keep_last=keep_last, before=before)

    def _retain(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        before: datetime | None = None,
        everything: bool = False,
    ) -> int:
        store = self._store
        with self._locked() as conn:
            with write_transaction(conn, self._path, self._timeout):
                history = conn.execute(_SELECT_HISTORY, (thread_id,)).fetchall()
                retention = store.retention(
                    thread_id, history, keep_last=keep_last, before=before, everything=everything
                )
                if retention.ids:
                    _delete(conn, thread_id, retention)
            store.forget(thread_id, retention.ids, thread_gone=everything)
            return len(retention.ids)

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _locked(self) -> _Locked:
        return _Locked(self)


class _Locked:
    """Holds the saver's lock (with a timeout: a saver raises rather than waits forever) and yields its connection."""

    __slots__ = ("_saver",)

    def __init__(self, saver: SqliteSaver) -> None:
        self._saver = saver

    def __enter__(self) -> sqlite3.Connection:
        saver = self._saver
        if not saver._lock.acquire(blocking=False):
            _wait_for(saver)
        conn = saver._conn
        if conn is None:
            saver._lock.release()
            raise SaverClosedError(f"{saver!r} is closed; open a new SqliteSaver on {saver.path!r}")
        return conn

    def __exit__(self, *exc: object) -> None:
        self._saver._lock.release()


def _wait_for(saver: SqliteSaver) -> None:
    """Acquire the saver's lock that another thread is holding; count this call among its waiters meanwhile. The
    lock may have changed hands many times before the limit ran out, so the error says what is known: how long
    this call waited and how many were queued with it, not who held the lock."""
    limit = saver._lock_timeout
    with saver._waiting_lock:
        saver._waiting += 1
    started = time.monotonic()
    try:
        acquired = saver._lock.acquire(timeout=limit)
    finally:
        with saver._waiting_lock:
            waiting = saver._waiting
            saver._waiting -= 1
    if acquired:
        return
    waited = time.monotonic() - started
    queue = (
        "only this call was waiting for it"
        if waiting == 1
        else f"{waiting} calls, this one included, were waiting for it"
    )
    raise SaverTimeoutError(
        f"{saver!r}: this call waited {waited:.3f} s for the saver's connection (the limit is {limit:g} s, twice "
        f"the saver's timeout) and gave up: other threads of this process were using it, and when it gave up "
        f"{queue}"
    )


class _SqliteRows:
    """The reads of the incremental store, on the saver's connection (see ``Rows``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def head(self, thread_id: str) -> Row | None:
        row: Row | None = self._conn.execute(_SELECT_HEAD, (thread_id,)).fetchone()
        return row

    def by_id(self, checkpoint_id: str) -> Row | None:
        row: Row | None = self._conn.execute(_SELECT_BY_ID, (checkpoint_id,)).fetchone()
        return row

    def page(self, thread_id: str, before_seq: int | None, limit: int | None) -> builtins.list[Row]:
        bound = _MAX_SEQ if before_seq is None else before_seq
        return self._conn.execute(_SELECT_PAGE, (thread_id, bound, -1 if limit is None else limit)).fetchall()

    def newest_safe(self, thread_id: str, before_seq: int | None) -> Row | None:
        bound = _MAX_SEQ if before_seq is None else before_seq
        row: Row | None = self._conn.execute(_SELECT_SAFE, (thread_id, bound)).fetchone()
        return row

    def blobs(self, ids: builtins.list[int]) -> builtins.list[tuple[int, str]]:
        found: builtins.list[tuple[int, str]] = []
        for chunk in _chunks(ids, _IN_CHUNK):
            found += self._conn.execute(
                f"SELECT id, value FROM blobs WHERE id IN ({', '.join('?' * len(chunk))})", chunk
            ).fetchall()
        return found

    def walk(self, tail: int, count: int) -> builtins.list[tuple[int | None, str]]:
        return self._conn.execute(_WALK, (tail, count)).fetchall()

    def count_rows(self, blob_ids: builtins.list[int], item_ids: builtins.list[int]) -> int:
        row = self._conn.execute(_COUNT_ROWS, (json.dumps(blob_ids), json.dumps(item_ids))).fetchone()
        return int(row[0])


def _delete(conn: sqlite3.Connection, thread_id: str, retention: Retention) -> None:
    """Delete what ``retention`` says, in the caller's write transaction."""
    conn.execute(_DELETE_CHECKPOINTS, (thread_id, json.dumps(retention.seqs)))
    if retention.collect and (retention.dead_blobs or retention.dead_tails):
        conn.execute(_RAISE_FLOOR)
        conn.execute(_FREE_BLOBS, (json.dumps(retention.dead_blobs),))
        conn.execute(_FREE_ITEMS, (json.dumps(retention.live_tails), json.dumps(retention.dead_tails)))


def _chunks(items: builtins.list[int], size: int) -> Iterator[builtins.list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
