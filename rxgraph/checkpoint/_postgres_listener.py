"""``RunListener``: the listening connection of ``PostgresRunLocks`` and its thread.

It listens on the channel of run exclusivity and hands every notification it hears to the locks, as its payload;
it also tells the locks when to ``poll``, every ``poll_interval`` seconds. It waits for the server no longer than
the saver's ``timeout``: a server that stopped answering sends nothing, which sounds like quiet, so it asks it a
question every ``timeout`` seconds, with the same deadline, and listens on a new connection when the question is not
answered (a notification sent meanwhile is missed; see :mod:`rxgraph.checkpoint._postgres_locks` for why that is
safe). Without a connection, it tries again at each poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from .._log import log
from ..errors import SaverTimeoutError
from ._postgres_database import Watchdog

__all__ = ["RunListener"]


class RunListener:
    """What ``PostgresRunLocks`` hears, on a connection of its own; :meth:`run` is its thread.

    Args:
        connect: a new connection of the locks, named by its role (with the saver's timeout for connecting).
        watchdog: the saver's; its ``timeout`` bounds every wait for the server.
        channel: the channel to listen on.
        closed: set when the locks close: the listener stops.
        poll_interval: the locks' ``poll_interval``, read at each wait.
        heard: called with the payload of every notification heard.
        poll: called every ``poll_interval`` seconds, and at each try to listen again without a connection.
    """

    def __init__(
        self,
        connect: Callable[[str], psycopg.Connection[Any]],
        watchdog: Watchdog,
        *,
        channel: str,
        closed: threading.Event,
        poll_interval: Callable[[], float],
        heard: Callable[[str], None],
        poll: Callable[[], None],
    ) -> None:
        self._connect = connect
        self._watchdog = watchdog
        self._channel = channel
        self._closed = closed
        self._poll_interval = poll_interval
        self._heard = heard
        self._poll = poll
        self.listening = threading.Event()
        """Set once the listener has tried to listen (connecting, then LISTEN with a deadline), done or not."""
        self.connection: psycopg.Connection[Any] | None = None
        """The listening connection (the last one, once the locks close), to close after the thread ends."""

    def run(self) -> None:
        """Listen until the locks close: the listener's thread."""
        try:
            listener = self.connection = self._relisten()
        finally:
            self.listening.set()
        asked = polled = time.monotonic()
        # It wakes for whichever comes first: a poll, or asking the server whether it still answers.
        nap = min(self._poll_interval(), self._watchdog.timeout)
        while not self._closed.is_set():
            if listener is None:
                self._closed.wait(self._poll_interval())
                self._poll()  # waiting runs find out whether the server is back (or fail if it is not)
                listener = self._relisten()
                asked = polled = time.monotonic()
                continue
            try:
                for notice in listener.notifies(timeout=nap):
                    if self._closed.is_set():
                        return
                    self._heard(notice.payload)
                if time.monotonic() - asked >= self._watchdog.timeout:
                    # A stopped server sends nothing, which sounds like quiet: ask it something, with a deadline.
                    with self._watchdog.watching(listener) as watched:
                        watched.execute("SELECT 1")
                    asked = time.monotonic()
            except (psycopg.Error, SaverTimeoutError) as error:
                if self._closed.is_set():
                    return
                log.warning("run exclusivity: the listening connection failed (%s); listening on a new one", error)
                listener.close()
                listener = self._relisten()
                asked = time.monotonic()
            if not self._closed.is_set() and time.monotonic() - polled >= self._poll_interval():
                self._poll()
                polled = time.monotonic()

    def _relisten(self) -> psycopg.Connection[Any] | None:
        try:
            listener = self._connect("run listener")
        except (psycopg.Error, SaverTimeoutError):
            return None
        try:
            with self._watchdog.watching(listener) as watched:
                watched.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except (psycopg.Error, SaverTimeoutError):
            listener.close()
            return None
        self.connection = listener
        return listener
