"""After a prune, on a real SQLite file and a real PostgreSQL schema: the rxgraph command still reads the thread,
and a new turn on a thread whose head is a cut turn still starts from the newest safe checkpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import ScriptedChat, final_reply, run_rxgraph, tool_call_reply

from rxgraph import CheckpointSaver, RunnableConfig
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.messages import AssistantMessage, ToolCall, UserMessage, check_request

CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CheckpointSaver, list[str]]]:
    """A saver on fresh storage, and the ``--db`` arguments that name that storage to the rxgraph command."""
    if request.param == "sqlite":
        path = tmp_path / "chat.db"
        with SqliteSaver(path) as saver:
            yield saver, ["--db", str(path)]
    else:
        url, schema = request.getfixturevalue("postgres_server"), request.getfixturevalue("postgres_schema")
        with PostgresSaver(url, schema=schema) as saver:
            yield saver, ["--db", url, "--schema", schema]


def test_a_pruned_thread_with_a_cut_head_reads_and_takes_a_new_turn(
    database: tuple[CheckpointSaver, list[str]], tmp_path: Path
) -> None:
    saver, db = database
    chat = ScriptedChat([final_reply("a"), final_reply("b"), final_reply("c")], saver)  # type: ignore[arg-type]
    for text in ("one", "two", "three"):
        chat.graph.invoke({"messages": UserMessage(content=text)}, CONFIG)
    # a cut turn left as the head (a process killed mid-turn): a tool call nobody answered
    head = saver.get("t")
    assert head is not None
    dangling = AssistantMessage(tool_calls=[ToolCall(id="c1", name="get_weather", arguments="{}")])
    cut = head.model_copy(
        update={
            "id": "cut",
            "seq": head.seq + 1,
            "parent_id": head.id,
            "values": {"messages": head.values["messages"].extended([UserMessage(content="four"), dangling])},
            "safe": False,
            "unsafe_reason": "tool call c1 has no response",
            "run_id": "killed",
        }
    )
    saver.put(cut, expected_head=head.id)

    assert saver.prune("t", keep_last=1) > 0
    kept = [c.seq for c in saver.list("t")]
    assert kept == [cut.seq, head.seq]  # the head, and the newest safe checkpoint, which a new turn starts from

    listing = run_rxgraph("inspect", *db, "--thread", "t", "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert [c["seq"] for c in json.loads(listing.stdout)["checkpoints"]] == kept
    check = run_rxgraph("check", *db, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "1 thread(s), 1 whose head cannot take new input" in check.stdout

    chat.script.extend([tool_call_reply(), final_reply("d")])
    chat.graph.invoke({"messages": UserMessage(content="five")}, CONFIG)
    check_request(chat.requests[-2])
    users = [m.content for m in chat.requests[-2] if isinstance(m, UserMessage)]
    assert users == ["one", "two", "three", "five"]  # nothing of the cut turn
