"""Next turns started from the terminal callback of a cut turn, as servers do: the harness runs them, and the
explorer tries every cancel point that way too."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _weather_turn import ANSWER, TOOL_CALL, get_weather

from rxgraph import CheckpointSaver
from rxgraph.agent import ReactAgent
from rxgraph.messages import check_request
from rxgraph.testing import (
    CancellationHarness,
    ScriptedChatModel,
    explore_cancellations,
    take_until_at,
    text,
    timeout_after,
)


def _agent(saver: CheckpointSaver) -> ReactAgent:
    return ReactAgent(
        ScriptedChatModel([TOOL_CALL, ANSWER, [text("Hello again.")], [text("And again.")]]),
        tools=[get_weather],
        checkpointer=saver,
    )


@pytest.mark.parametrize("cut", [take_until_at(3), timeout_after(1.5)], ids=["take_until", "timeout"])
def test_a_turn_started_from_the_callback_of_a_cut_turn_starts_from_its_rewound_head(
    cut: object, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    harness = CancellationHarness(_agent, saver_factory=saver_factory)
    first, second = harness.run_chained(["What's the weather in Paris?", "Hi again"], {0: cut})  # type: ignore[dict-item]
    assert first.cancelled and second.completed
    assert first.head is not None and first.head.source == "rewind" and dict(first.head.values) == {}
    assert second.pre_turn == first.head
    first_write = next(c for _, c in second.writes if c.source == "input")
    assert [m.role for m in first_write.values["messages"]] == ["user"]  # nothing of the cut turn
    check_request(first_write.values["messages"])


def test_the_explorer_starts_next_turns_from_the_callback_too(saver_factory: Callable[[], CheckpointSaver]) -> None:
    report = explore_cancellations(
        _agent, ["What's the weather in Paris?", "Hi again"], turns=[0], modes=("take_until",),
        saver_factory=saver_factory,
    )  # fmt: skip
    chained = [point for point in report.points if "terminal callback" in point[1]]
    assert chained and len(chained) == len(report.points) - 1 - len(chained)  # every cancel point, both ways
    assert report.ok, str(report)
