"""Run exclusivity across processes sharing a PostgreSQL database: the multitask policies hold between real
processes, a killed process frees its threads, and concurrent cancelled turns never leave a trace in a history.

Every process here is a real ``python`` process (``_runs_worker.py``) with its own ``PostgresSaver``; they meet only
in the database. Processes are coordinated through their stdin and stdout (``started`` lines), never with sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rxgraph
from rxgraph import RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.errors import RunInterruptedError, ThreadBusyError
from rxgraph.messages import UserMessage, request_violations

WORKER = Path(__file__).with_name("_runs_worker.py")
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(Path(rxgraph.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
}

pytestmark = pytest.mark.timeout(180)


class Worker:
    """A worker process; ``line()`` reads its next line of output (with a deadline)."""

    def __init__(self, dsn: str, schema: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), dsn, schema, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )

    def line(self, timeout: float = 60) -> str:
        assert self.process.stdout is not None
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not got or not got[0]:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"the worker said nothing more; its stderr:\n{err}")
        return got[0].strip()

    def outcome(self) -> dict[str, Any]:
        """The JSON line the worker prints at the end."""
        outcome: dict[str, Any] = json.loads(self.line())
        return outcome

    def result(self) -> dict[str, Any]:
        """Its outcome, once it exited cleanly (else its exit code and stderr, to say why)."""
        outcome = self.outcome()
        code = self.process.wait(60)
        if code != 0:
            _, err = self.process.communicate()
            raise AssertionError(f"the worker exited with {code} after its outcome {outcome}; its stderr:\n{err}")
        return outcome

    def say(self, text: str = "go") -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture
def workers(postgres_server: str, postgres_schema: str) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    with PostgresSaver(postgres_server, schema=postgres_schema):
        pass  # the schema exists before the workers race to open it
    yield started
    for worker in started:
        worker.stop()


def spawn(workers: list[Worker], dsn: str, schema: str, *args: str) -> Worker:
    worker = Worker(dsn, schema, *args)
    workers.append(worker)
    return worker


def user_texts(saver: PostgresSaver | SqliteSaver, thread_id: str) -> list[str]:
    head = saver.get(thread_id)
    if head is None:
        return []
    return [m.content for m in head.values["messages"] if isinstance(m, UserMessage)]  # type: ignore[misc]


def test_four_processes_share_five_threads_and_every_completed_turn_lands_once_in_order(
    workers: list[Worker], postgres_server: str, postgres_schema: str
) -> None:
    procs, turns, threads = 4, 50, 5
    running = [
        spawn(workers, postgres_server, postgres_schema, "turns", f"p{i}", str(turns), str(threads), "7")
        for i in range(procs)
    ]
    results = [worker.result() for worker in running]

    completed = [(thread, text) for r in results for thread, text in r["completed"]]
    cancelled = [(thread, text) for r in results for thread, text in r["cancelled"]]
    errors = [error for r in results for error in r["errors"]]
    assert errors == []  # under enqueue, no CheckpointConflictError (or anything else) reaches a caller
    assert len(completed) + len(cancelled) == procs * turns
    assert len(cancelled) > procs * turns // 5  # the cuts did happen, at many points
    print(f"{procs} processes: {len(completed)} turns completed, {len(cancelled)} cancelled, {len(errors)} errors")

    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        assert sorted(saver.threads()) == sorted({thread for thread, _ in completed + cancelled})
        for t in range(threads):
            thread = f"t{t}"
            history = user_texts(saver, thread)
            expected = [text for th, text in completed if th == thread]
            assert sorted(history) == sorted(expected), thread  # each completed turn once, no cancelled one
            for i in range(procs):
                # one process runs its turns one after the other: they land in that order
                own = [text for text in history if text.startswith(f"p{i}-")]
                assert own == [text for th, text in completed if th == thread and text.startswith(f"p{i}-")]
            head = saver.get(thread)
            assert head is not None and head.safe
            assert request_violations(list(head.values["messages"])) == []
            _no_write_after_a_rewind(saver, thread)


def _no_write_after_a_rewind(saver: PostgresSaver, thread: str) -> None:
    """Once a run's rewind landed, no checkpoint of that run follows it."""
    rewound: set[str] = set()
    for checkpoint in reversed(saver.list(thread)):  # oldest first
        assert checkpoint.run_id not in rewound, f"run {checkpoint.run_id} wrote after its rewind on {thread}"
        if checkpoint.source == "rewind":
            rewound.add(checkpoint.run_id)


def test_reject_in_a_second_process_while_the_first_runs(
    workers: list[Worker], postgres_server: str, postgres_schema: str
) -> None:
    first = spawn(workers, postgres_server, postgres_schema, "hold", "first", "t", "reject")
    assert first.line() == "started"

    second = spawn(workers, postgres_server, postgres_schema, "turn", "second", "t", "reject")
    refused = second.result()
    assert refused["outcome"] == ThreadBusyError.__name__ and "in another process" in refused["message"]

    first.say()
    assert first.result()["outcome"] == "completed"
    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        assert user_texts(saver, "t") == ["first"]


def test_interrupt_from_a_second_process_rewinds_the_first_then_runs(
    workers: list[Worker], postgres_server: str, postgres_schema: str
) -> None:
    first = spawn(workers, postgres_server, postgres_schema, "hold", "first", "t", "enqueue")
    assert first.line() == "started"

    second = spawn(workers, postgres_server, postgres_schema, "turn", "second", "t", "interrupt")
    interrupted = first.outcome()  # its tool still waits: the interrupt ended the run without it
    assert interrupted["outcome"] == RunInterruptedError.__name__
    assert second.line() == "started"
    assert second.result()["outcome"] == "completed"
    first.say()  # lets the abandoned tool call return (and the process exit); nothing of it may land
    assert first.process.wait(60) == 0

    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        assert user_texts(saver, "t") == ["second"]
        head = saver.get("t")
        assert head is not None and head.safe
        _no_write_after_a_rewind(saver, "t")
        # the second run started after the first's rewind had landed: all its checkpoints follow the rewind
        chain = list(reversed(saver.list("t")))  # oldest first
        rewind = next(i for i, c in enumerate(chain) if c.source == "rewind")
        later = {c.run_id for c in chain[rewind + 1 :]}
        earlier = {c.run_id for c in chain[:rewind]}
        assert later and not later & earlier


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_killed_process_frees_its_thread_and_its_turn_is_rewound_before_the_next_one(
    workers: list[Worker], postgres_server: str, postgres_schema: str, tmp_path: Path, kind: str
) -> None:
    dsn = f"sqlite:{tmp_path / 'turns.db'}" if kind == "sqlite" else postgres_server
    before = spawn(workers, dsn, postgres_schema, "turn", "before", "t", "reject")
    assert before.line() == "started" and before.result()["outcome"] == "completed"
    first = spawn(workers, dsn, postgres_schema, "hold", "killed", "t", "enqueue")
    assert first.line() == "started"  # mid-turn: the tool call is stored, its answer is not
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)

    second = spawn(workers, dsn, postgres_schema, "turn", "after", "t", "reject")
    assert second.line() == "started"  # not refused: the killed process holds nothing any more
    assert second.result()["outcome"] == "completed"  # WeatherModel raises on any request a strict API refuses

    saver = (
        SqliteSaver(tmp_path / "turns.db")
        if kind == "sqlite"
        else PostgresSaver(postgres_server, schema=postgres_schema)
    )
    with saver:
        head = saver.get("t")
        assert head is not None and head.safe and request_violations(list(head.values["messages"])) == []
        # The killed turn is undone as a cancel would have undone it: the next turn holds nothing of it.
        assert user_texts(saver, "t") == ["before", "after"]
        history = saver.list("t")
        killed = {c.run_id for c in history if c.source == "input" and c.values["messages"][-1].content == "killed"}
        assert len(killed) == 1
        rewinds = [c for c in history if c.source == "rewind"]
        assert [c.run_id for c in rewinds] == list(killed)
        assert rewinds[0].error is not None and "never ended" in rewinds[0].error
        # Its checkpoints stay in the history, for debugging: its input and its model's tool call.
        assert [c.node for c in history if c.run_id in killed and c.source != "rewind"] == ["model", "__start__"]


def test_the_same_policies_hold_between_two_savers_of_one_process(postgres_server: str, postgres_schema: str) -> None:
    """Two savers on one schema (as two processes would have) exclude each other's runs through the database."""
    gate, started = threading.Event(), threading.Event()

    @tool
    def weather() -> str:
        """The weather."""
        started.set()
        assert gate.wait(30)
        return "sunny"

    sys.path.insert(0, str(WORKER.parent))
    try:
        from _runs_worker import WeatherModel
    finally:
        sys.path.remove(str(WORKER.parent))
    config = RunnableConfig(thread_id="t")
    with (
        PostgresSaver(postgres_server, schema=postgres_schema) as one,
        PostgresSaver(postgres_server, schema=postgres_schema) as two,
    ):
        first = ReactAgent(WeatherModel(), tools=[weather], checkpointer=one)
        second = ReactAgent(WeatherModel(), tools=[weather], checkpointer=two, multitask="reject")
        outcome: list[Any] = []
        runner = threading.Thread(target=lambda: outcome.append(first.invoke("first", config)))
        runner.start()
        assert started.wait(30)
        with pytest.raises(ThreadBusyError, match="in another process"):
            second.invoke("second", config)
        gate.set()
        runner.join(30)
        assert outcome and second.invoke("second", config)
        assert user_texts(two, "t") == ["first", "second"]


def test_an_approval_asked_in_one_process_is_answered_in_another(
    workers: list[Worker], postgres_server: str, postgres_schema: str
) -> None:
    asking = spawn(workers, postgres_server, postgres_schema, "ask", "weather?", "t")
    assert asking.result() == {"asked": ["c1"]}  # the model's call, waiting; the process has exited
    answering = spawn(workers, postgres_server, postgres_schema, "answer", "t", "approve")
    assert answering.result() == {"outcome": "completed", "ran": True, "answer": "Sunny all day."}

    again = spawn(workers, postgres_server, postgres_schema, "ask", "and tomorrow?", "t")
    assert again.result() == {"asked": ["c5"]}
    rejecting = spawn(workers, postgres_server, postgres_schema, "answer", "t", "reject")
    assert rejecting.result() == {"outcome": "completed", "ran": False, "answer": "Sunny all day."}
    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        head = saver.get("t")
        assert head is not None and head.safe and head.pending is None
        assert request_violations(list(head.values["messages"])) == []  # WeatherModel checked every request too
