"""``PostgresRunLocks``: run exclusivity across processes, on PostgreSQL advisory locks and LISTEN/NOTIFY.

A thread held by a process is a session-level advisory lock taken on that process's lock connection, keyed by a
64-bit hash of the schema and the thread id. The lock lives exactly as long as the connection: a process that dies,
even killed, closes its socket and the server frees all its locks at once (no lease to wait out; the others notice
on their next ``poll``). The ``run_slots`` table says which run holds a thread and whether it is ending, for the
message of a ``reject`` and for telling a live run from one finishing its rewind; the lock, not the row, is the truth
(a dead process's row stays until the next holder overwrites it).

Notifications go on the channel ``rxgraph_runs`` as JSON ``{"kind": "released" | "interrupt", "schema", "key",
"by"}``: a release tells the waiting processes to try again at once, an interrupt asks the holder of ``key`` to
cancel its run. Payloads carry the key, not the thread id, so that they stay small whatever the id.

Two connections per saver, each on a thread of its own: one takes and frees locks (an operation queue, in order), one
listens. If the lock connection breaks, the locks it held are gone: it reconnects, takes back what it can, and logs
what another process took in between (the compare-and-set of every write still keeps that thread's history whole).
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from .._log import log
from ._run_locks import RemoteHolder, RunLockEvents, RunLocks

__all__ = ["CHANNEL", "PostgresRunLocks", "lock_key"]

CHANNEL = "rxgraph_runs"
"""The LISTEN/NOTIFY channel of run exclusivity (the payload names the schema)."""


def lock_key(schema: str, thread_id: str) -> int:
    """The advisory lock (a signed 64-bit key) that stands for ``thread_id`` in ``schema``."""
    digest = hashlib.blake2b(f"rxgraph.runs\x00{schema}\x00{thread_id}".encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


_STOP = object()


def _wake(event: threading.Event) -> None:
    event.set()


class PostgresRunLocks(RunLocks):
    """Run exclusivity for the processes sharing a ``PostgresSaver``'s schema (see the module docstring)."""

    def __init__(
        self, conninfo: str, *, schema: str, poll_interval: float = 0.5, connect_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.poll_interval = poll_interval
        self._conninfo = conninfo
        self._connect_kwargs = dict(connect_kwargs or {})
        self._schema = schema
        self._owner = uuid.uuid4().hex
        self._table = sql.Identifier(schema, "run_slots")
        self._events: RunLockEvents | None = None
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads_by_key: dict[int, set[str]] = {}  # every thread id attempted or held here, by its key
        self._held: set[str] = set()
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._listener: psycopg.Connection[Any] | None = None
        self._workers: list[threading.Thread] = []

    # -- RunLocks ------------------------------------------------------------------------------------------------

    def open(self, events: RunLockEvents) -> None:
        # The connections are made on the locks' own threads: opening never waits for the server (a graph may
        # open them from an event loop).
        self._events = events
        for name, target in (("ops", self._run_ops), ("listener", self._listen)):
            worker = threading.Thread(target=target, name=f"rxgraph-run-locks-{name}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def attempt(self, thread_id: str, run_id: str) -> None:
        self._post(self._attempt, thread_id, run_id)

    def update(self, thread_id: str, run_id: str, *, ending: bool) -> None:
        self._post(self._update, thread_id, run_id, ending)

    def release(self, thread_id: str, *, wait: bool = False) -> None:
        self._post(self._release, thread_id)
        if wait and not self._closed.is_set():
            freed = threading.Event()
            self._post(_wake, freed)  # the operations run in order: this one runs once the release is done
            freed.wait()

    def interrupt(self, thread_id: str, by_run: str) -> None:
        self._post(self._notify, "interrupt", thread_id, by_run)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._ops.put((self._notify_stop, ()))  # wakes this process's listener, which then sees it is closed
        self._closed.set()
        self._ops.put(_STOP)
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join()
        for conn in (self._conn, self._listener):
            if conn is not None:
                conn.close()  # frees every advisory lock this process held

    # -- the operations, on the ops thread -----------------------------------------------------------------------

    def _post(self, operation: Callable[..., None], *args: Any) -> None:
        if not self._closed.is_set():
            self._ops.put((operation, args))

    def _run_ops(self) -> None:
        assert self._events is not None
        while True:
            item = self._ops.get()
            if item is _STOP:
                # Whoever still waits for an operation to be done is let go: nothing more will be done.
                while not self._ops.empty():
                    left = self._ops.get_nowait()
                    if left is not _STOP and left[0] is _wake:
                        _wake(*left[1])
                return
            operation, args = item
            try:
                operation(*args)
            except psycopg.Error as error:
                log.exception("run exclusivity: %s%r failed on PostgreSQL", operation.__name__, args)
                if operation == self._attempt:
                    self._events.unavailable(args[0], error)
                self._reconnect()

    def _attempt(self, thread_id: str, run_id: str) -> None:
        key = lock_key(self._schema, thread_id)
        with self._lock:
            self._threads_by_key.setdefault(key, set()).add(thread_id)
        assert self._events is not None
        if self._holds(thread_id):
            self._events.acquired(thread_id, None)
            return
        # One round trip: try the lock; if taken, say so in run_slots; either way read what the row said before.
        row = (
            self._connection()
            .execute(
                sql.SQL(
                    "WITH got AS (SELECT pg_try_advisory_lock(%(key)s) AS ok), "
                    "mine AS (INSERT INTO {table} (thread_id, run_id, ending, owner) "
                    "  SELECT %(thread)s, %(run)s, false, %(owner)s FROM got WHERE ok "
                    "  ON CONFLICT (thread_id) DO UPDATE SET run_id = excluded.run_id, ending = false, "
                    "  owner = excluded.owner, since = now()) "
                    "SELECT got.ok, slot.run_id, slot.ending "
                    "FROM got LEFT JOIN {table} slot ON slot.thread_id = %(thread)s"
                ).format(table=self._table),
                {"key": key, "thread": thread_id, "run": run_id, "owner": self._owner},
            )
            .fetchone()
        )
        assert row is not None
        if row[0]:
            with self._lock:
                self._held.add(thread_id)
            self._events.acquired(thread_id, run_id)
        else:
            self._events.refused(thread_id, RemoteHolder(row[1], bool(row[2])))

    def _update(self, thread_id: str, run_id: str, ending: bool) -> None:
        if self._holds(thread_id):
            self._connection().execute(
                sql.SQL("UPDATE {} SET run_id = %s, ending = %s WHERE thread_id = %s AND owner = %s").format(
                    self._table
                ),
                (run_id, ending, thread_id, self._owner),
            )

    def _release(self, thread_id: str) -> None:
        if not self._holds(thread_id):
            self._forget(thread_id)  # it was only waiting: stop listening for it
            return
        with self._lock:
            self._held.discard(thread_id)
        key = lock_key(self._schema, thread_id)
        # One round trip: the row goes, the lock is freed, and the waiting processes hear of it on commit.
        self._connection().execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {} WHERE thread_id = %s AND owner = %s) "
                "SELECT pg_advisory_unlock(%s), pg_notify(%s, %s)"
            ).format(self._table),
            (thread_id, self._owner, key, CHANNEL, self._payload("released", key, None)),
        )
        self._forget(thread_id)

    def _payload(self, kind: str, key: int, by_run: str | None) -> str:
        return json.dumps({"kind": kind, "schema": self._schema, "key": key, "by": by_run})

    def _notify(self, kind: str, thread_id: str, by_run: str | None) -> None:
        payload = self._payload(kind, lock_key(self._schema, thread_id), by_run)
        self._connection().execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def _holds(self, thread_id: str) -> bool:
        with self._lock:
            return thread_id in self._held

    def _notify_stop(self) -> None:
        self._connection().execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps({"kind": "stop"})))

    def _forget(self, thread_id: str) -> None:
        key = lock_key(self._schema, thread_id)
        with self._lock:
            known = self._threads_by_key.get(key)
            if known is not None:
                known.discard(thread_id)
                if not known:
                    del self._threads_by_key[key]

    # -- the connection ------------------------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._conninfo, autocommit=True, **self._connect_kwargs)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def _reconnect(self) -> None:
        """An operation failed: if the lock connection broke (and its locks with it), connect again and take back
        what this process held."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return  # the statement failed, not the connection: the locks are still held
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        try:
            self._conn = conn = self._connect()
        except psycopg.Error:
            log.exception("run exclusivity: cannot reconnect to PostgreSQL; threads held here are not held there")
            return
        with self._lock:
            held = sorted(self._held)
        for thread_id in held:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(self._schema, thread_id),)).fetchone()
            if row is None or not row[0]:
                log.warning(
                    "run exclusivity: the lock on thread %r was lost with the connection and another process took "
                    "it; its writes still compare-and-set",
                    thread_id,
                )

    # -- the listener --------------------------------------------------------------------------------------------

    def _listen(self) -> None:
        assert self._events is not None
        events = self._events
        listener = self._listener = self._relisten()
        while not self._closed.is_set():
            if listener is None:
                self._closed.wait(self.poll_interval)
                events.poll()  # waiting runs find out whether the server is back (or fail if it is not)
                listener = self._relisten()
                continue
            try:
                for notice in listener.notifies(timeout=self.poll_interval):
                    if self._closed.is_set():
                        return
                    self._heard(events, notice.payload)
            except psycopg.Error:
                if self._closed.is_set():
                    return
                log.exception("run exclusivity: the listening connection failed; reconnecting")
                listener = self._relisten()
            if not self._closed.is_set():
                events.poll()

    def _relisten(self) -> psycopg.Connection[Any] | None:
        try:
            listener = self._connect()
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        except psycopg.Error:
            return None
        self._listener = listener
        return listener

    def _heard(self, events: RunLockEvents, payload: str) -> None:
        try:
            message = json.loads(payload)
            if message.get("schema") != self._schema:
                return
            kind, key, by_run = message["kind"], int(message["key"]), message.get("by")
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("run exclusivity: ignoring a notification it cannot read: %r", payload)
            return
        with self._lock:
            threads = [(thread_id, thread_id in self._held) for thread_id in sorted(self._threads_by_key.get(key, ()))]
        for thread_id, held in threads:
            if kind == "released" and not held:
                events.released(thread_id)
            elif kind == "interrupt" and held and isinstance(by_run, str):
                events.interrupted(thread_id, by_run)
