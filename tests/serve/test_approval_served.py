"""Tool approval over LangGraph's API, on a real uvicorn: the turn's stream ends with its values carrying
``__interrupt__`` (the calls to decide), the thread's state says what it waits on, and ``command.resume`` answers it
— also after a client that left the resumed turn midway, whose cut puts the question back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import closing
from typing import Any

from langgraph_sdk import get_sync_client
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
EMAIL_ADA = {"input": {"messages": "Email Ada"}}
APPROVE = {"command": {"resume": {"c1": {"decision": "approve"}}}}
ASKED = {
    "kind": "tool_approval",
    "calls": [{"id": "c1", "name": "send_email", "arguments": '{"to": "ada@example.com"}'}],
}


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


def test_a_turn_stops_for_approval_and_a_command_resume_answers_it(serve: Callable[[ASGIApp], Server]) -> None:
    saver, mailer = MemorySaver(), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))

    got = post_turn(server.url, "t", EMAIL_ADA)

    assert [name for name, _ in got] == ["metadata", "messages", "messages", "updates", "values", "values", "updates"]
    stopped, pending = got[-2][1], got[-1][1]
    [stop] = stopped["__interrupt__"]
    assert stop == {"value": ASKED, "id": stop["id"], "when": "inside", "node": "tools"}
    assert pending == {"__interrupt__": [stop]}
    assert [m["type"] for m in stopped["messages"]] == ["human", "ai"]
    head = saver.get("t")
    assert head is not None and head.source == "interrupt"
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert state["checkpoint"]["checkpoint_id"] == head.id  # the interrupt's checkpoint
        assert (state["next"], state["interrupts"]) == (["tools"], [stop])
        assert [(task["name"], task["interrupts"]) for task in state["tasks"]] == [("tools", [stop])]
        thread = client.threads.get("t")
        assert thread["status"] == "interrupted" and list(thread["interrupts"].values()) == [[stop]]
        assert client.runs.get("t", got[0][1]["run_id"])["status"] == "success"  # stopping for a human is no failure
        assert mailer.sent == []

        resumed = post_turn(server.url, "t", APPROVE)

        assert [name for name, _ in resumed][-3:] == ["messages", "updates", "values"]
        assert [(m["type"], m["content"]) for m in resumed[-1][1]["messages"][2:]] == [
            ("tool", "sent to ada@example.com"),
            ("ai", "Sent."),
        ]
        assert "__interrupt__" not in resumed[-1][1]
        assert mailer.sent == ["ada@example.com"]
        check_request(model.requests[-1].messages)
        state = client.threads.get_state("t")
        assert (state["next"], state["interrupts"], state["tasks"]) == ([], [], [])
        assert client.threads.get("t")["status"] == "idle"


def test_a_rejection_is_one_tool_message_and_a_bad_answer_leaves_the_question(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver, mailer = MemorySaver(), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))
    post_turn(server.url, "t", EMAIL_ADA)

    bad = post_turn(server.url, "t", {"command": {"resume": {"c9": {"decision": "approve"}}}})
    assert [name for name, _ in bad] == ["metadata", "error"]
    assert bad[-1][1] == {
        "error": "InvalidArgumentError",
        "message": "the tool approval answer must decide exactly the calls ['c1']; missing ['c1'], not asked ['c9']",
    }
    with closing(get_sync_client(url=server.url)) as client:
        assert client.runs.get("t", bad[0][1]["run_id"])["status"] == "error"
        state = client.threads.get_state("t")
        assert state["next"] == ["tools"] and [i["value"] for i in state["interrupts"]] == [ASKED]

    rejected = post_turn(
        server.url, "t", {"command": {"resume": {"c1": {"decision": "reject", "reason": "not today"}}}}
    )
    assert rejected[-1][0] == "values"
    assert mailer.sent == []
    check_request(model.requests[-1].messages)
    history = saver.get("t")
    assert history is not None
    answers = [m for m in history.values["messages"] if getattr(m, "tool_call_id", None) == "c1"]
    assert len(answers) == 1 and answers[0].is_error and "not today" in answers[0].content
    [shown] = [m for m in rejected[-1][1]["messages"] if m["type"] == "tool"]
    assert shown["status"] == "error" and "not today" in shown["content"]


def test_a_client_leaving_the_resumed_turn_puts_the_question_back(serve: Callable[[ASGIApp], Server]) -> None:
    saver, mailer = RewindWatch(MemorySaver()), Mailer()
    agent, model = _agent(saver, mailer)
    server = serve(create_app(agent))
    post_turn(server.url, "t", EMAIL_ADA)
    asked = saver.get("t")
    assert asked is not None

    mailer.release.clear()  # the approved tool runs until the client is gone
    hang_up_after(server.url, "t", APPROVE, lambda: mailer.started.wait(WAIT))  # gone while the tool runs
    assert mailer.runs[-1].cancelled.wait(WAIT)  # the server cancelled the resumed turn
    mailer.release.set()
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")  # waits for a rewind in flight
        # The resumed turn had written nothing: the head is still the question, and nothing of the cut turn landed.
        assert state["checkpoint"]["checkpoint_id"] == asked.id and saver.rewinds == []
        assert [(i["node"], i["value"]) for i in state["interrupts"]] == [("tools", ASKED)]  # asked again, not lost
        assert state["next"] == ["tools"]

        post_turn(server.url, "t", APPROVE)
        check_request(model.requests[-1].messages)
        assert client.threads.get_state("t")["interrupts"] == []
        assert client.threads.get("t")["status"] == "idle"


def test_the_demo_agent_that_asks_first_stops_before_its_tool(serve: Callable[[ASGIApp], Server]) -> None:
    from rxgraph.examples.chat import ScriptedChat, make_approving

    agent = make_approving()
    agent.model = ScriptedChat(pace=0.0)  # the scripted model, whatever the environment names
    server = serve(create_app(agent))
    got = post_turn(server.url, "t", {"input": {"messages": "Weather in Rome?"}})
    assert got[-2][0] == "values"
    [stop] = got[-2][1]["__interrupt__"]
    [call] = stop["value"]["calls"]
    assert call["name"] == "get_weather" and call["arguments"] == '{"city": "Rome"}'
    resumed = post_turn(server.url, "t", {"command": {"resume": {call["id"]: {"decision": "approve"}}}})
    assert resumed[-1][0] == "values"
    assert resumed[-1][1]["messages"][-1]["content"].startswith("Here is the weather:")
