"""The cancellation explorer over the ReactAgent: zero violations, and it does fail on a broken setup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from _support import StepPath
from _weather_turn import ANSWER, TOOL_CALL, get_weather
from reactivex import operators as ops

from rxgraph import END, START, CheckpointSaver, KeyStrategy, StateGraph
from rxgraph.agent import ReactAgent
from rxgraph.messages import UserMessage
from rxgraph.testing import (
    ScriptedChatModel,
    ScriptedTool,
    assert_cancellation_safe,
    explore_cancellations,
    finish,
    marbles,
    text,
    tool_call,
)
from rxgraph.testing._explorer import CancelMode

ALL_MODES = ("dispose", "timeout", "take_until")


def _one_tool_call(saver: CheckpointSaver, **kwargs: Any) -> ReactAgent:
    return ReactAgent(
        ScriptedChatModel([TOOL_CALL, ANSWER, [text("ok")]]), tools=[get_weather], checkpointer=saver, **kwargs
    )


def test_one_tool_call_has_no_violations_in_any_mode(
    saver_factory: Callable[[], CheckpointSaver], step_path: StepPath
) -> None:
    report = explore_cancellations(
        _one_tool_call, ["What's the weather in Paris?"], modes=ALL_MODES, saver_factory=saver_factory
    )
    assert report.ok, str(report)
    assert len(report.points) > 30
    step_path.check(lands=False)


def test_two_tool_calls_in_one_message_have_no_violations(
    saver_factory: Callable[[], CheckpointSaver], cancel_modes: tuple[CancelMode, ...]
) -> None:
    both = marbles(
        "-a-b-c|",
        a=tool_call("c1", "weather", '{"city": "Paris"}', index=0),
        b=tool_call("c2", "weather", '{"city": "Oslo"}', index=1),
        c=finish("tool_calls"),
    )

    def make(saver: CheckpointSaver) -> ReactAgent:
        weather = ScriptedTool("weather", [marbles("--r|", r="Sunny"), marbles("----r|", r="Snow")])
        return ReactAgent(ScriptedChatModel([both, ANSWER, [text("ok")]]), tools=[weather], checkpointer=saver)

    assert_cancellation_safe(make, ["Paris and Oslo?"], modes=cancel_modes, saver_factory=saver_factory)


def test_two_model_and_tool_rounds_in_one_turn_have_no_violations(
    saver_factory: Callable[[], CheckpointSaver], cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> ReactAgent:
        second_call = marbles("--a|", a=tool_call("c2", "get_weather", '{"city": "Oslo"}'))
        model = ScriptedChatModel([TOOL_CALL, second_call, ANSWER, [text("ok")]])
        return ReactAgent(model, tools=[get_weather], checkpointer=saver)

    report = assert_cancellation_safe(make, ["Compare Paris and Oslo"], modes=cancel_modes, saver_factory=saver_factory)
    assert len(report.points) > (40 if len(cancel_modes) > 1 else 30)  # (34 with the dispose alone)


def test_three_turns_with_the_cancellation_in_the_middle_one(
    saver_factory: Callable[[], CheckpointSaver], cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> ReactAgent:
        model = ScriptedChatModel([marbles("-h|", h=text("Hello!")), TOOL_CALL, ANSWER, marbles("--t|", t=text("Bye"))])
        return ReactAgent(model, tools=[get_weather], checkpointer=saver, system_prompt="Be brief.")

    report = assert_cancellation_safe(
        make, ["Hi", "Weather in Paris?", "Thanks"], turns=[1], modes=cancel_modes, saver_factory=saver_factory
    )
    assert {turn for turn, _ in report.points} == {1}


def test_every_turn_of_a_scenario_can_be_explored(saver_factory: Callable[[], CheckpointSaver]) -> None:
    report = explore_cancellations(_one_tool_call, ["first", "second"], saver_factory=saver_factory)
    assert report.ok, str(report)
    assert {turn for turn, _ in report.points} == {0, 1}


def test_the_keep_policy_is_reported_with_pictures(saver_factory: Callable[[], CheckpointSaver]) -> None:
    report = explore_cancellations(
        lambda saver: _one_tool_call(saver, on_cancel="keep"), ["weather?"], saver_factory=saver_factory
    )
    assert not report.ok
    invariants = {v.invariant for v in report.violations}
    assert invariants == {"the head is neither the pre-turn state nor a completed turn"}
    message = str(report)
    assert "saver  S" in message and "thread history, newest first" in message
    with pytest.raises(AssertionError, match="violation"):
        assert_cancellation_safe(
            lambda saver: _one_tool_call(saver, on_cancel="keep"), ["weather?"], saver_factory=saver_factory
        )


def test_a_graph_that_loses_committed_turns_is_reported(saver_factory: Callable[[], CheckpointSaver]) -> None:
    # A deliberately broken graph: "messages" is not APPEND, so each turn's input replaces the history.
    def make(saver: CheckpointSaver) -> Any:
        def forgetful(state: Any) -> rx.Observable[dict[str, Any]]:
            return rx.timer(2.0).pipe(ops.map(lambda _: {"note": "ran"}))

        return (
            StateGraph()
            .add_node("forget", forgetful)
            .add_edge(START, "forget")
            .add_edge("forget", END)
            .compile(checkpointer=saver)
        )

    report = explore_cancellations(
        make,
        [{"messages": [UserMessage(content="a")]}, {"messages": [UserMessage(content="b")]}],
        turns=[1],
        saver_factory=saver_factory,
    )
    assert "a committed turn was lost" in {v.invariant for v in report.violations}


def test_a_plain_graph_without_messages_is_explored_too(
    saver_factory: Callable[[], CheckpointSaver], step_path: StepPath, cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> Any:
        return (
            StateGraph({"log": KeyStrategy.APPEND})
            .add_node("a", lambda s: rx.timer(1.0).pipe(ops.map(lambda _: {"log": "a"})))
            .add_node("b", lambda s: rx.timer(2.0).pipe(ops.map(lambda _: {"log": "b"})))
            .add_edge(START, "a")
            .add_edge("a", "b")
            .add_edge("b", END)
            .compile(checkpointer=saver, messages_key=None)
        )

    assert_cancellation_safe(make, [{"log": "in"}, {"log": "again"}], modes=cancel_modes, saver_factory=saver_factory)
    step_path.check(lands=False)  # its nodes stream: called directly, landed by the general tail


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one turn"):
        explore_cancellations(_one_tool_call, [])
    with pytest.raises(ValueError, match="turn 3 is not in the scenario"):
        explore_cancellations(_one_tool_call, ["x"], turns=[3])
    with pytest.raises(ValueError, match="unknown cancel mode"):
        explore_cancellations(_one_tool_call, ["x"], modes=["explode"])  # type: ignore[list-item]
