"""``PostgresRegistry``: the server's thread and run records in the PostgreSQL schema of its ``PostgresSaver``, shared
by every server process that uses the database.

The records live in tables of their own beside the checkpoints (``rxgraph_server_threads``, ``rxgraph_server_runs``,
and ``rxgraph_server_meta`` for their schema version), which the saver never reads. Metadata and a run's options are
``jsonb`` (so that the server may one day filter threads by metadata in SQL), times ``timestamptz``. ``jsonb`` holds
JSON's meaning, not its text: an object's keys come back in its order (by length, then bytes), a float without a
fraction part that it writes as a whole number comes back an ``int``, and it cannot hold the character U+0000.

Imported (with psycopg) only when a registry is made for a ``PostgresSaver``, so that ``import rxgraph.serve``
works without the ``postgres`` extra.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, LiteralString, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ..checkpoint._postgres_database import Watchdog, Watched, named, server_limits
from ..checkpoint._schema import check_not_newer, migrate
from ..errors import (
    IncompatibleDatabaseError,
    InvalidArgumentError,
    InvalidTypeError,
    SaverClosedError,
    SaverTimeoutError,
)
from ._registry import Registry, RunRecord, RunStatus, ThreadRecord, now

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresRegistry"]

SCHEMA_VERSION = 1
"""The version of the records' tables this code writes (in ``rxgraph_server_meta``, apart from the saver's own)."""

MIGRATIONS: dict[int, Callable[[psycopg.Connection[Any]], None]] = {}
"""Version ``v`` -> the migration of the records' tables from ``v`` to ``v + 1``, run in the transaction that checks
them (it must not commit); the saver's schema is first on the ``search_path`` meanwhile."""

# `seq` is the order rows were inserted in: the tie-break of "newest first" between records created in the same
# microsecond. Index names are qualified by the schema, as the tables are.
_SCHEMA: tuple[LiteralString, ...] = (
    "CREATE TABLE IF NOT EXISTS rxgraph_server_meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS rxgraph_server_threads (
        thread_id text PRIMARY KEY,
        owner text,
        metadata jsonb NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY
    )""",
    "CREATE INDEX IF NOT EXISTS rxgraph_server_threads_owner ON rxgraph_server_threads (owner, created_at, seq)",
    "CREATE INDEX IF NOT EXISTS rxgraph_server_threads_created ON rxgraph_server_threads (created_at, seq)",
    """CREATE TABLE IF NOT EXISTS rxgraph_server_runs (
        run_id text PRIMARY KEY,
        thread_id text NOT NULL,
        assistant_id text NOT NULL,
        owner text,
        status text NOT NULL,
        kwargs jsonb NOT NULL,
        metadata jsonb NOT NULL,
        multitask_strategy text NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY
    )""",
    "CREATE INDEX IF NOT EXISTS rxgraph_server_runs_thread ON rxgraph_server_runs (thread_id, created_at, seq)",
)

_THREAD = "thread_id, owner, metadata, created_at, updated_at"
_RUN = "run_id, thread_id, assistant_id, owner, status, kwargs, metadata, multitask_strategy, created_at, updated_at"

_LIMITS: LiteralString = "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"
"""The registry's limits (from ``server_limits``) for one transaction, whoever's the pool's connections are."""

# {s} is the saver's schema.
_STATEMENTS: dict[str, LiteralString] = {
    "version": "SELECT value FROM {s}.rxgraph_server_meta WHERE key = 'schema_version'",
    "create_thread": f"""
        INSERT INTO {{s}}.rxgraph_server_threads ({_THREAD}) VALUES (%s, %s, %s::jsonb, %s, %s)
        ON CONFLICT (thread_id) DO NOTHING""",
    "get_thread": f"SELECT {_THREAD} FROM {{s}}.rxgraph_server_threads WHERE thread_id = %s",
    "all_threads": f"SELECT {_THREAD} FROM {{s}}.rxgraph_server_threads ORDER BY created_at DESC, seq DESC",
    "threads_of": (
        f"SELECT {_THREAD} FROM {{s}}.rxgraph_server_threads WHERE owner = %s ORDER BY created_at DESC, seq DESC"
    ),
    # jsonb's || merges the top-level keys, the new value winning; a key set to null stays, as null.
    "update_thread": f"""
        UPDATE {{s}}.rxgraph_server_threads SET metadata = metadata || %s::jsonb, updated_at = %s
        WHERE thread_id = %s RETURNING {_THREAD}""",
    "delete_thread_runs": "DELETE FROM {s}.rxgraph_server_runs WHERE thread_id = %s",
    "delete_thread": "DELETE FROM {s}.rxgraph_server_threads WHERE thread_id = %s",
    "put_run": f"""
        INSERT INTO {{s}}.rxgraph_server_runs ({_RUN}) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s)
        ON CONFLICT (run_id) DO UPDATE SET
            thread_id = excluded.thread_id, assistant_id = excluded.assistant_id, owner = excluded.owner,
            status = excluded.status, kwargs = excluded.kwargs, metadata = excluded.metadata,
            multitask_strategy = excluded.multitask_strategy, created_at = excluded.created_at,
            updated_at = excluded.updated_at""",
    "get_run": f"SELECT {_RUN} FROM {{s}}.rxgraph_server_runs WHERE run_id = %s",
    "runs": f"SELECT {_RUN} FROM {{s}}.rxgraph_server_runs WHERE thread_id = %s ORDER BY created_at DESC, seq DESC",
    "set_status": f"""
        UPDATE {{s}}.rxgraph_server_runs SET status = %s, updated_at = %s WHERE run_id = %s RETURNING {_RUN}""",
    "delete_run": "DELETE FROM {s}.rxgraph_server_runs WHERE run_id = %s",
}


class PostgresRegistry(Registry):
    """The server's records in a PostgreSQL schema (a ``PostgresSaver``'s), for any number of server processes.

    Every call is one transaction, so each is atomic between processes: ``put_run`` is an upsert, ``update_thread``
    and ``set_status`` one ``UPDATE`` each (a run deleted meanwhile stays deleted), ``delete_thread`` deletes the
    thread and its runs together. No call waits without a deadline: ``timeout`` bounds the wait for a connection of
    the pool, for a lock, for a statement (half a second more), and for a server that does not answer at all (a
    second more, then the connection is dropped), after which the call raises ``SaverTimeoutError``; after
    ``close``, or once the pool it was given is closed, ``SaverClosedError``.

    Needs the ``postgres`` extra (psycopg 3 and psycopg_pool).
    """

    def __init__(
        self,
        conninfo_or_pool: str | ConnectionPool[Any],
        *,
        schema: str = "rxgraph",
        timeout: float = 5.0,
        max_connections: int = 4,
    ) -> None:
        """Connect, and check (when missing, create) the records' tables.

        Args:
            conninfo_or_pool: a libpq connection string, for which the registry opens a small pool of its own and
                closes it on ``close``; or a ``psycopg_pool.ConnectionPool`` (a ``PostgresSaver``'s ``pool``, say),
                which it uses and leaves open.
            schema: the PostgreSQL schema of the tables: the saver's (created when missing).
            timeout: seconds a call waits (see the class) before it raises ``SaverTimeoutError``.
            max_connections: the size of the registry's own pool (ignored for a pool it is given).

        Raises:
            InvalidArgumentError: ``timeout``, ``max_connections`` or ``schema`` has a value it cannot have.
            InvalidTypeError: ``conninfo_or_pool`` is neither a string nor a ``ConnectionPool``.
            IncompatibleDatabaseError: the records' tables are newer than this code, or could not be migrated;
                nothing was written.
            SaverTimeoutError: another process held the schema's lock (creating or migrating it), or the pool had
                no connection free, for ``timeout`` seconds.
            psycopg.OperationalError: the server could not be reached, or refused the connection.
        """
        if not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout}", argument="timeout")
        if max_connections < 1:
            raise InvalidArgumentError(
                f"max_connections must be >= 1, got {max_connections}", argument="max_connections"
            )
        if not isinstance(schema, str) or not schema or "\x00" in schema:
            raise InvalidArgumentError(f"schema must be a non-empty name, got {schema!r}", argument="schema")
        self._schema = schema
        self._timeout = timeout
        self._limits = server_limits(timeout)
        if isinstance(conninfo_or_pool, str):
            conninfo = conninfo_or_pool
            self._where = _without_password(conninfo)
            self._watchdog = Watchdog(timeout, self._where)
            # Prepared on a connection of its own, so that a server that cannot be reached says why.
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, round(timeout))) as conn:
                self._prepare(conn)
            self._pool: ConnectionPool[Any] | None = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=max_connections,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": max(1, round(timeout)),
                    **named(conninfo, "server records", schema),
                },
                timeout=timeout,
                open=True,
                name="rxgraph-server-records",
            )
            self._owns_pool = True
            self.lanes = max_connections
        elif isinstance(conninfo_or_pool, ConnectionPool):
            pool = conninfo_or_pool
            self._where = _without_password(pool.conninfo if isinstance(pool.conninfo, str) else "")
            self._watchdog = Watchdog(timeout, self._where)
            self._pool = pool
            self._owns_pool = False
            self.lanes = pool.max_size
            with self._checkout() as conn:
                self._prepare(conn)
        else:
            raise InvalidTypeError(
                "PostgresRegistry takes a connection string or a psycopg_pool.ConnectionPool, got "
                f"{type(conninfo_or_pool).__name__}",
                argument="conninfo_or_pool",
            )

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of the records' tables."""
        return self._schema

    def __repr__(self) -> str:
        return f"PostgresRegistry({self._where!r}, schema={self._schema!r})"

    def close(self) -> None:
        """Close the pool when the registry opened it (a pool it was given stays open); closing again does
        nothing. Raises nothing."""
        pool, self._pool = self._pool, None
        if pool is not None and self._owns_pool:
            pool.close()
        self._watchdog.close()

    # -- threads -----------------------------------------------------------------------------------------------

    def create_thread(self, record: ThreadRecord) -> ThreadRecord | None:
        row = (
            record.thread_id,
            record.owner,
            _json(record.metadata, "metadata"),
            _moment(record.created_at),
            _moment(record.updated_at),
        )
        with self._transaction() as conn:
            return record if conn.execute(self._q["create_thread"], row).rowcount == 1 else None

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._transaction() as conn:
            row = conn.execute(self._q["get_thread"], (thread_id,)).fetchone()
        return None if row is None else _thread(row)

    def threads(self, owner: str | None) -> builtins.list[ThreadRecord]:
        with self._transaction() as conn:
            if owner is None:
                rows = conn.execute(self._q["all_threads"]).fetchall()
            else:
                rows = conn.execute(self._q["threads_of"], (owner,)).fetchall()
        return [_thread(row) for row in rows]

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> ThreadRecord | None:
        with self._transaction() as conn:
            row = conn.execute(self._q["update_thread"], (_json(metadata, "metadata"), now(), thread_id)).fetchone()
        return None if row is None else _thread(row)

    def delete_thread(self, thread_id: str) -> bool:
        with self._transaction() as conn:
            conn.execute(self._q["delete_thread_runs"], (thread_id,))
            return conn.execute(self._q["delete_thread"], (thread_id,)).rowcount > 0

    # -- runs --------------------------------------------------------------------------------------------------

    def put_run(self, record: RunRecord) -> None:
        row = (
            record.run_id,
            record.thread_id,
            record.assistant_id,
            record.owner,
            record.status,
            _json(record.kwargs, "kwargs"),
            _json(record.metadata, "metadata"),
            record.multitask_strategy,
            _moment(record.created_at),
            _moment(record.updated_at),
        )
        with self._transaction() as conn:
            conn.execute(self._q["put_run"], row)

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._transaction() as conn:
            row = conn.execute(self._q["get_run"], (run_id,)).fetchone()
        return None if row is None else _run(row)

    def runs(self, thread_id: str) -> builtins.list[RunRecord]:
        with self._transaction() as conn:
            rows = conn.execute(self._q["runs"], (thread_id,)).fetchall()
        return [_run(row) for row in rows]

    def set_status(self, run_id: str, status: RunStatus) -> RunRecord | None:
        with self._transaction() as conn:
            row = conn.execute(self._q["set_status"], (status, now(), run_id)).fetchone()
        return None if row is None else _run(row)

    def delete_run(self, run_id: str) -> bool:
        with self._transaction() as conn:
            return conn.execute(self._q["delete_run"], (run_id,)).rowcount > 0

    # -- plumbing ----------------------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Watched]:
        """A connection of the pool in one transaction for the ``with`` block (committed when the block ends,
        rolled back when it raises), watched, with the registry's lock and statement limits."""
        with self._checkout() as conn, self._watchdog.watching(conn) as watched, conn.transaction():
            watched.execute(_LIMITS, self._limits)
            yield watched

    @contextmanager
    def _checkout(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool for the ``with`` block, the pool's and the server's timeouts said as
        ``SaverTimeoutError``."""
        pool = self._pool
        if pool is None:
            raise SaverClosedError(f"{self!r} is closed; open a new one")
        try:
            with pool.connection(timeout=self._timeout) as conn:
                yield conn
        except PoolTimeout as error:
            raise self._timed_out("every connection of the pool was in use", error) from error
        except PoolClosed as error:
            raise SaverClosedError(f"the connection pool of {self!r} is closed") from error
        except pg_errors.LockNotAvailable as error:
            raise self._timed_out("another transaction held a lock it needed", error) from error
        except pg_errors.QueryCanceled as error:
            raise self._timed_out("a statement ran (or waited for a lock)", error) from error
        except pg_errors.DataError as error:
            raise InvalidArgumentError(
                f"{self!r}: PostgreSQL refused a record's value ({error}); jsonb holds neither the character U+0000 "
                "nor a lone surrogate",
                argument="record",
            ) from error

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Check the records' tables in the schema; create them (and the schema), or migrate them, when needed."""
        names = {"s": sql.Identifier(self._schema)}
        self._q = {name: sql.SQL(text).format(**names).as_bytes(conn) for name, text in _STATEMENTS.items()}
        place = f"{self._where}, schema {self._schema!r} (server records)"
        try:
            with conn.transaction():
                conn.execute(_LIMITS, self._limits)
                version = self._read_version(conn)
            if version == SCHEMA_VERSION:
                return
            check_not_newer(version, SCHEMA_VERSION, where=place, path=self._where)
            with conn.transaction():
                conn.execute(_LIMITS, self._limits)
                # The saver's lock: whoever creates or changes tables in the schema (the saver, or a registry) takes
                # it, so that two processes starting at once take turns (CREATE ... IF NOT EXISTS alone may fail
                # when another transaction creates the same name at the same time).
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"rxgraph.checkpoints:{self._schema}",)
                )
                version = self._read_version(conn)
                check_not_newer(version, SCHEMA_VERSION, where=place, path=self._where)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
                search_path = sql.Identifier(self._schema).as_string(conn)
                conn.execute("SELECT set_config('search_path', %s, true)", (search_path,))
                if version is None:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO rxgraph_server_meta (key, value) VALUES ('schema_version', %s)",
                        (str(SCHEMA_VERSION),),
                    )
                    return
                migrate(
                    conn,
                    version,
                    SCHEMA_VERSION,
                    MIGRATIONS,
                    record=lambda new: conn.execute(
                        "UPDATE rxgraph_server_meta SET value = %s WHERE key = 'schema_version'", (str(new),)
                    ),
                    errors=(psycopg.Error,),
                    where=place,
                    path=self._where,
                    each=conn.transaction,
                )
        except (pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as error:
            raise self._timed_out("another process was creating or migrating the schema", error) from error

    def _read_version(self, conn: psycopg.Connection[Any]) -> int | None:
        """The records' schema version; ``None`` before their tables exist."""
        found = conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'rxgraph_server_meta'",
            (self._schema,),
        ).fetchone()
        if found is None:
            return None
        row = conn.execute(self._q["version"]).fetchone()
        try:
            return int(row[0])  # type: ignore[index]
        except (TypeError, ValueError):
            raise IncompatibleDatabaseError(
                f"{self._where}, schema {self._schema!r}: rxgraph_server_meta has no valid schema_version ({row!r})",
                path=self._where,
            ) from None

    def _timed_out(self, why: str, error: BaseException) -> SaverTimeoutError:
        return SaverTimeoutError(
            f"{self._where}: {why} for more than {self._timeout:g} s; the server's records were not changed. Retry, "
            f"or open the registry with a longer timeout ({type(error).__name__}: {error})"
        )


# -- rows ----------------------------------------------------------------------------------------------------------


def _moment(moment: datetime) -> datetime:
    """A record's time, which must have a time zone (PostgreSQL would read a naive one in its session's)."""
    if moment.utcoffset() is None:
        raise InvalidArgumentError(
            f"a record's times must have a time zone (datetime.now(UTC)), got {moment!r}", argument="record"
        )
    return moment


def _json(value: Mapping[str, Any], what: str) -> str:
    """JSON text of a record's ``metadata`` or ``kwargs``, for a ``jsonb`` column."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"a record's {what} must be JSON: {error}", argument=what) from error


def _thread(row: tuple[Any, ...]) -> ThreadRecord:
    thread_id, owner, metadata, created_at, updated_at = row
    return ThreadRecord(
        thread_id=thread_id,
        owner=owner,
        metadata=metadata,
        created_at=created_at.astimezone(UTC),
        updated_at=updated_at.astimezone(UTC),
    )


def _run(row: tuple[Any, ...]) -> RunRecord:
    run_id, thread_id, assistant_id, owner, status, kwargs, metadata, strategy, created_at, updated_at = row
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        assistant_id=assistant_id,
        owner=owner,
        status=cast(RunStatus, status),
        kwargs=kwargs,
        metadata=metadata,
        multitask_strategy=strategy,
        created_at=created_at.astimezone(UTC),
        updated_at=updated_at.astimezone(UTC),
    )


def _without_password(conninfo: str) -> str:
    """The connection string without its password, to name the database in errors."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "a PostgreSQL database"  # unparsable: psycopg will say why when it connects
    params.pop("password", None)
    return make_conninfo("", **params)
