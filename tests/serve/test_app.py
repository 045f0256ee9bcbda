"""``create_app`` on a real uvicorn, over LangGraph's server API: a run streamed as server-sent events (its metadata,
the model's chunks and the tool's messages, each node's update and each superstep's values, messages as LangChain
dicts), the thread read back, bodies refused before anything runs, and a second run on a busy thread following its
``multitask_strategy``."""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from contextlib import closing
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import reactivex as rx
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from langgraph_sdk import get_sync_client
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import WAIT, WEATHER_CALL, RewindWatch, Server, SignallingModel, events, post_turn, run_body
from starlette.types import ASGIApp

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    InvalidArgumentError,
    InvalidTypeError,
    KeyStrategy,
    MemorySaver,
    RunInfo,
    StateGraph,
)
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import UserMessage, check_request
from rxgraph.serve import create_app
from rxgraph.testing import finish, text

CALL = WEATHER_CALL
POOL = ThreadPoolScheduler(4)
ASK = {"messages": "Weather in Paris?"}


class Tool:
    """``get_weather`` on a pool thread, held until ``release`` when ``held``; it says when it started."""

    def __init__(self, *, held: bool = False) -> None:
        self.started = threading.Event()
        self.released = threading.Event()
        if not held:
            self.released.set()

        @tool(scheduler=POOL)
        def get_weather(city: str, run: RunInfo) -> str:
            """Current weather for a city."""
            self.started.set()
            assert self.released.wait(WAIT), "the test never released the tool"
            return f"Sunny in {city}"

        self.tool = get_weather


def weather_agent(saver: CheckpointSaver, weather: Tool, answers: Sequence[Any] = ()) -> tuple[ReactAgent, Any]:
    """Asked about the weather, the model calls ``get_weather`` and then answers; ``answers`` are its later turns."""
    model = SignallingModel([[CALL, finish("tool_calls")], [text("Sunny "), text("today."), finish()], *answers])
    return ReactAgent(model, tools=[weather.tool], checkpointer=saver), model


@pytest.fixture
def saver() -> RewindWatch:
    """The server is the same over any saver: its tests run on one (the reads of a stored thread on each)."""
    return RewindWatch(MemorySaver())


def turn(server: Server, thread: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    return post_turn(server.url, thread, body)


def get(server: Server, path: str) -> httpx.Response:
    return httpx.get(server.url + path, timeout=WAIT)


def test_a_turn_streams_its_metadata_chunks_updates_and_values_as_langchain_messages(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    agent, _ = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    got = turn(server, "t", {"input": ASK})

    assert [name for name, _ in got] == [
        "metadata",
        *("messages", "messages", "updates", "values"),  # the model's call: its chunks, then its step
        *("messages", "updates", "values"),  # the tool's message, then its step
        *("messages", "messages", "messages", "updates", "values"),  # the model's answer
    ]
    metadata, call, call_end, model_update, after_model, answered, tools_update, after_tools, *answer = (
        data for _, data in got
    )
    answer_update, final = answer.pop(-2), answer.pop(-1)
    assert metadata == {"run_id": metadata["run_id"], "attempt": 1}
    for chunk, where in (call, call_end, answered, *answer):
        assert (where["run_id"], where["thread_id"]) == (metadata["run_id"], "t")
        assert where["langgraph_node"] == ("tools" if chunk["type"] == "tool" else "model")
    assert call[0]["type"] == "AIMessageChunk" and call[0]["content"] == ""
    assert call[0]["tool_call_chunks"] == [
        {"type": "tool_call_chunk", "index": 0, "id": "c1", "name": "get_weather", "args": '{"city": "Paris"}'}
    ]
    assert call_end[0]["response_metadata"] == {"finish_reason": "tool_calls"} and call_end[0]["id"] == call[0]["id"]
    assert answered[0] | {"id": None} == {
        "type": "tool",
        "content": "Sunny in Paris",
        "tool_call_id": "c1",
        "name": "get_weather",
        "id": None,
        "status": "success",
        "artifact": None,
        "additional_kwargs": {},
        "response_metadata": {},
    }
    assert [chunk["content"] for chunk, _ in answer] == ["Sunny ", "today.", ""]
    assert {chunk["id"] for chunk, _ in answer} != {call[0]["id"]} and len({chunk["id"] for chunk, _ in answer}) == 1
    messages = convert_to_messages(final["messages"])
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert messages[1].tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}
    ]
    assert (messages[2].tool_call_id, messages[2].content, messages[3].content) == (
        "c1",
        "Sunny in Paris",
        "Sunny today.",
    )
    # Each superstep's values extend the last ones, and an update's messages are the values' (ids included).
    assert (after_model["messages"], after_tools["messages"]) == (final["messages"][:2], final["messages"][:3])
    assert model_update == {"model": {"messages": final["messages"][1]}}
    assert tools_update == {"tools": {"messages": [final["messages"][2]]}}
    assert answer_update == {"model": {"messages": final["messages"][3]}}
    head = saver.get("t")
    assert head is not None and head.source == "loop"
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert state["values"] == final and state["checkpoint"]["checkpoint_id"] == head.id
        assert client.runs.get("t", metadata["run_id"])["status"] == "success"


def test_state_and_history_read_the_thread_newest_first(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    saver = saver_factory()
    agent, _ = weather_agent(saver, Tool())
    server = serve(create_app(agent))
    final = turn(server, "t", {"input": ASK})[-1][1]
    head = saver.get("t")
    assert head is not None

    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert state["values"] == final and [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
        assert (state["next"], state["tasks"], state["interrupts"]) == ([], [], [])
        assert state["checkpoint"] == {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": head.id,
            "checkpoint_map": None,
        }
        assert state["parent_checkpoint"] is not None and state["parent_checkpoint"]["checkpoint_id"] == head.parent_id
        assert state["metadata"] == {
            "source": "loop",
            "step": 4,
            "writes": None,
            "parents": {},
            "run_id": head.run_id,
            "node": "model",
            "safe": True,
            "error": None,
        }
        assert state["created_at"] == head.created_at.isoformat()

        history = client.threads.get_history("t")
        shown = [(h["metadata"]["step"], h["metadata"]["source"], h["metadata"]["node"]) for h in history]
        assert shown == [
            (4, "loop", "model"),
            (3, "loop", "tools"),
            (2, "loop", "model"),
            (1, "input", "__start__"),
            (0, "input", None),  # the thread's start, before its first checkpoint (a fork of the first message)
        ]
        assert [len(h["values"].get("messages", ())) for h in history] == [4, 3, 2, 1, 0]
        assert history[0] == state
        for newer, older in itertools.pairwise(history):
            assert newer["parent_checkpoint"]["checkpoint_id"] == older["checkpoint"]["checkpoint_id"]
        assert history[-1]["checkpoint"]["checkpoint_id"] == "__start__" and history[-1]["parent_checkpoint"] is None
        assert client.threads.get_history("t", limit=2) == history[:2]
        assert get(server, "/threads/t/history?limit=2").json() == history[:2]  # the GET form, as it was

        for read in (client.threads.get_state, client.threads.get_history):
            with pytest.raises(httpx.HTTPStatusError) as missing:
                read("nobody")
            assert missing.value.response.status_code == 404
            assert missing.value.response.json() == {"detail": "thread 'nobody' not found"}
    for bad in ("0", "-1", "two", "1.5"):
        refused = get(server, f"/threads/t/history?limit={bad}")
        assert refused.status_code == 422 and refused.json() == {
            "detail": "limit: must be a whole number from 1 to 10000"
        }


def _body(**fields: Any) -> bytes:
    """A run's body as the server reads it: these fields, for the assistant ``agent``, creating the thread."""
    return json.dumps({"assistant_id": "agent", "if_not_exists": "create", **fields}).encode()


REFUSED_BODIES = [
    (b"", 422, "body: Invalid JSON"),
    (b"{not json", 422, "body: Invalid JSON"),
    (b"[]", 422, "body: Input should be an object"),
    (b'{"input": {"messages": "hi"}}', 422, "assistant_id: Field required"),
    (_body(assistant_id="", input=ASK), 422, "assistant_id: String should have at least 1 character"),
    (_body(), 422, "InvalidArgumentError: an agent's run takes {'messages': [...]}"),  # no input
    (_body(input=3), 422, "InvalidArgumentError: an agent's run takes {'messages': [...]}"),
    (_body(input="hi"), 422, "InvalidArgumentError: an agent's run takes {'messages': [...]}"),  # not in messages
    (_body(input={"messages": "hi", "plan": "pro"}), 422, "InvalidArgumentError: an agent's run takes"),
    (_body(input=ASK, multitask_strategy="sometimes"), 422, "multitask_strategy: Input should be"),
    (_body(input=ASK, context=[]), 422, "context: Input should be an object"),
    (_body(input=ASK, stream=True), 422, "stream: Extra inputs are not permitted"),  # a key the body does not have
    (_body(input=ASK, stream_mode=["events"]), 422, "stream_mode: Value error, stream mode 'events' is not served"),
    (_body(input=ASK, webhook="http://127.0.0.1:1/hook"), 422, "webhook: Value error, webhook is not supported"),
    (_body(input=ASK, command={"resume": {}}), 422, "body: Value error, give input or command, not both"),
    (_body(input=ASK, config={"recursion_limit": 0}), 422, "InvalidConfigError: invalid RunnableConfig"),
    (_body(input={"messages": [{"role": "wizard", "content": "hi"}]}), 422, "MessageFormatError: message 0"),
    (_body(input={"messages": [{"type": "wizard", "content": "hi"}]}), 422, "MessageFormatError: message 0"),
    (_body(input={"messages": [{"role": "tool", "content": "sunny"}]}), 422, "MessageFormatError: message 0"),
    (_body(input={"messages": []}), 422, "InvalidArgumentError: an agent turn needs at least one message"),
    (_body(assistant_id="nobody", input=ASK), 404, "assistant 'nobody' not found; this server has agent"),
]


def test_a_body_that_asks_for_no_valid_run_is_refused_and_nothing_runs(serve: Callable[[ASGIApp], Server]) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    for body, status, problem in REFUSED_BODIES:
        refused = httpx.post(
            server.url + "/threads/t/runs/stream", content=body, headers={"content-type": "application/json"}
        )
        assert refused.status_code == status, (body, refused.text)
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["detail"].startswith(problem), (body, refused.text)
    uncreated = httpx.post(server.url + "/threads/u/runs/stream", json={"assistant_id": "agent", "input": ASK})
    assert (uncreated.status_code, uncreated.json()) == (404, {"detail": "thread 'u' not found"})
    for blank in ("/threads/%20/runs/stream", "/threads/%20%20/runs/stream"):
        refused = httpx.post(server.url + blank, json=run_body({"input": ASK}))
        assert refused.status_code == 422 and "thread_id" in refused.json()["detail"]
    assert model.calls == 0 and saver.threads() == []


SEQUENCE_BREAKS = [
    [{"role": "tool", "tool_call_id": "zz", "content": "sunny"}],  # answers a call nobody made
    [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        },
    ],  # a call nobody answers
    [
        {"type": "human", "content": "hi"},
        {"type": "ai", "content": "", "tool_calls": [{"id": "c9", "name": "get_weather", "args": {}}]},
    ],  # the same, as LangChain dicts
]


@pytest.mark.parametrize("messages", SEQUENCE_BREAKS, ids=["orphan-answer", "unanswered-call", "langchain"])
def test_agent_input_that_breaks_the_sequence_rules_is_refused_with_422_and_stores_nothing(
    messages: list[dict[str, Any]], serve: Callable[[ASGIApp], Server]
) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    refused = httpx.post(server.url + "/threads/t/runs/stream", json=run_body({"input": {"messages": messages}}))

    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].startswith("UnsafeHistoryError: agent input breaks the chat-API sequence rules")
    assert model.calls == 0 and saver.threads() == []


def test_a_refused_run_creates_no_thread(serve: Callable[[ASGIApp], Server]) -> None:
    agent, model = weather_agent(MemorySaver(), Tool())
    server = serve(create_app(agent))

    refused = httpx.post(server.url + "/threads/t/runs/stream", json=run_body({"input": {"messages": []}}))

    assert refused.status_code == 422
    with closing(get_sync_client(url=server.url)) as client:
        assert client.threads.search() == []
        assert get(server, "/threads/t").status_code == 404
    assert model.calls == 0


def test_a_client_gone_before_its_body_was_whole_starts_nothing_and_breaks_nothing(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))
    failures: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = failures.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        address = urlsplit(server.url)
        assert address.hostname is not None and address.port is not None
        with socket.create_connection((address.hostname, address.port), timeout=WAIT) as connection:
            whole = _body(input=ASK)
            connection.sendall(
                b"POST /threads/t/runs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(whole)}\r\n\r\n".encode()
                + whole[: len(whole) // 2]
            )
        assert turn(server, "u", {"input": ASK})[-1][0] == "values"
        with closing(get_sync_client(url=server.url)) as client:
            assert [t["thread_id"] for t in client.threads.search()] == ["u"]
        server.stop()  # returns once every request has been handled
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert failures == [] and model.calls == 2 and saver.threads() == ["u"]


@pytest.mark.parametrize(
    "messages",
    [
        [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        ],
        [
            {"type": "system", "content": "Answer in French."},
            {"type": "human", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        ],
    ],
    ids=["openai", "langchain"],
)
def test_an_agent_turn_may_bring_messages_as_openai_or_langchain_dicts(
    messages: list[dict[str, Any]], saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    final = turn(server, "t", {"input": {"messages": messages}})[-1]

    assert final[0] == "values"
    assert [m["type"] for m in final[1]["messages"]] == ["system", "human", "ai", "tool", "ai"]
    first, second = model.requests[0].messages[:2]
    assert (first.role, first.content) == ("system", "Answer in French.")
    assert (second.role, second.text) == ("user", "Weather in Paris?")  # a text part, kept as a part


def test_reject_answers_409_while_a_run_is_busy_and_the_running_run_goes_on(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    agent, model = weather_agent(saver, weather)
    server = serve(create_app(agent))
    first: list[tuple[str, Any]] = []
    running = threading.Thread(target=lambda: first.extend(turn(server, "t", {"input": ASK})))
    running.start()
    try:
        assert weather.started.wait(WAIT)

        refused = httpx.post(
            server.url + "/threads/t/runs/stream",
            json=run_body({"input": {"messages": "Hello?"}, "multitask_strategy": "reject"}),
            timeout=WAIT,
        )

        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/json"
        with closing(get_sync_client(url=server.url)) as client:
            [busy] = client.runs.list("t")
        assert busy["status"] == "running"
        assert refused.json() == {
            "detail": f"thread 't' is busy with run {busy['run_id']!r} (multitask_strategy='reject')"
        }
    finally:
        weather.released.set()
        running.join(WAIT)
    assert first[0] == ("metadata", {"run_id": busy["run_id"], "attempt": 1})
    assert first[-1][0] == "values" and len(first[-1][1]["messages"]) == 4  # the running turn went on, untouched
    assert model.calls == 2 and saver.rewinds == []


def test_enqueue_starts_the_second_run_once_the_first_has_ended(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    agent, model = weather_agent(saver, weather, answers=[[text("Bye!"), finish()]])
    server = serve(create_app(agent))
    first: list[tuple[str, Any]] = []
    running = threading.Thread(target=lambda: first.extend(turn(server, "t", {"input": ASK})))
    running.start()
    try:
        assert weather.started.wait(WAIT)
        body = run_body({"input": {"messages": "Thanks, bye."}, "multitask_strategy": "enqueue"})
        with (
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
            http.stream("POST", "/threads/t/runs/stream", json=body) as response,
            closing(get_sync_client(url=server.url)) as client,
        ):
            assert response.status_code == 200
            stream = events(response)
            name, metadata = next(stream)  # sent at once: the run is recorded, and in line behind the first
            assert name == "metadata"
            assert client.runs.get("t", metadata["run_id"])["status"] == "pending"
            assert model.calls == 1
            weather.released.set()
            second = list(stream)
            assert client.runs.get("t", metadata["run_id"])["status"] == "success"
    finally:
        weather.released.set()
        running.join(WAIT)

    assert first[-1][0] == "values" and len(first[-1][1]["messages"]) == 4
    assert second[-1][0] == "values" and second[-1][1]["messages"][-1]["content"] == "Bye!"
    # It started from the whole first turn: user, the call, its answer, the reply; then its own question.
    request = model.requests[2].messages
    assert [m.role for m in request] == ["user", "assistant", "tool", "assistant", "user"]
    assert request[-1] == UserMessage(content="Thanks, bye.")
    check_request(request)


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_and_rollback_cancel_the_running_run_which_is_rewound(
    strategy: str, saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    model = SignallingModel([[CALL, finish("tool_calls")], [text("Hi!"), finish()]])
    agent = ReactAgent(model, tools=[weather.tool], checkpointer=saver)
    server = serve(create_app(agent))
    first: list[tuple[str, Any]] = []
    running = threading.Thread(target=lambda: first.extend(turn(server, "t", {"input": ASK})))
    running.start()
    try:
        assert weather.started.wait(WAIT)
        second = turn(server, "t", {"input": {"messages": "Never mind. Hi!"}, "multitask_strategy": strategy})
    finally:
        weather.released.set()
        running.join(WAIT)

    # The first run's stream simply ends: nothing of the tool's answer, no error.
    assert first[0][0] == "metadata" and not running.is_alive()
    assert all(name != "error" for name, _ in first)
    assert all(len(data["messages"]) <= 2 for name, data in first if name == "values")
    assert saver.wait_for_rewind().values == {}
    assert second[-1][0] == "values" and [m["content"] for m in second[-1][1]["messages"]] == ["Never mind. Hi!", "Hi!"]
    assert [m.role for m in model.requests[1].messages] == ["user"]  # nothing of the interrupted turn
    with closing(get_sync_client(url=server.url)) as client:
        runs = {run["run_id"]: run["status"] for run in client.runs.list("t")}
    cancelled, following = first[0][1]["run_id"], second[0][1]["run_id"]
    if strategy == "interrupt":
        assert runs == {cancelled: "interrupted", following: "success"}
    else:  # rollback: the cancelled run's record is deleted too
        assert runs == {following: "success"}


def test_a_supersteps_values_are_sent_when_it_ends_not_when_the_next_one_does(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    agent, _ = weather_agent(saver, weather)
    server = serve(create_app(agent))
    shown = threading.Event()

    def read() -> None:
        with (
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
            http.stream("POST", "/threads/t/runs/stream", json=run_body({"input": ASK})) as response,
        ):
            for name, data in events(response):
                if name == "values" and [m["type"] for m in data["messages"]] == ["human", "ai"]:
                    shown.set()

    reading = threading.Thread(target=read)
    reading.start()
    try:
        assert weather.started.wait(WAIT)
        shown_while_the_tool_runs = shown.wait(WAIT)
    finally:
        weather.released.set()
        reading.join(WAIT)
    assert shown_while_the_tool_runs


def test_a_graph_takes_state_keys_streams_its_updates_values_and_writes_and_continues_with_null(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    def shout(state: dict[str, Any], run: RunInfo) -> rx.Observable[str]:
        run.write({"for": run.context["user"]})
        return rx.from_iterable([state["word"].upper(), "!"])

    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("shout", shout, reduce=lambda chunks: {"log": "".join(chunks)})
        .add_node("count", lambda state: {"count": len(state["log"])})
        .add_edge(START, "shout")
        .add_edge("shout", "count")
        .add_edge("count", END)
        .compile(checkpointer=saver)
    )
    server = serve(create_app(graph))

    got = turn(server, "w", {"input": {"word": "hey", "log": "start"}, "context": {"user": "u-1"}})

    assert got[1:] == [
        ("custom", {"for": "u-1"}),  # the context reached the node; its write was streamed
        ("updates", {"shout": {"log": "HEY!"}}),
        ("values", {"word": "hey", "log": ["start", "HEY!"]}),
        ("updates", {"count": {"count": 2}}),
        ("values", {"word": "hey", "log": ["start", "HEY!"], "count": 2}),
    ]
    head = saver.get("w")
    assert head is not None
    assert [name for name, _ in turn(server, "w", {"input": None})] == ["metadata"]  # the thread had ended
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("w")
    assert state["values"] == {"word": "hey", "log": ["start", "HEY!"], "count": 2}
    assert state["checkpoint"]["checkpoint_id"] == head.id  # nothing was left to run: nothing was written
    refused = httpx.post(server.url + "/threads/w/runs/stream", json=run_body({"input": "hey"}))
    assert refused.status_code == 422
    assert refused.json() == {"detail": "InvalidArgumentError: a run's input is an object of state keys, got str"}
    assert get(server, "/").status_code == 404  # the chat page is for agents


def test_the_chat_page_is_one_file_that_loads_nothing_from_elsewhere(serve: Callable[[ASGIApp], Server]) -> None:
    agent, _ = weather_agent(MemorySaver(), Tool())
    server = serve(create_app(agent))

    page = get(server, "/")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for needed in ('id="message"', 'id="send"', 'id="stop"', 'id="history"', 'id="log"', "AbortController"):
        assert needed in page.text
    assert "http://" not in page.text and "https://" not in page.text and "src=" not in page.text
    assert get(serve(create_app(agent, page=False)), "/").status_code == 404


def test_create_app_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(InvalidTypeError):
        create_app("an agent")  # type: ignore[arg-type]
    graph = StateGraph().add_node("n", lambda s: {}).add_edge(START, "n").add_edge("n", END)
    with pytest.raises(InvalidArgumentError, match="checkpointer"):
        create_app(graph.compile())
    with pytest.raises(InvalidArgumentError, match="ping"):
        create_app(graph.compile(checkpointer=MemorySaver()), ping=-1)
