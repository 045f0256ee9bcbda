"""The PostgreSQL schema of ``PostgresSaver``: creation, version check and migrations, run once when a saver opens.

Everything lives in one schema of the database (``rxgraph`` unless the saver is given another name), so that the
saver's tables never meet an application's (or another checkpoint library's ``checkpoints`` table). Why each piece
is there:

- ``meta (key, value)``: the ``format`` row (``rxgraph.checkpoints``) tells our tables from anyone else's, and
  ``schema_version`` which version of them this is. A saver refuses a schema whose tables are not ours, or whose
  version is newer than it knows, before it writes anything; an older one is migrated, once, under an advisory lock
  that makes concurrent openers wait for each other.
- ``heads (thread_id, head_id, head_seq)``: one row per thread, its current head. It is the compare-and-set: a
  ``put`` updates its thread's row ``WHERE head_id = <the expected head> AND head_seq = <its seq - 1>`` (or inserts
  the row, for a new thread) in the same transaction as its inserts. The row lock serialises the writers of one
  thread, and only of that thread; a writer that waited finds the row changed, updates nothing, and writes nothing.
  Retention (``prune``, ``delete_thread``) takes the same row lock, so it never runs in the middle of a put on its
  thread. ``threads()`` reads this table.
- ``checkpoints``: one row per checkpoint, O(number of state keys) in size; ``manifest`` maps each key to a blob
  id, or to ``[tail item id, length]`` for a list. The primary key ``(thread_id, seq)`` is the chain (the head is
  its last entry) and the backstop of the compare-and-set; ``id`` is unique across threads, as the contract says.
  The partial index on ``(thread_id, seq) WHERE safe`` answers "the newest safe checkpoint before seq" in one seek.
  ``created_at`` is ISO 8601 text and ``next`` JSON text, as in SQLite: read back exactly as written (a naive time
  stays naive, an offset is kept), by the same decoder.
- ``items (id, prev_id, value)``: lists as persistent linked lists; a checkpoint that appends to its parent's list
  adds only the new items, linked to the parent's tail, and older checkpoints keep pointing into the same chain.
- ``blobs (id, value)``: any other value, written once and shared by id by the checkpoints of a thread whose value is
  that same object.
- ``run_slots (thread_id, run_id, ending, owner, since)``: which run holds a thread for run exclusivity across
  processes, and whether it is ending (:mod:`rxgraph.checkpoint._postgres_locks`). The holder's advisory lock is the
  truth; the row only describes it, for a ``reject`` to name the run and to tell a live one from one rewinding.
- ``row_ids``: the sequence items and blobs take their ids from. A sequence never hands out an id twice, even after
  retention deleted the newest rows, so an id a saver has cached always means the row it cached.

Values and manifests are ``text`` holding JSON (which UTF-8 always encodes and which never holds a NUL), not
``jsonb``: ``jsonb`` would reorder the keys of a mapping and refuse ``\\u0000``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql

from ..errors import IncompatibleDatabaseError
from ._schema import FORMAT, check_not_newer, migrate, stored_version

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "TABLES", "Migration", "prepare"]

SCHEMA_VERSION = 2
"""The schema version this code writes."""

TABLES = ("meta", "heads", "checkpoints", "items", "blobs", "row_ids", "run_slots")
"""The relations the saver keeps in its schema."""

Migration = Callable[["psycopg.Connection[Any]"], None]
"""Upgrades a schema by one version, inside the transaction that opened it (it must not commit). Table names are
not qualified: the schema is first on the connection's ``search_path`` while it runs."""


def _add_the_pending_column(conn: psycopg.Connection[Any]) -> None:
    """Version 1 -> 2: checkpoints record the run's pending work (``Checkpoint.pending``: an interrupt, ``Send``
    payloads, join progress)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN pending text")


MIGRATIONS: dict[int, Migration] = {1: _add_the_pending_column}
"""Version ``v`` -> the migration from ``v`` to ``v + 1``. Opening an older schema runs them in order."""

_SCHEMA = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE heads (thread_id text PRIMARY KEY, head_id text NOT NULL, head_seq bigint NOT NULL)",
    """CREATE TABLE checkpoints (
        id text NOT NULL UNIQUE,
        thread_id text NOT NULL,
        seq bigint NOT NULL,
        parent_id text,
        node text,
        next text NOT NULL,
        run_id text NOT NULL,
        source text NOT NULL,
        created_at text NOT NULL,
        safe boolean NOT NULL,
        unsafe_reason text,
        rolled_back_from text,
        manifest text NOT NULL,
        error text,
        pending text,
        PRIMARY KEY (thread_id, seq)
    )""",
    "CREATE INDEX checkpoints_safe ON checkpoints (thread_id, seq) WHERE safe",
    "CREATE SEQUENCE row_ids",
    "CREATE TABLE items (id bigint PRIMARY KEY, prev_id bigint, value text NOT NULL)",
    "CREATE TABLE blobs (id bigint PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE run_slots (
        thread_id text PRIMARY KEY,
        run_id text NOT NULL,
        ending boolean NOT NULL,
        owner text NOT NULL,
        since timestamptz NOT NULL DEFAULT now()
    )""",
)


def prepare(
    conn: psycopg.Connection[Any],
    where: str,
    schema: str,
    migrations: Mapping[int, Migration] | None = None,
    *,
    timeout: float,
) -> int:
    """Check (and if needed create or migrate) the saver's schema; return its version.

    ``conn`` is a connection of the saver's; ``where`` names the database in errors (without its password).
    Nothing is written to a schema whose tables turn out not to be ours.

    Raises:
        IncompatibleDatabaseError: the database is not UTF-8, the schema holds tables of the saver's names that are
            not ours, a newer version, or one that could not be migrated.
        SaverTimeoutError: another opener held the schema's lock for ``timeout`` seconds (raised by the caller's
            translation of PostgreSQL's lock timeout).
    """
    migrations = MIGRATIONS if migrations is None else migrations
    place = f"{where}, schema {schema!r}"
    version = _read_version(conn, where, schema)
    if version == SCHEMA_VERSION:
        return version
    check_not_newer(version, SCHEMA_VERSION, where=place, path=where)
    with conn.transaction():
        # Creating or migrating: take the schema's lock, then look again (another process may have done it).
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{max(1, round(timeout * 1000))}ms",))
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"rxgraph.checkpoints:{schema}",))
        version = _read_version(conn, where, schema)
        check_not_newer(version, SCHEMA_VERSION, where=place, path=where)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute("SELECT set_config('search_path', %s, true)", (sql.Identifier(schema).as_string(conn),))
        if version is None:
            conn.execute(";\n".join(_SCHEMA))  # one round trip (no parameters: several statements are allowed)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('format', %s), ('schema_version', %s)",
                (FORMAT, str(SCHEMA_VERSION)),
            )
            return SCHEMA_VERSION
        return migrate(
            conn,
            version,
            SCHEMA_VERSION,
            migrations,
            record=lambda new: conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(new),)),
            errors=(psycopg.Error,),
            where=place,
            path=where,
            each=conn.transaction,  # a savepoint: a failed migration leaves the transaction usable to roll back
        )


def _read_version(conn: psycopg.Connection[Any], where: str, schema: str) -> int | None:
    """The schema's version, or None when it holds none of the saver's tables. Raises for anything not ours."""
    encoding = conn.execute("SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()")
    row = encoding.fetchone()
    if row is None or row[0] != "UTF8":
        raise IncompatibleDatabaseError(
            f"{where}: the database's encoding is {row[0] if row else None!r}, not UTF8; PostgresSaver stores text as "
            "UTF-8 (create the database with ENCODING 'UTF8')",
            path=where,
        )
    found = {
        name
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, list(TABLES)),
        )
    }
    if not found:
        return None
    foreign = (
        f"{where}: the schema {schema!r} holds {', '.join(sorted(found))}, which are not an rxgraph checkpoint "
        "store; give PostgresSaver a schema of its own (schema=...)"
    )
    if "meta" not in found:
        raise IncompatibleDatabaseError(foreign, path=where)
    try:
        with conn.transaction():  # a savepoint when a transaction is open: a failed read leaves it usable
            meta = dict(conn.execute(sql.SQL("SELECT key, value FROM {}.meta").format(sql.Identifier(schema))))
    except psycopg.Error as error:
        raise IncompatibleDatabaseError(foreign, path=where) from error
    return stored_version(meta, where=f"{where}, schema {schema!r}", path=where, foreign=foreign)
