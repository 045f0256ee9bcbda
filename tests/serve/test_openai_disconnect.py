"""The disconnect test again, end to end over HTTP on both sides: the served agent's model is ``OpenAIChatModel``
talking to a ``ChatCompletionsServer``. A client that goes away closes the model's HTTP stream when one is open (the
fake API sees it go), the thread is rewound, and the next turn's request is one a strict API accepts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _weather_api import PHASES, QUESTION, Scenario, scenario_maker
from serve._serving import WAIT, RewindWatch, Server, hang_up_after, leave_when, post_turn
from starlette.types import ASGIApp

from rxgraph import CheckpointSaver, MemorySaver
from rxgraph.serve import create_app


@pytest.fixture
def scenarios() -> Iterator[Callable[[str, CheckpointSaver], Scenario]]:
    with scenario_maker() as make:
        yield make


def leave(server: Server, scenario: Scenario, phase: str) -> None:
    """Start the weather turn and go away at ``phase``."""
    if phase == "before the first output":
        hang_up_after(server.url, "t", {"input": QUESTION}, lambda: scenario.gate.wait_for_arrivals(1, WAIT))
        return

    def reached(name: str, data: Any) -> bool:
        if phase == "while the answer streams":
            return name == "chunk" and data["node"] == "model" and data["chunk"]["content"] == "Sunny"
        if phase == "while the tool runs":
            return name == "node" and data["node"] == "model" and scenario.tool_started.wait(WAIT)
        if name == "node" and data["node"] == "tools":
            scenario.gate.wait_for_arrivals(1, WAIT)  # the answer was asked for, and has not begun
            return True
        return False

    leave_when(server.url, "t", {"input": QUESTION}, reached)


@pytest.mark.parametrize("phase", PHASES)
def test_leaving_closes_the_models_http_stream_rewinds_and_the_next_request_is_one_the_api_accepts(
    phase: str,
    serve: Callable[[ASGIApp], Server],
    scenarios: Callable[[str, CheckpointSaver], Scenario],
) -> None:
    saver = RewindWatch(MemorySaver())
    scenario = scenarios(phase, saver)
    server = serve(create_app(scenario.agent))
    assert post_turn(server.url, "t", {"input": "Hi"})[-1][0] == "end"
    before = saver.get("t")
    assert before is not None

    leave(server, scenario, phase)

    scenario.check_left(saver, before)
    assert post_turn(server.url, "t", {"input": "Thanks!"})[-1][0] == "end"
    scenario.check_next_accepted(saver)
