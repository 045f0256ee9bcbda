import pydantic
import pytest

from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from rxgraph.messages._types import MESSAGE_ADAPTER, MESSAGES_ADAPTER, parse_message, parse_messages


def _call(call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name="lookup", arguments='{"q": "x"}')


def test_messages_have_their_role_by_default() -> None:
    assert SystemMessage(content="s").role == "system"
    assert UserMessage(content="u").role == "user"
    assert AssistantMessage().role == "assistant"
    assert ToolMessage(tool_call_id="c1", content="r").role == "tool"


def test_assistant_message_defaults_to_empty_text_and_no_calls() -> None:
    message = AssistantMessage()
    assert message.content == ""
    assert message.tool_calls == ()


def test_tool_message_defaults() -> None:
    message = ToolMessage(tool_call_id="c1", content="r")
    assert message.name is None
    assert message.is_error is False


def test_tool_calls_given_as_list_are_stored_as_tuple() -> None:
    message = AssistantMessage(tool_calls=[_call("c1"), _call("c2")])  # type: ignore[arg-type]
    assert isinstance(message.tool_calls, tuple)
    assert [call.id for call in message.tool_calls] == ["c1", "c2"]


def test_role_cannot_be_changed_to_another_value() -> None:
    with pytest.raises(pydantic.ValidationError):
        UserMessage(role="assistant", content="hi")  # type: ignore[arg-type]


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError):
        UserMessage(content="hi", nickname="bob")  # type: ignore[call-arg]


def test_new_fields_default_to_none() -> None:
    assert SystemMessage(content="s").name is None and UserMessage(content="u").name is None
    message = AssistantMessage()
    assert message.refusal is None and message.name is None and message.usage is None


def test_a_system_message_may_be_a_developer_message() -> None:
    assert parse_message({"role": "developer", "content": "x"}) == SystemMessage(role="developer", content="x")
    with pytest.raises(pydantic.ValidationError):
        SystemMessage(role="user", content="x")  # type: ignore[arg-type]


def test_token_usage_is_frozen_and_counts_are_not_negative() -> None:
    usage = TokenUsage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    with pytest.raises(pydantic.ValidationError):
        usage.total_tokens = 4  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        TokenUsage(prompt_tokens=-1, completion_tokens=0, total_tokens=0)


@pytest.mark.parametrize(
    ("message", "field", "value"),
    [
        (SystemMessage(content="s"), "content", "changed"),
        (UserMessage(content="u"), "content", "changed"),
        (AssistantMessage(content="a"), "content", "changed"),
        (AssistantMessage(tool_calls=(_call(),)), "tool_calls", ()),
        (ToolMessage(tool_call_id="c1", content="r"), "is_error", True),
        (_call(), "arguments", "{}"),
    ],
)
def test_mutating_a_message_raises(message: pydantic.BaseModel, field: str, value: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        setattr(message, field, value)


def test_messages_are_hashable_and_compare_by_value() -> None:
    first = AssistantMessage(content="a", tool_calls=(_call("c1"),))
    second = AssistantMessage(content="a", tool_calls=[_call("c1")])  # type: ignore[arg-type]
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second, UserMessage(content="a")}) == 2


def test_tool_call_id_must_be_non_empty() -> None:
    with pytest.raises(pydantic.ValidationError):
        ToolCall(id="", name="lookup", arguments="{}")


def test_tool_call_arguments_are_kept_verbatim() -> None:
    text = '{ "b": 1,  "a": [1,2] }'
    assert ToolCall(id="c1", name="f", arguments=text).arguments == text


def test_duplicate_tool_call_ids_are_rejected_naming_the_id() -> None:
    with pytest.raises(pydantic.ValidationError, match="duplicate tool call id 'c7'"):
        AssistantMessage(tool_calls=(_call("c7"), _call("c8"), _call("c7")))


def test_duplicate_tool_call_id_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        AssistantMessage(tool_calls=(_call("c1"), _call("c1")))


def test_dicts_are_parsed_into_the_class_named_by_role() -> None:
    parsed = parse_messages(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r", "is_error": True},
        ]
    )
    assert parsed == [
        SystemMessage(content="s"),
        UserMessage(content="u"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),)),
        ToolMessage(tool_call_id="c1", content="r", is_error=True),
    ]


def test_adapters_validate_single_messages_and_lists() -> None:
    assert MESSAGE_ADAPTER.validate_python({"role": "user", "content": "u"}) == UserMessage(content="u")
    assert MESSAGES_ADAPTER.validate_python([]) == []


def test_parsing_an_unknown_role_fails() -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_message({"role": "narrator", "content": "x"})


def test_parsing_without_role_fails() -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_message({"content": "x"})


def test_parsing_keeps_existing_message_instances() -> None:
    message = UserMessage(content="u")
    assert parse_message(message) == message


def test_messages_round_trip_through_json() -> None:
    messages: list[Message] = [
        UserMessage(content="u"),
        AssistantMessage(
            content="thinking",
            tool_calls=(_call("c1"),),
            name="helper",
            usage=TokenUsage(prompt_tokens=5, completion_tokens=2, total_tokens=7),
        ),
        ToolMessage(tool_call_id="c1", content="r", name="lookup"),
        AssistantMessage(refusal="no"),
        SystemMessage(role="developer", content="d", name="ops"),
    ]
    assert MESSAGES_ADAPTER.validate_json(MESSAGES_ADAPTER.dump_json(messages)) == messages
