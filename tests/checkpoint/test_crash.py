"""A process running chat turns on an SQLite file is killed (SIGKILL) again and again, at many points.

After every kill the file must be intact, and the next user turn must start from a history a strict chat API accepts
(the head may be half a turn: safe-head selection skips it). Synchronisation is by the lines the worker prints.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rxgraph.checkpoint import SqliteSaver
from rxgraph.messages import UserMessage, check_ready_for_user_input, check_request

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

WORKER = Path(__file__).with_name("_crash_worker.py")
REPO = Path(__file__).resolve().parents[2]


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_crash_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()

# (mode, k): where each kill lands. "pause" and "txn" are exact (between two writes / inside one write's
# transaction); "run" kills a process that is running free, after it printed k lines.
KILLS: list[tuple[str, int]] = [
    ("pause", 1),
    ("txn", 2),
    ("run", 3),
    ("pause", 2),
    ("txn", 1),
    ("run", 8),
    ("pause", 3),
    ("txn", 3),
    ("run", 15),
    ("pause", 4),
    ("txn", 4),
    ("run", 6),
    ("pause", 5),
    ("txn", 6),
    ("run", 21),
    ("pause", 7),
    ("txn", 5),
    ("run", 11),
    ("pause", 6),
    ("txn", 7),
]


def _spawn(db: Path, mode: str, k: int) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), mode, str(k)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _run_until_kill(db: Path, mode: str, k: int) -> int:
    """Start a worker, kill it at its point; return the seq of the last write it reported as stored (0: none)."""
    proc = _spawn(db, mode, k)
    assert proc.stdout is not None
    stored = 0
    lines = 0
    stop = {"pause": "paused", "txn": "in-transaction"}.get(mode)
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                _, err = proc.communicate()
                pytest.fail(f"the worker ({mode}, {k}) exited early with {proc.returncode}:\n{err}")
            lines += 1
            word, _, rest = line.strip().partition(" ")
            if word == "stored":
                stored = int(rest)
            if (stop is not None and word == stop) or (stop is None and lines >= k):
                break
    finally:
        proc.kill()  # SIGKILL: no finally blocks, no atexit, no SQLite cleanup
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return stored


def _verify_and_take_a_turn(db: Path, turn: int) -> tuple[int, bool]:
    """Check the file, then run a user turn on it; return the head seq found and whether it was safe."""
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    requests: list[list[Any]] = []
    with SqliteSaver(db) as saver:
        head = saver.get(worker.THREAD)
        assert head is not None
        graph = worker.build_graph(saver, requests.append)
        text = f"test turn {turn}" + (worker.TOOLS if turn % 2 else "")
        graph.invoke({"messages": UserMessage(content=text)}, worker.CONFIG)
        assert len(requests) == (2 if turn % 2 else 1)
        for request in requests:
            check_request(request)
        assert requests[0][-1] == UserMessage(content=text)
        final = saver.get(worker.THREAD)
        assert final is not None and final.safe and final.seq > head.seq
        check_ready_for_user_input(final.values["messages"])
        if not head.safe:
            first = min((c for c in saver.list(worker.THREAD) if c.seq > head.seq), key=lambda c: c.seq)
            assert first.rolled_back_from == head.id
            base = saver.get(worker.THREAD, first.parent_id)
            assert base is not None and base.safe
        return head.seq, head.safe


def test_repeated_kills_leave_a_usable_history(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    previous_head = 0
    unsafe_heads = 0
    for turn, (mode, k) in enumerate(KILLS):
        stored = _run_until_kill(db, mode, k)
        head_seq, safe = _verify_and_take_a_turn(db, turn)
        if mode == "run":
            # The worker ran on while the test read its lines: later writes may have landed, none was lost.
            assert head_seq >= max(stored, previous_head + 1)
        else:
            # Killed between two writes, or inside one: exactly the announced writes are there, the one in flight
            # is not, and the head is what the worker's script says its last landed write was.
            landed = k if mode == "pause" else k - 1
            assert head_seq == previous_head + landed and (landed == 0 or stored == head_seq)
            assert safe == (landed == 0 or worker.session_writes_safe(landed)[-1])
        unsafe_heads += not safe
        with SqliteSaver(db) as saver:
            head = saver.get(worker.THREAD)
            assert head is not None
            previous_head = head.seq
    assert unsafe_heads >= 6  # the scenario under test: half a turn left behind by the kill
