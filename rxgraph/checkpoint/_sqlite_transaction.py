"""``write_transaction``: the one way ``SqliteSaver`` writes, whether it stores a checkpoint or prepares a file."""

from __future__ import annotations

import sqlite3
from types import TracebackType

from ..errors import SaverTimeoutError

__all__ = ["WriteTransaction", "locked_error", "write_transaction"]


class WriteTransaction:
    """``BEGIN IMMEDIATE`` on entry, ``COMMIT`` on a clean exit, ``ROLLBACK`` on any exception (the exception then
    goes on). See :func:`write_transaction`."""

    __slots__ = ("_conn", "_timeout", "_where")

    def __init__(self, conn: sqlite3.Connection, where: str, timeout: float) -> None:
        self._conn = conn
        self._where = where
        self._timeout = timeout

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            raise locked_error(self._where, self._timeout) from error
        return self._conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self._conn
        if exc_type is None:
            try:
                conn.execute("COMMIT")
                return
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def locked_error(where: str, timeout: float) -> SaverTimeoutError:
    """The error for a write that found ``where`` locked for ``timeout`` seconds: SQLite says only "database is
    locked", this says which file, and for how long it was waited on."""
    return SaverTimeoutError(
        f"{where} stayed locked for more than {timeout:g} s (another connection, or another process, was writing "
        "to it); nothing was written. Retry, or open the saver with a longer timeout"
    )


def write_transaction(conn: sqlite3.Connection, where: str, timeout: float) -> WriteTransaction:
    """A context manager holding SQLite's write lock on ``conn`` (in autocommit mode) for the ``with`` block.

    Taking the write lock first (``IMMEDIATE``) makes a read-check-write inside the block atomic across threads and
    processes. The block commits when it ends normally and rolls back when it raises.

    Args:
        conn: a connection opened with ``isolation_level=None``, with ``timeout`` as its busy timeout.
        where: the database file, for the note on a timeout.
        timeout: the connection's busy timeout in seconds, for the note on a timeout.

    Raises:
        SaverTimeoutError: the lock stayed taken for ``timeout`` seconds (its cause is SQLite's OperationalError).
    """
    return WriteTransaction(conn, where, timeout)
