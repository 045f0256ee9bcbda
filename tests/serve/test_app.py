"""``create_app`` on a real uvicorn: a turn streamed as server-sent events, the thread read back, bodies refused with
422, and a second turn on a busy thread following its ``multitask`` policy."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import reactivex as rx
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import WAIT, RewindWatch, Server, SignallingModel, post_turn
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
from rxgraph.testing import finish, text, tool_call

CALL = tool_call("c1", "get_weather", '{"city": "Paris"}')
POOL = ThreadPoolScheduler(4)


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


def test_a_turn_streams_chunks_tool_results_nodes_and_its_end(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    agent, _ = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    got = turn(server, "t", {"input": "Weather in Paris?"})

    names = [name for name, _ in got]
    assert names == ["chunk", "chunk", "node", "chunk", "node", "chunk", "chunk", "chunk", "node", "end"]
    call_chunk, finish_chunk, model_node, tool_chunk, tools_node, *answer, answer_node, end = (data for _, data in got)
    assert call_chunk == {"node": "model", "chunk": CALL.model_dump(mode="json")}  # a ChatChunk as its JSON
    assert call_chunk["chunk"]["tool_calls"] == [
        {"index": 0, "id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert call_chunk["chunk"]["finish_reason"] is None and finish_chunk["chunk"]["finish_reason"] == "tool_calls"
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert model_node["node"] == "model"
    assert model_node["messages"] == [{"role": "assistant", "content": None, "tool_calls": [call]}]
    assert tool_chunk == {"node": "tools", "chunk": {"role": "tool", "tool_call_id": "c1", "content": "Sunny in Paris"}}
    assert tools_node["messages"] == [tool_chunk["chunk"]]
    assert [a["chunk"]["content"] for a in answer] == ["Sunny ", "today.", ""]
    assert answer_node["messages"] == [{"role": "assistant", "content": "Sunny today."}]
    head = saver.get("t")
    assert head is not None and head.source == "loop"
    assert end == {"thread_id": "t", "checkpoint_id": head.id} and answer_node["checkpoint_id"] == head.id
    assert len({model_node["checkpoint_id"], tools_node["checkpoint_id"], head.id}) == 3


def test_state_and_history_read_the_thread_newest_first(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    agent, _ = weather_agent(saver_factory(), Tool())
    server = serve(create_app(agent))
    end = turn(server, "t", {"input": "Weather in Paris?"})[-1][1]

    state = get(server, "/threads/t/state").json()
    assert state["thread_id"] == "t" and state["next"] == []
    assert [m["role"] for m in state["values"]["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert state["values"]["messages"][1]["tool_calls"] == [
        {"id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert state["checkpoint"]["id"] == end["checkpoint_id"]
    assert state["checkpoint"] | {"created_at": None} == {
        "seq": 4,
        "id": end["checkpoint_id"],
        "parent_id": state["checkpoint"]["parent_id"],
        "node": "model",
        "next": [],
        "source": "loop",
        "run_id": state["checkpoint"]["run_id"],
        "created_at": None,
        "messages": 4,
        "safe": True,
        "unsafe_reason": None,
        "rolled_back_from": None,
        "error": None,
        "pending": None,
    }

    history = get(server, "/threads/t/history").json()["checkpoints"]
    assert [(c["seq"], c["source"], c["node"], c["messages"]) for c in history] == [
        (4, "loop", "model", 4),
        (3, "loop", "tools", 3),
        (2, "loop", "model", 2),
        (1, "input", "__start__", 1),
    ]
    assert history[0]["values"] == state["values"] and history[1]["parent_id"] == history[2]["id"]
    assert [c["seq"] for c in get(server, "/threads/t/history?limit=2").json()["checkpoints"]] == [4, 3]

    for path in ("/threads/nobody/state", "/threads/nobody/history"):
        missing = get(server, path)
        assert missing.status_code == 404 and missing.json()["type"] == "ThreadNotFoundError"
    for bad in ("0", "-1", "two", "1.5"):
        refused = get(server, f"/threads/t/history?limit={bad}")
        assert refused.status_code == 422 and refused.json()["type"] == "ValidationError"


REFUSED_BODIES = [
    (b"", "ValidationError"),
    (b"{not json", "ValidationError"),
    (b'{"context": {}}', "ValidationError"),  # no input
    (b'{"input": 3}', "ValidationError"),
    (b'{"input": "hi", "multitask": "sometimes"}', "ValidationError"),
    (b'{"input": "hi", "context": []}', "ValidationError"),
    (b'{"input": "hi", "stream": true}', "ValidationError"),  # a key the body does not have
    (b'{"input": [{"role": "wizard", "content": "hi"}]}', "MessageFormatError"),
    (b'{"input": [{"role": "tool", "content": "sunny"}]}', "MessageFormatError"),  # no tool_call_id
    (b'{"input": []}', "InvalidArgumentError"),
    (b'{"input": "hi", "resume": {}}', "ValidationError"),  # a turn or an answer, not both
    (b'{"input": [{"role": "tool", "tool_call_id": "zz", "content": "sunny"}]}', "UnsafeHistoryError"),  # orphan
    (
        b'{"input": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "c9", "type": '
        b'"function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}',
        "UnsafeHistoryError",  # a call nobody answers
    ),
]


def test_a_body_that_asks_for_no_valid_turn_is_refused_with_422_and_nothing_runs(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))

    for body, problem in REFUSED_BODIES:
        refused = httpx.post(
            server.url + "/threads/t/runs/stream", content=body, headers={"content-type": "application/json"}
        )
        assert (refused.status_code, refused.json()["type"]) == (422, problem), body
        assert refused.json()["message"], body
    for blank in ("/threads/%20/runs/stream", "/threads/%20%20/runs/stream"):
        assert httpx.post(server.url + blank, json={"input": "hi"}).status_code == 422
    assert get(server, "/threads/%20/state").status_code == 422
    assert model.calls == 0 and saver.threads() == []


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
            connection.sendall(
                b"POST /threads/t/runs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"input": "Weat'
            )
        assert turn(server, "u", {"input": "Weather in Paris?"})[-1][0] == "end"
        server.stop()  # returns once every request has been handled
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert failures == [] and model.calls == 2 and saver.threads() == ["u"]


def test_an_agent_turn_may_bring_messages_in_the_openai_wire_format(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))
    wire = [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    ]

    assert turn(server, "t", {"input": wire})[-1][0] == "end"

    first, second = model.requests[0].messages[:2]
    assert (first.role, first.content) == ("system", "Answer in French.")
    assert (second.role, second.content) == ("user", "Weather in Paris?")


def test_reject_answers_409_with_the_thread_busy_error_while_a_turn_runs(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    agent, model = weather_agent(saver, weather)
    server = serve(create_app(agent))
    first: list[tuple[str, Any]] = []
    running = threading.Thread(target=lambda: first.extend(turn(server, "t", {"input": "Weather in Paris?"})))
    running.start()
    try:
        assert weather.started.wait(WAIT)

        refused = httpx.post(
            server.url + "/threads/t/runs/stream", json={"input": "Hello?", "multitask": "reject"}, timeout=WAIT
        )

        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["type"] == "ThreadBusyError" and "'t'" in refused.json()["message"]
    finally:
        weather.released.set()
        running.join(WAIT)
    assert first[-1][0] == "end"  # the running turn went on, untouched
    assert model.calls == 2 and saver.rewinds == []


class _SignalsBodyRead:
    """ASGI middleware: sets ``listening`` when a request's handler asks for its next message after reading the
    whole body — for the run endpoint, once it has started the run (and so claimed or lined up for the thread) and
    listens for a disconnect while waiting for the first output."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.listening = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body_read = False

        async def watched_receive() -> Any:
            nonlocal body_read
            if body_read:
                self.listening.set()
            message = await receive()
            body_read = body_read or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        await self.app(scope, watched_receive, send)


def test_enqueue_starts_the_second_turn_once_the_first_has_ended(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    agent, model = weather_agent(saver, weather, answers=[[text("Bye!"), finish()]])
    app = _SignalsBodyRead(create_app(agent))
    server = serve(app)
    turns: dict[str, list[tuple[str, Any]]] = {}

    def run(name: str, body: dict[str, Any]) -> None:
        turns[name] = turn(server, "t", body)

    first = threading.Thread(target=run, args=("first", {"input": "Weather in Paris?"}))
    second = threading.Thread(target=run, args=("second", {"input": "Thanks, bye.", "multitask": "enqueue"}))
    first.start()
    try:
        assert weather.started.wait(WAIT)
        app.listening.clear()
        second.start()
        assert app.listening.wait(WAIT)  # the second turn is in line behind the first
        assert model.calls == 1
    finally:
        weather.released.set()
        first.join(WAIT)
        second.join(WAIT)

    assert turns["first"][-1][0] == "end" and turns["second"][-1][0] == "end"
    assert turns["second"][-2][1]["messages"] == [{"role": "assistant", "content": "Bye!"}]
    # It started from the whole first turn: user, the call, its answer, the reply; then its own question.
    request = model.requests[2].messages
    assert [m.role for m in request] == ["user", "assistant", "tool", "assistant", "user"]
    assert request[-1] == UserMessage(content="Thanks, bye.")
    check_request(request)


def test_interrupt_cancels_the_running_turn_which_is_rewound_and_ends_with_an_error(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    weather = Tool(held=True)
    model = SignallingModel([[CALL, finish("tool_calls")], [text("Hi!"), finish()]])
    agent = ReactAgent(model, tools=[weather.tool], checkpointer=saver)
    server = serve(create_app(agent))
    first: list[tuple[str, Any]] = []
    running = threading.Thread(target=lambda: first.extend(turn(server, "t", {"input": "Weather in Paris?"})))
    running.start()
    try:
        assert weather.started.wait(WAIT)
        second = turn(server, "t", {"input": "Never mind. Hi!", "multitask": "interrupt"})
    finally:
        weather.released.set()
        running.join(WAIT)

    assert first[-1] == ("error", {"type": "RunInterruptedError", "message": first[-1][1]["message"]})
    assert saver.wait_for_rewind().values == {}
    assert second[-1][0] == "end"
    assert [m.role for m in model.requests[1].messages] == ["user"]  # nothing of the interrupted turn


def test_a_graph_takes_state_keys_streams_its_chunks_and_resumes_with_null(
    saver: RewindWatch, serve: Callable[[ASGIApp], Server]
) -> None:
    def shout(state: dict[str, Any]) -> rx.Observable[str]:
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

    assert [name for name, _ in got] == ["chunk", "chunk", "node", "node", "end"]
    assert [data["chunk"] for _, data in got[:2]] == ["HEY", "!"]
    assert got[2][1].keys() == {"node", "checkpoint_id"}  # no messages: a graph has no chat history to show
    assert get(server, "/threads/w/state").json()["values"] == {"word": "hey", "log": ["start", "HEY!"], "count": 2}
    assert turn(server, "w", {"input": None}) == [
        ("end", {"thread_id": "w", "checkpoint_id": got[-1][1]["checkpoint_id"]})
    ]
    refused = httpx.post(server.url + "/threads/w/runs/stream", json={"input": "hey"})
    assert refused.status_code == 422 and refused.json()["type"] == "ValidationError"
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
