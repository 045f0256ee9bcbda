"""The explorer's crash mode: the turn's process dies at every point of the turn (nothing more of it is written, not
even its rewind, and its thread's slot is free), and the next turn must start from the state before the dead turn —
on every saver, for the next turn started after the crash and from the crashed turn's own callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _weather_turn import ANSWER, TOOL_CALL, get_weather

from rxgraph import END, START, CheckpointSaver, KeyStrategy, StateGraph
from rxgraph.agent import ReactAgent
from rxgraph.testing import ScriptedChatModel, assert_cancellation_safe, explore_cancellations, marbles, text


def _chat(saver: CheckpointSaver) -> ReactAgent:
    model = ScriptedChatModel([marbles("-h|", h=text("Hello!")), TOOL_CALL, ANSWER, marbles("--t|", t=text("Bye"))])
    return ReactAgent(model, tools=[get_weather], checkpointer=saver)


def test_a_crash_anywhere_in_a_turn_is_undone_before_the_next_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    report = assert_cancellation_safe(
        _chat, ["Hi", "Weather in Paris?", "Thanks"], turns=[1], modes=["crash"], saver_factory=saver_factory
    )
    assert len(report.points) > 20
    assert any("crash at" in point for _, point in report.points)


def test_a_crash_in_the_last_turn_leaves_a_thread_whose_next_turn_starts_before_it(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    assert_cancellation_safe(
        _chat, ["Hi", "Weather in Paris?"], turns=[1], modes=["crash"], saver_factory=saver_factory
    )


def test_a_workflow_that_keeps_its_progress_is_not_held_to_the_rewind(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    def make(saver: CheckpointSaver) -> Any:
        return (
            StateGraph({"log": KeyStrategy.APPEND})
            .add_node("a", lambda s: {"log": "a"})
            .add_node("b", lambda s: {"log": "b"})
            .add_edge(START, "a")
            .add_edge("a", "b")
            .add_edge("b", END)
            .compile(checkpointer=saver)
        )

    assert_cancellation_safe(make, [{"log": "in"}, {"log": "again"}], modes=["crash"], saver_factory=saver_factory)


def test_the_crash_mode_finds_a_runtime_that_does_not_undo_dead_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rxgraph.graph._start.rewinds_dead_runs", lambda policy: False)

    report = explore_cancellations(_chat, ["Hi", "Weather in Paris?", "Thanks"], turns=[1], modes=["crash"])

    assert not report.ok
    assert {v.invariant for v in report.violations} == {
        "the next turn does not start from the state before the dead turn"
    }
