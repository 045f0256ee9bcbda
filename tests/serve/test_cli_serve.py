"""``rxgraph serve MODULE:ATTR``: the demo agent served from the command line as the assistant ``agent`` of
LangGraph's API, its threads kept in ``--db``."""

from __future__ import annotations

import os
import sys
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client
from serve._serving import WAIT, events, run_body, rxgraph_serve

from rxgraph import SqliteSaver
from rxgraph.cli import main


def test_rxgraph_serve_serves_the_demo_agent_on_its_db_until_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with rxgraph_serve("rxgraph.examples.chat:make", "--db", str(db), cwd=tmp_path) as (url, said):
        assert f"rxgraph serve: rxgraph.examples.chat:make, threads in {db}" in said
        assert "<title>rxgraph chat</title>" in httpx.get(url + "/", timeout=WAIT).text
        body = run_body({"input": {"messages": "Hi"}})
        with httpx.stream("POST", url + "/threads/cli/runs/stream", json=body, timeout=WAIT) as answer:
            got = list(events(answer))
        assert got[0][0] == "metadata" and got[-1][0] == "values"
        chunks = [data[0] for name, data in got if name == "messages" and data[0]["type"] == "AIMessageChunk"]
        streamed = "".join(chunk["content"] for chunk in chunks)
        assert streamed.startswith("Hello!") and got[-1][1]["messages"][-1]["content"] == streamed
        with closing(get_sync_client(url=url)) as client:
            assert client.assistants.get("agent")["graph_id"] == "agent"
            assert client.threads.get_state("cli")["values"] == got[-1][1]

    saver = SqliteSaver(db)
    try:
        head = saver.get("cli")
        assert head is not None and [m.role for m in head.values["messages"]] == ["user", "assistant"]
    finally:
        saver.close()


def test_rxgraph_serve_says_what_it_cannot_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "served_here.py").write_text(
        "from rxgraph.examples.chat import make\nagent = make()\nnumber = 42\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)  # the command imports MODULE from the current directory too
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    cases = {
        ("served_here:agent", "--db", "x.db"): "--db needs a function that takes a checkpointer",
        ("served_here:nothing",): "'served_here' has no attribute 'nothing'",
        ("served_here:number",): "served_here:number is a int: expected a CompiledGraph, a ReactAgent or a function",
        ("no_such_module:make",): "cannot import 'no_such_module'",
        ("served_here",): "expected MODULE:ATTR",
    }
    try:
        for args, message in cases.items():
            assert main(["serve", *args]) == 1, args
            said = capsys.readouterr()
            assert said.out == "" and message in said.err, (args, said)
    finally:
        sys.modules.pop("served_here", None)
    with pytest.raises(SystemExit) as usage:
        main(["serve", "served_here:agent", "--port", "70000"])
    assert usage.value.code == 2 and "--port must be from 0 to 65535" in capsys.readouterr().err


def test_rxgraph_serve_answers_only_for_its_host_names(tmp_path: Path) -> None:
    with rxgraph_serve("rxgraph.examples.chat:make", cwd=tmp_path) as (url, said):
        assert "answers for host names 127.0.0.1, localhost, ::1, testserver (--allowed-host to change)" in said
        assert httpx.get(url + "/", timeout=WAIT).status_code == 200
        assert httpx.get(url + "/", headers={"host": "chat.example"}, timeout=WAIT).status_code == 400
    with rxgraph_serve("rxgraph.examples.chat:make", "--allowed-host", "chat.example", cwd=tmp_path) as (url, said):
        assert "answers for host names chat.example (--allowed-host to change)" in said
        assert httpx.get(url + "/", headers={"host": "chat.example"}, timeout=WAIT).status_code == 200
        assert httpx.get(url + "/", timeout=WAIT).status_code == 400  # 127.0.0.1 was not named


def test_a_refused_rxgraph_serve_leaves_no_database_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "served_here.py").write_text(
        "from rxgraph.examples.chat import make\nagent = make()\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    try:
        assert main(["serve", "served_here:agent", "--db", "x.db"]) == 1
    finally:
        sys.modules.pop("served_here", None)
    assert "--db needs a function that takes a checkpointer" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()
