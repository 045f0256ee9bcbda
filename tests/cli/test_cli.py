"""The rxgraph command, run as a real subprocess against real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _support import run_rxgraph, write_half_and_fine

from rxgraph import Checkpoint
from rxgraph.checkpoint._sqlite import SqliteSaver
from rxgraph.cli import CliError, main
from rxgraph.errors import RxGraphError
from rxgraph.messages import AssistantMessage, UserMessage


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("demo")
    result = run_rxgraph("demo", "--db", "chat.db", cwd=folder)
    assert result.returncode == 0, result.stderr
    (folder / "demo.out").write_text(result.stdout)
    return folder / "chat.db"


def test_demo_cancels_turn_two_rewinds_and_completes_turn_three(demo_db: Path) -> None:
    story = (demo_db.parent / "demo.out").read_text()
    assert "the client disconnects at t=10" in story
    assert "model         -----dX" in story and "saver  S---S--S-----R" in story
    assert "head seq 6 (rewind) holds the state before the turn [user, assistant]" in story
    assert "the model's first request passes check_request: [system, user, assistant, user]" in story
    assert "assistant: In Paris: Sunny, 21 C right now." in story
    assert "seq 6   rewind" in story


def test_demo_uses_a_new_thread_each_time_and_honours_cancel_at(tmp_path: Path) -> None:
    first = run_rxgraph("demo", "--db", "x.db", "--cancel-at", "2", cwd=tmp_path)
    second = run_rxgraph("demo", "--db", "x.db", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0
    assert "thread 'demo-1'" in first.stdout and "thread 'demo-2'" in second.stdout
    assert "cancelled at t=2" in first.stdout
    assert run_rxgraph("demo", "--cancel-at", "-1", cwd=tmp_path).returncode == 1


def test_demo_default_db_is_in_the_current_directory(tmp_path: Path) -> None:
    assert run_rxgraph("demo", cwd=tmp_path).returncode == 0
    assert (tmp_path / "rxgraph-demo.db").is_file()


def test_inspect_lists_threads_and_a_threads_checkpoints(demo_db: Path) -> None:
    threads = run_rxgraph("inspect", "--db", str(demo_db), cwd=demo_db.parent)
    assert threads.returncode == 0
    assert threads.stdout.splitlines()[1].split() == ["demo-1", "10", "loop", "yes"]
    table = run_rxgraph("inspect", "--db", str(demo_db), "--thread", "demo-1", cwd=demo_db.parent)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "ID", "PARENT", "NODE", "NEXT", "SOURCE", "RUN", "MSGS", "SAFE"]
    assert len(lines) == 11
    assert "NO: message 3: history ends with call ids ['call-1']" in table.stdout


def test_inspect_json(demo_db: Path) -> None:
    result = run_rxgraph("inspect", "--db", str(demo_db), "--thread", "demo-1", "--json", cwd=demo_db.parent)
    data = json.loads(result.stdout)
    checkpoints = data["checkpoints"]
    assert [c["seq"] for c in checkpoints] == list(range(10, 0, -1))
    rewind = next(c for c in checkpoints if c["source"] == "rewind")
    assert rewind["messages"] == 2 and rewind["safe"] is True
    assert {c["parent_id"] for c in checkpoints[:-1]} <= {c["id"] for c in checkpoints}
    listing = json.loads(run_rxgraph("inspect", "--db", str(demo_db), "--json", cwd=demo_db.parent).stdout)
    assert listing == {"threads": [{"thread_id": "demo-1", "head_seq": 10, "head_safe": True, "head_source": "loop"}]}


def test_check_reports_integrity_and_unsafe_heads(tmp_path: Path) -> None:
    db = tmp_path / "unsafe.db"
    with SqliteSaver(db) as saver:
        write_half_and_fine(saver)
    result = run_rxgraph("check", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0
    assert "integrity check: ok" in result.stdout
    assert "2 thread(s), 1 whose head cannot take new input (their message history is incomplete)\n" in result.stdout
    assert "half: head seq 2: message 1: history ends with call ids ['c9']" in result.stdout


@pytest.mark.parametrize("command", ["inspect", "check"])
def test_a_missing_file_is_an_error_and_is_not_created(tmp_path: Path, command: str) -> None:
    result = run_rxgraph(command, "--db", "nope.db", cwd=tmp_path)
    assert result.returncode == 1
    assert f"rxgraph {command}: error: no such database file: nope.db" in result.stderr
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("command", ["inspect", "check"])
def test_a_database_that_is_not_rxgraphs_is_an_error(tmp_path: Path, command: str) -> None:
    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    connection.commit()
    connection.close()
    result = run_rxgraph(command, "--db", str(other), cwd=tmp_path)
    assert result.returncode == 1
    assert "error:" in result.stderr and "rxgraph" in result.stderr
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello, this is not a database\n" * 100)
    result = run_rxgraph(command, "--db", str(text_file), cwd=tmp_path)
    assert result.returncode == 1 and "error:" in result.stderr


def test_an_unknown_thread_is_an_error(demo_db: Path) -> None:
    result = run_rxgraph("inspect", "--db", str(demo_db), "--thread", "nobody", cwd=demo_db.parent)
    assert result.returncode == 1
    assert "no thread 'nobody'" in result.stderr and "demo-1" in result.stderr


def test_usage_errors_exit_with_2(tmp_path: Path) -> None:
    assert run_rxgraph(cwd=tmp_path).returncode == 2
    assert run_rxgraph("inspect", cwd=tmp_path).returncode == 2
    assert run_rxgraph("frobnicate", cwd=tmp_path).returncode == 2


def _two_threads_one_head_damaged(folder: Path) -> Path:
    db = folder / "damaged.db"
    with SqliteSaver(db) as saver:
        for thread in ("good", "bad"):
            first = saver.put(
                Checkpoint(
                    id=f"{thread}-1",
                    thread_id=thread,
                    seq=1,
                    values={"messages": [UserMessage(content="q")]},
                    run_id="r",
                    source="input",
                ),
                expected_head=None,
            )
            saver.put(
                Checkpoint(
                    id=f"{thread}-2",
                    thread_id=thread,
                    seq=2,
                    parent_id=first.id,
                    values={"messages": first.values["messages"].extended([AssistantMessage(content="a")])},
                    run_id="r",
                    source="loop",
                ),
                expected_head=first.id,
            )
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        connection.execute("UPDATE checkpoints SET manifest = 'not json' WHERE id = ?", ("bad-2",))
    finally:
        connection.close()
    return db


def test_inspect_lists_every_thread_and_marks_one_whose_head_cannot_be_read(tmp_path: Path) -> None:
    db = _two_threads_one_head_damaged(tmp_path)
    result = run_rxgraph("inspect", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["THREAD", "HEAD", "SEQ", "HEAD", "SAFE"]
    assert lines[1].split()[:4] == ["bad", "2", "-", "UNREADABLE:"]
    assert "bad-2" in lines[1] and "cannot be decoded" in lines[1]
    assert lines[2].split() == ["good", "2", "loop", "yes"]
    listing = json.loads(run_rxgraph("inspect", "--db", str(db), "--json", cwd=tmp_path).stdout)
    bad, good = listing["threads"]
    assert good == {"thread_id": "good", "head_seq": 2, "head_safe": True, "head_source": "loop"}
    assert bad["thread_id"] == "bad" and bad["head_seq"] == 2
    assert bad["head_safe"] is None and bad["head_source"] is None
    assert "bad-2" in bad["error"] and "cannot be decoded" in bad["error"]
    # `check` agrees on which thread is damaged.
    check = run_rxgraph("check", "--db", str(db), cwd=tmp_path)
    assert check.returncode == 0 and "bad: the head cannot be read" in check.stdout


def test_check_and_inspect_read_a_file_whose_name_looks_like_part_of_a_uri(tmp_path: Path) -> None:
    db = _two_threads_one_head_damaged(tmp_path)
    odd = db.with_name("chat #1?mode=rwc.db")
    db.rename(odd)
    check = run_rxgraph("check", "--db", str(odd), cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "integrity check: ok" in check.stdout
    # The check read that very file: it did not open (and create) one named by what comes before the '#'.
    assert all(path.name.startswith(odd.name) for path in tmp_path.iterdir())
    inspect = run_rxgraph("inspect", "--db", str(odd), "--json", cwd=tmp_path)
    assert inspect.returncode == 0, inspect.stderr
    assert [row["head_seq"] for row in json.loads(inspect.stdout)["threads"]] == [2, 2]


def test_a_cli_error_is_an_rxgraph_error_reported_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert issubclass(CliError, RxGraphError)
    assert main(["inspect", "--db", str(tmp_path / "nope.db")]) == 1
    assert capsys.readouterr().err == f"rxgraph inspect: error: no such database file: {tmp_path / 'nope.db'}\n"


def test_inspect_and_check_say_what_a_thread_waits_on(tmp_path: Path) -> None:
    from rxgraph import END, START, RunnableConfig, StateGraph, interrupt

    db = tmp_path / "waiting.db"
    with SqliteSaver(db) as saver:
        graph = StateGraph().add_node("review", lambda s: {"ok": interrupt({"question": "Publish?"})})
        app = graph.add_edge(START, "review").add_edge("review", END).compile(saver)
        app.invoke({"draft": "hello"}, RunnableConfig(thread_id="post"))
    table = run_rxgraph("inspect", "--db", str(db), "--thread", "post", cwd=tmp_path)
    assert table.returncode == 0
    assert """waits: interrupt inside 'review', asking {"question": "Publish?"}""" in table.stdout
    data = json.loads(run_rxgraph("inspect", "--db", str(db), "--thread", "post", "--json", cwd=tmp_path).stdout)
    assert data["checkpoints"][0]["pending"]["interrupt"]["value"] == {"question": "Publish?"}
    check = run_rxgraph("check", "--db", str(db), cwd=tmp_path)
    assert "post: waits on an interrupt inside 'review' (head seq 2)" in check.stdout
