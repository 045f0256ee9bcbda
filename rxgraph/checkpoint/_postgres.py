"""``PostgresSaver``: checkpoints in PostgreSQL, incremental, shared by every process that connects to the database.

Storage is incremental, through the same store as ``SqliteSaver`` (:mod:`rxgraph.checkpoint._incremental`): a
step writes its new list items and changed values, not the conversation again. The schema, and why each table is
there, is described in :mod:`rxgraph.checkpoint._postgres_schema`; the SQL in
:mod:`rxgraph.checkpoint._postgres_database`, which is imported (with psycopg) only when a saver is opened.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidArgumentError, SaverClosedError
from ._base import Checkpoint
from ._incremental import IncrementalSaver, IncrementalStats, IncrementalStore
from ._run_locks import RunLocks
from ._serde import Serde, default_serde
from .contract import check_limit, check_prune

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from ._postgres_schema import Migration

__all__ = ["PostgresSaver", "PostgresSaverStats"]


@dataclass(slots=True)
class PostgresSaverStats(IncrementalStats):
    """Counters of one ``PostgresSaver`` since it was opened (for tests, benchmarks and monitoring); ``stats`` gives
    a copy.

    ``bytes_written`` is the size of the payload a saver inserted: the characters of every JSON value, manifest and
    text column, plus 8 per integer column. PostgreSQL adds its own row, page and index overhead on top.
    """


class PostgresSaver(IncrementalSaver):
    """A checkpoint saver on a PostgreSQL database; many threads and many processes may share one database.

    Each ``put`` is one transaction whose compare-and-set is SQL: it moves the thread's row in ``heads`` only if it
    still names the expected head, and that row's lock makes the writers of one thread take turns (writers of other
    threads do not wait). Reads take a connection of the pool each and wait for no one. Values are JSON through
    :class:`~rxgraph.checkpoint.Serde` (no pickle); statements are parameterised.

    ``schema_version`` is the version of the saver's schema once opened (created or migrated if needed). Close the
    saver (or use it as a context manager) when done; a closed saver raises ``SaverClosedError``. Methods raise what
    :class:`CheckpointSaver` says; ``SaverTimeoutError`` when no connection of the pool was free for ``timeout``
    seconds, a lock stayed taken or a statement ran that long, or the server did not answer at all (a stopped server
    process, a network that fails silently: the connection is then dropped, a second after ``timeout``); and
    psycopg's own errors when the server cannot be reached.

    No wait for the server is without that deadline, the run exclusivity's included (see
    :mod:`rxgraph.checkpoint._postgres_locks`): a turn that would wait on a server that stopped answering fails with
    ``SaverTimeoutError`` instead, and the next one uses a new connection. The saver names its connections in
    ``pg_stat_activity`` (``rxgraph checkpoints (<schema>)``, ``rxgraph run locks (<schema>)``, ``rxgraph run
    listener (<schema>)``) unless the connection string names its application.

    Needs the ``postgres`` extra (``pip install 'rxgraph[postgres]'``: psycopg 3 and psycopg_pool); importing
    rxgraph does not import them.
    """

    def __init__(
        self,
        conninfo_or_pool: str | ConnectionPool[Any],
        *,
        serde: Serde | None = None,
        timeout: float = 5.0,
        schema: str = "rxgraph",
        cache_size: int = 256,
        max_connections: int = 10,
        migrations: Mapping[int, Migration] | None = None,
        poll_interval: float = 0.5,
    ) -> None:
        """Connect, and check (create, or migrate) the saver's schema.

        Args:
            conninfo_or_pool: a libpq connection string (``"postgresql://user@host/db"``, ``"host=... dbname=..."``),
                for which the saver opens a pool of its own and closes it on ``close``; or a
                ``psycopg_pool.ConnectionPool`` of yours, which the saver uses and leaves open. Its connections
                must use PostgreSQL's default isolation level (read committed); in autocommit mode a call needs no
                BEGIN and COMMIT of its own (a write is usually one statement).
            serde: the type registry for values; default :data:`~rxgraph.checkpoint.default_serde`.
            timeout: seconds a call waits for a connection of the pool, for a lock another transaction holds, for a
                statement (half a second more), and for a server that does not answer at all (a second more, then
                the connection is dropped), before it raises ``SaverTimeoutError``. On a pool you give, the lock
                and statement limits are not set on its connections (they are yours): a long wait there ends when
                the server does not answer in time, with the connection dropped.
            schema: the PostgreSQL schema that holds the saver's tables; created when missing. Savers on different
                schemas of one database do not see each other's threads.
            cache_size: how many checkpoints (and ``4 * cache_size`` values) are kept in memory.
            max_connections: the size of the saver's own pool (ignored for a pool you give).
            migrations: ``{version: callable(connection)}``, overriding the registered schema migrations.
            poll_interval: seconds between the checks a run waiting for a thread held in another process makes
                (a release is heard at once; a process that died frees its threads at once, and a waiting run sees
                that within this time).

        Raises:
            ConfigurationError: psycopg or psycopg_pool is not installed (the ``postgres`` extra).
            InvalidArgumentError: ``timeout``, ``cache_size``, ``max_connections``, ``poll_interval`` or ``schema``
                has a value it cannot have (``argument`` names it); nothing was opened.
            InvalidTypeError: ``conninfo_or_pool`` is neither a string nor a ``ConnectionPool``.
            IncompatibleDatabaseError: the schema holds tables of the saver's names that are not an rxgraph
                checkpoint store, has a newer version, could not be migrated, or the database is not UTF-8
                (``path`` is the connection string without its password); nothing was written to it.
            SaverTimeoutError: another process held the schema's lock (creating or migrating it) for ``timeout``
                seconds.
            psycopg.OperationalError: the server could not be reached, or refused the connection.
        """
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout}", argument="timeout")
        if not poll_interval > 0:
            raise InvalidArgumentError(
                f"poll_interval must be > 0 seconds, got {poll_interval}", argument="poll_interval"
            )
        if cache_size < 1:
            raise InvalidArgumentError(f"cache_size must be >= 1, got {cache_size}", argument="cache_size")
        if max_connections < 1:
            raise InvalidArgumentError(
                f"max_connections must be >= 1, got {max_connections}", argument="max_connections"
            )
        if not isinstance(schema, str) or not schema or "\x00" in schema:
            raise InvalidArgumentError(f"schema must be a non-empty name, got {schema!r}", argument="schema")
        try:
            from ._postgres_database import Database
        except ImportError as error:
            raise ConfigurationError(
                f"PostgresSaver needs the postgres extra (pip install 'rxgraph[postgres]'): {error}"
            ) from error
        self._schema = schema
        self._poll_interval = poll_interval
        self._locks: RunLocks | None = None
        self._locks_lock = threading.Lock()
        self._closed = False
        self._db = Database(
            conninfo_or_pool, schema=schema, timeout=timeout, max_connections=max_connections, migrations=migrations
        )
        self.schema_version: int = self._db.schema_version
        self._counters = PostgresSaverStats()
        self._store = IncrementalStore(
            default_serde if serde is None else serde, cache_size, self._counters, self._db.errors
        )

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def where(self) -> str:
        """The database, as its connection string without the password (for messages and logs)."""
        return self._db.where

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of the saver's tables."""
        return self._schema

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool the saver takes its connections from: the one it opened for a connection string, or
        the one you gave it. For records of your own kept beside the checkpoints, in the same database (the
        server keeps its thread and run records this way); its connections are in autocommit mode unless your pool
        says otherwise. Leave closing it to the saver (its own closes with it).

        Raises:
            SaverClosedError: the saver was closed.
        """
        return self._db.pool

    @property
    def stats(self) -> PostgresSaverStats:
        """This saver's counters since it was opened (still readable once it is closed).

        Returns:
            A copy, which later calls do not change.
        """
        return replace(self._counters)

    def run_locks(self) -> RunLocks:
        """Run exclusivity shared with every process using this saver's schema: PostgreSQL advisory locks held on a
        connection of their own, and LISTEN/NOTIFY (see :mod:`rxgraph.checkpoint._postgres_locks`). Opened on first
        use (graphs ask for it on their first run), closed with the saver.

        Raises:
            SaverClosedError: the saver was closed.
        """
        with self._locks_lock:
            if self._locks is None:
                if self._closed:
                    raise SaverClosedError(f"{self!r} is closed; open a new one")
                from ._postgres_locks import PostgresRunLocks

                conninfo, kwargs = self._db.conninfo
                self._locks = PostgresRunLocks(
                    conninfo,
                    schema=self._schema,
                    watchdog=self._db.watchdog,
                    poll_interval=self._poll_interval,
                    connect_kwargs=kwargs,
                    heads=self._db.claimed,
                )
            return self._locks

    def close(self) -> None:
        """Stop taking calls and drop the caches; free the threads this process's runs hold for run exclusivity;
        close the pool when the saver opened it (calls in progress end first). A pool you gave stays open. Later
        calls raise ``SaverClosedError``; closing again does nothing. Raises nothing."""
        with self._locks_lock:
            self._closed, locks, self._locks = True, self._locks, None
        if locks is not None:
            locks.close()
        self._db.close()
        self._store.clear()
        self._db.claimed.clear()

    def __repr__(self) -> str:
        return f"PostgresSaver({self._db.where!r}, schema={self._schema!r})"

    # -- the contract ------------------------------------------------------------------------------------------

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """Read the head of ``thread_id`` (or its checkpoint ``checkpoint_id``) with one query on the primary key
        (or on ``id``); only rows this saver has not cached yet are read after it. The first read of a head after
        a run of this process claimed the thread needs no query: the claim read it (see ``run_locks``).

        Args:
            thread_id: the thread to read.
            checkpoint_id: which of its checkpoints; ``None`` means the head.

        Returns:
            That checkpoint; ``None`` if there is none (an id of another thread's, or one pruned, included).

        Raises:
            CheckpointDecodeError: its rows are damaged, or hold a model not registered in this process.
            SaverClosedError: after ``close``.
            SaverTimeoutError: the pool had no connection free within ``timeout``.
        """
        db = self._db
        with db.rows(head=db.claimed.take(thread_id)) if checkpoint_id is None else db.rows() as rows:
            return self._store.get(rows, thread_id, checkpoint_id)

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        """Read a page of a thread's history, newest first, in one query; each list is read as an extension of the
        older checkpoint's, so a page costs its new items, not its length times the conversation's.

        Args:
            thread_id: the thread to read (an unknown one reads as empty).
            limit: the page's size at most; ``None`` for no limit.
            before_seq: the page starts below this seq; ``None`` for the head.

        Returns:
            The checkpoints of the page (after a prune, seqs have gaps).

        Raises:
            InvalidArgumentError: a negative ``limit`` (``argument="limit"``).
            CheckpointDecodeError: a row of the page is damaged.
            SaverClosedError: after ``close``.
            SaverTimeoutError: the pool had no connection free within ``timeout``.
        """
        check_limit(limit)
        with self._db.rows() as rows:
            return self._store.list(rows, thread_id, limit, before_seq)

    def threads(self) -> builtins.list[str]:
        """The ids of the threads in the saver's schema (one row of ``heads`` each).

        Returns:
            Them, unordered.

        Raises:
            SaverClosedError: after ``close``.
            SaverTimeoutError: the pool had no connection free within ``timeout``.
        """
        return self._db.threads()

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        """Find where a new user turn may start: one seek on the partial index of safe checkpoints. One whose rows
        are damaged is passed over, with a warning (it could not be a turn's base anyway).

        Args:
            thread_id: the thread to look in.
            before_seq: look below this seq only; ``None`` for the whole thread.

        Returns:
            The newest safe (and readable) checkpoint there, or ``None``.

        Raises:
            SaverClosedError: after ``close``.
            SaverTimeoutError: the pool had no connection free within ``timeout``.
        """
        with self._db.rows() as rows:
            return self._store.latest_safe(rows, thread_id, before_seq)

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        """Append ``checkpoint`` to its thread atomically: the UPDATE of the thread's ``heads`` row (an INSERT for a
        new thread) is the compare-and-set, and the new items, blobs and row are inserted only if it moved the head.
        Only what changed since the parent is encoded and written. Usually all of it is one statement, so one round
        trip; a put that reuses rows of another checkpoint than the head's (a rewind's), or that finds the head not
        as expected, is a transaction of a few.

        Args:
            checkpoint: the thread's next checkpoint (seq: the head's plus one, 1 to start a thread; a new id).
            expected_head: the head it was built on, ``None`` to start the thread.

        Returns:
            ``checkpoint``, now the head.

        Raises:
            CheckpointConflictError: another writer moved the head first; no row was written.
            InvalidCheckpointError: a wrong seq, or an id the saver already holds (in any thread).
            SerializationError: a value the serde cannot store exactly; no row was written.
            SaverClosedError: after ``close``.
            SaverTimeoutError: no connection free, or the head row held by another writer, within ``timeout``.
        """
        store = self._store
        db = self._db
        claimed = db.claimed
        claimed.written(checkpoint.thread_id)  # a head a claim read is not the head any more, or may not be
        try:
            with db.connection() as conn:
                rows = db.rows_on(conn)
                plan = store.plan(checkpoint, store.parent(rows, checkpoint.parent_id), expected_head)
                refs, row, written, items, blobs = db.put(
                    conn,
                    checkpoint,
                    expected_head,
                    plan,
                    lambda plan, head_manifest: store.confirm(plan, rows, checkpoint, expected_head, head_manifest),
                )
        finally:
            claimed.written(checkpoint.thread_id)  # and one a claim read meanwhile may be older than this write
        # Only now (committed) may the new rows be referred to by later writes.
        store.stored(checkpoint, refs, row, written=written, items=items, blobs=blobs)
        return checkpoint

    # -- retention ---------------------------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> int:
        """Remove a thread: its head row, its checkpoints, and the items and blobs only they used, in one
        transaction that waits for (and makes wait) the thread's writers, and no one else.

        Args:
            thread_id: the thread; an unknown one is left as it is.

        Returns:
            How many checkpoints were removed.

        Raises:
            SaverClosedError: the saver was closed.
            SaverTimeoutError: no connection was free, or a writer of the thread held it, for ``timeout`` seconds;
                nothing changed.
        """
        store = self._store
        claimed = self._db.claimed
        claimed.written(thread_id)
        try:
            retention = self._db.retain(
                thread_id, lambda history: store.retention(thread_id, history, everything=True), delete_head=True
            )
        finally:
            claimed.written(thread_id)
        store.forget(thread_id, retention.ids, thread_gone=True)
        return len(retention.ids)

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        """Drop a thread's older checkpoints (the rule is ``select_pruned``'s: the head and the newest safe one
        stay), and the items and blobs no remaining checkpoint uses, in one transaction that holds the thread's head
        row. PostgreSQL's autovacuum gives the space back to the tables.

        Args:
            thread_id: the thread; an unknown one has nothing to drop.
            keep_last: keep the newest this many; ``None``: decide by ``before`` alone.
            before: keep those created at or after this time (with a time zone); ``None``: by ``keep_last`` alone.

        Returns:
            How many checkpoints were dropped.

        Raises:
            InvalidArgumentError: neither ``keep_last`` nor ``before``, a negative ``keep_last``, or a ``before``
                without a time zone.
            InvalidTypeError: ``keep_last`` is not an int, or ``before`` not a datetime.
            SaverClosedError: the saver was closed.
            SaverTimeoutError: no connection was free, or a writer of the thread held it, for ``timeout`` seconds;
                nothing changed.
        """
        check_prune(keep_last, before)
        store = self._store
        retention = self._db.retain(
            thread_id,
            lambda history: store.retention(thread_id, history, keep_last=keep_last, before=before),
            delete_head=False,
        )
        store.forget(thread_id, retention.ids)
        return len(retention.ids)
