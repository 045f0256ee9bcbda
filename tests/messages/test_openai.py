from typing import Any

import pydantic
import pytest

from rxgraph.errors import InvalidTypeError, MessageFormatError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    from_openai,
    to_openai,
)


def _conversation() -> list[Message]:
    return [
        SystemMessage(content="be brief"),
        UserMessage(content="weather in Paris and Rome?"),
        AssistantMessage(
            tool_calls=(
                ToolCall(id="call_a", name="weather", arguments='{"city": "Paris"}'),
                ToolCall(id="call_b", name="weather", arguments='{"city":"Rome"}'),
            )
        ),
        ToolMessage(tool_call_id="call_b", content="sunny", name="weather"),
        ToolMessage(tool_call_id="call_a", content="rain"),
        AssistantMessage(content="Rain in Paris, sun in Rome."),
        AssistantMessage(content="Let me check.", tool_calls=(ToolCall(id="c3", name="now", arguments=""),)),
        ToolMessage(tool_call_id="c3", content="12:00"),
        AssistantMessage(),
    ]


def test_to_openai_renders_the_wire_format() -> None:
    assert to_openai(_conversation()) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "sunny", "name": "weather"},
        {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
        {"role": "assistant", "content": "Rain in Paris, sun in Rome."},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "now", "arguments": ""}}],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "12:00"},
        {"role": "assistant", "content": ""},
    ]


def test_round_trip_preserves_messages() -> None:
    messages = _conversation()
    assert from_openai(to_openai(messages)) == messages


def test_empty_list_round_trips() -> None:
    assert to_openai([]) == []
    assert from_openai([]) == []


def test_is_error_is_dropped_on_the_wire_and_content_is_unchanged() -> None:
    message = ToolMessage(tool_call_id="c1", content="boom", is_error=True)
    wire = to_openai([message])
    assert wire == [{"role": "tool", "tool_call_id": "c1", "content": "boom"}]
    assert from_openai(wire) == [message.model_copy(update={"is_error": False})]


def test_to_openai_rejects_non_messages_naming_the_index() -> None:
    with pytest.raises(InvalidTypeError, match="message 1") as caught:
        to_openai([UserMessage(content="u"), {"role": "user", "content": "x"}])  # type: ignore[list-item]
    assert caught.value.argument == "messages" and isinstance(caught.value, TypeError)


def test_from_openai_reads_null_content_as_empty_text() -> None:
    assert from_openai([{"role": "assistant", "content": None}]) == [AssistantMessage()]


def test_from_openai_reads_missing_content_as_empty_text() -> None:
    payload = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]
    assert from_openai(payload) == [AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),))]


def test_from_openai_joins_text_content_parts() -> None:
    payload: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "tool", "tool_call_id": "c1", "content": []},
    ]
    assert from_openai(payload) == [
        SystemMessage(content="be brief"),
        UserMessage(content="hello"),
        ToolMessage(tool_call_id="c1", content=""),
    ]


def test_from_openai_ignores_extra_response_keys() -> None:
    response_message: dict[str, Any] = {
        "role": "assistant",
        "content": "hi",
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    }
    assert from_openai([response_message]) == [AssistantMessage(content="hi")]


def test_from_openai_accepts_any_iterable_of_mappings() -> None:
    payload = ({"role": "user", "content": str(i)} for i in range(3))
    assert from_openai(payload) == [UserMessage(content=str(i)) for i in range(3)]


def test_from_openai_keeps_arguments_text_verbatim() -> None:
    arguments = '{ "a" : 1 , "b":[1, 2] }'
    payload = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}],
        }
    ]
    [message] = from_openai(payload)
    assert isinstance(message, AssistantMessage)
    assert message.tool_calls[0].arguments == arguments


def _tool_call(**overrides: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    call.update(overrides)
    return call


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"role": "developer", "content": "x"}, "unknown role 'developer'"),
        ({"role": "function", "name": "f", "content": "x"}, "'function' role is not supported"),
        ({"content": "x"}, "missing 'role'"),
        ({"role": "user", "content": 3}, "'content' must be"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "type 'image_url'"),
        ({"role": "user", "content": ["plain"]}, "content part 0 must be an object"),
        ({"role": "user", "content": [{"type": "text"}]}, "no string 'text'"),
        ({"role": "tool", "content": "x"}, "'tool_call_id' must be a string"),
        ({"role": "tool", "tool_call_id": "c1", "content": "x", "name": 5}, "name"),
        ({"role": "assistant", "tool_calls": {"id": "c1"}}, "'tool_calls' must be a list"),
        ({"role": "assistant", "tool_calls": ["c1"]}, "tool call 0 must be an object"),
        ({"role": "assistant", "tool_calls": [_tool_call(type="custom")]}, "type 'custom'"),
        ({"role": "assistant", "tool_calls": [_tool_call(type=None)]}, "type None"),
        ({"role": "assistant", "tool_calls": [_tool_call(function=None)]}, "no 'function' object"),
        ({"role": "assistant", "tool_calls": [_tool_call(id="")]}, "non-empty string 'id'"),
        (
            {"role": "assistant", "tool_calls": [_tool_call(function={"name": "f", "arguments": {"a": 1}})]},
            "must be the JSON text as a string",
        ),
        ({"role": "assistant", "tool_calls": [_tool_call(function={"arguments": "{}"})]}, "'function.name'"),
        ({"role": "assistant", "tool_calls": [_tool_call(), _tool_call()]}, "duplicate tool call id 'c1'"),
    ],
)
def test_from_openai_rejects_malformed_entries_naming_the_index(entry: dict[str, Any], match: str) -> None:
    payload: list[dict[str, Any]] = [{"role": "user", "content": "fine"}, entry]
    with pytest.raises(MessageFormatError, match=r"^message 1: ") as caught:
        from_openai(payload)
    assert match in str(caught.value)
    assert caught.value.index == 1 and isinstance(caught.value, ValueError)


def test_from_openai_keeps_the_validation_error_as_the_cause() -> None:
    entry = {"role": "assistant", "tool_calls": [_tool_call(), _tool_call()]}
    with pytest.raises(MessageFormatError, match="duplicate tool call id 'c1'") as caught:
        from_openai([entry])
    assert caught.value.index == 0 and isinstance(caught.value.__cause__, pydantic.ValidationError)


def test_from_openai_rejects_non_object_entries() -> None:
    with pytest.raises(MessageFormatError, match="message 0: expected an object") as caught:
        from_openai(["user: hi"])  # type: ignore[list-item]
    assert caught.value.index == 0
