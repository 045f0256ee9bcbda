"""Scripted models and tools: marble timing on the run's scheduler, recorded requests, clear exhaustion."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex.testing import TestScheduler

from rxgraph import RunnableConfig
from rxgraph.agent import ChatChunk, ReactAgent
from rxgraph.errors import InvalidArgumentError, RxGraphError, ToolInputError
from rxgraph.messages import ToolMessage, UserMessage, check_request
from rxgraph.testing import ScriptedChatModel, ScriptedTool, ScriptExhaustedError, finish, marbles, text, tool_call


def test_a_script_plays_its_marbles_on_the_subscribing_scheduler() -> None:
    scheduler = TestScheduler()
    model = ScriptedChatModel([marbles("-a--b|", a=text("x"), b=finish())])
    observed = scheduler.start(lambda: model.stream([UserMessage(content="q")], []))
    assert [(m.time, m.value.kind) for m in observed.messages] == [(201.0, "N"), (204.0, "N"), (205.0, "C")]
    assert observed.messages[0].value.value == ChatChunk(content="x")


def test_requests_are_recorded_and_running_out_names_the_call() -> None:
    model = ScriptedChatModel([[text("one")]])
    model.stream([UserMessage(content="first")], [])
    assert model.calls == 1 and model.requests[0].messages == (UserMessage(content="first"),)
    with pytest.raises(ScriptExhaustedError, match=r"no script for call #2: it was given 1") as caught:
        model.stream([UserMessage(content="second")], [])
    assert (caught.value.call, caught.value.scripts) == (2, 1)
    # A failed expectation to a test framework, and an rxgraph error to code that catches those.
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, RxGraphError)


def test_an_error_frame_fails_the_answer() -> None:
    scheduler = TestScheduler()
    model = ScriptedChatModel([marbles("-a#", a=text("x"), error=ConnectionError("reset"))])
    observed = scheduler.start(lambda: model.stream([], []))
    assert observed.messages[-1].value.kind == "E" and isinstance(
        observed.messages[-1].value.exception, ConnectionError
    )


def test_marble_values_are_single_letters() -> None:
    with pytest.raises(InvalidArgumentError, match="single letters") as caught:
        marbles("-ab|", ab=text("x"))
    assert caught.value.argument == "ab" and isinstance(caught.value, ValueError)


def test_bad_helper_arguments_are_invalid_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="split must be at least 1, got 0") as split:
        tool_call("c1", "echo", split=0)
    assert split.value.argument == "split"
    with pytest.raises(InvalidArgumentError, match="needs at least one script") as scripts:
        ScriptedTool("empty", [])
    assert scripts.value.argument == "scripts"


def test_scripted_tool_answers_after_its_delay_and_can_fail() -> None:
    scheduler = TestScheduler()
    weather = ScriptedTool(
        "get_weather",
        [marbles("---r|", r="Sunny"), marbles("--#", error=TimeoutError("upstream timed out"))],
        description="Weather.",
    )
    model = ScriptedChatModel(
        [
            [tool_call("c1", "get_weather", '{"city": "Paris"}'), finish("tool_calls")],
            [text("it is sunny")],
            [tool_call("c2", "get_weather", '{"city": "Oslo"}'), finish("tool_calls")],
            [text("no idea")],
        ]
    )
    agent = ReactAgent(model, tools=[weather])
    config = RunnableConfig(scheduler=scheduler)
    agent.invoke("Paris?", config)
    assert scheduler.clock == 4.0  # "---r|": the tool answers at frame 3 and completes at 4; the model takes no time
    assert weather.calls == [{"city": "Paris"}]
    agent.invoke("Oslo?", config)
    answered = model.requests[3].messages[-1]
    assert isinstance(answered, ToolMessage) and answered.is_error and "upstream timed out" in answered.content
    assert weather.spec.name == "get_weather" and weather.spec.description == "Weather."


def test_scripted_tool_without_repeat_runs_out_clearly() -> None:
    tool = ScriptedTool("once", marbles("r|", r="ok"), repeat_last=False)
    tool.run().subscribe()
    with pytest.raises(ScriptExhaustedError, match="'once' has no script for call #2") as caught:
        tool.run().subscribe()
    assert (caught.value.call, caught.value.scripts) == (2, 1)


def test_a_scripted_tool_reports_bad_json_naming_itself() -> None:
    with pytest.raises(ToolInputError, match="not valid JSON") as caught:
        ScriptedTool("lookup", marbles("r|", r="ok")).parse_arguments("{")
    assert caught.value.tool == "lookup"


def test_split_tool_call_helpers_feed_the_agent(capsys: Any) -> None:
    parts = tool_call("c1", "echo", '{"word": "hello"}', split=3)
    assert isinstance(parts, tuple)
    model = ScriptedChatModel(
        [marbles("-a-b-c-d|", a=parts[0], b=parts[1], c=parts[2], d=finish("tool_calls")), [text("done")]]
    )

    def echo(word: str) -> str:
        return word

    agent = ReactAgent(model, tools=[echo])
    assert agent.invoke("say hello", RunnableConfig(scheduler=TestScheduler())).content == "done"
    check_request(model.requests[1].messages)
    assert model.requests[1].messages[-1] == ToolMessage(tool_call_id="c1", name="echo", content="hello")
