"""ReactAgent: a real StateGraph that streams the model, runs tools, and loops until an answer."""

from __future__ import annotations

from typing import Any

import pytest
from _weather_turn import weather_agent
from reactivex.testing import TestScheduler

import rxgraph.agent
import rxgraph.errors
from rxgraph import MemorySaver, NodeOutput, RunnableConfig, StreamingOutput
from rxgraph.agent import ChatChunk, ReactAgent
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, MaxIterationsError
from rxgraph.messages import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
    check_ready_for_user_input,
    check_request,
)
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call


def test_full_streaming_run_persists_a_valid_paired_sequence() -> None:
    scheduler, saver = TestScheduler(), MemorySaver()
    agent, model = weather_agent(saver, first_turn=True)
    config = RunnableConfig(thread_id="t1", scheduler=scheduler)
    outputs: list[NodeOutput] = []
    agent.stream("What's the weather in Paris?", config).subscribe(outputs.append)
    scheduler.advance_by(20.0)
    history = agent.get_state(config).values["messages"]
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].id == history[2].tool_call_id == "call-1"
    assert history[2].content == "Sunny in Paris" and history[3].content == "Sunny today"
    check_ready_for_user_input(history)
    streamed = [(o.node, type(o.chunk).__name__) for o in outputs if isinstance(o, StreamingOutput)]
    assert streamed == [
        ("model", "ChatChunk"),
        ("model", "ChatChunk"),
        ("tools", "ToolMessage"),
        ("model", "ChatChunk"),
        ("model", "ChatChunk"),
    ]
    assert [o.node for o in outputs if type(o) is NodeOutput] == ["model", "tools", "model"]
    assert model.calls == 2


def test_invoke_returns_the_final_answer_and_the_model_gets_the_full_history_with_the_system_prompt_first() -> None:
    model = ScriptedChatModel([[text("one")], [text("two")]])
    agent = ReactAgent(model, checkpointer=MemorySaver(), system_prompt="Be brief.")
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("first", config) == AssistantMessage(content="one")
    assert agent.invoke([UserMessage(content="second")], config).content == "two"
    assert model.requests[1].messages == (
        SystemMessage(content="Be brief."),
        UserMessage(content="first"),
        AssistantMessage(content="one"),
        UserMessage(content="second"),
    )
    assert agent.get_state(config).values["messages"][0] == UserMessage(content="first")  # not stored


def test_a_model_may_answer_several_tool_calls_in_one_message() -> None:
    calls = [tool_call("a", "echo", '{"word": "x"}', index=0), tool_call("b", "echo", '{"word": "y"}', index=1)]
    model = ScriptedChatModel([[text("Checking. "), *calls, finish("tool_calls")], [text("done")]])

    def echo(word: str) -> str:
        return word * 2

    agent = ReactAgent(model, tools=[echo], checkpointer=MemorySaver())
    agent.invoke("go", RunnableConfig(thread_id="t"))
    history = agent.get_state(RunnableConfig(thread_id="t")).values["messages"]
    assert history[1].content == "Checking. "
    assert [(m.tool_call_id, m.content) for m in history if isinstance(m, ToolMessage)] == [("a", "xx"), ("b", "yy")]
    assert model.requests[0].tools[0].name == "echo"


def test_the_last_allowed_model_call_offers_no_tools() -> None:
    model = ScriptedChatModel([[tool_call("a", "echo", '{"word": "x"}')], [text("giving up on tools")]])

    def echo(word: str) -> str:
        return word

    agent = ReactAgent(model, tools=[echo], max_iterations=2)
    assert agent.invoke("go").content == "giving up on tools"
    assert [len(r.tools) for r in model.requests] == [1, 0]


def test_a_model_that_keeps_calling_tools_fails_the_turn_and_the_next_turn_is_still_valid() -> None:
    looping = [tool_call("a", "echo", '{"word": "x"}')]
    model = ScriptedChatModel([looping, [tool_call("b", "echo", '{"word": "y"}')], [text("fine")]])

    def echo(word: str) -> str:
        return word

    agent = ReactAgent(model, tools=[echo], checkpointer=MemorySaver(), max_iterations=2)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(MaxIterationsError, match="max_iterations=2") as caught:
        agent.invoke("go", config)
    assert caught.value.max_iterations == 2
    assert agent.invoke("again", config).content == "fine"
    check_request(model.requests[-1].messages)


def test_agent_input_forms() -> None:
    model = ScriptedChatModel([[text("a")], [text("b")], [text("c")]])
    agent = ReactAgent(model)
    agent.invoke("plain text")
    agent.invoke(UserMessage(content="one message"))
    agent.invoke([SystemMessage(content="note"), UserMessage(content="two")])
    assert [r.messages[-1].content for r in model.requests] == ["plain text", "one message", "two"]
    with pytest.raises(InvalidArgumentError, match="at least one message") as empty:
        agent.invoke([])
    assert empty.value.argument == "input" and isinstance(empty.value, ValueError)
    with pytest.raises(InvalidTypeError, match="agent input #0") as not_messages:
        agent.invoke([{"role": "user"}])  # type: ignore[list-item]
    assert not_messages.value.argument == "input" and isinstance(not_messages.value, TypeError)


def test_agent_options_are_checked_when_it_is_built() -> None:
    with pytest.raises(InvalidArgumentError, match="max_iterations must be at least 1, got 0") as iterations:
        ReactAgent(ScriptedChatModel([]), max_iterations=0)
    assert iterations.value.argument == "max_iterations"
    with pytest.raises(InvalidTypeError, match="must have a stream") as no_stream:
        ReactAgent(object())  # type: ignore[arg-type]
    assert no_stream.value.argument == "model"


def test_a_config_that_is_not_a_runnable_config_is_refused_before_the_turn_starts() -> None:
    model = ScriptedChatModel([[text("never")]])
    agent = ReactAgent(model)
    for call in (agent.stream, agent.invoke):
        with pytest.raises(InvalidTypeError, match="config must be a RunnableConfig, got dict") as caught:
            call("hi", {"thread_id": "t"})  # type: ignore[arg-type]
        assert caught.value.argument == "config"
    assert model.calls == 0


def test_chat_chunks_are_what_the_model_node_streams() -> None:
    model = ScriptedChatModel([[text("Hel"), text("lo")]])
    outputs: list[Any] = []
    ReactAgent(model).stream("hi").subscribe(outputs.append)
    assert [o.chunk for o in outputs if isinstance(o, StreamingOutput)] == [
        ChatChunk(content="Hel"),
        ChatChunk(content="lo"),
    ]


@pytest.mark.parametrize("policy", ["reject", "interrupt"])
def test_the_agents_multitask_policy_applies_to_a_second_turn_on_a_busy_thread(policy: str) -> None:
    from rxgraph import RunInterruptedError, ThreadBusyError
    from rxgraph.testing import marbles

    scheduler = TestScheduler()
    model = ScriptedChatModel([marbles("----a|", a=text("slow answer")), [text("quick answer")]])
    agent = ReactAgent(model, checkpointer=MemorySaver(), multitask=policy)  # type: ignore[arg-type]
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    first: list[Exception] = []
    second: list[Any] = []
    agent.stream("first", config).subscribe(on_error=first.append)
    scheduler.advance_by(1.0)
    agent.stream("second", config).subscribe(on_error=second.append, on_completed=lambda: second.append("done"))
    scheduler.advance_by(10.0)
    roles = [(m.role, m.content) for m in agent.get_state(config).values["messages"]]
    if policy == "reject":
        assert first == [] and [type(e) for e in second] == [ThreadBusyError]
        assert roles == [("user", "first"), ("assistant", "slow answer")]
    else:
        assert [type(e) for e in first] == [RunInterruptedError] and second == ["done"]
        assert roles == [("user", "second"), ("assistant", "quick answer")]


def test_the_agent_package_leaves_its_errors_to_rxgraph_errors() -> None:
    errors = {getattr(rxgraph.errors, name) for name in rxgraph.errors.__all__}
    assert [name for name in rxgraph.agent.__all__ if getattr(rxgraph.agent, name) in errors] == []
    assert not hasattr(rxgraph.agent, "ToolInputError") and not hasattr(rxgraph.agent, "MaxIterationsError")
