"""The rxgraph command on a PostgreSQL database (``--db postgresql://...``), run as a real subprocess against a real
server: ``inspect``, ``check`` and ``serve``, and never a password in what they print."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from _support import run_rxgraph, write_half_and_fine
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from serve._serving import WAIT, events, run_body, rxgraph_serve

from rxgraph.checkpoint import PostgresSaver


def _with_password(url: str) -> str:
    """The same server as a URL with a password in it (the test server trusts 127.0.0.1 and ignores it)."""
    params = conninfo_to_dict(url)
    host, port, user, dbname = params.get("host"), params.get("port"), params.get("user"), params.get("dbname")
    assert make_conninfo(url)  # a URL psycopg reads
    return f"postgresql://{user}:hunter2-secret@{host}:{port}/{dbname}"


def _two_threads(url: str, schema: str) -> None:
    with PostgresSaver(url, schema=schema) as saver:
        write_half_and_fine(saver)


def test_inspect_and_check_read_a_postgres_schema(postgres_server: str, postgres_schema: str, tmp_path: Path) -> None:
    _two_threads(postgres_server, postgres_schema)
    url = _with_password(postgres_server)

    threads = run_rxgraph("inspect", "--db", url, "--schema", postgres_schema, cwd=tmp_path)
    assert threads.returncode == 0, threads.stderr
    rows = [line.split() for line in threads.stdout.splitlines()[1:]]
    assert rows == [["fine", "2", "loop", "yes"], ["half", "2", "loop", "NO"]]

    listing = run_rxgraph(
        "inspect", "--db", url, "--schema", postgres_schema, "--thread", "half", "--json", cwd=tmp_path
    )
    assert listing.returncode == 0, listing.stderr
    checkpoints = json.loads(listing.stdout)["checkpoints"]
    assert [c["seq"] for c in checkpoints] == [2, 1] and checkpoints[0]["safe"] is False

    check = run_rxgraph("check", "--db", url, "--schema", postgres_schema, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "schema: ok" in check.stdout and f"(schema {postgres_schema}), version" in check.stdout
    assert "2 thread(s), 1 whose head cannot take new input" in check.stdout and "  half: head seq 2" in check.stdout

    missing = run_rxgraph("inspect", "--db", url, "--schema", postgres_schema, "--thread", "nope", cwd=tmp_path)
    assert missing.returncode == 1 and "no thread 'nope'" in missing.stderr
    for result in (threads, listing, check, missing):
        assert "hunter2" not in result.stdout + result.stderr


def test_a_server_that_cannot_be_reached_is_one_line_without_the_password(tmp_path: Path) -> None:
    url = "postgresql://someone:hunter2-secret@127.0.0.1:1/nothing"  # port 1: nothing listens there
    result = run_rxgraph("check", "--db", url, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("rxgraph check: error: cannot open the PostgreSQL database")
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr


def test_rxgraph_serve_keeps_its_threads_in_postgres(
    postgres_server: str, postgres_schema: str, tmp_path: Path
) -> None:
    url = _with_password(postgres_server)
    with rxgraph_serve("rxgraph.examples.chat:make", "--db", url, "--schema", postgres_schema, cwd=tmp_path) as (
        served,
        said,
    ):
        assert f"(schema {postgres_schema})" in said and "hunter2" not in said
        with httpx.stream(
            "POST", served + "/threads/pg/runs/stream", json=run_body({"input": {"messages": "Hi"}}), timeout=WAIT
        ) as answer:
            got = list(events(answer))
        assert got[0][0] == "metadata" and got[-1][0] == "values"

    with PostgresSaver(postgres_server, schema=postgres_schema) as saver:
        head = saver.get("pg")
        assert head is not None and [m.role for m in head.values["messages"]] == ["user", "assistant"]
