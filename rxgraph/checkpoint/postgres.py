"""Checkpoints in PostgreSQL, shared by every process that connects to the database: ``PostgresSaver`` (install the
``postgres`` extra: psycopg 3 and psycopg_pool).

The same names are in :mod:`rxgraph.checkpoint`; importing either does not import psycopg, which is loaded when a
saver is opened. See ``PostgresSaver`` for the storage, the compare-and-set and the run exclusivity across
processes.
"""

from ._postgres import PostgresSaver, PostgresSaverStats

__all__ = ["PostgresSaver", "PostgresSaverStats"]
