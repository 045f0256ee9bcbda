"""``rxgraph serve`` with LangGraph's API: several targets, ``--auth``, settings from the environment, one log line per
run's end, and what it refuses (an open address without auth, ``--workers`` without PostgreSQL)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client
from serve._serving import SERVE_ENV, WAIT, leave_when

from rxgraph.cli import main

COUNTER = """
from rxgraph import END, START, KeyStrategy, StateGraph


def make(checkpointer):
    builder = StateGraph({"count": KeyStrategy.REPLACE})
    builder.add_node("add", lambda state: {"count": state.get("count", 0) + 1})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=checkpointer)
"""

AUTH = """
TOKENS = {"Bearer ann-token": "ann", "Bearer bob-token": "bob"}


def who(headers):
    return TOKENS.get(headers.get("authorization", ""))
"""


class Served:
    """An ``rxgraph serve`` process: its URL, what it printed until it listened, and (once stopped) the rest."""

    def __init__(self, url: str, said: str) -> None:
        self.url = url
        self.said = said
        self.rest = ""


@contextmanager
def served(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``rxgraph serve ARGS --port 0`` in a subprocess (with ``env`` added to its environment), stopped with SIGINT
    when the block ends; it must exit cleanly."""
    server = subprocess.Popen(
        [sys.executable, "-m", "rxgraph", "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**SERVE_ENV, **(env or {})},
    )
    try:
        assert server.stdout is not None
        said: list[str] = []
        started = None
        for line in server.stdout:
            said.append(line)
            started = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if started:
                break
        assert started, "".join(said)
        process = Served(started.group(1), "".join(said))
        yield process
        server.send_signal(signal.SIGINT)
        process.rest, _ = server.communicate(timeout=WAIT)
        assert server.returncode == 0, process.rest
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "counting.py").write_text(COUNTER, encoding="utf-8")
    (tmp_path / "auth_here.py").write_text(AUTH, encoding="utf-8")
    return tmp_path


def test_several_targets_are_assistants_and_auth_keeps_each_thread_to_its_creator(here: Path) -> None:
    args = (
        "rxgraph.examples.chat:make",
        "counter=counting:make",
        "--db",
        str(here / "s.db"),
        "--auth",
        "auth_here:who",
    )
    with served(*args, cwd=here) as server:
        url = server.url
        assert "rxgraph serve: rxgraph.examples.chat:make, counter=counting:make, threads in" in server.said
        assert "no authentication" not in server.said
        with (
            get_sync_client(url=url, headers={"Authorization": "Bearer ann-token"}) as ann,
            get_sync_client(url=url, headers={"Authorization": "Bearer bob-token"}) as bob,
            get_sync_client(url=url) as nobody,
        ):
            assert sorted(a["assistant_id"] for a in ann.assistants.search()) == ["agent", "counter"]
            thread = ann.threads.create()["thread_id"]
            assert ann.runs.wait(thread, "counter", input={"count": 41}) == {"count": 42}
            chat = ann.runs.wait(thread + "-chat", "agent", input={"messages": "Hi"}, if_not_exists="create")
            assert chat["messages"][-1]["type"] == "ai"
            assert bob.threads.search() == []
            assert len(ann.threads.search()) == 2
            with pytest.raises(httpx.HTTPStatusError) as refused:
                nobody.threads.search()
            assert refused.value.response.status_code == 401


def test_settings_come_from_the_environment_and_each_run_end_is_logged(here: Path) -> None:
    env = {
        "RXGRAPH_TARGETS": "rxgraph.examples.chat:make",
        "RXGRAPH_DB": str(here / "env.db"),
        "RXGRAPH_LOG_LEVEL": "info",
    }
    with served(cwd=here, env=env) as server:
        assert f"threads in {here / 'env.db'}" in server.said and "no authentication" in server.said
        with get_sync_client(url=server.url) as client:
            client.runs.wait("t", "agent", input={"messages": "Hi"}, if_not_exists="create")
            # Cut the next turn once its answer has started: it is cancelled and rewound, and the log says so.
            leave_when(server.url, "t", {"input": {"messages": "Tell me a story"}}, lambda name, _: name == "messages")
            cut = client.runs.list("t")[0]["run_id"]
            client.runs.join("t", cut)
            head = client.threads.get_state("t")["checkpoint"]["checkpoint_id"]
    assert re.search(r"INFO: +rxgraph: run \S+ on thread t completed", server.rest), server.rest
    assert f"run {cut} on thread t cancelled; the thread is rewound to checkpoint {head}" in server.rest


def test_rxgraph_serve_refuses_an_open_address_without_auth_and_workers_without_postgres(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "rxgraph.examples.chat:make", "--host", "0.0.0.0"]) == 1
    assert "--host 0.0.0.0 without --auth" in capsys.readouterr().err
    assert main(["serve", "rxgraph.examples.chat:make", "--workers", "2", "--db", str(here / "w.db")]) == 1
    assert "--workers above 1 needs a PostgreSQL --db" in capsys.readouterr().err
    assert main(["serve"]) == 1
    assert "name what to serve" in capsys.readouterr().err
    assert main(["serve", "a=rxgraph.examples.chat:make", "a=rxgraph.examples.chat:make"]) == 1
    assert "two targets are named 'a'" in capsys.readouterr().err
    env = {**SERVE_ENV, "RXGRAPH_HOST": "0.0.0.0"}
    done = subprocess.run(
        [sys.executable, "-m", "rxgraph", "serve", "rxgraph.examples.chat:make"],
        env=env,
        cwd=here,
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
    )
    assert done.returncode == 1 and "--host 0.0.0.0 without --auth" in done.stderr
