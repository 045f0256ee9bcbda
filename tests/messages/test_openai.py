from typing import Any

import pydantic
import pytest

from rxgraph.errors import InvalidTypeError, MessageFormatError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    TokenUsage,
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
        {"role": "tool", "tool_call_id": "call_b", "content": "sunny"},
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


def test_round_trip_preserves_messages_but_the_tool_name() -> None:
    messages = _conversation()
    unnamed = [m.model_copy(update={"name": None}) if isinstance(m, ToolMessage) else m for m in messages]
    assert unnamed != messages
    assert from_openai(to_openai(messages)) == unnamed


def test_a_tool_message_keeps_its_name_in_the_model_but_not_on_the_wire() -> None:
    message = ToolMessage(tool_call_id="c1", content="sunny", name="weather")
    assert to_openai([message]) == [{"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    # A name that arrives anyway (older clients sent one) is read.
    assert from_openai([{"role": "tool", "tool_call_id": "c1", "content": "sunny", "name": "weather"}]) == [message]


def test_names_of_participants_go_both_ways() -> None:
    messages: list[Message] = [
        SystemMessage(content="s", name="policy"),
        UserMessage(content="hi", name="alice"),
        AssistantMessage(content="hello", name="helper"),
    ]
    wire = to_openai(messages)
    assert wire == [
        {"role": "system", "content": "s", "name": "policy"},
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "hello", "name": "helper"},
    ]
    assert from_openai(wire) == messages


def test_a_developer_message_is_a_system_message_that_keeps_its_role() -> None:
    [message] = from_openai([{"role": "developer", "content": "be brief", "name": "ops"}])
    assert message == SystemMessage(role="developer", content="be brief", name="ops")
    assert to_openai([message]) == [{"role": "developer", "content": "be brief", "name": "ops"}]


def test_a_refusal_is_kept_both_ways() -> None:
    response_message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    [message] = from_openai([response_message])
    assert message == AssistantMessage(content=None, refusal="I can't help with that.")
    assert to_openai([message]) == [response_message]


def test_refusal_parts_of_an_assistant_message_are_kept_in_order() -> None:
    entry: dict[str, Any] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Partly:"}, {"type": "refusal", "refusal": "no more"}],
    }
    [message] = from_openai([entry])
    assert message == AssistantMessage(content=(TextPart(text="Partly:"), RefusalPart(refusal="no more")))
    assert message.text == "Partly:" and message.refusal is None
    assert to_openai([message]) == [entry]


def test_usage_is_not_sent_back() -> None:
    message = AssistantMessage(content="hi", usage=TokenUsage(prompt_tokens=3, completion_tokens=1, total_tokens=4))
    assert to_openai([message]) == [{"role": "assistant", "content": "hi"}]


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


def test_from_openai_keeps_null_content_as_none() -> None:
    assert from_openai([{"role": "assistant", "content": None}]) == [AssistantMessage(content=None)]
    assert AssistantMessage(content=None).text == ""


def test_from_openai_reads_missing_content_as_null() -> None:
    payload = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]
    assert from_openai(payload) == [AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),))]


def test_from_openai_keeps_text_parts_as_parts() -> None:
    payload: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": "be brief."}, {"type": "text", "text": "be kind."}]},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "tool", "tool_call_id": "c1", "content": []},
    ]
    messages = from_openai(payload)
    assert messages == [
        SystemMessage(content=(TextPart(text="be brief."), TextPart(text="be kind."))),
        UserMessage(content=(TextPart(text="hello"),)),
        AssistantMessage(content=(TextPart(text="a"), TextPart(text="b"))),
        ToolMessage(tool_call_id="c1", content=()),
    ]
    assert [m.text for m in messages] == ["be brief.\nbe kind.", "hello", "a\nb", ""]
    assert to_openai(messages) == payload


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
        ({"role": "narrator", "content": "x"}, "unknown role 'narrator'"),
        ({"role": "function", "name": "f", "content": "x"}, "'function' role is not supported"),
        ({"content": "x"}, "missing 'role'"),
        ({"role": "user", "content": 3}, "'content' must be"),
        ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "is an image"),
        ({"role": "tool", "tool_call_id": "c", "content": [{"type": "input_audio"}]}, "content part 0 is audio"),
        ({"role": "assistant", "content": [{"type": "file", "file": {"file_id": "f"}}]}, "is a file"),
        ({"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}, "is a refusal (type 'refusal')"),
        ({"role": "user", "content": [{"type": "video_url"}]}, "content part 0 has type 'video_url'"),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, "must be 'wav' or 'mp3'"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}, "'image_url' must be an object"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": 1}}]}, "no string 'image_url.url'"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x", "detail": "max"}}]},
            "'image_url.detail' must be",
        ),
        ({"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]}, "'file_id' or 'file_data'"),
        ({"role": "user", "content": [{"type": "file", "file": {"file_id": 3}}]}, "'file.file_id' must be a string"),
        ({"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}, "'x', which rxgraph does not keep"),
        (
            {"role": "user", "content": [{"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "x"}}]},
            "'prompt_cache_breakpoint' must be",
        ),
        ({"role": "user", "content": None}, "a user message needs a 'content'"),
        ({"role": "assistant", "content": [{"type": "refusal"}]}, "no string 'refusal'"),
        (
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            "legacy 'function_call' cannot be kept",
        ),
        ({"role": "assistant", "content": None, "audio": {"id": "audio_1"}}, "'audio' (a previous audio answer)"),
        ({"role": "assistant", "content": "x", "refusal": 3}, "'refusal' must be a string or null"),
        ({"role": "user", "content": "x", "name": 3}, "'name' must be a string or null"),
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
