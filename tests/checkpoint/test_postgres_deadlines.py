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
from psycopg import sql
from psycopg_pool import ConnectionPool
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import END, START, CheckpointConflictError, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.agent import ChatChunk, ReactAgent, tool
from rxgraph.checkpoint import PostgresSaver
from rxgraph.errors import RunInterruptedError, SaverTimeoutError
from rxgraph.messages import AssistantMessage, UserMessage, request_violations
from rxgraph.testing import ScriptedChatModel, text, tool_call

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
    """The server process of a saver's connection: ``role`` is ``checkpoints`` (the saver's pool), ``run locks`` or
    ``run listener``, as ``pg_stat_activity`` names them."""
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


def weather_call() -> ChatChunk:
    """The model's request for the weather tool, as one chunk."""
    chunk = tool_call("c1", "weather")
    assert isinstance(chunk, ChatChunk)
    return chunk


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


# -- the run-lock connection ---------------------------------------------------------------------------------------


def test_a_turn_whose_lock_connection_stops_answering_fails_with_saver_timeout_and_the_next_turn_works(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    with PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as saver:
        graph = steps_graph(saver)
        assert graph.invoke({}, RunnableConfig(thread_id="a")) == {"steps": ["first", "second"]}  # opens the locks

        with stopped(backend(raw, "run locks", postgres_schema)):
            failed = outcome(in_thread(lambda: graph.invoke({}, RunnableConfig(thread_id="b"))))
            assert isinstance(failed, SaverTimeoutError), failed
            assert "did not answer" in str(failed)
            # While the old backend is still stopped, a new lock connection serves the next turns.
            assert outcome(in_thread(lambda: graph.invoke({}, RunnableConfig(thread_id="c")))) == {
                "steps": ["first", "second"]
            }

        # Continued, the old backend finds its connection gone and ends (freeing what it held): "b" works too.
        assert outcome(in_thread(lambda: graph.invoke({}, RunnableConfig(thread_id="b")))) == {
            "steps": ["first", "second"]
        }
        assert_one_chain(saver, "b")


def test_a_run_whose_lock_was_lost_with_its_connection_cannot_break_the_history(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    """The lock connection of the process running a turn stops answering: the connection is dropped and the lock
    goes with it, so another process takes the thread. To that process the first run is dead (its lock is gone): it
    rewinds the first turn and runs its own. The first run's next write then fails its compare-and-set, and the
    history is the second turn's, whole and valid."""
    gate, started = threading.Event(), threading.Event()

    @tool
    def weather() -> str:
        """The weather."""
        started.set()
        assert gate.wait(GUARD)
        return "sunny"

    config = RunnableConfig(thread_id="t")
    # No polls in the first process: it takes the lost lock back only when it hears the thread released, which
    # keeps the other process's turn from racing it for the thread.
    with (
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT, poll_interval=3600) as one,
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as two,
    ):
        first = ReactAgent(ScriptedChatModel([[weather_call()], [text("Sunny.")]]), tools=[weather], checkpointer=one)
        held = in_thread(lambda: first.invoke("weather?", config))
        assert started.wait(GUARD)
        try:
            with stopped(backend(raw, "run locks", postgres_schema)):
                # The first process asks its lock connection for another thread: no answer, so it is dropped.
                other = ReactAgent(ScriptedChatModel([[text("Hi.")], [text("Hi again.")]]), checkpointer=one)
                failed = outcome(in_thread(lambda: other.invoke("hi", RunnableConfig(thread_id="u"))))
                assert isinstance(failed, SaverTimeoutError), failed
                # A new connection serves the next turn; it tried to take "t" back first, which the stopped
                # backend still holds.
                again = outcome(in_thread(lambda: other.invoke("hi", RunnableConfig(thread_id="v"))))
                assert isinstance(again, AssistantMessage) and again.content == "Hi.", again

            # The old backend, continued, ends, and with it the lock on "t": the second process's turn gets it.
            second = ReactAgent(ScriptedChatModel([[text("Hello.")]]), checkpointer=two)
            answer = outcome(in_thread(lambda: second.invoke("hello", config)))
            assert isinstance(answer, AssistantMessage) and answer.content == "Hello."
        finally:
            gate.set()
        lost = outcome(held)
        assert isinstance(lost, CheckpointConflictError), lost

        head = two.get("t")
        assert head is not None and head.safe
        messages = list(head.values["messages"])
        assert request_violations(messages) == []
        assert [(type(m).__name__, m.content) for m in messages] == [
            ("UserMessage", "hello"),
            ("AssistantMessage", "Hello."),
        ]
        assert_one_chain(two, "t")
        # The first run's turn was rewound by the second process, and nothing of that run landed after the rewind.
        history = list(reversed(two.list("t")))  # oldest first
        rewinds = [i for i, checkpoint in enumerate(history) if checkpoint.source == "rewind"]
        assert len(rewinds) == 1
        dead = history[rewinds[0]].run_id
        assert all(checkpoint.run_id != dead for checkpoint in history[rewinds[0] + 1 :])


def test_a_claim_whose_run_slots_row_stays_locked_fails_with_saver_timeout_and_keeps_no_lock(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    """A live server, but the thread's row of run_slots is held by a transaction that does not end: the claim fails
    in time, and the advisory lock its statement took before it waited is not left behind (another process then
    gets the thread at once)."""
    config = RunnableConfig(thread_id="t")
    with (
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as one,
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as two,
    ):
        with raw.transaction(force_rollback=True):  # a writer of the row that never commits
            raw.execute(
                sql.SQL("INSERT INTO {} (thread_id, run_id, ending, owner) VALUES ('t', 'r', false, 'test')").format(
                    sql.Identifier(postgres_schema, "run_slots")
                )
            )
            failed = outcome(in_thread(lambda: steps_graph(one).invoke({}, config)))
            assert isinstance(failed, SaverTimeoutError), failed
        rejecting = RunnableConfig(thread_id="t", multitask="reject")
        assert outcome(in_thread(lambda: steps_graph(two).invoke({}, rejecting))) == {"steps": ["first", "second"]}
        assert outcome(in_thread(lambda: steps_graph(one).invoke({}, config))) == {"steps": ["first", "second"] * 2}


# -- the listening connection --------------------------------------------------------------------------------------


def test_an_interrupt_reaches_a_process_whose_listening_connection_stopped_answering(
    postgres_server: str, postgres_schema: str, raw: psycopg.Connection[Any]
) -> None:
    gate, started = threading.Event(), threading.Event()

    # On a pool, as a blocking tool should be: the interrupt reaches the caller while the tool still waits.
    @tool(scheduler=ThreadPoolScheduler(1))
    def weather() -> str:
        """The weather."""
        started.set()
        assert gate.wait(GUARD)
        return "sunny"

    config = RunnableConfig(thread_id="t")
    with (
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as one,
        PostgresSaver(postgres_server, schema=postgres_schema, timeout=TIMEOUT) as two,
    ):
        first = ReactAgent(ScriptedChatModel([[weather_call()], [text("Sunny.")]]), tools=[weather], checkpointer=one)
        held = in_thread(lambda: first.invoke("first", config))
        try:
            assert started.wait(GUARD)
            with stopped(backend(raw, "run listener", postgres_schema)):
                second = ReactAgent(ScriptedChatModel([[text("Second.")]]), checkpointer=two, multitask="interrupt")
                answer = outcome(in_thread(lambda: second.invoke("second", config)))
                assert isinstance(answer, AssistantMessage) and answer.content == "Second.", answer
                interrupted = outcome(held)
                assert isinstance(interrupted, RunInterruptedError), interrupted
        finally:
            gate.set()  # the abandoned tool call returns; nothing of it may land

        head = two.get("t")
        assert head is not None and head.safe
        assert [m.content for m in head.values["messages"] if isinstance(m, UserMessage)] == ["second"]
        assert request_violations(list(head.values["messages"])) == []


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
