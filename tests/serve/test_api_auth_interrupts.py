"""LangGraph's API with identities (``create_app(auth=...)``: each thread is its creator's alone) and with runs that
stop for a human (a graph's ``interrupt()``, an agent's tool approval): shown as LangGraph shows them and answered
with ``command={"resume": ...}``. Driven by the official client on a real uvicorn."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from serve._serving import WAIT, Server
from serve.test_approval_served import Mailer, _agent
from starlette.types import ASGIApp

from rxgraph import END, START, KeyStrategy, MemorySaver, StateGraph, interrupt
from rxgraph.messages import check_request
from rxgraph.serve import create_app

TOKENS = {"token-ann": "ann", "token-bob": "bob"}


def _who(headers: Mapping[str, str]) -> str | None:
    return TOKENS.get(headers.get("authorization", "").removeprefix("Bearer "))


async def _who_async(headers: Mapping[str, str]) -> str | None:
    return _who(headers)


@contextmanager
def _status(code: int) -> Iterator[None]:
    with pytest.raises(httpx.HTTPStatusError) as failed:
        yield
    assert failed.value.response.status_code == code, failed.value.response.text
    assert "detail" in failed.value.response.json()


def _counter() -> Any:
    builder = StateGraph({"count": KeyStrategy.REPLACE, "answer": KeyStrategy.REPLACE})
    builder.add_node("ask", lambda state: {"answer": interrupt({"question": "how many?"})})
    builder.add_node("add", lambda state: {"count": state.get("count", 0) + int(state["answer"])})
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=MemorySaver())


@pytest.fixture
def clients() -> Iterator[Callable[[Server, str | None], SyncLangGraphClient]]:
    made: list[SyncLangGraphClient] = []

    def connect(server: Server, token: str | None) -> SyncLangGraphClient:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        made.append(get_sync_client(url=server.url, headers=headers))
        return made[-1]

    yield connect
    for client in made:
        client.close()


@pytest.mark.parametrize("auth", [_who, _who_async], ids=["sync", "async"])
def test_each_thread_is_its_creators_and_no_one_else_sees_it(
    serve: Callable[[ASGIApp], Server], clients: Callable[[Server, str | None], SyncLangGraphClient], auth: Any
) -> None:
    server = serve(create_app({"counter": _counter()}, auth=auth))
    ann, bob, nobody = clients(server, "token-ann"), clients(server, "token-bob"), clients(server, None)
    thread = ann.threads.create(metadata={"topic": "sums"})["thread_id"]
    ann.runs.wait(thread, "counter", input={"count": 1})

    assert [t["thread_id"] for t in ann.threads.search()] == [thread]
    assert bob.threads.search() == [] and bob.threads.search(metadata={"topic": "sums"}) == []
    for call in (
        lambda: bob.threads.get(thread),
        lambda: bob.threads.get_state(thread),
        lambda: bob.threads.get_history(thread),
        lambda: bob.threads.update(thread, metadata={"x": 1}),
        lambda: bob.threads.update_state(thread, {"count": 9}),
        lambda: bob.runs.list(thread),
        lambda: bob.runs.wait(thread, "counter", input={"count": 5}),
        lambda: bob.threads.delete(thread),
    ):
        with _status(404):
            call()
    with _status(401):
        nobody.threads.search()
    with _status(401):
        nobody.assistants.search()
    # Bob cannot take the id for a thread of his own (it is taken), and Ann's thread is as she left it.
    with _status(409):
        bob.threads.create(thread_id=thread)
    with _status(409):
        bob.runs.wait(thread, "counter", input={"count": 5}, if_not_exists="create")
    assert ann.threads.get_state(thread)["values"] == {"count": 1}
    assert ann.threads.get(thread)["metadata"] == {"topic": "sums", "graph_id": "counter"}


def test_a_graph_interrupt_is_shown_as_langgraph_shows_it_and_a_resume_command_answers_it(
    serve: Callable[[ASGIApp], Server], clients: Callable[[Server, str | None], SyncLangGraphClient]
) -> None:
    client = clients(serve(create_app({"counter": _counter()})), None)
    thread = client.threads.create()["thread_id"]

    parts = list(client.runs.stream(thread, "counter", input={"count": 1}, stream_mode=["values", "updates"]))

    stop = parts[-1]
    assert stop.event == "updates" and stop.data["__interrupt__"][0]["value"] == {"question": "how many?"}
    values = [p.data for p in parts if p.event == "values"]
    [pending] = values[-1]["__interrupt__"]
    assert pending["value"] == {"question": "how many?"} and pending["id"]
    assert client.threads.get(thread)["status"] == "interrupted"
    state = client.threads.get_state(thread)
    assert state["next"] == ["ask"]
    assert [t["interrupts"] for t in state["tasks"]] == [[pending]]

    done = client.runs.wait(thread, "counter", command={"resume": "41"})

    assert done == {"count": 42, "answer": "41"}
    assert client.threads.get(thread)["status"] == "idle"
    assert client.threads.get_state(thread)["tasks"] == []


def test_a_tool_approval_stops_the_turn_and_a_resume_command_approves_it(
    serve: Callable[[ASGIApp], Server], clients: Callable[[Server, str | None], SyncLangGraphClient]
) -> None:
    mailer = Mailer()
    agent, model = _agent(MemorySaver(), mailer)
    client = clients(serve(create_app(agent)), None)
    thread = client.threads.create()["thread_id"]

    stopped = client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": "Email Ada"}]})

    [pending] = stopped["__interrupt__"]
    assert pending["value"] == {
        "kind": "tool_approval",
        "calls": [{"id": "c1", "name": "send_email", "arguments": '{"to": "ada@example.com"}'}],
    }
    assert client.threads.get(thread)["status"] == "interrupted" and mailer.sent == []

    done = client.runs.wait(thread, "agent", command={"resume": {"c1": {"decision": "approve"}}})

    assert mailer.sent == ["ada@example.com"]
    assert [m["type"] for m in done["messages"]] == ["human", "ai", "tool", "ai"]
    check_request(model.requests[-1].messages)


def test_another_identity_learns_nothing_of_a_busy_thread_not_even_that_it_is_busy(
    serve: Callable[[ASGIApp], Server], clients: Callable[[Server, str | None], SyncLangGraphClient]
) -> None:
    release = threading.Event()
    builder = StateGraph({"count": KeyStrategy.REPLACE})
    builder.add_node("hold", lambda state: {"count": 1} if release.wait(WAIT) else {"count": 0})
    builder.add_edge(START, "hold")
    builder.add_edge("hold", END)
    server = serve(create_app({"held": builder.compile(checkpointer=MemorySaver())}, auth=_who))
    ann, bob = clients(server, "token-ann"), clients(server, "token-bob")
    thread = ann.threads.create()["thread_id"]
    run = ann.runs.create(thread, "held", input={"count": 0})
    try:
        with _status(409):  # its owner is told it is busy
            ann.runs.create(thread, "held", input={"count": 0}, multitask_strategy="reject")
        with _status(404):  # anyone else, that there is no such thread
            bob.runs.create(thread, "held", input={"count": 0}, multitask_strategy="reject")
    finally:
        release.set()
    assert ann.runs.join(thread, run["run_id"]) == {"count": 1}
