"""``PostgresRelay``: the relay between server processes sharing a ``PostgresSaver``'s database.

Why PostgreSQL itself, and how: the processes already share it, so no broker is added to run and secure. A run's
published events are rows of a table (``rxgraph_server_events``: run, number, event, data), which is what makes a
stream resumable from any process with ``Last-Event-ID`` (a reader asks for the rows above its last number; nothing
is lost or repeated), and what a reader that missed a wake-up still finds at its next look. ``LISTEN``/``NOTIFY``
on one channel carries the rest: the wake-up after each batch of rows, the follow requests and the cancels. A
notification is delivered at the writer's commit, after its rows, so a woken reader finds them.

A writer thread inserts what is published in batches (one transaction per batch, its wake-ups in it), so a run
streaming tokens costs a process one round trip per batch, not per token; a listener thread holds a connection of
its own. Events are kept an hour after they were written, then deleted by the writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from .._log import log
from ._relay import CancelAction, Relay, RelayHandlers

__all__ = ["PostgresRelay"]

_TABLE = "rxgraph_server_events"
_END = "__end__"
"""The event that closes a run's published events (not sent to clients)."""
_LAST = 2**31 - 1
"""The number of the closing row: after every event's."""
_BATCH = 500
_KEEP_SECONDS = 3600
_PRUNE_EVERY = 300.0
_LISTEN_WAKE = 1.0
"""Seconds the listener waits for a notification before it checks whether it is closed."""


def _channel(schema: str) -> str:
    # A channel name is an identifier (63 bytes at most): one per schema, as the servers of a schema share threads.
    return "rxgraph_srv_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


class PostgresRelay(Relay):
    """The relay on the database of a ``PostgresSaver`` (its pool, its schema); see the module docstring.

    Args:
        pool: the saver's connection pool (for the writer and the readers).
        conninfo: how the listener connects (the pool's connection string), with ``connect_kwargs``.
        schema: the saver's schema, which holds the events' table.
    """

    def __init__(self, pool: ConnectionPool[Any], schema: str) -> None:
        self._pool = pool
        self._schema = schema
        self._channel = _channel(schema)
        self._table = sql.Identifier(schema, _TABLE)
        # What the writer sends: a row (run, number, event, data), or a notification alone (run None, payload).
        self._outbox: queue.Queue[tuple[str | None, int, str, str] | None] = queue.Queue()
        self._closed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handlers: RelayHandlers | None = None
        self._waiting: dict[str, asyncio.Event] = {}
        self._threads: list[threading.Thread] = []
        self._listener: psycopg.Connection[Any] | None = None
        self._create_table()

    @property
    def shared(self) -> bool:
        return True

    def _create_table(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            # Two servers starting at once must not both create it (CREATE ... IF NOT EXISTS races on the catalog).
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self._schema}.{_TABLE}",))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id text NOT NULL, seq integer NOT NULL, event text NOT NULL, "
                    "data text NOT NULL, written timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run_id, seq))"
                ).format(self._table)
            )

    def open(self, loop: asyncio.AbstractEventLoop, handlers: RelayHandlers) -> None:
        self._loop, self._handlers = loop, handlers
        for name, target in (("writer", self._write), ("listener", self._listen)):
            thread = threading.Thread(target=target, name=f"rxgraph relay {name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self._closed.set()
        self._outbox.put(None)
        for thread in self._threads:
            thread.join(timeout=10)
        if self._listener is not None:
            self._listener.close()

    # -- sending -------------------------------------------------------------------------------------------------

    def publish(self, run_id: str, events: Sequence[tuple[int, str, str]], *, ended: bool) -> None:
        for number, event, data in events:
            self._outbox.put((run_id, number, event, data))
        if ended:
            self._outbox.put((run_id, _LAST, _END, ""))

    def request_follow(self, run_id: str) -> None:
        self._outbox.put((None, 0, "follow", run_id))

    def request_cancel(self, run_id: str, action: CancelAction) -> None:
        self._outbox.put((None, 0, f"cancel {action}", run_id))

    def _write(self) -> None:
        """The writer's thread: batches of rows and notifications, each batch one transaction."""
        last_prune = 0.0
        while True:
            first = self._outbox.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < _BATCH:
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._outbox.put(None)
                    break
                batch.append(item)
            try:
                self._send(batch)
                now = time.monotonic()
                if now - last_prune > _PRUNE_EVERY:
                    last_prune = now
                    self._prune()
            except Exception:
                log.exception("rxgraph.serve: relaying %d item(s) to the other server processes failed", len(batch))

    def _send(self, batch: list[tuple[str | None, int, str, str]]) -> None:
        rows: list[tuple[str, int, str, str]] = []
        notices: dict[str, None] = {}  # each once, in order
        for run_id, number, event, data in batch:
            if run_id is None:
                notices[f"{event} {data}"] = None
            else:
                rows.append((run_id, number, event, data))
                notices[f"events {run_id}"] = None
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            if rows:
                cursor.executemany(
                    sql.SQL(
                        "INSERT INTO {} (run_id, seq, event, data) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
                    ).format(self._table),
                    rows,
                )
            for notice in notices:
                cursor.execute("SELECT pg_notify(%s, %s)", (self._channel, notice))

    def _prune(self) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE written < now() - make_interval(secs => %s)").format(self._table),
                (_KEEP_SECONDS,),
            )

    # -- hearing -------------------------------------------------------------------------------------------------

    def _listen(self) -> None:
        """The listener's thread: notifications, until closed; a lost connection is replaced."""
        while not self._closed.is_set():
            try:
                # The pool's own connection settings (each may be a function that gives them).
                conninfo = self._pool.conninfo() if callable(self._pool.conninfo) else self._pool.conninfo
                given = self._pool.kwargs() if callable(self._pool.kwargs) else self._pool.kwargs
                kwargs = {k: v for k, v in (given or {}).items() if k != "autocommit"}
                with psycopg.connect(conninfo, autocommit=True, **kwargs) as conn:
                    self._listener = conn
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    while not self._closed.is_set():
                        for notice in conn.notifies(timeout=_LISTEN_WAKE):
                            self._heard(notice.payload)
                            if self._closed.is_set():
                                return
            except psycopg.Error as error:
                if self._closed.is_set():
                    return
                log.warning("rxgraph.serve: the relay's listening connection failed (%s); listening again", error)
                self._closed.wait(_LISTEN_WAKE)
                self._wake_all()  # a reader may have missed a wake-up meanwhile: let it look

    def _heard(self, payload: str) -> None:
        kind, _, run_id = payload.rpartition(" ")
        loop, handlers = self._loop, self._handlers
        if loop is None or handlers is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            if kind == "events":
                loop.call_soon_threadsafe(self._wake, run_id)
            elif kind == "follow":
                loop.call_soon_threadsafe(handlers.follow_requested, run_id)
            elif kind in ("cancel interrupt", "cancel rollback"):
                action: CancelAction = "rollback" if kind.endswith("rollback") else "interrupt"
                loop.call_soon_threadsafe(handlers.cancel_requested, run_id, action)

    def _wake(self, run_id: str) -> None:
        waiting = self._waiting.pop(run_id, None)
        if waiting is not None:
            waiting.set()

    def _wake_all(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                for run_id in list(self._waiting):
                    loop.call_soon_threadsafe(self._wake, run_id)

    # -- reading -------------------------------------------------------------------------------------------------

    def changed(self, run_id: str) -> asyncio.Event:
        waiting = self._waiting.get(run_id)
        if waiting is None:
            waiting = self._waiting[run_id] = asyncio.Event()
        return waiting

    def read(self, run_id: str, after: int) -> tuple[list[tuple[int, str, str]], bool]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                sql.SQL("SELECT seq, event, data FROM {} WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s").format(
                    self._table
                ),
                (run_id, after, _BATCH * 4),
            ).fetchall()
        events = [(int(seq), str(event), str(data)) for seq, event, data in rows]
        ended = bool(events) and events[-1][1] == _END
        return [e for e in events if e[1] != _END], ended
