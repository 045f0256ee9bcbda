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
listens (:class:`~rxgraph.checkpoint._postgres_listener.RunListener`) — from before the first lock is taken, so that
what is sent about a thread held here is heard. Neither waits for the server without a deadline (the saver's
``timeout``, through its :class:`~rxgraph.checkpoint._postgres_database.Watchdog`):

- A lock connection that does not answer in time is *lost*: it is dropped, the claim whose attempt was on it fails
  with ``SaverTimeoutError``, and so do the attempts queued behind it (their claims have waited as long); later
  operations open a new connection.
- The threads held on a lost connection are held in the database no longer (once its server process notices, it
  frees them). Their runs go on, but without exclusivity: another process may take such a thread, and to it the run
  is dead (its lock is gone), so it rewinds that turn before its own, like a killed process's. The run's next write
  then fails its compare-and-set (``CheckpointConflictError``): it cannot write over the other turn, and the history
  stays one chain. To close that window, the lost locks are taken back on the new connection as soon as the database
  lets them go: at once, at each ``poll``, and when a release is heard.
- The listening connection hears nothing from a server that stopped answering, so it is asked a question every
  ``timeout`` seconds, with the same deadline, and replaced if it does not answer. A notification sent meanwhile is
  missed: waiting runs try again at each ``poll`` anyway, and an interrupt is asked again each time its line is
  refused the thread, until it gets it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from .._log import log
from ..errors import SaverTimeoutError
from ._postgres_database import ClaimedHeads, Watchdog, named, server_limits
from ._postgres_listener import RunListener
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
    """Run exclusivity for the processes sharing a ``PostgresSaver``'s schema (see the module docstring).

    ``watchdog`` is the saver's: its ``timeout`` bounds every wait for the server (connecting included), and its
    thread drops a connection whose server does not answer. ``heads``: the saver's :class:`ClaimedHeads`; an attempt
    then reads the thread's head in its own round trip, in a statement of its own that starts once the lock is taken,
    and the saver keeps what it read for the run's first read of the head. Every release (and a lost connection)
    tells the saver to forget it.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        watchdog: Watchdog,
        poll_interval: float = 0.5,
        connect_kwargs: dict[str, Any] | None = None,
        heads: ClaimedHeads | None = None,
    ) -> None:
        self.poll_interval = poll_interval
        self._heads = heads
        self._conninfo = conninfo
        self._connect_kwargs = dict(connect_kwargs or {})
        self._schema = schema
        self._watchdog = watchdog
        self._owner = uuid.uuid4().hex
        self._table = sql.Identifier(schema, "run_slots")
        self._events: RunLockEvents | None = None
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads_by_key: dict[int, set[str]] = {}  # every thread id attempted or held here, by its key
        self._held: set[str] = set()  # held by runs of this process, and locked on the current connection
        self._lost: set[str] = set()  # held by runs of this process, but their lock went with a lost connection
        self._interrupting: dict[str, str] = {}  # a thread this process asked for with an interrupt, and the asker
        # When the lock connection was last lost or could not be made, and why: attempts posted before fail with it.
        self._failed_at = -math.inf
        self._failure: Exception | None = None
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._listener = RunListener(
            self._connect,
            watchdog,
            channel=CHANNEL,
            closed=self._closed,
            poll_interval=lambda: self.poll_interval,
            heard=self._heard,
            poll=self._poll,
        )
        self._workers: list[threading.Thread] = []

    # -- RunLocks ------------------------------------------------------------------------------------------------

    def open(self, events: RunLockEvents) -> None:
        # The connections are made on the locks' own threads: opening never waits for the server (a graph may
        # open them from an event loop).
        self._events = events
        for name, target in (("ops", self._run_ops), ("listener", self._listener.run)):
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
            # Bounded like any wait for the server: past it, the release is still done in its turn, or its lock
            # went with a lost connection.
            freed.wait(self._watchdog.limit)

    def interrupt(self, thread_id: str, by_run: str) -> None:
        self._post(self._notify, "interrupt", thread_id, by_run)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._ops.put((self._notify_stop, (), time.monotonic()))  # wakes this process's listener at once
        self._closed.set()
        self._ops.put(_STOP)
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join()
        for conn in (self._conn, self._listener.connection):
            if conn is not None:
                conn.close()  # frees every advisory lock this process held

    # -- the operations, on the ops thread -----------------------------------------------------------------------

    def _post(self, operation: Callable[..., None], *args: Any) -> None:
        if not self._closed.is_set():
            self._ops.put((operation, args, time.monotonic()))

    def _run_ops(self) -> None:
        assert self._events is not None
        events = self._events
        # A process listens before it takes (or waits for) its first thread: an interrupt or a release sent for it
        # after that is heard. Bounded: the listener's first try is (connecting, then LISTEN with a deadline).
        self._listener.listening.wait()
        while True:
            item = self._ops.get()
            if item is _STOP:
                # Whoever still waits for an operation to be done is let go: nothing more will be done.
                while not self._ops.empty():
                    left = self._ops.get_nowait()
                    if left is not _STOP and left[0] is _wake:
                        _wake(*left[1])
                return
            operation, args, posted = item
            if operation == self._attempt and posted < self._failed_at:
                # Its claim has waited on a connection that failed since: it fails with it rather than wait again.
                assert self._failure is not None
                events.unavailable(args[0], self._failure)
                continue
            try:
                operation(*args)
            except (psycopg.Error, SaverTimeoutError) as error:
                failure = self._said(error)
                # Taking lost threads back is tried again at each poll: while the server is away, say it quietly.
                level = logging.DEBUG if operation == self._retake else logging.WARNING
                log.log(level, "run exclusivity: %s%r failed on PostgreSQL: %s", operation.__name__, args, failure)
                conn = self._conn
                if conn is None or conn.closed:
                    # Before the claim hears of it: what is posted once it has, is tried on a new connection.
                    self._lose(failure)
                # else the statement failed, not the connection: its locks are still held
                if operation == self._attempt:
                    events.unavailable(args[0], failure)

    def _attempt(self, thread_id: str, run_id: str) -> None:
        key = lock_key(self._schema, thread_id)
        with self._lock:
            self._threads_by_key.setdefault(key, set()).add(thread_id)
            mine = thread_id in self._held or thread_id in self._lost
        assert self._events is not None
        if mine:
            self._events.acquired(thread_id, None)
            return
        # One round trip: try the lock; if taken, say so in run_slots; either way read what the row said before.
        # With `heads`, the same round trip reads the thread's head, in a statement of its own: it starts once the
        # lock is taken, so it sees every write of the previous holder (all committed before it let go), where the
        # first statement's reads see the database as it was before the lock was tried.
        attempt = sql.SQL(
            "WITH got AS (SELECT pg_try_advisory_lock(%(key)s) AS ok), "
            "mine AS (INSERT INTO {table} (thread_id, run_id, ending, owner) "
            "  SELECT %(thread)s, %(run)s, false, %(owner)s FROM got WHERE ok "
            "  ON CONFLICT (thread_id) DO UPDATE SET run_id = excluded.run_id, ending = false, "
            "  owner = excluded.owner, since = now()) "
            "SELECT got.ok, slot.run_id, slot.ending "
            "FROM got LEFT JOIN {table} slot ON slot.thread_id = %(thread)s"
        ).format(table=self._table)
        params = {"key": key, "thread": thread_id, "run": run_id, "owner": self._owner}
        heads = self._heads
        row: tuple[Any, ...] | None = None
        head: tuple[Any, ...] | None = None
        try:
            if heads is None:
                row = self._execute(attempt, params)
            else:
                heads.reading(thread_id)
                row, head = self._execute_script(sql.Composed([attempt, sql.SQL("; "), heads.statement]), params)
        except psycopg.Error:
            conn = self._conn
            if conn is not None and not conn.closed:
                # The statement failed on a live connection (its row stayed locked too long, say) after it may have
                # taken the lock: a session's advisory lock outlives a failed statement, so let it go.
                with contextlib.suppress(psycopg.Error, SaverTimeoutError):
                    self._execute("SELECT pg_advisory_unlock(%s)", (key,))
            raise
        finally:
            if heads is not None:
                heads.read(thread_id, head, taken=row is not None and bool(row[0]))
        assert row is not None
        if row[0]:
            with self._lock:
                self._held.add(thread_id)
                self._interrupting.pop(thread_id, None)
            self._events.acquired(thread_id, run_id)
            return
        self._events.refused(thread_id, RemoteHolder(row[1], bool(row[2])))
        with self._lock:
            asker = self._interrupting.get(thread_id)
        if asker is not None and not row[2]:
            # Asked again at each refusal: a holder whose listening connection was being replaced missed the last.
            self._notify("interrupt", thread_id, asker)

    def _update(self, thread_id: str, run_id: str, ending: bool) -> None:
        with self._lock:
            held = thread_id in self._held
        if held:
            self._execute(
                sql.SQL("UPDATE {} SET run_id = %s, ending = %s WHERE thread_id = %s AND owner = %s").format(
                    self._table
                ),
                (run_id, ending, thread_id, self._owner),
            )

    def _release(self, thread_id: str) -> None:
        if self._heads is not None:
            self._heads.written(thread_id)  # once let go, another process may write it
        with self._lock:
            held = thread_id in self._held
            self._held.discard(thread_id)
            self._lost.discard(thread_id)  # its lock went with its connection: nothing to free
        try:
            if held:
                key = lock_key(self._schema, thread_id)
                # One round trip: the row goes, the lock is freed, and the waiting processes hear of it on commit.
                self._execute(
                    sql.SQL(
                        "WITH gone AS (DELETE FROM {} WHERE thread_id = %s AND owner = %s) "
                        "SELECT pg_advisory_unlock(%s), pg_notify(%s, %s)"
                    ).format(self._table),
                    (thread_id, self._owner, key, CHANNEL, self._payload("released", key, None)),
                )
        finally:
            self._forget(thread_id)  # held or only waited for: stop listening for it

    def _retake(self) -> None:
        """Take back the threads whose lock went with a lost connection (a new connection does it as it opens)."""
        conn = self._conn
        if conn is None or conn.closed:
            self._connection()
        else:
            self._take_back()

    def _payload(self, kind: str, key: int, by_run: str | None) -> str:
        return json.dumps({"kind": kind, "schema": self._schema, "key": key, "by": by_run})

    def _notify(self, kind: str, thread_id: str, by_run: str | None) -> None:
        if kind == "interrupt" and by_run is not None:
            with self._lock:
                self._interrupting[thread_id] = by_run
        payload = self._payload(kind, lock_key(self._schema, thread_id), by_run)
        self._execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def _notify_stop(self) -> None:
        conn = self._conn
        if conn is not None and not conn.closed:  # without a connection, the listener stops at its next poll
            self._execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps({"kind": "stop"})))

    def _forget(self, thread_id: str) -> None:
        key = lock_key(self._schema, thread_id)
        with self._lock:
            self._interrupting.pop(thread_id, None)
            known = self._threads_by_key.get(key)
            if known is not None:
                known.discard(thread_id)
                if not known:
                    del self._threads_by_key[key]

    # -- the connection ------------------------------------------------------------------------------------------

    def _connect(self, role: str) -> psycopg.Connection[Any]:
        """A new connection of the locks (``role`` names it in ``pg_stat_activity`` unless the connection string
        names the application), with the saver's timeout for connecting and, on the server, for locks."""
        kwargs = {
            "connect_timeout": max(2, math.ceil(self._watchdog.timeout)),
            **named(self._conninfo, role, self._schema),
        }
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, **{**kwargs, **self._connect_kwargs})
        except pg_errors.ConnectionTimeout as error:
            raise self._watchdog.unanswered(error) from error
        try:
            with self._watchdog.watching(conn) as watched:
                watched.execute(
                    "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                    server_limits(self._watchdog.timeout),
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> psycopg.Connection[Any]:
        """The lock connection; a new one if there is none, which takes back the threads lost with the last."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = self._conn = self._connect("run locks")
        except (psycopg.Error, SaverTimeoutError) as error:
            self._failed_at, self._failure = time.monotonic(), self._said(error)
            raise
        try:
            self._take_back()
        except (psycopg.Error, SaverTimeoutError):
            if conn.closed:
                raise  # the new connection failed too
            log.warning("run exclusivity: could not take back the threads lost with the last connection", exc_info=True)
        return conn

    def _execute(self, query: LiteralString | sql.Composed, params: Any) -> tuple[Any, ...] | None:
        """One statement on the lock connection, under the watchdog; its first row, if it returns rows."""
        conn = self._connection()
        with self._watchdog.watching(conn) as watched:
            cursor = watched.execute(query, params)
            return cursor.fetchone() if cursor.description is not None else None

    def _execute_script(
        self, query: sql.Composed, params: dict[str, Any]
    ) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        """Two statements in one round trip on the lock connection, under the watchdog; the first row of each."""
        conn = self._connection()
        with self._watchdog.watching(conn) as watched:
            cursor = watched.script(query, params)
            first = cursor.fetchone()
            cursor.nextset()
            return first, cursor.fetchone()

    def _lose(self, failure: Exception) -> None:
        """The lock connection broke or did not answer in time: its locks are gone (the server frees them when it
        notices). What was held on it is taken back as soon as the database lets it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._failed_at, self._failure = time.monotonic(), failure
        with self._lock:
            lost = sorted(self._held)
            self._lost.update(self._held)
            self._held.clear()
        if self._heads is not None:
            for thread_id in lost:
                self._heads.written(thread_id)  # no longer held: another process may write it
        if lost:
            log.warning(
                "run exclusivity: the lock connection was lost (%s); threads %s are not held in the database until "
                "they are taken back; meanwhile another process may take them, and every write still compares and "
                "sets the thread's head",
                failure,
                lost,
            )
            self._post(self._retake)

    def _take_back(self) -> None:
        with self._lock:
            lost = sorted(self._lost)
        for thread_id in lost:
            row = self._execute("SELECT pg_try_advisory_lock(%s)", (lock_key(self._schema, thread_id),))
            if row is not None and row[0]:
                with self._lock:
                    self._lost.discard(thread_id)
                    self._held.add(thread_id)
                log.info("run exclusivity: thread %r is held in the database again", thread_id)

    def _said(self, error: BaseException) -> Exception:
        """The error a claim fails with: a timeout of the server's (a row of run_slots locked too long) as the
        saver says timeouts; anything else as it is."""
        if isinstance(error, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
            return SaverTimeoutError(
                f"run exclusivity: PostgreSQL did not answer within {self._watchdog.timeout:g} s "
                f"({type(error).__name__}: {error}); retry, or give the saver a longer timeout"
            )
        assert isinstance(error, Exception)
        return error

    # -- what the listener hears (on its thread, see _postgres_listener) -----------------------------------------

    def _poll(self) -> None:
        assert self._events is not None
        self._events.poll()
        with self._lock:
            lost = bool(self._lost)
        if lost:
            self._post(self._retake)

    def _heard(self, payload: str) -> None:
        events = self._events
        assert events is not None
        try:
            message = json.loads(payload)
            if message.get("schema") != self._schema:
                return
            kind, key, by_run = message["kind"], int(message["key"]), message.get("by")
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("run exclusivity: ignoring a notification it cannot read: %r", payload)
            return
        with self._lock:
            threads = [
                (thread_id, thread_id in self._held, thread_id in self._lost)
                for thread_id in sorted(self._threads_by_key.get(key, ()))
            ]
        for thread_id, held, lost in threads:
            if kind == "released" and lost:
                self._post(self._retake)  # whoever took it in between let it go: take it back now
            elif kind == "released" and not held:
                events.released(thread_id)
            elif kind == "interrupt" and (held or lost) and isinstance(by_run, str):
                events.interrupted(thread_id, by_run)
