"""The SQLite schema of ``SqliteSaver``: creation, version check and migrations, run once when a file is opened."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping

from ..errors import IncompatibleDatabaseError
from ._schema import FORMAT, check_not_newer, migrate, stored_version
from ._sqlite_transaction import write_transaction

__all__ = ["FORMAT", "MIGRATIONS", "SCHEMA_VERSION", "Migration", "prepare"]

SCHEMA_VERSION = 4
"""The schema version this code writes."""

Migration = Callable[[sqlite3.Connection], None]
"""Upgrades a database by one version, inside the transaction that opened it (it must not commit)."""


def _add_the_error_column(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: checkpoints record the error of a failed run (``Checkpoint.error``)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN error TEXT")


def _keep_the_rows_threads_may_share(conn: sqlite3.Connection) -> None:
    """Version 2 -> 3: retention frees the rows of one thread's checkpoints. A version-2 saver shared rows between
    threads, so the rows it wrote (ids up to ``legacy_row_ids``) are never freed."""
    conn.execute(
        "INSERT INTO meta (key, value) SELECT 'legacy_row_ids', "
        "MAX(IFNULL((SELECT MAX(id) FROM items), 0), IFNULL((SELECT MAX(id) FROM blobs), 0))"
    )


def _add_the_pending_column(conn: sqlite3.Connection) -> None:
    """Version 3 -> 4: checkpoints record the run's pending work (``Checkpoint.pending``: an interrupt, ``Send``
    payloads, join progress)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN pending TEXT")


MIGRATIONS: dict[int, Migration] = {
    1: _add_the_error_column,
    2: _keep_the_rows_threads_may_share,
    3: _add_the_pending_column,
}
"""Version ``v`` -> the migration from ``v`` to ``v + 1``. Opening an older file runs them in order."""

# Why each piece is there:
# - checkpoints: one row per checkpoint, O(number of state keys) in size; `manifest` maps each key to a blob id or
#   to [tail item id, length] for a list. The primary key (thread_id, seq) is the chain, and the head is its last
#   entry; clustering the rows on it (WITHOUT ROWID) saves a b-tree per insert. The (thread_id, safe, seq) index
#   answers "newest safe checkpoint before seq" in one seek.
# - items: lists as persistent linked lists; a checkpoint that appends to its parent's list adds only the new items,
#   linked to the parent's tail, and older checkpoints keep pointing into the same chain.
# - blobs: any other value, written once and shared by id by the checkpoints of a thread whose value is that same
#   object.
# - meta: the format marker and schema version; since version 3 also `row_id_floor` (retention raises it to the
#   highest id it has seen, and new rows take ids above it: an id is never given twice, so a saver's cached id always
#   means the row it cached) and, in a file migrated from version 2, `legacy_row_ids` (rows up to it may be shared
#   between threads and are never freed).
_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE checkpoints (
        id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        parent_id TEXT,
        node TEXT,
        next TEXT NOT NULL,
        run_id TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL,
        safe INTEGER NOT NULL,
        unsafe_reason TEXT,
        rolled_back_from TEXT,
        manifest TEXT NOT NULL,
        error TEXT,
        pending TEXT,
        PRIMARY KEY (thread_id, seq)
    ) WITHOUT ROWID""",
    "CREATE INDEX checkpoints_safe ON checkpoints (thread_id, safe, seq)",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, prev_id INTEGER, value TEXT NOT NULL)",
    "CREATE TABLE blobs (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
)


def prepare(
    conn: sqlite3.Connection, where: str, migrations: Mapping[int, Migration] | None = None, *, timeout: float
) -> int:
    """Check (and if needed create or migrate) the schema of a freshly opened connection; return its version.

    ``conn`` must be in autocommit mode (``isolation_level=None``), with ``timeout`` (seconds) as its busy timeout.
    Nothing is written to a file that turns out not to be an rxgraph database.
    """
    migrations = MIGRATIONS if migrations is None else migrations
    version = _read_version(conn, where)
    if version == SCHEMA_VERSION:
        return version
    check_not_newer(version, SCHEMA_VERSION, where=where, path=where)
    # Creating or migrating: take the write lock, then look again (another process may have done it meanwhile).
    with write_transaction(conn, where, timeout):
        version = _read_version(conn, where)
        if version is None:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))],
            )
            return SCHEMA_VERSION
        check_not_newer(version, SCHEMA_VERSION, where=where, path=where)
        return migrate(
            conn,
            version,
            SCHEMA_VERSION,
            migrations,
            record=lambda new: conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(new),)),
            errors=(sqlite3.Error,),
            where=where,
            path=where,
        )


def _read_version(conn: sqlite3.Connection, where: str) -> int | None:
    """The file's schema version, or None for an empty database. Raises for anything that is not ours."""
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as error:
        raise IncompatibleDatabaseError(
            f"{where} is not an SQLite database ({error}); give SqliteSaver a new path or an rxgraph checkpoint file",
            path=where,
        ) from error
    if not tables:
        return None
    foreign = (
        f"{where} is an SQLite database but not an rxgraph checkpoint database (its tables: "
        f"{', '.join(sorted(tables)[:8])}); give SqliteSaver a file of its own"
    )
    if "meta" not in tables:
        raise IncompatibleDatabaseError(foreign, path=where)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as error:
        raise IncompatibleDatabaseError(foreign, path=where) from error
    return stored_version(meta, where=where, path=where, foreign=foreign)
