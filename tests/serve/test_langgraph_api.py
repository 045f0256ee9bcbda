"""LangGraph's server API, driven by its official Python client (``langgraph-sdk``, unmodified) against a real
uvicorn: assistants, threads, runs, stream modes, multitask strategies, and the errors the reference server gives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from serve._serving import RewindWatch, Server
from serve.test_app import Tool, weather_agent
from starlette.types import ASGIApp

from rxgraph import END, START, KeyStrategy, MemorySaver, RunInfo, StateGraph
from rxgraph.agent import ReactAgent
from rxgraph.messages import check_request
from rxgraph.serve import create_app

ASK = {"messages": [{"type": "human", "content": "Weather in Paris?"}]}


@contextmanager
def _http_error(status: int) -> Iterator[None]:
    """The block fails with the HTTP status ``status`` (the client raises ``httpx.HTTPStatusError``)."""
    with pytest.raises(httpx.HTTPStatusError) as failed:
        yield
    assert failed.value.response.status_code == status, failed.value.response.text


@pytest.fixture
def saver() -> RewindWatch:
    return RewindWatch(MemorySaver())


_clients: list[SyncLangGraphClient] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def _client(server: Server) -> SyncLangGraphClient:
    _clients.append(get_sync_client(url=server.url))
    return _clients[-1]


def _agent_server(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server], tool: Tool | None = None, answers: Any = ()
) -> tuple[SyncLangGraphClient, ReactAgent, Any]:
    agent, model = weather_agent(saver, tool or Tool(), answers)
    return _client(serve(create_app(agent))), agent, model


def test_the_served_agent_is_one_assistant_with_its_graph_and_schemas(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    client, _, _ = _agent_server(saver, serve)

    [assistant] = client.assistants.search()
    assert assistant["assistant_id"] == assistant["graph_id"] == "agent"
    assert client.assistants.get("agent")["graph_id"] == "agent"
    graph = client.assistants.get_graph("agent")
    assert {n["id"] for n in graph["nodes"]} == {"__start__", "model", "tools", "__end__"}
    assert {"source": "__start__", "target": "model", "conditional": False} in graph["edges"]
    schemas = client.assistants.get_schemas("agent")
    assert schemas["graph_id"] == "agent" and "messages" in schemas["state_schema"]["properties"]
    assert client.assistants.search(graph_id="other") == []
    with _http_error(404):
        client.assistants.get("other")


def test_a_streamed_turn_sends_values_updates_and_message_chunks_as_langchain_messages(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    client, _, _ = _agent_server(saver, serve)
    thread = client.threads.create(metadata={"user": "ann"})

    parts = list(
        client.runs.stream(thread["thread_id"], "agent", input=ASK, stream_mode=["values", "updates", "messages-tuple"])
    )

    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "values"
    assert events.count("values") == 3 and events.count("updates") == 3  # model, tools, model
    final = convert_to_messages(parts[-1].data["messages"])
    assert [type(m) for m in final] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert final[1].tool_calls == [{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}]
    assert final[2].tool_call_id == "c1" and final[2].content == "Sunny in Paris"
    assert final[3].content == "Sunny today."
    chunks = [p.data for p in parts if p.event == "messages"]
    text = "".join(
        c["content"] for c, meta in chunks if c["type"] == "AIMessageChunk" and meta["langgraph_node"] == "model"
    )
    assert text == "Sunny today."
    # A message has one id in every event: its streamed pieces, the update that adds it, the values that hold it.
    last_update = [p.data for p in parts if p.event == "updates"][-1]
    final_ids = [m["id"] for m in parts[-1].data["messages"]]
    assert last_update["model"]["messages"]["id"] == final_ids[-1]
    streamed = list(dict.fromkeys(c["id"] for c, _ in chunks))
    assert streamed == final_ids[1:]  # the call, the tool's answer, the answer; in the order they streamed

    state = client.threads.get_state(thread["thread_id"])
    assert state["values"] == parts[-1].data and state["next"] == []
    assert state["checkpoint"]["checkpoint_id"] == saver.get(thread["thread_id"]).id  # type: ignore[union-attr]
    assert client.threads.get(thread["thread_id"])["status"] == "idle"
    [run] = client.runs.list(thread["thread_id"])
    assert run["status"] == "success" and run["assistant_id"] == "agent"


def test_threads_are_created_found_by_metadata_updated_and_deleted(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    client, _, _ = _agent_server(saver, serve, answers=[[]])
    first = client.threads.create(thread_id="t-1", metadata={"user": "ann"})
    client.threads.create(thread_id="t-2", metadata={"user": "bob"})
    with _http_error(409):
        client.threads.create(thread_id="t-1")
    assert client.threads.create(thread_id="t-1", if_exists="do_nothing")["thread_id"] == "t-1"

    assert [t["thread_id"] for t in client.threads.search(metadata={"user": "ann"})] == ["t-1"]
    assert len(client.threads.search(limit=1)) == 1
    assert [t["thread_id"] for t in client.threads.search(offset=1)] == ["t-1"]  # newest first
    assert [t["thread_id"] for t in client.threads.search(sort_by="created_at", sort_order="asc")] == ["t-1", "t-2"]
    assert [t["thread_id"] for t in client.threads.search(sort_by="thread_id", sort_order="desc", limit=1)] == ["t-2"]
    client.runs.wait("t-1", "agent", input=ASK)
    assert [t["thread_id"] for t in client.threads.search(status="idle", metadata={"user": "ann"})] == ["t-1"]

    changed = client.threads.update("t-1", metadata={"plan": "pro"})
    assert changed["metadata"] == {"user": "ann", "plan": "pro", "graph_id": "agent"}
    assert changed["created_at"] == first["created_at"]

    client.threads.delete("t-1")
    with _http_error(404):
        client.threads.get("t-1")
    assert saver.get("t-1") is None
    with _http_error(404):
        client.threads.get_state("unknown")


def test_wait_returns_the_final_values_and_history_lists_the_checkpoints(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    client, _, model = _agent_server(saver, serve)
    thread = client.threads.create()

    result = client.runs.wait(thread["thread_id"], "agent", input=ASK)

    assert isinstance(result, dict)
    assert [m["type"] for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    check_request(model.requests[-1].messages)
    history = client.threads.get_history(thread["thread_id"], limit=10)
    assert [h["metadata"]["source"] for h in history] == ["loop", "loop", "loop", "input", "input"]  # and the start
    assert history[0]["values"] == result
    older = client.threads.get_history(thread["thread_id"], limit=2, before=history[1]["checkpoint"])
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == [h["checkpoint"]["checkpoint_id"] for h in history[2:4]]
    at = client.threads.get_state(thread["thread_id"], checkpoint_id=history[2]["checkpoint"]["checkpoint_id"])
    assert at["values"] == history[2]["values"]
    assert at["parent_checkpoint"]["checkpoint_id"] == history[3]["checkpoint"]["checkpoint_id"]


def test_a_background_run_is_joined_and_read_back(saver: RewindWatch, serve: Callable[[ASGIApp], Server]) -> None:
    tool = Tool(held=True)
    client, _, _ = _agent_server(saver, serve, tool)
    thread = client.threads.create()

    run = client.runs.create(thread["thread_id"], "agent", input=ASK)
    assert run["status"] in ("pending", "running")
    assert tool.started.wait(10)
    assert client.threads.get(thread["thread_id"])["status"] == "busy"
    assert client.runs.get(thread["thread_id"], run["run_id"])["status"] == "running"
    with _http_error(409):
        client.runs.delete(thread["thread_id"], run["run_id"])  # a run still going is cancelled, not deleted
    tool.released.set()

    joined = client.runs.join(thread["thread_id"], run["run_id"])
    assert [m["type"] for m in joined["messages"]] == ["human", "ai", "tool", "ai"]
    assert client.runs.get(thread["thread_id"], run["run_id"])["status"] == "success"
    # Its stream, joined after the end with Last-Event-ID -1, is every event from the start.
    replay = list(client.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id="-1"))
    assert replay[0].event == "metadata" and replay[-1].data == joined
    with _http_error(404):
        client.runs.get(thread["thread_id"], "no-such-run")
    client.runs.delete(thread["thread_id"], run["run_id"])
    with _http_error(404):
        client.runs.get(thread["thread_id"], run["run_id"])
    assert client.runs.list(thread["thread_id"]) == []


def _counter() -> Any:
    def add(state: dict[str, Any]) -> dict[str, Any]:
        return {"count": state.get("count", 0) + 1}

    builder = StateGraph({"count": KeyStrategy.REPLACE})
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder


def test_a_stateless_run_and_a_graph_target_with_update_state(serve: Callable[[ASGIApp], Server]) -> None:
    graph = _counter().compile(checkpointer=MemorySaver())
    client = _client(serve(create_app({"counter": graph})))

    assert client.runs.wait(None, "counter", input={"count": 1}) == {"count": 2}
    assert client.threads.search() == []  # its thread is gone with it

    thread = client.threads.create()
    client.runs.wait(thread["thread_id"], "counter", input={"count": 5})
    written = client.threads.update_state(thread["thread_id"], {"count": 40}, as_node="add")
    assert (
        written["checkpoint"]["checkpoint_id"]
        == client.threads.get_state(thread["thread_id"])["checkpoint"]["checkpoint_id"]
    )
    assert client.threads.get_state(thread["thread_id"])["values"] == {"count": 40}
    with _http_error(422):
        client.runs.wait(thread["thread_id"], "counter", input=[1, 2])
    with _http_error(404):
        client.runs.wait(thread["thread_id"], "nobody", input={"count": 1})
    with _http_error(404):
        client.runs.wait("no-thread", "counter", input={"count": 1})
    assert client.runs.wait("new-thread", "counter", input={"count": 1}, if_not_exists="create") == {"count": 2}


def _steps() -> Any:
    def first(state: dict[str, Any], run: RunInfo) -> dict[str, Any]:
        run.write({"user": run.context.get("user"), "plan": run.context.get("plan")})
        return {"log": ["first"]}

    builder = StateGraph({"log": KeyStrategy.APPEND})
    builder.add_node("first", first)
    builder.add_node("second", lambda state: {"log": ["second"]})
    builder.add_node("third", lambda state: {"log": ["third"]})
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", "third")
    builder.add_edge("third", END)
    return builder.compile(checkpointer=MemorySaver())


def test_a_run_stops_where_it_is_asked_takes_its_context_and_is_steered_by_a_command(
    serve: Callable[[ASGIApp], Server],
) -> None:
    client = _client(serve(create_app({"steps": _steps()})))
    thread = client.threads.create()["thread_id"]

    parts = list(
        client.runs.stream(
            thread,
            "steps",
            input={"log": []},
            stream_mode=["custom", "updates"],
            interrupt_before=["third"],
            config={"configurable": {"user": "ann"}},
            context={"plan": "pro"},
        )
    )

    assert [p.data for p in parts if p.event == "custom"] == [{"user": "ann", "plan": "pro"}]
    [run] = client.runs.list(thread)
    assert "context" not in run["kwargs"] and run["kwargs"]["interrupt_before"] == ["third"]  # context is not kept
    assert [list(p.data) for p in parts if p.event == "updates"] == [["first"], ["second"], ["__interrupt__"]]
    assert client.threads.get_state(thread)["next"] == ["third"]
    assert client.runs.wait(thread, "steps", input=None) == {"log": ["first", "second", "third"]}
    # A command's update and goto: the run goes where it says, with its update merged.
    assert client.runs.wait(thread, "steps", command={"update": {"log": ["extra"]}, "goto": "third"}) == {
        "log": ["first", "second", "third", "extra", "third"]
    }
    with _http_error(422):
        client.runs.wait(thread, "steps", input={"log": []}, interrupt_before=["nowhere"])
    with _http_error(422):
        list(client.runs.stream(thread, "steps", input={"log": []}, stream_mode="events"))


def test_a_subgraphs_inner_steps_are_streamed_under_its_namespace_when_asked(
    serve: Callable[[ASGIApp], Server],
) -> None:
    def write(state: dict[str, Any], run: RunInfo) -> dict[str, Any]:
        run.write("inside")
        return {"log": ["inner"]}

    inner = (
        StateGraph({"log": KeyStrategy.APPEND}).add_node("work", write).add_edge(START, "work").add_edge("work", END)
    )
    outer = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("sub", inner.compile())
        .add_node("after", lambda state: {"log": ["after"]})
        .add_edge(START, "sub").add_edge("sub", "after").add_edge("after", END)
        .compile(checkpointer=MemorySaver())
    )  # fmt: skip
    client = _client(serve(create_app({"outer": outer})))
    thread = client.threads.create()["thread_id"]
    modes: Any = ["updates", "custom"]

    flat = [p.event for p in client.runs.stream(thread, "outer", input={"log": []}, stream_mode=modes)]
    nested = list(client.runs.stream(thread, "outer", input={"log": []}, stream_mode=modes, stream_subgraphs=True))

    assert flat == ["metadata", "custom", "updates", "updates"]
    assert [p.event for p in nested] == ["metadata", "custom|sub", "updates|sub", "updates", "updates"]
    assert nested[2].data == {"work": {"log": ["inner"]}}
    assert [list(p.data) for p in nested if p.event == "updates"] == [["sub"], ["after"]]
