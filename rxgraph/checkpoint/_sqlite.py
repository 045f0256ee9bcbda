"""``SqliteSaver``: checkpoints in an SQLite file (stdlib ``sqlite3``), incremental and safe across processes.

Storage is incremental: a checkpoint row holds only a *manifest* (state key -> blob id, or -> the tail item and
length of a list), so writing a step costs what changed in it, not the length of the conversation:

- a list value (``FrozenList``, the value of an ``APPEND`` key) is a persistent linked list in ``items``; when the
  new list extends its parent checkpoint's list, only the new items are inserted, linked to the parent's tail;
- any other value is a row of ``blobs``; a value that is the very object the parent (or another recently stored or
  read checkpoint) had reuses that row.

Values are JSON through :class:`~rxgraph.checkpoint.Serde` (no pickle). Each ``put`` is one ``BEGIN
IMMEDIATE`` transaction that reads the thread's head row and writes only if it is the expected one, so the
compare-and-set holds across threads and processes sharing the file.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from .._frozen import FrozenList
from .._log import log
from ..errors import (
    CheckpointDecodeError,
    DecodeError,
    IncompatibleDatabaseError,
    InvalidArgumentError,
    SaverClosedError,
    SaverTimeoutError,
)
from ._base import Checkpoint, CheckpointSaver, check_limit, check_put, duplicate_id, new_checkpoint
from ._serde import Serde, default_serde, json_text, parse_json_text
from ._sqlite_schema import Migration, prepare
from ._sqlite_transaction import write_transaction

__all__ = ["SqliteSaver", "SqliteSaverStats"]


_K = TypeVar("_K")
_V = TypeVar("_V")

_Ref: TypeAlias = int | tuple[int | None, int]
"""Where a stored value lives: a blob id, or (tail item id, length) for a list (tail None for an empty list)."""

_Row: TypeAlias = tuple[Any, ...]

_MISSING: Any = object()
_MAX_SEQ = 2**63 - 1
_IN_CHUNK = 500  # ids per "IN (...)" query, well under SQLite's limit on bound parameters

_COLUMNS = (
    "id, thread_id, seq, parent_id, node, next, run_id, source, created_at, safe, unsafe_reason, rolled_back_from, "
    "manifest, error"
)
_SELECT_HEAD = f"SELECT {_COLUMNS} FROM checkpoints WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
_SELECT_HEAD_ID = "SELECT id, seq FROM checkpoints WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
_SELECT_BY_ID = f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?"
_SELECT_PAGE = f"SELECT {_COLUMNS} FROM checkpoints WHERE thread_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
_SELECT_SAFE = (
    f"SELECT {_COLUMNS} FROM checkpoints WHERE thread_id = ? AND safe = 1 AND seq < ? ORDER BY seq DESC LIMIT 1"
)
_INSERT_CHECKPOINT = f"INSERT INTO checkpoints ({_COLUMNS}) VALUES ({', '.join('?' * _COLUMNS.count(','))}, ?)"
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
class SqliteSaverStats:
    """Counters of one ``SqliteSaver`` since it was opened (for tests, benchmarks and monitoring); ``stats`` gives
    a copy.

    ``bytes_written`` is the size of the payload a saver inserted: the characters of every JSON value, manifest and
    text column, plus 8 per integer column. SQLite adds its own page and index overhead on top.
    """

    puts: int = 0
    bytes_written: int = 0
    items_written: int = 0
    blobs_written: int = 0
    checkpoints_decoded: int = 0
    items_decoded: int = 0
    blobs_decoded: int = 0


class _Lru(Generic[_K, _V]):
    """A small least-recently-used map (callers hold the saver's lock)."""

    __slots__ = ("_capacity", "_data")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._data: OrderedDict[_K, _V] = OrderedDict()

    def get(self, key: _K, default: _V | None = None) -> _V | None:
        data = self._data
        value = data.get(key, _MISSING)
        if value is _MISSING:
            return default
        data.move_to_end(key)
        return value  # type: ignore[no-any-return]

    def put(self, key: _K, value: _V) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        if len(data) > self._capacity:
            data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()


class _Entry:
    """A checkpoint this saver stored or read, with where each of its values lives."""

    __slots__ = ("checkpoint", "refs")

    def __init__(self, checkpoint: Checkpoint, refs: dict[str, _Ref]) -> None:
        self.checkpoint = checkpoint
        self.refs = refs


class SqliteSaver(CheckpointSaver):
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
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        # Waits for another thread's call, which itself may wait up to `timeout` on SQLite's lock.
        self._lock = threading.Lock()
        self._lock_timeout = 2 * timeout
        self._waiting = 0  # calls blocked on _lock right now (counted only once a call has to wait)
        self._waiting_lock = threading.Lock()
        self._by_id: _Lru[str, _Entry] = _Lru(cache_size)
        self._heads: _Lru[str, str] = _Lru(cache_size)  # thread id -> id of the newest head this saver saw
        self._blob_values: _Lru[int, Any] = _Lru(4 * cache_size)
        self._list_values: _Lru[int, FrozenList[Any]] = _Lru(4 * cache_size)  # tail item id -> the list
        # id(value) -> (value, ref): finds the row of a value this saver stored or read, by identity. Holding the
        # value keeps its id from being reused while it is in the map.
        self._known: _Lru[int, tuple[Any, _Ref]] = _Lru(4 * cache_size)
        self._counters = SqliteSaverStats()

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
            for cache in (self._by_id, self._heads, self._blob_values, self._list_values, self._known):
                cache.clear()
        if conn is not None:
            conn.close()

    def __enter__(self) -> SqliteSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteSaver({self._path!r})"

    # -- the contract ------------------------------------------------------------------------------------------

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        with self._locked() as conn:
            if checkpoint_id is None:
                # One indexed query even on a cache hit: another process may have moved the head.
                row = conn.execute(_SELECT_HEAD, (thread_id,)).fetchone()
                if row is None:
                    return None
                previous = self._heads.get(thread_id)
                entry = self._entry_for(row, self._by_id.get(previous) if previous is not None else None)
                self._heads.put(thread_id, row[0])
                return entry.checkpoint
            # Stored checkpoints never change, so a cached one is current.
            cached = self._by_id.get(checkpoint_id)
            if cached is None:
                row = conn.execute(_SELECT_BY_ID, (checkpoint_id,)).fetchone()
                if row is None:
                    return None
                cached = self._entry_for(row, None)
            return cached.checkpoint if cached.checkpoint.thread_id == thread_id else None

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        check_limit(limit)
        with self._locked() as conn:
            bound = _MAX_SEQ if before_seq is None else before_seq
            rows = conn.execute(_SELECT_PAGE, (thread_id, bound, -1 if limit is None else limit)).fetchall()
            # Oldest first, so that each list is read as an extension of the previous checkpoint's (usually a few
            # items) rather than from scratch.
            result: builtins.list[Checkpoint] = []
            hint: _Entry | None = None
            for row in reversed(rows):
                hint = self._entry_for(row, hint)
                result.append(hint.checkpoint)
            result.reverse()
            return result

    def threads(self) -> builtins.list[str]:
        with self._locked() as conn:
            return [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        """The newest safe checkpoint (``seq < before_seq`` when given), found with one indexed query.

        A checkpoint that cannot be decoded is skipped with a warning: it cannot be the base of a new turn.
        """
        with self._locked() as conn:
            bound = _MAX_SEQ if before_seq is None else before_seq
            while True:
                row = conn.execute(_SELECT_SAFE, (thread_id, bound)).fetchone()
                if row is None:
                    return None
                try:
                    return self._entry_for(row, None).checkpoint
                except CheckpointDecodeError as error:
                    log.warning("thread %r: skipping checkpoint %s (seq %d): %s", thread_id, row[0], row[2], error)
                    bound = row[2]

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        thread_id = checkpoint.thread_id
        values = checkpoint.values
        with self._locked() as conn:
            parent = self._parent_of(conn, checkpoint.parent_id)
            refs, blobs, chains = self._plan(values, parent)
            written = 0
            item_rows: builtins.list[tuple[int, int | None, str]] = []
            with write_transaction(conn, self._path, self._timeout):
                check_put(
                    checkpoint,
                    expected_head=expected_head,
                    head=conn.execute(_SELECT_HEAD_ID, (thread_id,)).fetchone(),
                )  # a duplicate id is refused by the table's unique index, below: one query less per put
                for key, text, _ in blobs:
                    refs[key] = _row_id(conn.execute("INSERT INTO blobs (value) VALUES (?)", (text,)))
                    written += len(text) + 8
                if chains:
                    next_id = conn.execute("SELECT IFNULL(MAX(id), 0) + 1 FROM items").fetchone()[0]
                    for key, tail, texts, value in chains:
                        for text in texts:
                            item_rows.append((next_id, tail, text))
                            written += len(text) + 16
                            tail = next_id
                            next_id += 1
                        refs[key] = (tail, len(value))
                    conn.executemany("INSERT INTO items (id, prev_id, value) VALUES (?, ?, ?)", item_rows)
                refs = {key: refs[key] for key in values}  # the manifest keeps the state's key order
                row = _checkpoint_row(checkpoint, refs)
                written += sum(len(v) if isinstance(v, str) else 8 for v in row if v is not None)
                try:
                    conn.execute(_INSERT_CHECKPOINT, row)
                except sqlite3.IntegrityError as error:
                    if "checkpoints.id" not in str(error):
                        raise
                    raise duplicate_id(checkpoint) from error
            # Only now (committed) may the new rows be referred to by later writes.
            self._remember(_Entry(checkpoint, refs))
            self._heads.put(thread_id, checkpoint.id)
            counters = self._counters
            counters.puts += 1
            counters.bytes_written += written
            counters.items_written += len(item_rows)
            counters.blobs_written += len(blobs)
            return checkpoint

    # -- writing -----------------------------------------------------------------------------------------------

    def _parent_of(self, conn: sqlite3.Connection, parent_id: str | None) -> _Entry | None:
        """The parent checkpoint with its refs: from the cache, else read from disk (once)."""
        if parent_id is None:
            return None
        entry = self._by_id.get(parent_id)
        if entry is not None:
            return entry
        row = conn.execute(_SELECT_BY_ID, (parent_id,)).fetchone()
        if row is None:
            return None
        try:
            return self._entry_for(row, None)
        except CheckpointDecodeError as error:
            # Not fatal for the write: its values are then stored in full instead of as changes.
            log.warning("parent checkpoint %s cannot be read, storing the new one in full: %s", parent_id, error)
            return None

    def _plan(
        self, values: Mapping[str, Any], parent: _Entry | None
    ) -> tuple[
        dict[str, _Ref],
        builtins.list[tuple[str, str, Any]],
        builtins.list[tuple[str, int | None, builtins.list[str], FrozenList[Any]]],
    ]:
        """Decide, key by key, what a put reuses and what it writes; encode what it writes.

        Returns the reused refs, the blobs to insert ``(key, text, value)`` and the list items to insert
        ``(key, tail to link to, texts, list)``.
        """
        serde = self._serde
        known = self._known
        parent_values: Mapping[str, Any] = parent.checkpoint.values if parent is not None else {}
        refs: dict[str, _Ref] = {}
        blobs: builtins.list[tuple[str, str, Any]] = []
        chains: builtins.list[tuple[str, int | None, builtins.list[str], FrozenList[Any]]] = []
        for key, value in values.items():
            old = parent_values.get(key, _MISSING)
            if value is old:
                refs[key] = parent.refs[key]  # type: ignore[union-attr]
                continue
            seen = known.get(id(value))
            if seen is not None and seen[0] is value:
                refs[key] = seen[1]
                continue
            if type(value) is not FrozenList:
                blobs.append((key, serde.dumps(value, key=key), value))
                continue
            start, tail = 0, None
            if type(old) is FrozenList and len(old) <= len(value):
                old_ref = parent.refs[key]  # type: ignore[union-attr]
                # Shared storage proves the prefix for free; otherwise (the parent was read from disk, or the list
                # was rebuilt) compare item by item, which costs less than rewriting the history.
                if isinstance(old_ref, tuple) and (
                    value.shares_prefix_with(old) or _has_prefix(value, old, serde, key)
                ):
                    start, tail = len(old), old_ref[0]
            texts = [serde.dumps(value[i], key=key, index=i) for i in range(start, len(value))]
            chains.append((key, tail, texts, value))
        return refs, blobs, chains

    def _remember(self, entry: _Entry) -> None:
        """Cache a stored or decoded checkpoint and make its values findable by identity and by row."""
        self._by_id.put(entry.checkpoint.id, entry)
        values = entry.checkpoint.values
        known = self._known
        for key, ref in entry.refs.items():
            value = values[key]
            known.put(id(value), (value, ref))
            if isinstance(ref, tuple):
                if ref[0] is not None:
                    self._list_values.put(ref[0], value)
            else:
                self._blob_values.put(ref, value)

    # -- reading -----------------------------------------------------------------------------------------------

    def _entry_for(self, row: _Row, hint: _Entry | None) -> _Entry:
        """The cached entry of a checkpoint row, or the row decoded (and cached). ``hint``: a checkpoint whose lists
        this one probably extends (read first, so only the new items are fetched)."""
        cached = self._by_id.get(row[0])
        if cached is not None:
            return cached
        entry = self._decode(row, hint)
        self._remember(entry)
        return entry

    def _decode(self, row: _Row, hint: _Entry | None) -> _Entry:
        cid, thread_id, seq, parent_id, node, next_json, run_id, source, created_at, safe, unsafe, rolled, manifest = (
            row[:13]
        )
        error = row[13]
        try:
            refs_json = parse_json_text(manifest)
            if type(refs_json) is not dict:
                raise DecodeError(f"the manifest is not a JSON object: {manifest[:80]!r}")
            blob_ids = [ref for ref in refs_json.values() if type(ref) is int]
            blob_values = self._read_blobs(blob_ids) if blob_ids else {}
            values: dict[str, Any] = {}
            refs: dict[str, _Ref] = {}
            for key, ref in refs_json.items():
                if type(ref) is int:
                    values[key] = blob_values[ref]
                    refs[key] = ref
                    continue
                if not (type(ref) is list and len(ref) == 2 and type(ref[1]) is int and ref[1] >= 0):
                    raise DecodeError(f"key {key!r} has an invalid manifest entry {ref!r}")
                tail, length = ref
                if not (tail is None and length == 0) and type(tail) is not int:
                    raise DecodeError(f"key {key!r} has an invalid manifest entry {ref!r}")
                values[key] = self._read_list(tail, length, _list_hint(hint, key))
                refs[key] = (tail, length)
            checkpoint = new_checkpoint(
                id=cid,
                thread_id=thread_id,
                seq=seq,
                parent_id=parent_id,
                values=MappingProxyType(values),
                node=node,
                next=tuple(json.loads(next_json)),
                run_id=run_id,
                source=source,
                created_at=datetime.fromisoformat(created_at),
                safe=bool(safe),
                unsafe_reason=unsafe,
                rolled_back_from=rolled,
                error=error,
            )
        except sqlite3.Error:
            raise  # a lock or I/O problem is not a damaged checkpoint: never let it be skipped as one
        except Exception as error:
            raise CheckpointDecodeError(
                f"thread {thread_id!r}: checkpoint {cid!r} (seq {seq}) cannot be decoded: {error}",
                thread_id=thread_id,
                checkpoint_id=cid,
            ) from error
        self._counters.checkpoints_decoded += 1
        return _Entry(checkpoint, refs)

    def _read_blobs(self, ids: builtins.list[int]) -> dict[int, Any]:
        pool = self._blob_values
        found: dict[int, Any] = {}
        missing: builtins.list[int] = []
        for blob_id in ids:
            value = pool.get(blob_id, _MISSING)
            if value is _MISSING:
                missing.append(blob_id)
            else:
                found[blob_id] = value
        conn = self._conn
        assert conn is not None
        for chunk in _chunks(sorted(set(missing)), _IN_CHUNK):
            rows = conn.execute(
                f"SELECT id, value FROM blobs WHERE id IN ({', '.join('?' * len(chunk))})", chunk
            ).fetchall()
            decoded = self._serde.loads_many(row[1] for row in rows)
            for (blob_id, _), value in zip(rows, decoded, strict=True):
                found[blob_id] = value
            self._counters.blobs_decoded += len(rows)
        for blob_id in missing:
            if blob_id not in found:
                raise DecodeError(f"blob {blob_id} is missing")
        return found

    def _read_list(self, tail: int | None, length: int, hint: tuple[int, int, FrozenList[Any]] | None) -> Any:
        if length == 0:
            return FrozenList()
        assert tail is not None
        pooled = self._list_values.get(tail)
        if pooled is not None and len(pooled) == length:
            return pooled
        if hint is not None:
            hint_tail, hint_length, hint_list = hint
            if hint_length < length:
                rows = self._walk(tail, length - hint_length)
                if len(rows) == length - hint_length and rows[0][0] == hint_tail:
                    return hint_list.extended(self._serde.loads_many(row[1] for row in rows))
        rows = self._walk(tail, length)
        if len(rows) != length or rows[0][0] is not None:
            raise DecodeError(f"the list ending at item {tail} does not have the {length} items its manifest says")
        return FrozenList(self._serde.loads_many(row[1] for row in rows))

    def _walk(self, tail: int, count: int) -> builtins.list[tuple[int | None, str]]:
        conn = self._conn
        assert conn is not None
        rows: builtins.list[tuple[int | None, str]] = conn.execute(_WALK, (tail, count)).fetchall()
        self._counters.items_decoded += len(rows)
        return rows

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


def _checkpoint_row(checkpoint: Checkpoint, refs: Mapping[str, _Ref]) -> tuple[Any, ...]:
    # Keys as they are, not as \u escapes: json.loads would join an escaped surrogate pair into one code point.
    manifest = json_text({key: list(ref) if isinstance(ref, tuple) else ref for key, ref in refs.items()})
    return (
        checkpoint.id,
        checkpoint.thread_id,
        checkpoint.seq,
        checkpoint.parent_id,
        checkpoint.node,
        json.dumps(list(checkpoint.next), separators=(",", ":")),
        checkpoint.run_id,
        checkpoint.source,
        checkpoint.created_at.isoformat(),
        int(checkpoint.safe),
        checkpoint.unsafe_reason,
        checkpoint.rolled_back_from,
        manifest,
        checkpoint.error,
    )


def _list_hint(hint: _Entry | None, key: str) -> tuple[int, int, FrozenList[Any]] | None:
    if hint is None:
        return None
    ref = hint.refs.get(key)
    if not isinstance(ref, tuple) or ref[0] is None:
        return None
    value = hint.checkpoint.values.get(key)
    return (ref[0], ref[1], value) if type(value) is FrozenList else None


def _has_prefix(value: FrozenList[Any], prefix: FrozenList[Any], serde: Serde, key: str) -> bool:
    """Whether the first ``len(prefix)`` items of ``value`` are stored exactly as ``prefix``'s are, so its rows can
    be reused: each item is the very same object or encodes to the very same text. Equality is not enough: ``True ==
    1``, ``1.0 == 1``, ``-0.0 == 0.0`` and ``(1, 2) == FrozenList([1, 2])``, and reusing the parent's row would read
    back the parent's item."""
    dumps = serde.dumps
    for index, (a, b) in enumerate(zip(value, prefix)):  # noqa: B905 - value is the longer one
        if a is not b and dumps(a, key=key, index=index) != dumps(b, key=key, index=index):
            return False
    return True


def _row_id(cursor: sqlite3.Cursor) -> int:
    row_id = cursor.lastrowid
    assert row_id is not None
    return row_id


def _chunks(items: builtins.list[int], size: int) -> Iterator[builtins.list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
