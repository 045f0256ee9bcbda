"""The disconnect test again, end to end over HTTP on both sides: the served agent's model is ``OpenAIChatModel``
talking to a ``ChatCompletionsServer``. A client that goes away from its run's stream closes the model's HTTP stream
when one is open (the fake API sees it go), the thread is rewound, and the next turn's request is one a strict API
accepts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest
from _weather_api import PHASES, QUESTION, Scenario, scenario_maker
from langgraph_sdk import get_sync_client
from serve._serving import WAIT, RewindWatch, Server, hang_up_after, leave_when, post_turn
from starlette.types import ASGIApp

from rxgraph import CheckpointSaver, MemorySaver
from rxgraph.serve import create_app

ASK = {"messages": QUESTION}


@pytest.fixture
def scenarios() -> Iterator[Callable[[str, CheckpointSaver], Scenario]]:
    with scenario_maker() as make:
        yield make


def leave(server: Server, scenario: Scenario, phase: str) -> None:
    """Start the weather turn and go away at ``phase``."""
    if phase == "before the first output":
        hang_up_after(server.url, "t", {"input": ASK}, lambda: scenario.gate.wait_for_arrivals(1, WAIT))
        return

    def reached(name: str, data: Any) -> bool:
        if phase == "while the answer streams":
            chunk, where = data if name == "messages" else ({}, {})
            return where.get("langgraph_node") == "model" and chunk.get("content") == "Sunny"
        if phase == "while the tool runs":
            return name == "updates" and "model" in data and scenario.tool_started.wait(WAIT)
        if name == "updates" and "tools" in data:
            scenario.gate.wait_for_arrivals(1, WAIT)  # the answer was asked for, and has not begun
            return True
        return False

    leave_when(server.url, "t", {"input": ASK}, reached)


@pytest.mark.parametrize("phase", PHASES)
def test_leaving_closes_the_models_http_stream_rewinds_and_the_next_request_is_one_the_api_accepts(
    phase: str,
    serve: Callable[[ASGIApp], Server],
    scenarios: Callable[[str, CheckpointSaver], Scenario],
) -> None:
    saver = RewindWatch(MemorySaver())
    scenario = scenarios(phase, saver)
    server = serve(create_app(scenario.agent))
    greeted = post_turn(server.url, "t", {"input": {"messages": "Hi"}})
    assert greeted[-1][0] == "values"
    before = saver.get("t")
    assert before is not None

    leave(server, scenario, phase)

    scenario.check_left(saver, before)
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert state["checkpoint"]["checkpoint_id"] == saver.rewinds[0].id and state["values"] == greeted[-1][1]
    thanked = post_turn(server.url, "t", {"input": {"messages": "Thanks!"}})
    assert thanked[-1][0] == "values" and thanked[-1][1]["messages"][-1]["content"] == "You're welcome."
    scenario.check_next_accepted(saver)


def _reached(scenario: Scenario) -> None:
    """Wait until the held weather turn is at its scenario's phase."""
    if scenario.phase == "while the tool runs":
        assert scenario.tool_started.wait(WAIT)
    else:  # the model's answer is held at the gate: before any text, mid-answer, or after the tool
        scenario.gate.wait_for_arrivals(1, WAIT)


ENDINGS = [
    *((phase, "cancel") for phase in PHASES),
    ("while the answer streams", "cancel with rollback"),
    ("while the tool runs", "a newer run that rolls back"),
    ("between the tool and the answer", "a newer run that interrupts"),
]


@pytest.mark.parametrize(("phase", "ending"), ENDINGS)
def test_a_background_run_cancelled_or_replaced_closes_the_models_stream_and_rewinds(
    phase: str,
    ending: str,
    serve: Callable[[ASGIApp], Server],
    scenarios: Callable[[str, CheckpointSaver], Scenario],
) -> None:
    saver = RewindWatch(MemorySaver())
    scenario = scenarios(phase, saver)
    server = serve(create_app(scenario.agent))
    with closing(get_sync_client(url=server.url)) as client:
        client.threads.create(thread_id="t")
        client.runs.wait("t", "agent", input={"messages": "Hi"})
        before = saver.get("t")
        assert before is not None
        run = client.runs.create("t", "agent", input=ASK)
        _reached(scenario)

        thanks = {"messages": "Thanks!"}
        if ending.startswith("cancel"):
            client.runs.cancel(
                "t", run["run_id"], wait=True, action="rollback" if "rollback" in ending else "interrupt"
            )
            scenario.check_left(saver, before)
            client.runs.wait("t", "agent", input=thanks)
        else:
            strategy: Any = "rollback" if "rolls back" in ending else "interrupt"
            client.runs.wait("t", "agent", input=thanks, multitask_strategy=strategy)
            scenario.check_left(saver, before)
        scenario.check_next_accepted(saver)
        runs = {r["run_id"]: r["status"] for r in client.runs.list("t")}
        assert runs.get(run["run_id"]) == (None if "rollback" in ending or "rolls back" in ending else "interrupted")
