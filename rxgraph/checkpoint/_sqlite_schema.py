"""The SQLite schema of ``SqliteSaver``: creation, version check and migrations, run once when a file is opened."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping

from ..errors import IncompatibleDatabaseError
from ._sqlite_transaction import write_transaction

__all__ = ["FORMAT", "MIGRATIONS", "SCHEMA_VERSION", "Migration", "prepare"]

FORMAT = "rxgraph.checkpoints"
"""The ``format`` row of the ``meta`` table: what marks a file as an rxgraph checkpoint database."""

SCHEMA_VERSION = 2
"""The schema version this code writes."""

Migration = Callable[[sqlite3.Connection], None]
"""Upgrades a database by one version, inside the transaction that opened it (it must not commit)."""


def _add_the_error_column(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: checkpoints record the error of a failed run (``Checkpoint.error``)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN error TEXT")


MIGRATIONS: dict[int, Migration] = {1: _add_the_error_column}
"""Version ``v`` -> the migration from ``v`` to ``v + 1``. Opening an older file runs them in order."""

# Why each piece is there:
# - checkpoints: one row per checkpoint, O(number of state keys) in size; `manifest` maps each key to a blob id or
#   to [tail item id, length] for a list. The primary key (thread_id, seq) is the chain, and the head is its last
#   entry; clustering the rows on it (WITHOUT ROWID) saves a b-tree per insert. The (thread_id, safe, seq) index
#   answers "newest safe checkpoint before seq" in one seek.
# - items: lists as persistent linked lists; a checkpoint that appends to its parent's list adds only the new items,
#   linked to the parent's tail, and older checkpoints keep pointing into the same chain.
# - blobs: any other value, written once and shared by id by every checkpoint whose value is that same object.
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
    _check_not_newer(version, where)
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
            version = SCHEMA_VERSION
        else:
            _check_not_newer(version, where)
            while version < SCHEMA_VERSION:
                migrate = migrations.get(version)
                if migrate is None:
                    raise IncompatibleDatabaseError(
                        f"{where}: schema version {version} is older than {SCHEMA_VERSION} and no migration from "
                        f"version {version} is registered",
                        path=where,
                    )
                try:
                    migrate(conn)
                except sqlite3.Error as error:
                    raise IncompatibleDatabaseError(
                        f"{where}: the migration from schema version {version} failed: {error}", path=where
                    ) from error
                version += 1
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    return version


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
    if meta.get("format") != FORMAT:
        raise IncompatibleDatabaseError(foreign, path=where)
    raw = meta.get("schema_version")
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise IncompatibleDatabaseError(
            f"{where}: the meta table has no valid schema_version ({raw!r})", path=where
        ) from None


def _check_not_newer(version: int | None, where: str) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise IncompatibleDatabaseError(
            f"{where}: schema version {version} was written by a newer rxgraph; this one knows versions up to "
            f"{SCHEMA_VERSION}. Upgrade rxgraph to open it.",
            path=where,
        )
