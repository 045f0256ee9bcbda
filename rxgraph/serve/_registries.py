"""``registry_for`` and ``relay_for``: where the server keeps its thread and run records, and how it reaches the
other server processes, chosen by the checkpointer it serves — so that the records live as long as the threads they
describe, and processes that share the threads share the runs."""

from __future__ import annotations

from ..checkpoint import CheckpointSaver, PostgresSaver, SqliteSaver
from ._registry import MemoryRegistry, Registry
from ._registry_sqlite import SqliteRegistry
from ._relay import LocalRelay, Relay

__all__ = ["registry_for", "relay_for"]

_PRIVATE_SQLITE = ("", ":memory:")
"""SQLite paths of a database no other connection can open: the saver's records could not be beside it."""


def registry_for(saver: CheckpointSaver) -> Registry:
    """The registry beside ``saver``'s checkpoints; the caller closes it (before the saver).

    - a ``SqliteSaver``: a ``SqliteRegistry`` on its file, in tables of its own (for a private database,
      ``":memory:"``, a ``MemoryRegistry``: no other connection can open it);
    - a ``PostgresSaver``: a ``PostgresRegistry`` on its pool and in its schema, shared by every server process that
      uses the database;
    - a ``DelegatingSaver`` (``rxgraph.testing``): the registry of the saver it wraps;
    - anything else (a ``MemorySaver``, a saver of your own): a ``MemoryRegistry``. The server of a custom saver keeps
      its records in this process's memory only: a restart forgets which threads it created, their owners and
      metadata, and its runs, though the checkpoints stay in your store.

    Raises:
        IncompatibleDatabaseError: the records' tables in the saver's database are newer than this code.
        SaverTimeoutError: the database stayed locked (or did not answer) while the records' tables were checked.
        SaverClosedError: the ``PostgresSaver`` was closed.
    """
    saver = _innermost(saver)
    if isinstance(saver, SqliteSaver):
        return MemoryRegistry() if saver.path in _PRIVATE_SQLITE else SqliteRegistry(saver.path)
    if isinstance(saver, PostgresSaver):
        # Imported here: psycopg is needed only when the saver is a PostgresSaver (which already imported it).
        from ._registry_postgres import PostgresRegistry

        return PostgresRegistry(saver.pool, schema=saver.schema)
    return MemoryRegistry()


def relay_for(saver: CheckpointSaver) -> Relay:
    """The relay between the server processes that share ``saver``'s storage: a ``PostgresRelay`` on a
    ``PostgresSaver``'s database (the one storage several servers share), else a ``LocalRelay``. The caller opens
    and closes it.

    Raises:
        SaverTimeoutError, psycopg.Error: the events' table could not be checked (PostgreSQL).
        SaverClosedError: the ``PostgresSaver`` was closed.
    """
    saver = _innermost(saver)
    if isinstance(saver, PostgresSaver):
        from ._relay_postgres import PostgresRelay

        return PostgresRelay(saver.pool, saver.schema)
    return LocalRelay()


def _innermost(saver: CheckpointSaver) -> CheckpointSaver:
    """The saver that stores, under any ``DelegatingSaver`` wrapped around it."""
    from ..testing import DelegatingSaver  # imported here: the testing kit is not part of a server otherwise

    while isinstance(saver, DelegatingSaver):
        saver = saver.inner
    return saver
