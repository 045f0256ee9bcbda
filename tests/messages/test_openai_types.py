"""``to_openai`` checked against the ``openai`` package's own request types, strictly (unknown keys refused), and the
new message fields through the checkpoint serde."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from pydantic import ConfigDict, TypeAdapter, ValidationError

from rxgraph.checkpoint import Serde
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
    from_openai,
    to_openai,
)

_STRICT = TypeAdapter(list[ChatCompletionMessageParam], config=ConfigDict(extra="forbid"))


def _materialize(value: Any) -> Any:
    """Pydantic validates ``Iterable[...]`` fields (content parts, tool calls) lazily: walk them so their items are
    validated too."""
    if isinstance(value, Mapping):
        return {key: _materialize(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_materialize(item) for item in value]
    if isinstance(value, Iterator):
        return [_materialize(item) for item in value]
    return value


def strict_check(wire: list[dict[str, Any]]) -> None:
    """Raise ``ValidationError`` unless ``wire`` is a list of the API's request messages, with no key they lack."""
    _materialize(_STRICT.validate_python(wire))


# -- the checker itself can fail -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        {"role": "tool", "tool_call_id": "c1", "content": "x", "name": "f"},  # what to_openai used to send
        {"role": "narrator", "content": "x"},
        {"role": "user", "content": "x", "is_error": False},
        # Inside the lazily validated tool calls:
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}", "x": 1}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "a", "extra": 1}]},
    ],
)
def test_the_strict_check_refuses_what_the_types_do_not_have(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        strict_check([entry])


# -- to_openai passes it ---------------------------------------------------------------------------------------


def test_every_kind_of_message_passes_the_strict_check() -> None:
    usage = TokenUsage(prompt_tokens=9, completion_tokens=3, total_tokens=12)
    wire = to_openai(
        [
            SystemMessage(content="s", name="policy"),
            SystemMessage(role="developer", content="d"),
            UserMessage(content="u", name="alice"),
            AssistantMessage(
                tool_calls=(ToolCall(id="c1", name="f", arguments="{"),), name="helper", usage=usage, refusal=None
            ),
            ToolMessage(tool_call_id="c1", content="r", name="f", is_error=True),
            AssistantMessage(refusal="no"),
            AssistantMessage(),
        ]
    )
    strict_check(wire)
    assert wire[4] == {"role": "tool", "tool_call_id": "c1", "content": "r"}


_texts = st.text(max_size=8)
_names = st.none() | st.text(min_size=1, max_size=5)
_usages = st.none() | st.builds(
    TokenUsage,
    prompt_tokens=st.integers(0, 10**6),
    completion_tokens=st.integers(0, 10**6),
    total_tokens=st.integers(0, 2 * 10**6),
)


@st.composite
def _assistant(draw: st.DrawFn, ids: Iterator[int]) -> AssistantMessage:
    calls = tuple(
        ToolCall(id=f"call_{next(ids)}", name=draw(st.text(max_size=5)), arguments=draw(_texts))
        for _ in range(draw(st.integers(0, 3)))
    )
    return AssistantMessage(
        content=draw(_texts),
        tool_calls=calls,
        refusal=draw(st.none() | _texts),
        name=draw(_names),
        usage=draw(_usages),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Histories that follow the sequence rules: turns of a user message, then assistant messages whose calls are
    all answered, in any order."""
    ids = iter(range(10**6))
    history: list[Message] = []
    if draw(st.booleans()):
        history.append(
            SystemMessage(role=draw(st.sampled_from(["system", "developer"])), content=draw(_texts), name=draw(_names))
        )
    for _ in range(draw(st.integers(0, 3))):
        history.append(UserMessage(content=draw(_texts), name=draw(_names)))
        for _ in range(draw(st.integers(0, 2))):
            answer = draw(_assistant(ids))
            history.append(answer)
            calls = draw(st.permutations(answer.tool_calls))
            history.extend(
                ToolMessage(tool_call_id=call.id, content=draw(_texts), name=draw(_names), is_error=draw(st.booleans()))
                for call in calls
            )
        history.append(AssistantMessage(content=draw(_texts), usage=draw(_usages)))
    return history


def _as_read_back(message: Message) -> Message:
    """What ``from_openai(to_openai(...))`` gives back: everything but what the wire has no field for."""
    if isinstance(message, ToolMessage):
        return message.model_copy(update={"name": None, "is_error": False})
    if isinstance(message, AssistantMessage):
        return message.model_copy(update={"usage": None})
    return message


@settings(max_examples=150, deadline=None)
@given(histories())
def test_any_history_is_a_valid_request_and_reads_back(history: list[Message]) -> None:
    wire = to_openai(history)
    strict_check(wire)
    assert from_openai(wire) == [_as_read_back(message) for message in history]


# -- new fields through the checkpoint serde -------------------------------------------------------------------


def _strictly_equal(expected: Iterable[Message], actual: Iterable[Any]) -> None:
    for e, a in zip(expected, actual, strict=True):
        assert type(a) is type(e) and a == e
        if isinstance(e, AssistantMessage):
            assert type(a.usage) is type(e.usage)


@settings(max_examples=50, deadline=None)
@given(histories())
def test_every_field_reads_back_from_the_serde(history: list[Message]) -> None:
    serde = Serde()
    _strictly_equal(history, serde.loads(serde.dumps(history)))


def test_a_message_stored_before_the_new_fields_reads_back_with_their_defaults() -> None:
    serde = Serde()
    old = (
        '[{"$type":"rxgraph.SystemMessage","data":{"role":"system","content":"s"}},'
        '{"$type":"rxgraph.UserMessage","data":{"role":"user","content":"u"}},'
        '{"$type":"rxgraph.AssistantMessage","data":{"role":"assistant","content":"a","tool_calls":[]}}]'
    )
    assert list(serde.loads(old)) == [
        SystemMessage(content="s"),
        UserMessage(content="u"),
        AssistantMessage(content="a"),
    ]
