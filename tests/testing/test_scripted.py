"""Scripted models and tools: marble timing on the run's scheduler, recorded requests, clear exhaustion."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex.testing import TestScheduler

from rxgraph import RunnableConfig
from rxgraph.agent import ChatChunk, ReactAgent
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, RxGraphError, ToolInputError
from rxgraph.messages import ToolMessage, UserMessage, check_request
from rxgraph.testing import (
    Script,
    ScriptedChatModel,
    ScriptedTool,
    ScriptExhaustedError,
    finish,
    marbles,
    text,
    tool_call,
)


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


def _play(script: Script) -> list[tuple[float, str, Any]]:
    """(frame, kind, value) of everything the script does, subscribed at 200 on a TestScheduler, one tick a frame."""
    observed = TestScheduler().start(script.observable, disposed=10_000)
    return [(m.time - 200.0, m.value.kind, m.value.value if m.value.kind == "N" else None) for m in observed.messages]


def test_a_group_emits_its_values_in_the_frame_of_its_parenthesis_and_takes_a_frame_per_character() -> None:
    script = marbles("-(a,b)-c|", a="A", b="B", c="C")
    assert _play(script) == [(1.0, "N", "A"), (1.0, "N", "B"), (7.0, "N", "C"), (8.0, "C", None)]
    assert script.duration == 9.0
    assert _play(marbles("(a,|)", a="A")) == [(0.0, "N", "A"), (0.0, "C", None)]
    failing = _play(marbles("-(a, #)", a="A", error=KeyError("k")))
    assert failing == [(1.0, "N", "A"), (1.0, "E", None)]


@pytest.mark.parametrize("diagram", ["-a-b-|", "(a,b)-a|", "--ab|", "a -- (b, a) --- |", "(a,b)(b,a)#", "-ab-(ab,a)-|"])
def test_duration_ends_with_the_frame_of_the_last_event(diagram: str) -> None:
    script = marbles(diagram, a=1, b=2, ab=3, error=ValueError("boom"), timespan=2.0)
    played = TestScheduler().start(script.observable, disposed=10_000).messages
    last = max((m.time - 200.0 for m in played), default=script.duration - 2.0)
    assert script.duration == last + 2.0  # the last character is one frame of 2.0


def test_spaces_line_diagrams_up_and_take_no_time() -> None:
    assert _play(marbles("-- a -- b |", a=1, b=2)) == _play(marbles("--a--b|", a=1, b=2))
    assert marbles("  -a  |  ", a=1).duration == 3.0


def test_a_name_is_a_run_of_characters_taking_a_frame_per_character() -> None:
    script = marbles("-hi-|", hi=text("x"))
    assert _play(script) == [(1.0, "N", ChatChunk(content="x")), (4.0, "C", None)]
    assert script.duration == 5.0


def test_a_name_without_a_value_fails_when_the_script_is_built_naming_it_and_showing_the_diagram() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        marbles("-a-x|", a=text("x"))
    assert caught.value.argument == "diagram" and isinstance(caught.value, ValueError)
    assert str(caught.value).splitlines() == [
        "marble diagram '-a-x|': 'x' has no value (values given: 'a'); give it one: marbles(..., x=...)",
        "  -a-x|",
        "     ^",
    ]
    with pytest.raises(InvalidArgumentError, match="'a' has no value \\(values given: none\\)"):
        Script("-a|")  # a script built by hand is checked too


def test_letters_written_together_are_one_name_and_the_error_says_how_to_separate_them() -> None:
    with pytest.raises(InvalidArgumentError, match="'ab' has no value") as caught:
        marbles("-ab|", a=text("x"), b=finish())
    assert "write 'a-b' (a frame apart) or '(a,b)' (in one frame)" in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="'ab' has no value"):
        marbles("(ab)", a=text("x"), b=finish())


@pytest.mark.parametrize(
    ("diagram", "problem", "caret"),
    [
        ("-(a", "'(' opens a group that is never closed", 1),
        ("-a)", "')' closes no group", 2),
        ("((a))", "groups cannot be nested", 1),
        ("(a|b)", "'a|b' in a group: '|' is an element of its own, as in (a,|)", 2),
        ("(a#)", "'#' is an element of its own", 2),
        ("(a-b)", "'a-b' in a group: frames go outside a group", 2),
        ("(a,,b)", "empty element", 3),
        ("(a,)", "empty element", 2),
        ("-()", "empty element", 1),
        ("a,b", "',' outside a group", 1),
        ("-a-|a", "'a' comes after '|': only '-' and spaces may follow the end of a diagram", 4),
        ("-#-(a)", "'a' comes after '#'", 4),
        ("(|,a)", "'a' comes after '|'", 3),
        ("-a b|", "spaces do not separate names, reactivex removes them and reads 'ab'", 1),
        ("-a\tb|", "'a\\tb' holds '\\t': only spaces may line a diagram up", None),
        ("-a\n-b|", "holds '\\n'", None),
        ("--^-a|", "'^' has no value (values given: 'a', 'b'); there are no subscription markers", 2),
        ("-a-!", "there are no subscription markers", 3),
        ("-1-|", "'1' is a number to reactivex, which would emit 1: names are not numbers", 1),
        ("-(a,inf)", "'inf' is a number to reactivex", 4),
    ],
)
def test_a_diagram_reactivex_would_refuse_or_misread_fails_when_built(
    diagram: str, problem: str, caret: int | None
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        marbles(diagram, a=1, b=2)
    message = str(caught.value)
    assert caught.value.argument == "diagram"
    assert message.startswith(f"marble diagram {diagram!r}: ") and problem in message.splitlines()[0]
    if caret is None:  # a diagram with a tab or a line break is only quoted
        assert len(message.splitlines()) == 1
    else:
        assert message.splitlines()[1:] == [f"  {diagram}", "  " + " " * caret + "^"]


@pytest.mark.parametrize("name", ["1", "2.5", "nan", "a b", "a-b", "(a)", "", "x\ty"])
def test_a_value_name_no_diagram_can_spell_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="marble value") as caught:
        marbles("-|", **{name: "v"})
    assert caught.value.argument == name


def test_a_negative_timespan_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="timespan") as caught:
        marbles("-a|", a=1, timespan=-1.0)
    assert caught.value.argument == "timespan"
    assert _play(marbles("-a-(a,a)|", a=1, timespan=0.0)) == [(0.0, "N", 1)] * 3 + [(0.0, "C", None)]


def test_a_diagram_string_is_no_script() -> None:
    with pytest.raises(InvalidTypeError, match="not diagram strings") as model:
        ScriptedChatModel(["-a|"])  # type: ignore[list-item]
    assert model.value.argument == "scripts"
    with pytest.raises(InvalidTypeError, match="takes marbles") as tool:
        ScriptedTool("weather", "--r|")  # type: ignore[arg-type]
    assert tool.value.argument == "scripts"


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
