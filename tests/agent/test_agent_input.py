"""An agent turn's input is checked against the chat-API sequence rules before anything reads or stores the thread:
an orphan tool message or an assistant message whose calls nobody answers would otherwise be stored, sent, and — once
a lenient model answered — leave a thread none of whose checkpoints can take another turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rxgraph import CheckpointSaver, RunnableConfig, UnsafeHistoryError
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage, check_request
from rxgraph.testing import ScriptedChatModel, text


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


CALL = ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}')

INVALID_INPUTS: list[tuple[str, Any]] = [
    ("an orphan tool message", [ToolMessage(tool_call_id="zz", content="sunny")]),
    ("a lone orphan tool message", ToolMessage(tool_call_id="zz", content="sunny")),
    ("unanswered calls at the end", [UserMessage(content="Weather?"), AssistantMessage(tool_calls=[CALL])]),
    (
        "a user message between a call and its answer",
        [AssistantMessage(tool_calls=[CALL]), UserMessage(content="?"), ToolMessage(tool_call_id="c1", content="x")],
    ),
    (
        "a tool answer followed by a user message",
        [
            AssistantMessage(tool_calls=[CALL]),
            ToolMessage(tool_call_id="c1", content="sunny"),
            UserMessage(content="and now?"),
        ],
    ),
]


def _agent(saver: CheckpointSaver) -> tuple[ReactAgent, ScriptedChatModel]:
    # A lenient model: it answers whatever it is sent, as some providers do.
    model = ScriptedChatModel([[text("Hello!")], [text("Still fine.")], [text("Again.")]])
    return ReactAgent(model, tools=[get_weather], checkpointer=saver), model


@pytest.mark.parametrize(("case", "bad"), INVALID_INPUTS, ids=[case for case, _ in INVALID_INPUTS])
def test_input_that_breaks_the_sequence_rules_is_refused_and_nothing_is_stored_or_sent(
    saver_factory: Callable[[], CheckpointSaver], case: str, bad: Any
) -> None:
    saver = saver_factory()
    agent, model = _agent(saver)
    config = RunnableConfig(thread_id="t")
    agent.invoke("Hi", config)
    head = saver.get("t")

    for start in (agent.stream, agent.invoke, agent.astream):
        with pytest.raises(UnsafeHistoryError) as refused:
            start(bad, config)
        assert refused.value.violations, case
        assert "nothing was stored" in str(refused.value)

    assert saver.get("t") == head and len(model.requests) == 1
    # The thread still takes turns.
    assert agent.invoke("Still there?", config).content == "Still fine."
    check_request(agent.get_state(config).values["messages"])


def test_input_on_a_new_thread_is_refused_before_the_thread_exists(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    agent, model = _agent(saver)

    with pytest.raises(UnsafeHistoryError):
        agent.invoke([ToolMessage(tool_call_id="zz", content="sunny")], RunnableConfig(thread_id="new"))

    assert saver.get("new") is None and model.requests == []


def test_input_that_answers_its_own_calls_is_a_valid_turn(saver_factory: Callable[[], CheckpointSaver]) -> None:
    # A turn may bring a closed exchange of its own (a client replaying tool results): the model gets it and answers.
    saver = saver_factory()
    agent, _ = _agent(saver)
    config = RunnableConfig(thread_id="t")

    answer = agent.invoke(
        [
            SystemMessage(content="Be brief."),
            UserMessage(content="Weather in Paris?"),
            AssistantMessage(tool_calls=[CALL]),
            ToolMessage(tool_call_id="c1", content="Sunny in Paris"),
        ],
        config,
    )

    assert answer.content == "Hello!"
    assert [m.role for m in agent.get_state(config).values["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert agent.get_state(config).checkpoint.safe
