"""What ``PostgresSaver`` says to PostgreSQL: its connection pool, its SQL, and the transaction of a ``put``.

Imported only when a ``PostgresSaver`` is opened, so that ``import rxgraph`` works without psycopg.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ..errors import CheckpointConflictError, InvalidTypeError, SaverClosedError, SaverTimeoutError
from ._base import Checkpoint, check_put, duplicate_id
from ._incremental import COLUMNS, Plan, Ref, Retention, Row, checkpoint_row
from ._postgres_schema import Migration, prepare

__all__ = ["Database", "PostgresRows"]

_MAX_SEQ = 2**63 - 1

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
    # Everything a put inserts, in one statement.
    "insert": f"""
        WITH new_blobs AS (
            INSERT INTO {{s}}.blobs (id, value) SELECT * FROM unnest(%s::bigint[], %s::text[])
        ), new_items AS (
            INSERT INTO {{s}}.items (id, prev_id, value) SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[])
        )
        INSERT INTO {{s}}.checkpoints ({COLUMNS}) VALUES ({", ".join(["%s"] * (COLUMNS.count(",") + 1))})""",
}


class PostgresRows:
    """The reads of the incremental store (see ``Rows``), on one connection."""

    __slots__ = ("_conn", "_q")

    def __init__(self, conn: psycopg.Connection[Any], statements: Mapping[str, bytes]) -> None:
        self._conn = conn
        self._q = statements

    def head(self, thread_id: str) -> Row | None:
        return self._conn.execute(self._q["head"], (thread_id,)).fetchone()

    def by_id(self, checkpoint_id: str) -> Row | None:
        return self._conn.execute(self._q["by_id"], (checkpoint_id,)).fetchone()

    def page(self, thread_id: str, before_seq: int | None, limit: int | None) -> builtins.list[Row]:
        bound = _MAX_SEQ if before_seq is None else before_seq
        return self._conn.execute(self._q["page"], (thread_id, bound, limit)).fetchall()

    def newest_safe(self, thread_id: str, before_seq: int | None) -> Row | None:
        bound = _MAX_SEQ if before_seq is None else before_seq
        return self._conn.execute(self._q["newest_safe"], (thread_id, bound)).fetchone()

    def blobs(self, ids: builtins.list[int]) -> builtins.list[tuple[int, str]]:
        return self._conn.execute(self._q["blobs"], (ids,)).fetchall()

    def walk(self, tail: int, count: int) -> builtins.list[tuple[int | None, str]]:
        return self._conn.execute(self._q["walk"], (tail, count)).fetchall()

    def count_rows(self, blob_ids: builtins.list[int], item_ids: builtins.list[int]) -> int:
        row = self._conn.execute(self._q["count_rows"], (blob_ids, item_ids)).fetchone()
        assert row is not None
        return int(row[0])


class Database:
    """A ``PostgresSaver``'s storage: the pool it takes connections from and the statements it runs on them.

    ``where`` is the database's connection string without its password (for errors and ``repr``); ``conninfo``
    the connection string and keyword arguments that reach it (for connections of their own, such as run locks);
    ``schema_version`` the version of the schema once it was checked, created or migrated.
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
            # Opened once, directly, so that a server that cannot be reached says why rather than time out.
            with psycopg.connect(target, autocommit=True, connect_timeout=max(1, round(timeout))) as conn:
                self._prepare(conn, migrations)
            lock_timeout = f"{max(1, round(timeout * 1000))}ms"

            def configure(conn: psycopg.Connection[Any]) -> None:
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (lock_timeout,))

            self._pool: ConnectionPool[Any] | None = ConnectionPool(
                target,
                min_size=1,
                max_size=max_connections,
                kwargs={"autocommit": True},
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
            self._pool = target
            self._owns_pool = False
            with self.connection() as conn:
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

    def _schema_ident(self, conn: psycopg.Connection[Any]) -> str:
        return sql.Identifier(self._schema).as_string(conn)

    def close(self) -> None:
        """Stop handing out connections; close the pool when the saver made it. Raises nothing."""
        pool, self._pool = self._pool, None
        if pool is not None and self._owns_pool:
            pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool for the ``with`` block, which commits what the block did unless it raised.

        Raises:
            SaverClosedError: the saver was closed.
            SaverTimeoutError: no connection was free for ``timeout`` seconds, or a lock stayed taken that long.
        """
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
        except (pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as error:
            raise self._timed_out("another transaction held a lock it needed", error) from error

    @contextmanager
    def rows(self) -> Iterator[PostgresRows]:
        """The store's reads on a connection of the pool, for the ``with`` block (see :meth:`connection`)."""
        with self.connection() as conn:
            yield self.rows_on(conn)

    def rows_on(self, conn: psycopg.Connection[Any]) -> PostgresRows:
        """The store's reads on ``conn``."""
        return PostgresRows(conn, self._q)

    def threads(self) -> builtins.list[str]:
        """Every thread with a head."""
        with self.connection() as conn:
            return [row[0] for row in conn.execute(self._q["threads"])]

    def put(
        self,
        conn: psycopg.Connection[Any],
        checkpoint: Checkpoint,
        expected_head: str | None,
        plan: Plan,
        confirm: Callable[[Plan, str | None], Plan],
    ) -> tuple[dict[str, Ref], Row, int, int, int]:
        """Write ``checkpoint`` as ``plan`` says, in one transaction, if its thread's head is ``expected_head``.
        Once the head is taken, ``confirm(plan, the head's manifest)`` gives the plan to write (``plan``, or one
        that reuses no freed rows).

        Returns:
            The refs of its values, its row, the payload bytes written, and how many items and blobs were inserted.

        Raises:
            CheckpointConflictError: the head is not ``expected_head``; nothing was written.
            InvalidCheckpointError: the seq is not the head's plus one, or the id is already stored.
        """
        q = self._q
        thread_id = checkpoint.thread_id
        with conn.transaction():
            cas = {
                "thread": thread_id,
                "id": checkpoint.id,
                "seq": checkpoint.seq,
                "expected": expected_head,
                "rows": plan.new_rows,
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
