"""A client that goes away from its run's stream cancels the run, at whatever point of the turn: the model's answer or
the tool is disposed, the thread is rewound (its state is the one before the turn, and the run is recorded as
interrupted), and the next turn sends the model a valid request with nothing of the cut turn."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest
from langgraph_sdk import get_sync_client
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import WAIT, RewindWatch, Server, SignallingModel, hang_up_after, leave_when, post_turn
from starlette.types import ASGIApp

from rxgraph import CheckpointSaver, RunInfo
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import AssistantMessage, UserMessage, check_request
from rxgraph.rx import SignalType
from rxgraph.serve import create_app
from rxgraph.testing import finish, marbles, text, tool_call

POOL = ThreadPoolScheduler(4)
QUESTION = {"messages": "Weather in Paris?"}
GREETING = [text("Hello!"), finish()]
CALL = [tool_call("c1", "get_weather", '{"city": "Paris"}'), finish("tool_calls")]
WELCOME = [text("You're welcome."), finish()]


class Turn:
    """The weather turn the client leaves, with what each phase needs: the model's scripts (a greeting turn first,
    then the weather turn, then the next turn's answer) and a tool that can be held until the turn is cancelled."""

    def __init__(self, phase: str, saver: CheckpointSaver) -> None:
        never = marbles("-")  # an answer that has not begun: no chunk, no end
        streaming = marbles("a-", a=text("Sunny"))  # an answer cut after its first chunk
        scripts: dict[str, list[Any]] = {
            "before the first output": [GREETING, never, WELCOME],
            "while the answer streams": [GREETING, CALL, streaming, WELCOME],
            "while the tool runs": [GREETING, CALL, WELCOME],
            "between the tool and the answer": [GREETING, CALL, never, WELCOME],
        }
        self.model = SignallingModel(scripts[phase])
        self.tool_started = threading.Event()
        self.tool_saw_cancel = threading.Event()
        hold = phase == "while the tool runs"

        @tool(scheduler=POOL)
        def get_weather(city: str, run: RunInfo) -> str:
            """Current weather for a city."""
            self.tool_started.set()
            if hold and run.cancelled.wait(WAIT):
                self.tool_saw_cancel.set()
            return f"Sunny in {city}"

        self.agent = ReactAgent(self.model, tools=[get_weather], checkpointer=saver)


def leave(server: Server, turn: Turn, phase: str) -> None:
    """Start the weather turn and go away at ``phase``."""
    if phase == "before the first output":
        hang_up_after(server.url, "t", {"input": QUESTION}, lambda: turn.model.wait_for_calls(2))
        return

    def reached(name: str, data: Any) -> bool:
        if phase == "while the answer streams":
            chunk, where = data if name == "messages" else ({}, {})
            return where.get("langgraph_node") == "model" and chunk.get("content") == "Sunny"
        if phase == "while the tool runs":
            return name == "updates" and "model" in data and turn.tool_started.wait(WAIT)
        if name == "updates" and "tools" in data:
            turn.model.wait_for_calls(3)  # the answer was asked for, and has not begun
            return True
        return False

    leave_when(server.url, "t", {"input": QUESTION}, reached)


@pytest.mark.parametrize(
    "phase",
    ["before the first output", "while the answer streams", "while the tool runs", "between the tool and the answer"],
)
def test_a_client_that_goes_away_cancels_its_turn_which_is_rewound_and_the_next_turn_is_valid(
    phase: str, saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    saver = RewindWatch(saver_factory())
    turn = Turn(phase, saver)
    server = serve(create_app(turn.agent))
    greeted = post_turn(server.url, "t", {"input": {"messages": "Hi"}})
    assert greeted[-1][0] == "values"
    before = saver.get("t")
    assert before is not None

    leave(server, turn, phase)

    if phase == "while the tool runs":
        assert turn.tool_saw_cancel.wait(WAIT)
    else:
        assert turn.model.wait_for_end(turn.model.calls) is SignalType.CANCEL  # the model's answer was disposed
    rewind = saver.wait_for_rewind()
    assert rewind.parent_id == before.id and rewind.values == before.values
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert (state["checkpoint"]["checkpoint_id"], state["metadata"]["source"]) == (rewind.id, "rewind")
        assert state["values"] == greeted[-1][1] and state["next"] == []  # what the client saw before the turn
        [cut] = [run for run in client.runs.list("t") if run["run_id"] != greeted[0][1]["run_id"]]
        client.runs.join("t", cut["run_id"])  # once it has ended
        assert client.runs.get("t", cut["run_id"])["status"] == "interrupted"

    thanked = post_turn(server.url, "t", {"input": {"messages": "Thanks!"}})
    assert thanked[-1][0] == "values" and thanked[-1][1]["messages"][-1]["content"] == "You're welcome."
    request = turn.model.requests[-1].messages
    check_request(request)
    assert request == (
        UserMessage(content="Hi"),
        AssistantMessage(content="Hello!"),
        UserMessage(content="Thanks!"),
    )
    assert len(saver.rewinds) == 1
