"""What ``PostgresSaver`` says to PostgreSQL: its connection pool, its SQL, the transaction of a ``put``, and the
deadline every statement runs under.

Imported only when a ``PostgresSaver`` is opened, so that ``import rxgraph`` works without psycopg.
"""

from __future__ import annotations

import builtins
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from typing import Any, Final, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from .._log import log
from ..errors import CheckpointConflictError, InvalidTypeError, SaverClosedError, SaverTimeoutError
from ._base import Checkpoint
from ._incremental import COLUMNS, Plan, Ref, Retention, Row, checkpoint_row
from ._postgres_schema import Migration, prepare
from .contract import check_put, duplicate_id

__all__ = ["GRACE", "ClaimedHeads", "Database", "PostgresRows", "Watchdog", "Watched", "named", "server_limits"]

GRACE = 1.0
"""Seconds a server that does not answer at all is given beyond the saver's ``timeout`` before its connection is
dropped: time for PostgreSQL's own ``lock_timeout`` and ``statement_timeout`` (which keep the connection, and say
what waited) to answer first."""

_MAX_SEQ = 2**63 - 1

_TYPES = {"seq": "bigint", "safe": "boolean"}  # of the checkpoint columns; the others are text
_COLUMN_NAMES = tuple(name.strip() for name in COLUMNS.split(","))

# The inserts of a put in one statement, each made only if the CTE `moved` (its compare-and-set) returned a row.
_INSERTED = f"""new_blobs AS (
            INSERT INTO {{s}}.blobs (id, value)
            SELECT * FROM unnest(%(blob_ids)s::bigint[], %(blob_texts)s::text[]) WHERE EXISTS (SELECT FROM moved)
        ), new_items AS (
            INSERT INTO {{s}}.items (id, prev_id, value)
            SELECT * FROM unnest(%(item_ids)s::bigint[], %(item_prevs)s::bigint[], %(item_texts)s::text[])
            WHERE EXISTS (SELECT FROM moved)
        ), new_checkpoint AS (
            INSERT INTO {{s}}.checkpoints ({COLUMNS})
            SELECT {", ".join(f"%(c_{name})s::{_TYPES.get(name, 'text')}" for name in _COLUMN_NAMES)}
            WHERE EXISTS (SELECT FROM moved)
        )
        SELECT EXISTS (SELECT FROM moved),
            (SELECT array_agg(nextval({{row_ids}})) FROM generate_series(1, %(refill)s))"""

# {s} is the saver's schema, {row_ids} the name of its sequence (a string literal).
_STATEMENTS: dict[str, LiteralString] = {
    "head": f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE thread_id = %s ORDER BY seq DESC LIMIT 1",
    "by_id": f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE id = %s",
    "page": f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE thread_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s",
    # `safe` in the WHERE clause lets PostgreSQL use the partial index on (thread_id, seq) WHERE safe.
    "newest_safe": (
        f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE thread_id = %s AND safe AND seq < %s ORDER BY seq DESC LIMIT 1"
    ),
    "blobs": "SELECT id, value FROM {s}.blobs WHERE id = ANY(%s)",
    # Walks a list back from its tail, at most %s items; ordered oldest first. The depth bound also stops a damaged
    # (cyclic) chain.
    "walk": """
        WITH RECURSIVE chain(id, prev_id, value, depth) AS (
            SELECT id, prev_id, value, 1 FROM {s}.items WHERE id = %s
            UNION ALL
            SELECT items.id, items.prev_id, items.value, chain.depth + 1
            FROM {s}.items AS items JOIN chain ON items.id = chain.prev_id
            WHERE chain.depth < %s
        )
        SELECT prev_id, value FROM chain ORDER BY depth DESC""",
    "threads": "SELECT thread_id FROM {s}.heads",
    "count_rows": """
        SELECT (SELECT count(*) FROM {s}.blobs WHERE id = ANY(%s))
            + (SELECT count(*) FROM {s}.items WHERE id = ANY(%s))""",
    "reserve": "SELECT array_agg(nextval({row_ids})) FROM generate_series(1, %s)",
    # Retention takes the thread's heads row first, as a put does: the two take turns on a thread.
    "lock_head": "SELECT 1 FROM {s}.heads WHERE thread_id = %s FOR UPDATE",
    "history": "SELECT id, seq, safe, created_at, manifest FROM {s}.checkpoints WHERE thread_id = %s ORDER BY seq DESC",
    "delete_checkpoints": "DELETE FROM {s}.checkpoints WHERE thread_id = %s AND seq = ANY(%s)",
    "delete_head": "DELETE FROM {s}.heads WHERE thread_id = %s",
    "free_blobs": "DELETE FROM {s}.blobs WHERE id = ANY(%s)",
    # The items reached from the dropped lists' tails and not from the kept ones': kept lists pass through the items
    # of every shorter list they extend. UNION visits a chain shared by many tails once, and stops a cyclic one.
    "free_items": """
        WITH RECURSIVE
            live(id) AS (
                SELECT unnest(%s::bigint[])
                UNION
                SELECT items.prev_id FROM {s}.items AS items JOIN live ON items.id = live.id
                WHERE items.prev_id IS NOT NULL
            ),
            dead(id) AS (
                SELECT unnest(%s::bigint[])
                UNION
                SELECT items.prev_id FROM {s}.items AS items JOIN dead ON items.id = dead.id
                WHERE items.prev_id IS NOT NULL AND items.prev_id NOT IN (SELECT id FROM live)
            )
        DELETE FROM {s}.items WHERE id IN (SELECT id FROM dead EXCEPT SELECT id FROM live)""",
    "head_of": "SELECT head_id, head_seq FROM {s}.heads WHERE thread_id = %(thread)s",
    # The compare-and-set. Each returns, when it moved the head, the ids of the rows the put will insert (NULL for
    # none) and the manifest of the head it moved from (NULL for a new thread); nothing when the head was not the
    # expected one.
    "move_head": """
        UPDATE {s}.heads SET head_id = %(id)s, head_seq = %(seq)s
        WHERE thread_id = %(thread)s AND head_id = %(expected)s AND head_seq = %(seq)s - 1
        RETURNING
            (SELECT array_agg(nextval({row_ids})) FROM generate_series(1, %(rows)s)),
            (SELECT manifest FROM {s}.checkpoints WHERE thread_id = %(thread)s AND seq = %(seq)s - 1)""",
    "insert_head": """
        INSERT INTO {s}.heads (thread_id, head_id, head_seq) SELECT %(thread)s, %(id)s, %(seq)s WHERE %(seq)s = 1
        ON CONFLICT (thread_id) DO NOTHING
        RETURNING (SELECT array_agg(nextval({row_ids})) FROM generate_series(1, %(rows)s)), NULL::text""",
    # A put in one statement (see Database.put): the same compare-and-set as move_head and insert_head (move_head's
    # also checks that the head's row is the one the plan reuses values of), and the inserts, each made only if the
    # head moved; then whether it did, and `refill` new ids for the saver's stock (see _IdStock). The ids of the
    # rows it inserts were taken from that stock before.
    "put_next": f"""
        WITH moved AS (
            UPDATE {{s}}.heads SET head_id = %(id)s, head_seq = %(seq)s
            WHERE thread_id = %(thread)s AND head_id = %(expected)s AND head_seq = %(seq)s - 1
                AND (%(head_manifest)s::text IS NULL OR EXISTS (
                    SELECT FROM {{s}}.checkpoints
                    WHERE thread_id = %(thread)s AND seq = %(seq)s - 1 AND manifest = %(head_manifest)s::text
                ))
            RETURNING 1
        ), {_INSERTED}""",
    "put_first": f"""
        WITH moved AS (
            INSERT INTO {{s}}.heads (thread_id, head_id, head_seq) SELECT %(thread)s, %(id)s, %(seq)s WHERE %(seq)s = 1
            ON CONFLICT (thread_id) DO NOTHING
            RETURNING 1
        ), {_INSERTED}""",
    # The head as a claim of the thread reads it, right after taking it (see ClaimedHeads).
    "claim_head": f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE thread_id = %(thread)s ORDER BY seq DESC LIMIT 1",
    # Everything a put inserts, in one statement.
    "insert": f"""
        WITH new_blobs AS (
            INSERT INTO {{s}}.blobs (id, value) SELECT * FROM unnest(%s::bigint[], %s::text[])
        ), new_items AS (
            INSERT INTO {{s}}.items (id, prev_id, value) SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[])
        )
        INSERT INTO {{s}}.checkpoints ({COLUMNS}) VALUES ({", ".join(["%s"] * (COLUMNS.count(",") + 1))})""",
}


def named(conninfo: str, role: str, schema: str) -> dict[str, str]:
    """The connection argument that names a saver's connection in ``pg_stat_activity`` (``rxgraph checkpoints
    (chat)``, ``rxgraph run locks (chat)``...), unless the connection string names its application itself."""
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return {}  # unparsable: psycopg will say why when it connects
    if "fallback_application_name" in given:
        return {}
    return {"fallback_application_name": f"rxgraph {role} ({schema})"[:63]}


def server_limits(timeout: float) -> tuple[str, str]:
    """PostgreSQL's ``lock_timeout`` and ``statement_timeout`` for a saver's ``timeout``: a lock waited for that
    long says so (the statement's limit comes half a :data:`GRACE` later, or it would always speak first), and both
    answer before the watchdog drops the connection; they keep it."""
    return f"{max(1, round(timeout * 1000))}ms", f"{max(1, round((timeout + GRACE / 2) * 1000))}ms"


class _Watch:
    """One connection in use: its socket, when it must have been answered by, and whether that passed."""

    __slots__ = ("deadline", "expired", "fd")

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd = fd
        self.deadline = deadline
        self.expired = False


class Watchdog:
    """Drops the connection of a server that keeps a statement waiting longer than ``timeout`` (plus :data:`GRACE`).

    Nothing else bounds that wait. PostgreSQL's own timeouts run in the server process, which cannot act when it is
    stopped or cut off; libpq waits for a result without a deadline; and on loopback the kernel keeps the socket
    open and answers TCP keepalives for a stopped process. So every connection in use is *watched*: from the moment
    it is taken until it is given back, each statement (and the saver's own work between two of them) must be
    answered within the limit. When a deadline passes, the watchdog's thread shuts the connection's socket down —
    ``shutdown(2)`` on a duplicate of its descriptor, not ``close``: the descriptor stays the connection's, and it is
    only touched while the owner still holds the connection (arming and disarming share the watchdog's lock). The
    owner's wait then ends at once with psycopg's ``OperationalError``, which :meth:`watching` turns into
    ``SaverTimeoutError``; the connection is closed, so a pool discards it and opens another.

    Every deadline is "now + limit", so the watches, kept in the order they were last renewed, are also in the order
    they expire: the watchdog only ever looks at the first one. One daemon thread, started with the first watch, and
    never woken by a call: with nothing to watch it looks again ``limit`` seconds later, which is no later than the
    deadline of anything armed meanwhile.
    """

    def __init__(self, timeout: float, where: str) -> None:
        self.timeout = timeout
        self.limit = timeout + GRACE
        self._where = where
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._watches: OrderedDict[_Watch, None] = OrderedDict()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def watching(self, conn: psycopg.Connection[Any]) -> Iterator[Watched]:
        """Watch ``conn`` for the ``with`` block, whose statements go through the ``Watched`` it gives.

        Raises:
            SaverTimeoutError: the server did not answer in time; ``conn`` is closed (its cause is psycopg's error).
        """
        watch = _Watch(conn.fileno(), time.monotonic() + self.limit)
        self._arm(watch)
        try:
            yield Watched(conn, watch, self)
        except psycopg.Error as error:
            if watch.expired:
                raise self.unanswered(error) from error
            raise
        finally:
            self._disarm(watch)
            if watch.expired and not conn.closed:
                # Answered just before the deadline passed: the result stands, but the socket is shut, so the
                # connection must not be used again. pgconn.finish, not close: a pool whose close() gives
                # connections back would otherwise be handed it twice.
                conn.pgconn.finish()

    def unanswered(self, error: BaseException | None = None) -> SaverTimeoutError:
        """The error of a call whose server did not answer in time."""
        cause = f" ({type(error).__name__}: {str(error).strip().splitlines()[0]})" if error is not None else ""
        return SaverTimeoutError(
            f"{self._where}: the database did not answer within {self.timeout:g} s (a server process that stopped "
            "or waits for a lock, or a network that fails silently); the connection was dropped. A write in flight "
            "may or may not have landed: read the thread again before relying on it. Retry, or give the saver a "
            f"longer timeout{cause}"
        )

    def close(self) -> None:
        """Stop the watchdog's thread (connections still watched are no longer broken). Raises nothing."""
        with self._changed:
            self._closed = True
            self._watches.clear()
            self._changed.notify_all()

    def renew(self, watch: _Watch) -> None:
        """The server answered, or is asked something new: it has ``limit`` seconds from now."""
        with self._lock:
            if watch.expired:
                return
            watch.deadline = time.monotonic() + self.limit
            self._watches.move_to_end(watch)

    def _arm(self, watch: _Watch) -> None:
        with self._changed:
            if self._closed:
                return
            self._watches[watch] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rxgraph-postgres-watchdog", daemon=True)
                self._thread.start()

    def _disarm(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.pop(watch, None)

    def _run(self) -> None:
        with self._changed:
            while not self._closed:
                if not self._watches:
                    self._changed.wait(self.limit)
                    continue
                watch = next(iter(self._watches))
                left = watch.deadline - time.monotonic()
                if left > 0:
                    self._changed.wait(left)  # a renewal moves it back: looked at again then
                    continue
                del self._watches[watch]
                watch.expired = True
                _shut(watch.fd)


def _shut(fd: int) -> None:
    """Shut a connection's socket down in both directions: its owner's wait ends with an error, at once."""
    try:
        with socket.socket(fileno=socket.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError as error:
        log.warning("could not drop a PostgreSQL connection that did not answer in time: %s", error)


class Watched:
    """A connection in use under a :class:`Watchdog`: ``execute`` renews its deadline before and after a statement;
    the rest (``transaction``, ``commit``) is the connection's, still watched."""

    __slots__ = ("_dog", "_watch", "conn")

    def __init__(self, conn: psycopg.Connection[Any], watch: _Watch, dog: Watchdog) -> None:
        self.conn = conn
        self._watch = watch
        self._dog = dog

    def execute(
        self, query: LiteralString | bytes | sql.SQL | sql.Composed, params: Params | None = None
    ) -> psycopg.Cursor[Any]:
        """``conn.execute(query, params)``, with ``limit`` seconds for the server to answer."""
        self._dog.renew(self._watch)
        cursor = self.conn.execute(query, params)
        self._dog.renew(self._watch)
        return cursor

    def transaction(self) -> AbstractContextManager[psycopg.Transaction]:
        """``conn.transaction()``: its BEGIN and COMMIT are watched like the statements in between."""
        return self.conn.transaction()

    def script(self, query: sql.Composed, params: Mapping[str, Any]) -> psycopg.ClientCursor[Any]:
        """Several statements (``;``-separated) in one round trip, with ``limit`` seconds for the server to answer:
        bound client-side (psycopg quotes each value) and sent with the simple query protocol, in one implicit
        transaction in which each statement still sees what was committed before it started. The cursor holds one
        result per statement (``nextset`` moves to the next)."""
        self._dog.renew(self._watch)
        cursor = psycopg.ClientCursor(self.conn)
        cursor.execute(query, params)
        self._dog.renew(self._watch)
        return cursor


_UNREAD: Final[Any] = object()


class PostgresRows:
    """The reads of the incremental store (see ``Rows``), on one watched connection — taken from ``connect`` at the
    first statement, so a call whose reads all come from caches (and ``head``) takes none. ``head``: the thread's
    head row when it is known already (see :class:`ClaimedHeads`), given by the first ``head`` read in place of a
    query."""

    __slots__ = ("_conn", "_connect", "_head", "_q")

    def __init__(
        self,
        conn: Watched | Callable[[], Watched],
        statements: Mapping[str, bytes],
        *,
        head: Row | None = _UNREAD,
    ) -> None:
        self._conn: Watched | None = conn if isinstance(conn, Watched) else None
        self._connect = conn if not isinstance(conn, Watched) else None
        self._q = statements
        self._head = head

    def _execute(self, query: bytes, params: Params) -> psycopg.Cursor[Any]:
        conn = self._conn
        if conn is None:
            assert self._connect is not None
            conn = self._conn = self._connect()
        return conn.execute(query, params)

    def head(self, thread_id: str) -> Row | None:
        known, self._head = self._head, _UNREAD
        if known is not _UNREAD:
            return known
        return self._execute(self._q["head"], (thread_id,)).fetchone()

    def by_id(self, checkpoint_id: str) -> Row | None:
        return self._execute(self._q["by_id"], (checkpoint_id,)).fetchone()

    def page(self, thread_id: str, before_seq: int | None, limit: int | None) -> builtins.list[Row]:
        bound = _MAX_SEQ if before_seq is None else before_seq
        return self._execute(self._q["page"], (thread_id, bound, limit)).fetchall()

    def newest_safe(self, thread_id: str, before_seq: int | None) -> Row | None:
        bound = _MAX_SEQ if before_seq is None else before_seq
        return self._execute(self._q["newest_safe"], (thread_id, bound)).fetchone()

    def blobs(self, ids: builtins.list[int]) -> builtins.list[tuple[int, str]]:
        return self._execute(self._q["blobs"], (ids,)).fetchall()

    def walk(self, tail: int, count: int) -> builtins.list[tuple[int | None, str]]:
        return self._execute(self._q["walk"], (tail, count)).fetchall()

    def count_rows(self, blob_ids: builtins.list[int], item_ids: builtins.list[int]) -> int:
        row = self._execute(self._q["count_rows"], (blob_ids, item_ids)).fetchone()
        assert row is not None
        return int(row[0])


class ClaimedHeads:
    """The heads that claims of threads read, each kept until its thread's next read of the head: the read a run
    makes first (``get``, to choose its base) then costs no round trip.

    A claim (:class:`~rxgraph.checkpoint._postgres_locks.PostgresRunLocks`) reads the thread's head in the round trip
    that takes its advisory lock, in a statement of its own that starts once the lock is taken: it sees every write
    of the thread's previous holder, whose writes all committed before it let go. From then until the thread is let
    go, the writers of the thread take turns through this process's run slots, and each of them writes through this
    saver, which forgets the thread's head (``written``) before and after every write; so while a head is kept, it is
    the head a read would find. A write of the thread that does not hold it (an application's own ``put`` in
    another process) is what the compare-and-set of every write is for, as it always was: the first write built on
    an older head fails with ``CheckpointConflictError``.

    A head is kept only when no write of the thread through this saver ended while the claim read it (``reading`` to
    ``read``), and it is taken once: the first ``get`` of the thread's head has it, later ones read the database.
    """

    def __init__(self, statement: sql.SQL) -> None:
        self.statement = statement
        """The statement that reads a thread's head, with the parameter ``%(thread)s``."""
        self._lock = threading.Lock()
        self._heads: dict[str, Row | None] = {}
        self._clean: dict[str, bool] = {}  # threads being claimed: no write of theirs ended since the claim began

    def reading(self, thread_id: str) -> None:
        """A claim of ``thread_id`` is about to read its head."""
        with self._lock:
            self._clean[thread_id] = True

    def read(self, thread_id: str, head: Row | None, *, taken: bool) -> None:
        """The claim read ``head`` (its row, None for a thread without checkpoints), and took the thread, or not."""
        with self._lock:
            if self._clean.pop(thread_id, False) and taken:
                self._heads[thread_id] = head

    def written(self, thread_id: str) -> None:
        """A write of ``thread_id`` starts or ends (or the thread is let go): the head kept, if any, is no more."""
        with self._lock:
            self._heads.pop(thread_id, None)
            if thread_id in self._clean:
                self._clean[thread_id] = False

    def take(self, thread_id: str) -> Row | None:
        """The head kept for ``thread_id`` (a row, or None for no checkpoint), now forgotten; ``_UNREAD`` if none."""
        with self._lock:
            return self._heads.pop(thread_id, _UNREAD)

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()
            self._clean.clear()


class _IdStock:
    """Ids of the saver's sequence reserved ahead, for the rows a put in one statement inserts: it must know them
    before it is sent, to write them into the manifest and the list links. Each such statement asks for as many new
    ones as it takes, in its own round trip; a put that needs more than the stock holds goes through the transaction,
    which reserves what it needs and refills the stock too. A sequence never gives an id twice, whether or not it
    is used: ids reserved and never used are gaps, nothing more."""

    _MOST = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: deque[int] = deque()
        self.target = 64  # grows (to _MOST) with the largest put asked for

    def take(self, count: int) -> builtins.list[int] | None:
        """``count`` ids, or None (and none taken) when the stock has fewer."""
        with self._lock:
            if count > len(self._ids):
                self.target = min(self._MOST, max(self.target, 2 * count))
                return None
            ids = self._ids
            return [ids.popleft() for _ in range(count)]

    def add(self, ids: builtins.list[int] | None) -> None:
        if ids:
            with self._lock:
                self._ids.extend(ids)

    def wanted(self) -> int:
        """How many ids would fill the stock to its target."""
        with self._lock:
            return max(0, self.target - len(self._ids))


class Database:
    """A ``PostgresSaver``'s storage: the pool it takes connections from and the statements it runs on them.

    ``where`` is the database's connection string without its password (for errors and ``repr``); ``conninfo``
    the connection string and keyword arguments that reach it (for connections of their own, such as run locks);
    ``schema_version`` the version of the schema once it was checked, created or migrated; ``watchdog`` the deadline
    of every statement (shared with the run locks); ``claimed`` the heads the run locks' claims read (shared with
    them too).

    Every wait for the server is bounded: for a connection of the pool by the pool's timeout; for a lock, and for a
    statement that runs too long, by PostgreSQL's ``lock_timeout`` and ``statement_timeout`` (set on the saver's own
    pool; they keep the connection); and for a server that does not answer at all by the watchdog, ``GRACE`` later.
    """

    errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    """What the driver raises: errors the store must let through rather than take for damaged rows."""

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        schema: str,
        timeout: float,
        max_connections: int,
        migrations: Mapping[int, Migration] | None,
    ) -> None:
        self._timeout = timeout
        self._schema = schema
        if isinstance(target, str):
            self.conninfo: tuple[str, dict[str, Any]] = (target, {})
            self.where = _without_password(target)
            self.watchdog = Watchdog(timeout, self.where)
            # Opened once, directly, so that a server that cannot be reached says why rather than time out.
            with psycopg.connect(target, autocommit=True, connect_timeout=max(1, round(timeout))) as conn:
                self._prepare(conn, migrations)
            limits = server_limits(timeout)

            def configure(conn: psycopg.Connection[Any]) -> None:
                with self.watchdog.watching(conn) as watched:
                    watched.execute(
                        "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                        limits,
                    )

            self._pool: ConnectionPool[Any] | None = ConnectionPool(
                target,
                min_size=1,
                max_size=max_connections,
                kwargs={"autocommit": True, **named(target, "checkpoints", schema)},
                configure=configure,
                timeout=timeout,
                open=True,
                name="rxgraph-checkpoints",
            )
            self._owns_pool = True
        elif isinstance(target, ConnectionPool):
            conninfo, kwargs = target.conninfo, target.kwargs
            self.conninfo = (
                conninfo if isinstance(conninfo, str) else "",
                {k: v for k, v in (kwargs or {}).items() if k != "autocommit"} if isinstance(kwargs, dict) else {},
            )
            self.where = _without_password(
                conninfo if isinstance(conninfo, str) else "", kwargs if isinstance(kwargs, dict) else None
            )
            self.watchdog = Watchdog(timeout, self.where)
            self._pool = target
            self._owns_pool = False
            # Not watched: a migration may take its time (as it does on the direct connection above).
            with self._checkout() as conn:
                self._prepare(conn, migrations)
        else:
            raise InvalidTypeError(
                "PostgresSaver takes a connection string or a psycopg_pool.ConnectionPool, got "
                f"{type(target).__name__}",
                argument="conninfo_or_pool",
            )

    def _prepare(self, conn: psycopg.Connection[Any], migrations: Mapping[int, Migration] | None) -> None:
        try:
            self.schema_version = prepare(conn, self.where, self._schema, migrations, timeout=self._timeout)
        except (pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as error:
            raise self._timed_out("another process was creating or migrating the schema", error) from error
        # Rendered once: identifiers are escaped by libpq, which need not happen at every call.
        names = {"s": sql.Identifier(self._schema), "row_ids": sql.Literal(f"{self._schema_ident(conn)}.row_ids")}
        self._q = {name: sql.SQL(text).format(**names).as_bytes(conn) for name, text in _STATEMENTS.items()}
        self.claimed = ClaimedHeads(sql.SQL(self._q["claim_head"].decode()))  # the saver's own text, rendered here
        self._stock = _IdStock()
        row = conn.execute(self._q["reserve"], (self._stock.wanted(),)).fetchone()
        self._stock.add(row[0] if row is not None else None)

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The pool connections are taken from: the saver's own, or the one it was given.

        Raises:
            SaverClosedError: the saver was closed.
        """
        pool = self._pool
        if pool is None:
            raise SaverClosedError(f"the PostgresSaver on {self.where} is closed; open a new one")
        return pool

    def _schema_ident(self, conn: psycopg.Connection[Any]) -> str:
        return sql.Identifier(self._schema).as_string(conn)

    def close(self) -> None:
        """Stop handing out connections; close the pool when the saver made it; stop the watchdog. Raises
        nothing."""
        pool, self._pool = self._pool, None
        if pool is not None and self._owns_pool:
            pool.close()
        self.watchdog.close()

    @contextmanager
    def connection(self) -> Iterator[Watched]:
        """A connection of the pool for the ``with`` block, watched (see :class:`Watchdog`), which commits what the
        block did unless it raised.

        Raises:
            SaverClosedError: the saver was closed.
            SaverTimeoutError: no connection was free for ``timeout`` seconds, a lock stayed taken that long, a
                statement ran that long, or the server did not answer at all (then the connection is dropped).
        """
        with self._checkout() as conn, self.watchdog.watching(conn) as watched:
            try:
                yield watched
            except BaseException:
                _settle(conn, commit=False)
                raise
            _settle(conn, commit=True)

    @contextmanager
    def _checkout(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool for the ``with`` block, with the pool's and the server's timeouts said as
        ``SaverTimeoutError``."""
        pool = self._pool
        if pool is None:
            raise SaverClosedError(f"the PostgresSaver on {self.where} is closed; open a new one")
        try:
            with pool.connection(timeout=self._timeout) as conn:
                yield conn
        except PoolTimeout as error:
            raise self._timed_out("every connection of the pool was in use", error) from error
        except PoolClosed as error:
            raise SaverClosedError(f"the connection pool of the PostgresSaver on {self.where} is closed") from error
        except pg_errors.LockNotAvailable as error:
            raise self._timed_out("another transaction held a lock it needed", error) from error
        except pg_errors.QueryCanceled as error:
            raise self._timed_out("a statement ran (or waited for a lock)", error) from error

    @contextmanager
    def rows(self, *, head: Row | None = _UNREAD) -> Iterator[PostgresRows]:
        """The store's reads on a connection of the pool, for the ``with`` block (see :meth:`connection`), taken at
        the first statement; ``head``: the thread's head row when it is known already (the first ``head`` read gives
        it)."""
        with ExitStack() as stack:
            yield PostgresRows(lambda: stack.enter_context(self.connection()), self._q, head=head)

    def rows_on(self, conn: Watched) -> PostgresRows:
        """The store's reads on ``conn``."""
        return PostgresRows(conn, self._q)

    def threads(self) -> builtins.list[str]:
        """Every thread with a head."""
        with self.connection() as conn:
            return [row[0] for row in conn.execute(self._q["threads"])]

    def put(
        self,
        conn: Watched,
        checkpoint: Checkpoint,
        expected_head: str | None,
        plan: Plan,
        confirm: Callable[[Plan, str | None], Plan],
    ) -> tuple[dict[str, Ref], Row, int, int, int]:
        """Write ``checkpoint`` as ``plan`` says if its thread's head is ``expected_head``, atomically: in one
        statement when the plan reuses no rows but the expected head's and the stock has the ids it needs, else in
        a transaction. Once the head is taken, ``confirm(plan, the head's manifest)`` gives the plan to write
        (``plan``, or one that reuses no freed rows).

        One statement cannot check what a retention of the thread freed meanwhile (its reads see the database as it
        was when it started, possibly before a retention that held the head's row committed): rows borrowed from
        another checkpoint than the head (a rewind's, say) are checked in the transaction, after its compare-and-set
        holds the row. The head's own rows are never freed, and its row is checked in the statement itself. When
        the statement finds the head not as expected it has written nothing, and the transaction does the put
        again: it raises what the head says (a conflict), or writes (the head's row was written again since the
        plan read it: it plans again).

        Returns:
            The refs of its values, its row, the payload bytes written, and how many items and blobs were inserted.

        Raises:
            CheckpointConflictError: the head is not ``expected_head``; nothing was written.
            InvalidCheckpointError: the seq is not the head's plus one, or the id is already stored.
        """
        if not (plan.borrowed_blobs or plan.borrowed_items):
            ids = self._stock.take(plan.new_rows)
            if ids is not None:
                done = self._put_at_once(conn, checkpoint, expected_head, plan, ids)
                if done is not None:
                    return done
        return self._put_in_transaction(conn, checkpoint, expected_head, plan, confirm)

    def _put_at_once(
        self, conn: Watched, checkpoint: Checkpoint, expected_head: str | None, plan: Plan, ids: builtins.list[int]
    ) -> tuple[dict[str, Ref], Row, int, int, int] | None:
        """The put in one statement, on ids taken from the stock; None when the head was not as expected (nothing
        was written)."""
        taken = iter(ids)
        refs, blob_rows, item_rows, written = plan.assign(taken, taken)
        row, row_bytes = checkpoint_row(checkpoint, refs, plan.pending)
        params: dict[str, Any] = {
            "thread": checkpoint.thread_id,
            "id": checkpoint.id,
            "seq": checkpoint.seq,
            "expected": expected_head,
            "head_manifest": plan.head_manifest,
            "blob_ids": [blob_id for blob_id, _ in blob_rows],
            "blob_texts": [text for _, text in blob_rows],
            "item_ids": [item_id for item_id, _, _ in item_rows],
            "item_prevs": [prev_id for _, prev_id, _ in item_rows],
            "item_texts": [text for _, _, text in item_rows],
            "refill": self._stock.wanted(),
            **{f"c_{name}": value for name, value in zip(_COLUMN_NAMES, row, strict=True)},
        }
        try:
            result = conn.execute(self._q["put_first" if expected_head is None else "put_next"], params).fetchone()
        except pg_errors.UniqueViolation as error:
            if error.diag.constraint_name == "checkpoints_id_key":
                raise duplicate_id(checkpoint) from error
            raise _moved_meanwhile(checkpoint, expected_head) from error  # the (thread_id, seq) backstop
        assert result is not None
        self._stock.add(result[1])
        if not result[0]:
            return None
        return refs, row, written + row_bytes, len(item_rows), len(blob_rows)

    def _put_in_transaction(
        self,
        conn: Watched,
        checkpoint: Checkpoint,
        expected_head: str | None,
        plan: Plan,
        confirm: Callable[[Plan, str | None], Plan],
    ) -> tuple[dict[str, Ref], Row, int, int, int]:
        """The put in a transaction: the compare-and-set (which reserves the ids, and refills the stock), the check
        of the rows the plan reuses, then the inserts."""
        q = self._q
        thread_id = checkpoint.thread_id
        with conn.transaction():
            refill = self._stock.wanted()
            cas = {
                "thread": thread_id,
                "id": checkpoint.id,
                "seq": checkpoint.seq,
                "expected": expected_head,
                "rows": plan.new_rows + refill,
            }
            moved = conn.execute(q["insert_head" if expected_head is None else "move_head"], cas).fetchone()
            if moved is None:
                check_put(checkpoint, expected_head=expected_head, head=conn.execute(q["head_of"], cas).fetchone())
                raise _moved_meanwhile(checkpoint, expected_head)
            reserved: builtins.list[int] = moved[0] or []
            confirmed = confirm(plan, moved[1])
            if confirmed.new_rows > len(reserved):  # written again in full: more rows than reserved
                more = conn.execute(q["reserve"], (confirmed.new_rows - len(reserved),)).fetchone()
                reserved += more[0] if more is not None else []
            ids = iter(reserved)
            refs, blob_rows, item_rows, written = confirmed.assign(ids, ids)
            self._stock.add(list(ids))  # what it did not use (a sequence gives an id once, used or not)
            row, row_bytes = checkpoint_row(checkpoint, refs, confirmed.pending)
            try:
                conn.execute(
                    q["insert"],
                    (
                        [blob_id for blob_id, _ in blob_rows],
                        [text for _, text in blob_rows],
                        [item_id for item_id, _, _ in item_rows],
                        [prev_id for _, prev_id, _ in item_rows],
                        [text for _, _, text in item_rows],
                        *row,
                    ),
                )
            except pg_errors.UniqueViolation as error:
                if error.diag.constraint_name == "checkpoints_id_key":
                    raise duplicate_id(checkpoint) from error
                raise _moved_meanwhile(checkpoint, expected_head) from error  # the (thread_id, seq) backstop
        return refs, row, written + row_bytes, len(item_rows), len(blob_rows)

    def retain(
        self, thread_id: str, decide: Callable[[builtins.list[Row]], Retention], *, delete_head: bool
    ) -> Retention:
        """Remove from a thread what ``decide`` says, given its ``(id, seq, safe, created_at, manifest)`` rows newest
        first, in one transaction that holds the thread's heads row (``delete_head``: and delete it).

        Returns:
            What ``decide`` said.
        """
        q = self._q
        with self.connection() as conn, conn.transaction():
            conn.execute(q["lock_head"], (thread_id,))
            retention = decide(conn.execute(q["history"], (thread_id,)).fetchall())
            if retention.ids:
                conn.execute(q["delete_checkpoints"], (thread_id, retention.seqs))
                if delete_head:
                    conn.execute(q["delete_head"], (thread_id,))
                if retention.collect:
                    conn.execute(q["free_blobs"], (retention.dead_blobs,))
                    conn.execute(q["free_items"], (retention.live_tails, retention.dead_tails))
        return retention

    def _timed_out(self, why: str, error: BaseException) -> SaverTimeoutError:
        return SaverTimeoutError(
            f"{self.where}: {why} for more than {self._timeout:g} s; nothing was written. Retry, or open the "
            f"saver with a longer timeout ({type(error).__name__}: {error})"
        )


def _settle(conn: psycopg.Connection[Any], *, commit: bool) -> None:
    """End the transaction a connection that is not in autocommit mode opened with its first statement, while it is
    still watched: the pool would otherwise commit (or roll back) after the watch, without a deadline."""
    status = conn.info.transaction_status
    if commit and status == TransactionStatus.INTRANS:
        conn.commit()
    elif not commit and status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        # The error that brought us here says more; the pool discards a connection it cannot reset.
        with suppress(psycopg.Error):
            conn.rollback()


def _moved_meanwhile(checkpoint: Checkpoint, expected_head: str | None) -> CheckpointConflictError:
    return CheckpointConflictError(
        f"thread {checkpoint.thread_id!r}: the head moved while checkpoint {checkpoint.id!r} was being written over "
        f"{expected_head!r}; nothing was written. Read the thread again and decide on its new head",
        thread_id=checkpoint.thread_id,
        expected_head=expected_head,
        actual_head=None,
    )


def _without_password(conninfo: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """The connection string (with a pool's connection arguments) without its password, to name the database in
    errors."""
    try:
        params = conninfo_to_dict(conninfo, **{k: v for k, v in (kwargs or {}).items() if isinstance(v, str | int)})
    except psycopg.ProgrammingError:
        return "a PostgreSQL database"  # unparsable: psycopg will say why when it connects
    params.pop("password", None)
    return make_conninfo("", **params)
