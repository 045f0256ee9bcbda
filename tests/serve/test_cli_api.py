"""``rxgraph serve`` with LangGraph's API: several targets, ``--auth``, settings from the environment, one log line per
run's end, and what it refuses (an open address without auth, ``--workers`` without PostgreSQL)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client
from serve._serving import SERVE_ENV, WAIT, leave_when, rxgraph_serve

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
    with rxgraph_serve(*args, cwd=here) as (url, said):
        assert "rxgraph serve: rxgraph.examples.chat:make, counter=counting:make, threads in" in said
        assert "no authentication" not in said
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
    rest: list[str] = []
    with rxgraph_serve(cwd=here, env=env, after=rest) as (url, said):
        assert f"threads in {here / 'env.db'}" in said and "no authentication" in said
        with get_sync_client(url=url) as client:
            client.runs.wait("t", "agent", input={"messages": "Hi"}, if_not_exists="create")
            # Cut the next turn once its answer has started: it is cancelled and rewound, and the log says so.
            leave_when(url, "t", {"input": {"messages": "Tell me a story"}}, lambda name, _: name == "messages")
            cut = client.runs.list("t")[0]["run_id"]
            client.runs.join("t", cut)
            head = client.threads.get_state("t")["checkpoint"]["checkpoint_id"]
    assert re.search(r"INFO: +rxgraph: run \S+ on thread t completed", rest[0]), rest
    # The rewind's line (where the thread now stands), then the run's end.
    rewound = re.search(
        rf"thread 't': run {cut} was cancelled and rewound to checkpoint \S+; its head is now "
        rf"checkpoint {head} ",
        rest[0],
    )
    ended = rest[0].find(f"run {cut} on thread t cancelled")
    assert rewound is not None and ended > rewound.start(), rest


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


TRACED = """
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from rxgraph.examples.chat import make  # the application's agent, and its tracing set up as it starts

provider = TracerProvider()
spans = open(os.environ["SPANS_FILE"], "a", encoding="utf-8")
show = lambda span: json.dumps({"name": span.name, **dict(span.attributes)}) + "\\n"
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=spans, formatter=show)))
trace.set_tracer_provider(provider)
"""


@pytest.mark.parametrize("switch", [["--otel"], []])
def test_otel_reports_runs_to_the_providers_the_process_has(here: Path, switch: list[str]) -> None:
    (here / "traced.py").write_text(TRACED, encoding="utf-8")
    spans = here / "spans.jsonl"
    spans.touch()
    with (
        rxgraph_serve("traced:make", *switch, cwd=here, env={"SPANS_FILE": str(spans)}) as (url, _),
        get_sync_client(url=url) as client,
    ):
        client.runs.wait("t", "agent", input={"messages": "Hi"}, if_not_exists="create")
    reported = [json.loads(line) for line in spans.read_text(encoding="utf-8").splitlines()]
    runs = [span for span in reported if span["name"] == "rxgraph.run"]
    if switch:
        assert [(run["rxgraph.thread_id"], run["rxgraph.outcome"]) for run in runs] == [("t", "completed")]
    else:
        assert runs == []  # without --otel, nothing
