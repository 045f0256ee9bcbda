"""Two ``rxgraph serve`` processes on one PostgreSQL database: a background run executing in the first is joined and
followed (``join_stream``) from the second, a stream resumes there with ``Last-Event-ID`` with nothing lost or
repeated, and a cancel sent to the second cancels (and rewinds) the run in the first. ``--workers 2`` serves.

The served graph's ``wait`` node holds until the test writes a line to a named pipe (the gate), which each server
process reads: the test decides when the run in the first process goes on, with no timing involved."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from serve._serving import SERVE_ENV, WAIT, events, rxgraph_serve

GATED = """
import os
import threading

import reactivex as rx
from reactivex.disposable import Disposable

from rxgraph import END, START, KeyStrategy, RunInfo, StateGraph

_lock = threading.Lock()
_words = []  # lines written before any run waited
_waiting = []  # the observers of the runs waiting, first come first served


def _give(word):
    with _lock:
        if not _waiting:
            _words.append(word)
            return
        observer = _waiting.pop(0)
    observer.on_next({"log": [word]})
    observer.on_completed()


def _read_gate(path):
    # Each line written to the pipe lets one waiting run go on (or the next one to wait).
    while True:
        with open(path) as pipe:
            for line in pipe:
                _give(line.strip())


threading.Thread(target=_read_gate, args=(os.environ["GATE"],), daemon=True).start()


def _gate(observer, scheduler=None):
    with _lock:
        word = _words.pop(0) if _words else None
        if word is None:
            _waiting.append(observer)
    if word is not None:
        observer.on_next({"log": [word]})
        observer.on_completed()

    def leave():
        with _lock:
            if observer in _waiting:
                _waiting.remove(observer)

    return Disposable(leave)


def wait(state, run: RunInfo):
    run.write({"waiting": os.getpid()})
    return rx.create(_gate)


def make(checkpointer):
    builder = StateGraph({"log": KeyStrategy.APPEND})
    builder.add_node("start", lambda state: {"log": ["start"]})
    builder.add_node("wait", wait)
    builder.add_edge(START, "start")
    builder.add_edge("start", "wait")
    builder.add_edge("wait", END)
    return builder.compile(checkpointer=checkpointer)


def make_quick(checkpointer):
    builder = StateGraph({"log": KeyStrategy.APPEND})
    builder.add_node("quick", lambda state: {"log": [str(os.getpid())]})
    builder.add_edge(START, "quick")
    builder.add_edge("quick", END)
    return builder.compile(checkpointer=checkpointer)
"""


@pytest.fixture
def two_servers(
    tmp_path: Path, postgres_server: str, postgres_schema: str
) -> Iterator[tuple[SyncLangGraphClient, SyncLangGraphClient, Path]]:
    """Two server processes on one database (each with its gate), and a client of each."""
    (tmp_path / "gated.py").write_text(GATED, encoding="utf-8")
    gates = [tmp_path / "gate-a", tmp_path / "gate-b"]
    for gate in gates:
        os.mkfifo(gate)
    db = ("--db", postgres_server, "--schema", postgres_schema)
    with (
        rxgraph_serve("gated:make", *db, cwd=tmp_path, env={"GATE": str(gates[0])}) as (first, _),
        rxgraph_serve("gated:make", *db, cwd=tmp_path, env={"GATE": str(gates[1])}) as (second, _),
        get_sync_client(url=first) as a,
        get_sync_client(url=second) as b,
    ):
        yield a, b, gates[0]


def _open_gate(gate: Path, word: str) -> None:
    with open(gate, "w") as pipe:
        pipe.write(word + "\n")


def _read_until(response: httpx.Response, event: str) -> list[tuple[str, Any]]:
    got = []
    for name, data in events(response):
        got.append((name, data))
        if name == event:
            return got
    raise AssertionError(f"the stream ended before a {event!r} event: {got}")


def test_a_run_in_one_process_is_joined_followed_and_resumed_from_another(
    two_servers: tuple[SyncLangGraphClient, SyncLangGraphClient, Path],
) -> None:
    a, b, gate = two_servers
    thread = a.threads.create()["thread_id"]
    run = a.runs.create(thread, "agent", input={"log": []}, stream_mode=["values", "custom"])
    assert b.threads.get(thread)["status"] == "busy"  # the record is shared

    # The second process follows the run: it gets every event from the first one, then hangs up mid-run.
    url = str(b.http.client.base_url).rstrip("/")
    with httpx.stream("GET", f"{url}/threads/{thread}/runs/{run['run_id']}/stream", timeout=WAIT) as response:
        seen = _read_until(response, "custom")
    names = [name for name, _ in seen]
    assert names[0] == "metadata" and names[-1] == "custom"
    assert seen[-1][1]["waiting"] != os.getpid()

    # It comes back after the event it last saw, and gets the rest, nothing twice.
    _open_gate(gate, "done")
    rest = list(b.runs.join_stream(thread, run["run_id"], last_event_id=str(len(seen))))
    assert [p.event for p in rest] == ["values"]
    assert rest[-1].data == {"log": ["start", "done"]}
    everything = list(b.runs.join_stream(thread, run["run_id"], last_event_id="-1"))
    assert [(p.event, p.data) for p in everything] == [*seen, *((p.event, p.data) for p in rest)]
    assert b.runs.join(thread, run["run_id"]) == {"log": ["start", "done"]}
    assert b.runs.get(thread, run["run_id"])["status"] == "success"


def test_a_cancel_sent_to_another_process_rewinds_the_run(
    two_servers: tuple[SyncLangGraphClient, SyncLangGraphClient, Path],
) -> None:
    a, b, gate = two_servers
    thread = a.threads.create()["thread_id"]
    first = a.runs.create(thread, "agent", input={"log": []})
    _open_gate(gate, "one")
    assert a.runs.join(thread, first["run_id"]) == {"log": ["start", "one"]}
    before = a.threads.get_state(thread)
    run = a.runs.create(thread, "agent", input={"log": ["again"]}, stream_mode=["custom"])
    url = str(b.http.client.base_url).rstrip("/")
    with httpx.stream("GET", f"{url}/threads/{thread}/runs/{run['run_id']}/stream", timeout=WAIT) as response:
        _read_until(response, "custom")  # it waits at its gate, in the first process

    # Under reject, a run asked of the other process is refused as a busy thread is here: 409.
    with pytest.raises(httpx.HTTPStatusError) as refused:
        b.runs.create(thread, "agent", input={"log": ["too soon"]}, multitask_strategy="reject")
    assert refused.value.response.status_code == 409
    assert run["run_id"] in refused.value.response.json()["detail"]

    b.runs.cancel(thread, run["run_id"], wait=True)

    assert a.runs.get(thread, run["run_id"])["status"] == "interrupted"
    state = b.threads.get_state(thread)
    assert state["values"] == before["values"] == {"log": ["start", "one"]}
    assert state["metadata"]["source"] == "rewind"
    assert state["checkpoint"]["checkpoint_id"] != before["checkpoint"]["checkpoint_id"]  # a rewind, written anew


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_workers_serve_from_several_processes(tmp_path: Path, postgres_server: str, postgres_schema: str) -> None:
    (tmp_path / "gated.py").write_text(GATED, encoding="utf-8")
    os.mkfifo(tmp_path / "gate")
    port = _free_port()
    args = [
        "gated:make_quick",
        "--db",
        postgres_server,
        "--schema",
        postgres_schema,
        "--workers",
        "2",
        "--port",
        str(port),
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "rxgraph", "serve", *args],
        cwd=tmp_path,
        env={**SERVE_ENV, "GATE": str(tmp_path / "gate")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        said, started = [], 0
        for line in server.stdout:
            said.append(line)
            started += "Application startup complete" in line
            if started == 2:
                break
        assert started == 2, "".join(said)
        assert "2 processes" in "".join(said)
        with get_sync_client(url=f"http://127.0.0.1:{port}") as client:
            assert client.http.get("/ok") == {"ok": True}
            # Runs land on either process, on one thread, its records and checkpoints shared.
            thread = client.threads.create()["thread_id"]
            for _ in range(4):
                client.runs.wait(thread, "agent", input={"log": []})
            pids = client.threads.get_state(thread)["values"]["log"]
            assert len(pids) == 4 and all(pid.isdigit() for pid in pids)
            assert [r["status"] for r in client.runs.list(thread)] == ["success"] * 4
    finally:
        server.terminate()
        server.communicate(timeout=WAIT * 2)
