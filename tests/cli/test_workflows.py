"""The command line on threads of graphs that are workflows: `next`, a failed run's `error`, one checkpoint's values.

The databases are real SQLite files written through a real ``SqliteSaver``. The command runs in this process (it is
the same ``main`` that ``python -m rxgraph`` calls) except where a test runs it as a subprocess, to see it whole.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _support import run_rxgraph

from rxgraph import Checkpoint
from rxgraph.checkpoint import SqliteSaver
from rxgraph.cli import main
from rxgraph.messages import AssistantMessage, ToolCall, UserMessage

FAILURE = "ValueError: report needs a total"
# An error whose message spans lines, as UnsafeHistoryError's does.
UNSAFE = (
    "UnsafeHistoryError: message history is not a valid request body (1 violation):\n"
    "message 1: history ends with call ids ['c1'] of the assistant message at index 1 still pending (rule 4)"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``rxgraph *args`` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # argparse writes --help to stdout
        try:
            code = main(list(args), out=out)
        except SystemExit as exit:  # a usage error, from argparse
            code = int(exit.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _write(saver: SqliteSaver, thread: str, steps: list[dict[str, Any]]) -> None:
    head: Checkpoint | None = None
    for seq, step in enumerate(steps, start=1):
        checkpoint = Checkpoint(
            thread_id=thread, seq=seq, parent_id=head.id if head else None, run_id="run-0001", **step
        )
        head = saver.put(checkpoint, expected_head=head.id if head else None)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workflows") / "flows.db"
    with SqliteSaver(path) as saver:
        # A workflow (no message history) whose `report` node failed: the run kept what it wrote.
        _write(
            saver,
            "orders",
            [
                {"id": "orders-input", "values": {"order": 7}, "next": ("price", "stock"), "source": "input"},
                {
                    "id": "orders-priced",
                    "values": {"order": 7, "prices": [9.5, math.inf], "raw": b"\x00\xffok"},
                    "node": "price",
                    "next": ("report",),
                    "source": "loop",
                },
                {
                    "id": "orders-failed",
                    "values": {
                        "order": 7,
                        "prices": [9.5, math.inf],
                        "raw": b"\x00\xffok",
                        "pair": ("a", 1),
                        "tags": frozenset({"b", "a"}),
                        "meta": {"by": {"name": "ops"}, "$weird": None},
                    },
                    "next": ("report",),
                    "source": "error",
                    "error": FAILURE,
                },
            ],
        )
        # A chat whose turn failed and was rewound to the state before it: safe, but the last run failed.
        question = UserMessage(content="Weather in Paris?")
        _write(
            saver,
            "chat",
            [
                {"id": "chat-input", "values": {"messages": [question]}, "next": ("model",), "source": "input"},
                {"id": "chat-rewind", "values": {}, "source": "rewind", "error": UNSAFE},
            ],
        )
        # A chat whose head waits for tool results: it cannot take a new user turn.
        call = AssistantMessage(tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}')])
        _write(
            saver,
            "half",
            [
                {"id": "half-input", "values": {"messages": [question]}, "next": ("model",), "source": "input"},
                {
                    "id": "half-model",
                    "values": {"messages": [question, call]},
                    "node": "model",
                    "next": ("tools",),
                    "source": "loop",
                    "safe": False,
                    "unsafe_reason": "message 1: history ends with call ids ['c1'] still pending (rule 4)",
                },
            ],
        )
        # A workflow that ran to its end.
        _write(saver, "done", [{"id": "done-1", "values": {"total": 3}, "node": "sum", "source": "loop"}])
    return path


def test_inspect_shows_next_as_a_column_and_a_failed_runs_error_below_its_checkpoint(db: Path) -> None:
    result = run_rxgraph("inspect", "--db", str(db), "--thread", "orders", cwd=db.parent)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "ID", "PARENT", "NODE", "NEXT", "SOURCE", "RUN", "MSGS", "SAFE"]
    assert lines[1].split() == ["3", "orders-faile", "orders-price", "-", "report", "error", "run-0001", "-", "yes"]
    assert lines[2] == f"    error: {FAILURE}"
    assert lines[3].split() == ["2", "orders-price", "orders-input", "price", "report", "loop", "run-0001", "-", "yes"]
    assert lines[4].split() == ["1", "orders-input", "-", "-", "price,stock", "input", "run-0001", "-", "yes"]
    assert len(lines) == 5
    ended = _run("inspect", "--db", str(db), "--thread", "done").stdout.splitlines()
    assert ended[1].split()[4] == "-"  # a run that ended has nothing next


def test_inspect_json_has_next_and_error(db: Path) -> None:
    result = _run("inspect", "--db", str(db), "--thread", "orders", "--json")
    checkpoints = json.loads(result.stdout)["checkpoints"]
    assert [(c["next"], c["error"]) for c in checkpoints] == [
        (["report"], FAILURE),
        (["report"], None),
        (["price", "stock"], None),
    ]
    rewind = json.loads(_run("inspect", "--db", str(db), "--thread", "chat", "--json").stdout)
    assert rewind["checkpoints"][0]["error"] == UNSAFE
    table = _run("inspect", "--db", str(db), "--thread", "chat").stdout.splitlines()
    assert table[2:4] == [f"    error: {UNSAFE.splitlines()[0]}", f"      {UNSAFE.splitlines()[1]}"]
    assert table[4].split()[0] == "1"


def test_inspect_one_checkpoint_prints_its_metadata_and_values_as_json(db: Path) -> None:
    result = run_rxgraph(
        "inspect", "--db", str(db), "--thread", "orders", "--checkpoint", "orders-failed", cwd=db.parent
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # strict JSON: no NaN or Infinity in it
    assert document["values"] == {
        "order": 7,
        "prices": [9.5, "inf"],
        "raw": {"$bytes": "AP9vaw=="},
        "pair": ["a", 1],
        "tags": ["a", "b"],
        "meta": {"by": {"name": "ops"}, "$weird": None},
    }
    metadata = document["metadata"]
    assert metadata["thread_id"] == "orders" and metadata["id"] == "orders-failed" and metadata["seq"] == 3
    assert metadata["source"] == "error" and metadata["error"] == FAILURE and metadata["next"] == ["report"]
    assert metadata["parent_id"] == "orders-priced" and metadata["safe"] is True


def test_inspect_one_checkpoint_shows_messages_as_their_json_dump(db: Path) -> None:
    result = _run("inspect", "--db", str(db), "--thread", "half", "--checkpoint", "half-model")
    messages = json.loads(result.stdout)["values"]["messages"]
    assert messages == [
        UserMessage(content="Weather in Paris?").model_dump(mode="json"),
        AssistantMessage(tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}')]).model_dump(
            mode="json"
        ),
    ]
    assert messages[1]["tool_calls"][0]["id"] == "c1"


def test_inspect_one_checkpoint_takes_the_start_of_an_id_as_the_table_shows_it(db: Path) -> None:
    shortened = _run("inspect", "--db", str(db), "--thread", "orders", "--checkpoint", "orders-pric")
    assert shortened.returncode == 0, shortened.stderr
    assert json.loads(shortened.stdout)["metadata"]["id"] == "orders-priced"
    ambiguous = _run("inspect", "--db", str(db), "--thread", "orders", "--checkpoint", "orders-")
    assert ambiguous.returncode == 1
    assert "'orders-' is the start of several checkpoint ids in thread 'orders'" in ambiguous.stderr


def test_inspect_an_unknown_checkpoint_is_a_clear_error(db: Path) -> None:
    result = _run("inspect", "--db", str(db), "--thread", "orders", "--checkpoint", "nope")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("rxgraph inspect: error: no checkpoint 'nope' in thread 'orders' of ")
    assert "seq 1 to 3" in result.stderr
    # Another thread's checkpoint is not this thread's.
    other = _run("inspect", "--db", str(db), "--thread", "orders", "--checkpoint", "chat-input")
    assert other.returncode == 1 and "no checkpoint 'chat-input'" in other.stderr
    thread = _run("inspect", "--db", str(db), "--thread", "nobody", "--checkpoint", "x")
    assert thread.returncode == 1 and "no thread 'nobody'" in thread.stderr


def test_inspect_a_checkpoint_needs_its_thread(db: Path) -> None:
    result = _run("inspect", "--db", str(db), "--checkpoint", "orders-failed")
    assert result.returncode == 2 and "--checkpoint needs --thread" in result.stderr


def test_check_words_its_verdict_for_workflows_and_lists_failed_runs(db: Path) -> None:
    result = run_rxgraph("check", "--db", str(db), cwd=db.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"integrity check: ok ({db})",
        "4 thread(s), 1 whose head cannot take new input (their message history is incomplete), "
        "2 whose last run failed",
        f"  chat: last run failed: {UNSAFE.splitlines()[0]}",
        f"      {UNSAFE.splitlines()[1]} (head seq 2, rewind)",
        "  half: head seq 2: message 1: history ends with call ids ['c1'] still pending (rule 4)",
        f"  orders: last run failed: {FAILURE} (head seq 3, error)",
        "(a new run with input on a thread whose head cannot take it starts from the thread's newest checkpoint "
        "that can)",
    ]


def test_help_says_how_values_are_shown() -> None:
    result = _run("inspect", "--help")
    text = " ".join(result.stdout.split())
    assert "model_dump(mode='json')" in text and '{"$bytes": "<base64>"}' in text and "NEXT" in text
    assert "--checkpoint ID" in text
    check = " ".join(_run("check", "--help").stdout.split())
    assert "whose last run failed" in check and "cannot take new input" in check
