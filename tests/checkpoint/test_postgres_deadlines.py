"""No wait for PostgreSQL without a deadline: a server process that stops answering fails the turn that waits on it
with ``SaverTimeoutError`` (within the saver's ``timeout``), never hangs it, and the next turn works.

The failures are real: a backend process of the test server is stopped with SIGSTOP (a stopped process keeps its
socket open and its kernel answers for it, so neither PostgreSQL's own timeouts nor TCP keepalives can notice) and
continued with SIGCONT when the test is done with it, whatever happens. Each turn runs on a thread of its own and is
awaited with a generous bound, only so that a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.checkpoint import PostgresSaver
from rxgraph.errors import SaverTimeoutError

T = TypeVar("T")

GUARD = 30.0
"""Seconds a turn may take before the test calls it a hang (the saver's timeout here is 2 s)."""

TIMEOUT = 2.0
"""The savers' timeout: a turn waiting on a stopped server fails after this (and the watchdog's grace)."""


@pytest.fixture
def raw(postgres_server: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own, to find the backends of a saver's connections."""
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


def backend(raw: psycopg.Connection[Any], role: str, schema: str) -> int:
    """The server process of a saver's connection: ``role`` is ``checkpoints`` for the saver's pool, as
    ``pg_stat_activity`` names it."""
    rows = raw.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (f"rxgraph {role} ({schema})",)
    ).fetchall()
    assert len(rows) == 1, f"expected one {role} connection, found {rows}"
    return int(rows[0][0])


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The server process ``pid`` stopped (SIGSTOP) for the block, and continued (SIGCONT) however it ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def in_thread(call: Callable[[], T]) -> Future[T]:
    """``call()`` on a new thread; the future holds its result or its error."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


def outcome(future: Future[Any]) -> Any:
    """What the turn ended with (its result, or the error it raised); fails the test if it has not ended within
    ``GUARD`` seconds."""
    try:
        return future.result(GUARD)
    except TimeoutError as error:
        if not future.done():
            raise AssertionError(f"the turn did not end within {GUARD:g} s: it hangs") from error
        return error
    except Exception as error:
        return error


def steps_graph(saver: PostgresSaver, first: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """START -> first -> second -> END; each node appends its name to ``steps``."""
    return (
        StateGraph({"steps": KeyStrategy.APPEND})
        .add_node("first", first or (lambda state: {"steps": "first"}))
        .add_node("second", lambda state: {"steps": "second"})
        .add_edge(START, "first")
        .add_edge("first", "second")
        .add_edge("second", END)
        .compile(checkpointer=saver)
    )


def assert_one_chain(saver: PostgresSaver, thread_id: str) -> None:
    """The thread's checkpoints are one chain: seqs 1, 2, 3... without a gap or a repeat."""
    seqs = [checkpoint.seq for checkpoint in reversed(saver.list(thread_id))]
    assert seqs == list(range(1, len(seqs) + 1)), seqs


# -- a connection of the pool --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["own", "caller's"])
def test_a_turn_whose_pool_connection_stops_answering_mid_turn_fails_and_the_history_stays_valid(
    pool: str, postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    """A pool of one connection; its backend stops between two steps of a turn, so the turn's next checkpoint
    write waits on it."""
    entered, go = threading.Event(), threading.Event()

    def first(state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        assert go.wait(GUARD)
        return {"steps": "first"}

    given = ConnectionPool(postgres_server, min_size=1, max_size=1, open=True) if pool == "caller's" else None
    try:
        target: str | ConnectionPool[Any] = postgres_server if given is None else given
        with PostgresSaver(target, schema=postgres_schema, timeout=TIMEOUT, max_connections=1) as saver:
            graph = steps_graph(saver, first)
            config = RunnableConfig(thread_id="t")
            turn = in_thread(lambda: graph.invoke({}, config))
            assert entered.wait(GUARD)
            if given is None:
                pid = backend(raw, "checkpoints", postgres_schema)
            else:
                with given.connection() as conn:
                    pid = conn.info.backend_pid
            with stopped(pid):
                go.set()
                failed = outcome(turn)
                assert isinstance(failed, SaverTimeoutError), failed

            # The stopped connection was dropped; the pool's new one serves the next turn, from a valid history.
            assert_one_chain(saver, "t")
            assert outcome(in_thread(lambda: graph.invoke({}, config))) == {"steps": ["first", "second"]}
            assert_one_chain(saver, "t")
    finally:
        if given is not None:
            given.close()
