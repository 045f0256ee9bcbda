"""Tool approval over HTTP, on a real uvicorn: the turn's stream ends with an ``interrupt`` event listing the calls,
the state says what the thread waits on, and a ``resume`` body answers it — also after a client that left the
resumed turn midway, whose cut puts the question back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import WAIT, RewindWatch, Server, SignallingModel, hang_up_after, post_turn
from starlette.types import ASGIApp

from rxgraph import MemorySaver, RunInfo
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import check_request
from rxgraph.serve import create_app
from rxgraph.testing import finish, text, tool_call

POOL = ThreadPoolScheduler(2)
CALL = tool_call("c1", "send_email", '{"to": "ada@example.com"}')


class Mailer:
    """A ``send_email`` tool that needs approval; ``hold`` keeps it running until ``release``."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

        self.runs: list[RunInfo] = []

        @tool(scheduler=POOL, requires_approval=True)
        def send_email(to: str, run: RunInfo) -> str:
            """Send an email."""
            self.runs.append(run)
            self.started.set()
            assert self.release.wait(WAIT), "the test never released the tool"
            self.sent.append(to)
            return f"sent to {to}"

        self.tool = send_email


def _agent(saver: Any, mailer: Mailer) -> tuple[ReactAgent, SignallingModel]:
    model = SignallingModel([[CALL, finish("tool_calls")], [text("Sent."), finish()], [text("Sent."), finish()]])
    return ReactAgent(model, tools=[mailer.tool], checkpointer=saver), model


def test_a_turn_stops_for_approval_and_a_resume_body_answers_it(serve: Callable[[ASGIApp], Server]) -> None:
    saver, mailer = MemorySaver(), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))

    got = post_turn(server.url, "t", {"input": "Email Ada"})
    assert [name for name, _ in got] == ["chunk", "chunk", "node", "interrupt", "end"]
    stop, end = got[-2][1], got[-1][1]
    assert stop["node"] == "tools" and stop["when"] == "inside"
    assert stop["value"] == {
        "kind": "tool_approval",
        "calls": [{"id": "c1", "name": "send_email", "arguments": '{"to": "ada@example.com"}'}],
    }
    head = saver.get("t")
    assert head is not None and end == {"thread_id": "t", "checkpoint_id": head.id}  # the interrupt's checkpoint
    state = httpx.get(f"{server.url}/threads/t/state", timeout=WAIT).json()
    assert state["interrupt"] == {"node": "tools", "when": "inside", "value": stop["value"]}
    assert mailer.sent == []

    resumed = post_turn(server.url, "t", {"resume": {"c1": {"decision": "approve"}}})
    assert [name for name, _ in resumed][-3:] == ["chunk", "node", "end"]
    assert mailer.sent == ["ada@example.com"]
    check_request(model.requests[-1].messages)
    assert httpx.get(f"{server.url}/threads/t/state", timeout=WAIT).json()["interrupt"] is None


def test_a_rejection_is_one_tool_message_and_a_bad_answer_leaves_the_question(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver, mailer = MemorySaver(), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))
    post_turn(server.url, "t", {"input": "Email Ada"})

    bad = post_turn(server.url, "t", {"resume": {"c9": {"decision": "approve"}}})
    assert bad[-1][0] == "error" and bad[-1][1]["type"] == "InvalidArgumentError"
    assert httpx.get(f"{server.url}/threads/t/state", timeout=WAIT).json()["interrupt"]["node"] == "tools"

    post_turn(server.url, "t", {"resume": {"c1": {"decision": "reject", "reason": "not today"}}})
    assert mailer.sent == []
    check_request(model.requests[-1].messages)
    history = saver.get("t")
    assert history is not None
    answers = [m for m in history.values["messages"] if getattr(m, "tool_call_id", None) == "c1"]
    assert len(answers) == 1 and answers[0].is_error and "not today" in answers[0].content


def test_a_client_leaving_the_resumed_turn_puts_the_question_back(serve: Callable[[ASGIApp], Server]) -> None:
    saver, mailer = RewindWatch(MemorySaver()), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))
    post_turn(server.url, "t", {"input": "Email Ada"})
    asked = saver.get("t")

    mailer.release.clear()  # the approved tool runs until the client is gone
    body = {"resume": {"c1": {"decision": "approve"}}}
    hang_up_after(server.url, "t", body, lambda: mailer.started.wait(WAIT))  # gone while the tool runs
    assert mailer.runs[-1].cancelled.wait(WAIT)  # the server cancelled the resumed turn
    mailer.release.set()
    state = httpx.get(f"{server.url}/threads/t/state", timeout=WAIT).json()  # waits for a rewind in flight
    # The resumed turn had written nothing: the head is still the question, and nothing of the cut turn landed.
    assert asked is not None and state["checkpoint"]["id"] == asked.id and saver.rewinds == []
    assert state["interrupt"] is not None and state["interrupt"]["node"] == "tools"  # asked again, not lost
    assert state["next"] == ["tools"]

    post_turn(server.url, "t", {"resume": {"c1": {"decision": "approve"}}})
    check_request(model.requests[-1].messages)
    assert httpx.get(f"{server.url}/threads/t/state", timeout=WAIT).json()["interrupt"] is None


def test_the_demo_agent_that_asks_first_stops_before_its_tool(serve: Callable[[ASGIApp], Server]) -> None:
    from rxgraph.examples.chat import ScriptedChat, make_approving

    agent = make_approving()
    agent.model = ScriptedChat(pace=0.0)  # the scripted model, whatever the environment names
    server = serve(create_app(agent))
    got = post_turn(server.url, "t", {"input": "Weather in Rome?"})
    assert got[-2][0] == "interrupt" and got[-2][1]["value"]["calls"][0]["name"] == "get_weather"
    resumed = post_turn(server.url, "t", {"resume": {got[-2][1]["value"]["calls"][0]["id"]: {"decision": "approve"}}})
    assert resumed[-1][0] == "end"
