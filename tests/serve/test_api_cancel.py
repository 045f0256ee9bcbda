"""The guarantee on LangGraph's API: every way a client ends a run — leaving its stream, ``runs.cancel`` (interrupt
or rollback), a newer run's ``multitask_strategy`` (interrupt or rollback) — rewinds the turn, so the thread's state
is its pre-turn state and the next turn's model request is valid. Also ``reject``, ``enqueue`` and
``on_disconnect="continue"``, driven by the official client on a real uvicorn."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from serve._serving import WAIT, ReadingModel, RewindWatch, Server, leave_when
from serve.test_app import Tool
from starlette.types import ASGIApp

from rxgraph import MemorySaver, SqliteSaver
from rxgraph.agent import ReactAgent
from rxgraph.messages import check_request
from rxgraph.serve import create_app
from rxgraph.serve._registry import LEASE, RunRecord
from rxgraph.serve._registry_sqlite import SqliteRegistry

ASK = {"messages": [{"type": "human", "content": "Weather in Paris?"}]}
AGAIN = {"messages": [{"type": "human", "content": "And tomorrow?"}]}


@pytest.fixture
def saver() -> RewindWatch:
    return RewindWatch(MemorySaver())


@pytest.fixture
def scene(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> Iterator[tuple[SyncLangGraphClient, Tool, ReadingModel]]:
    """A served agent whose tool is held until released; a thread ``t`` with one completed turn."""
    tool, model = Tool(held=True), ReadingModel()
    server = serve(create_app(ReactAgent(model, tools=[tool.tool], checkpointer=saver)))
    client = get_sync_client(url=server.url)
    client.threads.create(thread_id="t")
    client.runs.wait("t", "agent", input={"messages": [{"type": "human", "content": "Hello"}]})
    yield client, tool, model
    tool.released.set()
    client.close()


def _before(client: SyncLangGraphClient) -> dict[str, Any]:
    return client.threads.get_state("t")


def _assert_rewound(
    client: SyncLangGraphClient, saver: RewindWatch, before: dict[str, Any], model: ReadingModel
) -> None:
    """The thread is back at its pre-turn values, by a rewind, and takes a next turn whose request is valid."""
    rewind = saver.wait_for_rewind()
    state = client.threads.get_state("t")
    assert state["values"] == before["values"]
    assert state["checkpoint"]["checkpoint_id"] == rewind.id
    assert client.threads.get("t")["status"] == "idle"
    result = client.runs.wait("t", "agent", input=AGAIN)
    assert result["messages"][-1]["content"] == "Rain."
    check_request(model.requests[-1])


def test_leaving_the_stream_while_a_tool_runs_rewinds_the_turn(
    scene: tuple[SyncLangGraphClient, Tool, ReadingModel], saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    client, _, model = scene
    before = _before(client)
    url = str(client.http.client.base_url).rstrip("/")

    # The model's step is sent as values while the tool is still held: each superstep's values go out as it lands.
    leave_when(
        url,
        "t",
        {"input": ASK},
        lambda name, data: name == "values" and data["messages"][-1].get("tool_calls", [{}])[0].get("id") == "c1",
    )

    _assert_rewound(client, saver, before, model)
    # Newest first: the next turn, the cut one, the first turn.
    assert [r["status"] for r in client.runs.list("t")] == ["success", "interrupted", "success"]


def test_runs_cancel_rewinds_the_turn_and_rollback_deletes_the_run(
    scene: tuple[SyncLangGraphClient, Tool, ReadingModel], saver: RewindWatch
) -> None:
    client, tool, model = scene
    before = _before(client)

    run = client.runs.create("t", "agent", input=ASK)
    assert tool.started.wait(WAIT)
    client.runs.cancel("t", run["run_id"], wait=True)
    assert client.runs.get("t", run["run_id"])["status"] == "interrupted"
    _assert_rewound(client, saver, before, model)

    before = _before(client)
    tool.started.clear()
    run = client.runs.create("t", "agent", input=ASK)
    assert tool.started.wait(WAIT)
    client.runs.cancel("t", run["run_id"], wait=True, action="rollback")
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.runs.get("t", run["run_id"])
    assert gone.value.response.status_code == 404
    saver.wait_for_rewind(2)
    assert client.threads.get_state("t")["values"] == before["values"]


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_a_newer_run_that_interrupts_or_rolls_back_rewinds_the_older_one(
    scene: tuple[SyncLangGraphClient, Tool, ReadingModel], saver: RewindWatch, strategy: str
) -> None:
    client, tool, model = scene
    before = _before(client)
    older = client.runs.create("t", "agent", input=ASK)
    assert tool.started.wait(WAIT)

    newer = client.runs.wait("t", "agent", input=AGAIN, multitask_strategy=strategy)  # type: ignore[arg-type]

    assert saver.wait_for_rewind().parent_id is not None
    assert [m["content"] for m in newer["messages"]] == [
        *[m["content"] for m in before["values"]["messages"]],
        "And tomorrow?",
        "Rain.",
    ]
    check_request(model.requests[-1])
    if strategy == "interrupt":
        assert client.runs.get("t", older["run_id"])["status"] == "interrupted"
    else:
        with pytest.raises(httpx.HTTPStatusError):
            client.runs.get("t", older["run_id"])


def test_reject_refuses_a_run_while_one_is_going_and_enqueue_waits_for_it(
    scene: tuple[SyncLangGraphClient, Tool, ReadingModel],
) -> None:
    client, tool, model = scene
    first = client.runs.create("t", "agent", input=ASK)
    assert tool.started.wait(WAIT)

    with pytest.raises(httpx.HTTPStatusError) as busy:
        client.runs.create("t", "agent", input=AGAIN, multitask_strategy="reject")
    assert busy.value.response.status_code == 409 and first["run_id"] in busy.value.response.json()["detail"]

    queued = client.runs.create("t", "agent", input=AGAIN, multitask_strategy="enqueue")
    assert client.runs.get("t", queued["run_id"])["status"] == "pending"
    tool.released.set()
    final = client.runs.join("t", queued["run_id"])
    assert [m["content"] for m in final["messages"]][-3:] == ["Sunny today.", "And tomorrow?", "Rain."]
    assert [r["status"] for r in client.runs.list("t")][:2] == ["success", "success"]
    check_request(model.requests[-1])


def test_a_run_started_with_on_disconnect_continue_outlives_its_stream(
    scene: tuple[SyncLangGraphClient, Tool, ReadingModel], saver: RewindWatch
) -> None:
    client, tool, _ = scene
    url = str(client.http.client.base_url).rstrip("/")

    leave_when(
        url, "t", {"input": ASK, "on_disconnect": "continue"}, lambda name, data: name == "updates" and "model" in data
    )
    [run, _] = client.runs.list("t")
    tool.released.set()

    final = client.runs.join("t", run["run_id"])
    assert final["messages"][-1]["content"] == "Sunny today."
    assert saver.rewinds == []


def test_the_record_of_a_run_whose_process_died_stops_counting_as_running(
    tmp_path: Path, serve: Callable[[ASGIApp], Server]
) -> None:
    saver = SqliteSaver(tmp_path / "t.db")
    server = serve(create_app(ReactAgent(ReadingModel(), checkpointer=saver)))
    others = SqliteRegistry(str(tmp_path / "t.db"))  # what another server process on the file wrote
    try:
        with get_sync_client(url=server.url) as client:
            client.threads.create(thread_id="t")
            moment = datetime.now(UTC)

            def record(run_id: str, touched: float) -> RunRecord:
                at = moment - timedelta(seconds=touched)
                return RunRecord(run_id, "t", "agent", None, "running", {}, {}, "enqueue", at, at)

            others.put_run(record("live", LEASE / 3))
            assert client.threads.get("t")["status"] == "busy"
            assert client.runs.get("t", "live")["status"] == "running"
            others.put_run(record("live", LEASE * 2))  # its process stopped touching it: it died
            assert client.threads.get("t")["status"] == "idle"
            assert client.runs.get("t", "live")["status"] == "error"
            assert client.runs.list("t", status="error")[0]["run_id"] == "live"
            client.runs.cancel("t", "live", wait=True)  # nothing to wait for
            assert client.runs.join("t", "live") == {}
            client.runs.delete("t", "live")
    finally:
        others.close()
        saver.close()
