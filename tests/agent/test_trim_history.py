"""ReactAgent(trim=...): the model sees a trimmed request, the thread keeps its whole history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, UnsafeHistoryError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    check_ready_for_user_input,
    check_request,
    trim_messages,
)
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

PROMPT = SystemMessage(content="Be brief.")


def echo(word: str) -> str:
    """Say a word back."""
    return word


def _call(call_id: str, word: str, index: int = 0) -> Any:
    return tool_call(call_id, "echo", f'{{"word": "{word}"}}', index=index)


def _three_turns() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            [_call("c1", "x"), finish("tool_calls")],  # turn 1: one tool round, then an answer
            [text("one")],
            [_call("c2", "y", 0), _call("c3", "z", 1), finish("tool_calls")],  # turn 2: two calls in one message
            [text("two")],
            [_call("c4", "w"), finish("tool_calls")],  # turn 3: two tool rounds
            [_call("c5", "v"), finish("tool_calls")],
            [text("three")],
        ]
    )


def _assert_tool_blocks_whole(request: Sequence[Message]) -> None:
    for index, message in enumerate(request):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            block = request[index + 1 : index + 1 + len(message.tool_calls)]
            assert {m.tool_call_id for m in block if isinstance(m, ToolMessage)} == {c.id for c in message.tool_calls}
        if isinstance(message, ToolMessage):
            answered = [m for m in request[:index] if isinstance(m, AssistantMessage) and m.tool_calls][-1]
            assert message.tool_call_id in {c.id for c in answered.tool_calls}


def test_the_model_gets_trimmed_requests_over_turns_with_tools_and_the_thread_keeps_everything() -> None:
    model = _three_turns()
    agent = ReactAgent(
        model,
        tools=[echo],
        checkpointer=MemorySaver(),
        system_prompt=PROMPT.content,
        trim=lambda messages: trim_messages(messages, max_messages=6),
    )
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("first", config).content == "one"
    assert agent.invoke("second", config).content == "two"
    assert agent.invoke("third", config).content == "three"
    assert model.calls == 7

    history = agent.get_state(config).values["messages"]
    first = ["user", "assistant", "tool", "assistant"]
    second = ["user", "assistant", "tool", "tool", "assistant"]
    third = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m.role for m in history] == [*first, *second, *third]  # whole: 15 messages, no request held more than 6
    check_ready_for_user_input(history)

    sent = [list(r.messages) for r in model.requests]
    for request in sent:
        check_request(request)
        assert request[0] == PROMPT and PROMPT not in request[1:]  # the system prompt, first, once
        assert isinstance(request[1], UserMessage)  # the kept history starts at a user message
        _assert_tool_blocks_whole(request)
        kept = request[1:]
        assert any(history[k : k + len(kept)] == kept for k in range(len(history)))  # a run of the stored history
    # What each call saw: the newest turns that fit in 6 messages with the prompt, else the current turn alone.
    assert [[m.role for m in r] for r in sent] == [
        ["system", "user"],
        ["system", "user", "assistant", "tool"],
        ["system", "user", "assistant", "tool", "assistant", "user"],  # turn 1 whole, then "second"
        ["system", "user", "assistant", "tool", "tool"],  # turn 1 dropped: its 4 messages no longer fit
        ["system", "user"],
        ["system", "user", "assistant", "tool"],
        ["system", "user", "assistant", "tool", "assistant", "tool"],
    ]
    assert sent[3][1] == UserMessage(content="second") and sent[6][1] == UserMessage(content="third")
    assert len(sent[6]) == 6 and sent[6][1:] == history[9:14]


def test_a_token_budget_counts_the_system_prompt_the_agent_puts_first() -> None:
    model = ScriptedChatModel([[text("a" * 10)], [text("b")]])
    agent = ReactAgent(
        model,
        checkpointer=MemorySaver(),
        system_prompt="x" * 20,
        trim=lambda m: trim_messages(m, max_tokens=40, token_counter=lambda message: len(message.content)),
    )
    config = RunnableConfig(thread_id="t")
    agent.invoke("q" * 5, config)
    agent.invoke("r" * 5, config)  # 20 + 5 + 10 + 5 = 40 fits
    assert [m.content for m in model.requests[1].messages] == ["x" * 20, "q" * 5, "a" * 10, "r" * 5]

    model = ScriptedChatModel([[text("a" * 10)], [text("b")]])
    agent = ReactAgent(
        model,
        checkpointer=MemorySaver(),
        system_prompt="x" * 21,  # one more: the first turn no longer fits
        trim=lambda m: trim_messages(m, max_tokens=40, token_counter=lambda message: len(message.content)),
    )
    agent.invoke("q" * 5, config)
    agent.invoke("r" * 5, config)
    assert [m.content for m in model.requests[1].messages] == ["x" * 21, "r" * 5]


def test_a_trim_that_drops_the_system_prompt_gets_it_put_back_first() -> None:
    model = ScriptedChatModel([[text("one")], [text("two")]])
    seen: list[list[Message]] = []

    def newest_two(messages: list[Message]) -> list[Message]:
        seen.append(list(messages))
        return messages[-2:]

    agent = ReactAgent(model, checkpointer=MemorySaver(), system_prompt=PROMPT.content, trim=newest_two)
    config = RunnableConfig(thread_id="t")
    agent.invoke("first", config)
    agent.invoke("second", config)
    assert seen[1][0] == PROMPT and len(seen[1]) == 4  # the trim saw the prompt, then the whole history
    assert list(model.requests[1].messages) == [PROMPT, AssistantMessage(content="one"), UserMessage(content="second")]
    assert list(model.requests[0].messages) == [PROMPT, UserMessage(content="first")]  # kept, not doubled


def test_a_trimmed_request_a_chat_api_would_refuse_fails_the_turn_before_the_model_sees_it_and_is_rewound() -> None:
    model = ScriptedChatModel([[_call("c1", "x"), finish("tool_calls")], [text("never")], [text("fine")]])
    trims: list[int] = []

    def newest_one(messages: list[Message]) -> list[Message]:
        trims.append(len(messages))
        return messages[-1:] if len(trims) == 2 else messages  # the tool message alone, the second time

    saver = MemorySaver()
    agent = ReactAgent(model, tools=[echo], checkpointer=saver, system_prompt=PROMPT.content, trim=newest_one)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(UnsafeHistoryError, match="the request that trim returned is not a valid request body") as e:
        agent.invoke("go", config)
    assert e.value.thread_id == "t" and "'t'" in str(e.value)
    assert [getattr(v, "rule", None) for v in e.value.violations] == [2] and "c1" in str(
        e.value
    )  # a tool answering no call
    assert model.calls == 1  # the second request was never sent
    assert agent.get_state(config).values.get("messages", []) == []  # the failed turn was undone
    assert agent.invoke("again", config).content == "never"  # the turn after it runs (trims as written)


def test_a_trim_that_drops_the_newest_message_fails_the_turn() -> None:
    model = ScriptedChatModel([[text("unused")]])
    agent = ReactAgent(model, system_prompt=PROMPT.content, trim=lambda m: m[:1])
    with pytest.raises(InvalidArgumentError, match="trim dropped the newest message of the history") as caught:
        agent.invoke("hello")
    assert caught.value.argument == "trim" and model.calls == 0


def test_a_trim_that_returns_something_else_than_messages_fails_the_turn() -> None:
    model = ScriptedChatModel([[text("unused")]])
    with pytest.raises(InvalidTypeError, match="trim must return a list of messages, got NoneType") as none:
        ReactAgent(model, trim=lambda m: None).invoke("hello")  # type: ignore[arg-type,return-value]
    assert none.value.argument == "trim"
    with pytest.raises(InvalidTypeError, match="not an rxgraph message at index 0: str"):
        ReactAgent(model, trim=lambda m: ["hello"]).invoke("hello")  # type: ignore[list-item]
    assert model.calls == 0


def test_trim_must_be_callable() -> None:
    with pytest.raises(InvalidTypeError, match=r"trim must be callable .* got int") as caught:
        ReactAgent(ScriptedChatModel([]), trim=20)  # type: ignore[arg-type]
    assert caught.value.argument == "trim" and isinstance(caught.value, TypeError)


def test_without_trim_the_whole_history_is_sent() -> None:
    model = ScriptedChatModel([[text("one")], [text("two")]])
    agent = ReactAgent(model, checkpointer=MemorySaver(), system_prompt=PROMPT.content)
    config = RunnableConfig(thread_id="t")
    agent.invoke("first", config)
    agent.invoke("second", config)
    assert len(model.requests[1].messages) == 4 and agent.trim is None
