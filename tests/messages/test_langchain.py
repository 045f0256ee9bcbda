"""LangChain message dicts, judged by ``langchain_core`` itself: what ``to_langchain`` writes is what LangChain's own
messages dump, and what LangChain dumps ``from_langchain`` reads back."""

import json
import re
from typing import Any

import messages._part_strategies as parts
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core import messages as lc
from langchain_core.load import dumpd

from rxgraph.errors import InvalidArgumentError, InvalidTypeError, MessageFormatError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
    from_langchain,
    message_ids,
    next_message_id,
    to_langchain,
)


def _conversation() -> list[Message]:
    return [
        SystemMessage(content="be brief"),
        UserMessage(content="weather in Paris and Rome?", name="alice"),
        AssistantMessage(
            tool_calls=(
                ToolCall(id="call_a", name="weather", arguments='{"city": "Paris"}'),
                ToolCall(id="call_b", name="weather", arguments='{"city": "Rome", "days": [1, 2]}'),
            ),
            usage=TokenUsage(prompt_tokens=20, completion_tokens=9, total_tokens=29),
        ),
        ToolMessage(tool_call_id="call_b", content="sunny", name="weather"),
        ToolMessage(tool_call_id="call_a", content="no such city", is_error=True),
        AssistantMessage(content="Rain in Paris, sun in Rome.", name="helper"),
    ]


def _reloaded(entries: list[dict[str, Any]]) -> list[lc.BaseMessage]:
    """LangChain's messages built from the dicts as LangChain builds them from its own dumps (``Class(**dump)``)."""
    return lc.messages_from_dict([{"type": entry["type"], "data": entry} for entry in entries])


def test_to_langchain_writes_what_langchain_messages_dump() -> None:
    history = _conversation()
    entries = to_langchain(history)
    ids = message_ids(history)
    assert entries[0] == {
        "content": "be brief",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "system",
        "name": None,
        "id": ids[0],
    }
    assert entries[2] == {
        "content": "",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "ai",
        "name": None,
        "id": ids[2],
        "tool_calls": [
            {"name": "weather", "args": {"city": "Paris"}, "id": "call_a", "type": "tool_call"},
            {"name": "weather", "args": {"city": "Rome", "days": [1, 2]}, "id": "call_b", "type": "tool_call"},
        ],
        "invalid_tool_calls": [],
        "usage_metadata": {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29},
    }
    assert entries[4] == {
        "content": "no such city",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "tool",
        "name": None,
        "id": ids[4],
        "tool_call_id": "call_a",
        "artifact": None,
        "status": "error",
    }
    reloaded = _reloaded(entries)
    assert [type(m) for m in reloaded] == [
        lc.SystemMessage,
        lc.HumanMessage,
        lc.AIMessage,
        lc.ToolMessage,
        lc.ToolMessage,
        lc.AIMessage,
    ]
    assert [m.model_dump() for m in reloaded] == entries


def test_convert_to_messages_reads_the_fields_rxgraph_had() -> None:
    history = _conversation()
    system, human, ai, tool_b, tool_a, answer = lc.convert_to_messages(to_langchain(history))
    assert isinstance(system, lc.SystemMessage) and system.content == "be brief"
    assert isinstance(human, lc.HumanMessage) and (human.content, human.name) == ("weather in Paris and Rome?", "alice")
    assert isinstance(ai, lc.AIMessage)
    assert ai.tool_calls == [
        {"name": "weather", "args": {"city": "Paris"}, "id": "call_a", "type": "tool_call"},
        {"name": "weather", "args": {"city": "Rome", "days": [1, 2]}, "id": "call_b", "type": "tool_call"},
    ]
    assert isinstance(tool_b, lc.ToolMessage) and (tool_b.tool_call_id, tool_b.name) == ("call_b", "weather")
    assert isinstance(tool_a, lc.ToolMessage) and (tool_a.content, tool_a.status) == ("no such city", "error")
    assert isinstance(answer, lc.AIMessage) and (answer.content, answer.name) == (
        "Rain in Paris, sun in Rome.",
        "helper",
    )
    assert [m.id for m in (system, human, ai, tool_b, tool_a, answer)] == message_ids(history)
    # convert_to_messages (what LangGraph's add_messages uses) passes only some keys on; the dump's constructor
    # reads usage too.
    reloaded_ai = _reloaded(to_langchain(history))[2]
    assert isinstance(reloaded_ai, lc.AIMessage)
    assert reloaded_ai.usage_metadata == {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29}


def test_round_trip_restores_the_history() -> None:
    history = _conversation()
    assert from_langchain(to_langchain(history)) == history
    assert from_langchain(m.model_dump() for m in lc.convert_to_messages(to_langchain(history[:2]))) == history[:2]


def test_a_developer_message_is_a_system_message_marked_as_langchain_openai_marks_it() -> None:
    message = SystemMessage(role="developer", content="be brief", name="ops")
    [entry] = to_langchain([message])
    assert (entry["type"], entry["additional_kwargs"]) == ("system", {"__openai_role__": "developer"})
    assert from_langchain([entry]) == [message]
    # LangChain's own reading of an OpenAI developer message, and of the 'developer' type.
    [from_openai_dict] = lc.convert_to_messages([{"role": "developer", "content": "be brief", "name": "ops"}])
    assert from_langchain([from_openai_dict.model_dump()]) == [message]
    assert from_langchain([{"type": "developer", "content": "be brief", "name": "ops"}]) == [message]


def test_a_refusal_goes_to_additional_kwargs_both_ways() -> None:
    message = AssistantMessage(refusal="I can't help with that.")
    [entry] = to_langchain([message])
    assert entry["additional_kwargs"] == {"refusal": "I can't help with that."}
    assert from_langchain([entry]) == [message]


def test_arguments_that_are_not_a_json_object_travel_as_invalid_tool_calls_in_their_order() -> None:
    calls = (
        ToolCall(id="c1", name="broken", arguments='{"city": "Par'),
        ToolCall(id="c2", name="weather", arguments='{"city": "Paris"}'),
        ToolCall(id="c3", name="listed", arguments="[1, 2]"),
        ToolCall(id="c4", name="none", arguments=""),
        ToolCall(id="c5", name="nan", arguments='{"x": NaN}'),
        ToolCall(id="c6", name="huge", arguments='{"x": 1e999}'),
    )
    message = AssistantMessage(content="checking", tool_calls=calls)
    [entry] = to_langchain([message])
    assert entry["tool_calls"] == [{"name": "weather", "args": {"city": "Paris"}, "id": "c2", "type": "tool_call"}]
    invalid = entry["invalid_tool_calls"]
    assert [(c["id"], c["name"], c["args"], c["type"]) for c in invalid] == [
        ("c1", "broken", '{"city": "Par', "invalid_tool_call"),
        ("c3", "listed", "[1, 2]", "invalid_tool_call"),
        ("c4", "none", "", "invalid_tool_call"),
        ("c5", "nan", '{"x": NaN}', "invalid_tool_call"),
        ("c6", "huge", '{"x": 1e999}', "invalid_tool_call"),
    ]
    assert all(isinstance(c["error"], str) and c["error"] for c in invalid)
    # The order is in the calls as OpenAI has them, which LangChain leaves alone next to its own lists.
    assert [c["id"] for c in entry["additional_kwargs"]["tool_calls"]] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    [reloaded] = _reloaded([entry])
    assert isinstance(reloaded, lc.AIMessage) and reloaded.model_dump() == entry
    assert from_langchain([entry]) == [message]
    assert from_langchain([reloaded.model_dump()]) == [message]


def test_without_their_order_invalid_calls_come_after_the_valid_ones() -> None:
    [entry] = to_langchain(
        [
            AssistantMessage(
                tool_calls=(ToolCall(id="c1", name="f", arguments="{"), ToolCall(id="c2", name="g", arguments="{}"))
            )
        ]
    )
    del entry["additional_kwargs"]["tool_calls"]
    [message] = from_langchain([entry])
    assert isinstance(message, AssistantMessage)
    assert [call.id for call in message.tool_calls] == ["c2", "c1"]


def test_an_order_that_names_other_calls_is_passed_over() -> None:
    entry = lc.AIMessage(
        content="",
        tool_calls=[{"name": "g", "args": {}, "id": "c2"}],
        invalid_tool_calls=[{"name": "f", "args": "{", "id": "c1", "error": "bad", "type": "invalid_tool_call"}],
        additional_kwargs={"tool_calls": [{"id": "c1"}, {"id": "old"}]},
    ).model_dump()
    [message] = from_langchain([entry])
    assert isinstance(message, AssistantMessage)
    assert message.tool_calls == (
        ToolCall(id="c2", name="g", arguments="{}"),
        ToolCall(id="c1", name="f", arguments="{"),
    )


def test_arguments_are_re_serialized_from_the_parsed_object() -> None:
    message = AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments='{ "a" : 1 ,"b":"Zürich" }'),))
    [back] = from_langchain(to_langchain([message]))
    assert isinstance(back, AssistantMessage)
    assert back.tool_calls[0].arguments == '{"a": 1, "b": "Zürich"}'
    assert json.loads(back.tool_calls[0].arguments) == json.loads(message.tool_calls[0].arguments)


def test_ids_are_written_when_given() -> None:
    history = [UserMessage(content="hi"), AssistantMessage(content="hello")]
    assert [entry["id"] for entry in to_langchain(history, ids=["run-1", "run-2"])] == ["run-1", "run-2"]


@pytest.mark.parametrize("ids", [["only-one"], ["a", "b", "c"], "ab"])
def test_ids_must_name_each_message_once(ids: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="one id per message") as caught:
        to_langchain([UserMessage(content="hi"), AssistantMessage(content="hello")], ids=ids)
    assert caught.value.argument == "ids"


def test_message_ids_are_the_same_for_the_same_history_and_known_before_a_message_is_whole() -> None:
    history = _conversation()
    again = [m.model_copy() for m in history]
    ids = message_ids(history)
    assert ids == message_ids(again) and len(set(ids)) == len(ids)
    assert re.fullmatch(r"1-[0-9a-f]{16}", ids[1]) and ids[3].startswith("tool-")
    # The id of each message is known from what comes before it: the answer's while it streams, and a tool's
    # answer's from the call it answers, in whatever order the tools finish.
    for i, message in enumerate(history):
        if isinstance(message, AssistantMessage | ToolMessage):
            call = message.tool_call_id if isinstance(message, ToolMessage) else None
            assert next_message_id(history[:i], tool_call_id=call) == ids[i], i
    assert next_message_id(history[:3], tool_call_id="call_a") == ids[4]  # call_a's answer comes after call_b's
    assert to_langchain(history)[4]["id"] == ids[4]


def test_message_ids_differ_from_where_two_histories_differ() -> None:
    usage = TokenUsage(prompt_tokens=1, completion_tokens=1, total_tokens=2)
    variants: list[Message] = [
        UserMessage(content="hi"),
        SystemMessage(content="hi"),
        SystemMessage(role="developer", content="hi"),
        UserMessage(content="hi", name="alice"),
        AssistantMessage(content="hi"),
        AssistantMessage(content="hi", usage=usage),
        AssistantMessage(content="hi", usage=usage.model_copy(update={"total_tokens": 3})),
        AssistantMessage(content="hi", refusal="no"),
        AssistantMessage(content="hi", tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),)),
        AssistantMessage(content="hi", tool_calls=(ToolCall(id="c1", name="f", arguments="{ }"),)),
        ToolMessage(tool_call_id="c1", content="hi"),
        ToolMessage(tool_call_id="c1", content="hi", is_error=True),
        ToolMessage(tool_call_id="c1", content="hi", name="f"),
    ]
    after = UserMessage(content="next")
    # What follows a message tells every variant apart; the user's own messages differ by themselves too, where a
    # model's answer is named by its place alone (so that it is named before it is whole).
    follows = [message_ids([variant, after])[1] for variant in variants]
    assert len(set(follows)) == len(follows)
    own = [message_ids([variant])[0] for variant in variants]
    assert len(set(own[:4])) == 4 and len(set(own[4:10])) == 1
    assert message_ids([after, after])[0] != message_ids([after, after])[1]


def test_to_langchain_and_message_ids_refuse_non_messages_naming_the_index() -> None:
    with pytest.raises(InvalidTypeError, match="message 1") as caught:
        to_langchain([UserMessage(content="u"), {"role": "user", "content": "x"}])  # type: ignore[list-item]
    assert caught.value.argument == "messages"
    with pytest.raises(InvalidTypeError, match="message 4"):
        message_ids([UserMessage(content="u")] * 4 + ["hi"])  # type: ignore[list-item]


def test_from_langchain_reads_langchain_dumps() -> None:
    dumped = [
        lc.SystemMessage(content="be brief", id="s1"),
        lc.HumanMessage(content="weather?", name="alice", example=False),
        lc.AIMessage(
            content="",
            tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}],
            usage_metadata={
                "input_tokens": 5,
                "output_tokens": 2,
                "total_tokens": 7,
                "input_token_details": {"cache_read": 3},
            },
            response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
        ),
        lc.ToolMessage(content="sunny", tool_call_id="c1", name="weather", artifact={"raw": 1}),
        lc.ToolMessage(content="boom", tool_call_id="c2", status="error"),
        lc.AIMessage(content="Sunny.", additional_kwargs={"refusal": None}),
    ]
    expected: list[Message] = [
        SystemMessage(content="be brief"),
        UserMessage(content="weather?", name="alice"),
        AssistantMessage(
            tool_calls=(ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}'),),
            usage=TokenUsage(prompt_tokens=5, completion_tokens=2, total_tokens=7),
        ),
        ToolMessage(tool_call_id="c1", content="sunny", name="weather"),
        ToolMessage(tool_call_id="c2", content="boom", is_error=True),
        AssistantMessage(content="Sunny."),
    ]
    assert from_langchain([m.model_dump() for m in dumped]) == expected
    assert from_langchain([entry["data"] for entry in lc.messages_to_dict(dumped)]) == expected
    assert from_langchain(lc.messages_to_dict(dumped)) == expected
    assert from_langchain([dumpd(m) for m in dumped]) == expected


def test_from_langchain_reads_chunks_as_their_base_type() -> None:
    chunks = [
        lc.HumanMessageChunk(content="hi"),
        lc.SystemMessageChunk(content="be brief"),
        lc.AIMessageChunk(
            content="ok",
            tool_call_chunks=[{"name": "f", "args": '{"a": 1}', "id": "c1", "index": 0, "type": "tool_call_chunk"}],
        ),
        lc.ToolMessageChunk(content="done", tool_call_id="c1"),
    ]
    expected: list[Message] = [
        UserMessage(content="hi"),
        SystemMessage(content="be brief"),
        AssistantMessage(content="ok", tool_calls=(ToolCall(id="c1", name="f", arguments='{"a": 1}'),)),
        ToolMessage(tool_call_id="c1", content="done"),
    ]
    assert [m.model_dump()["type"] for m in chunks] == [
        "HumanMessageChunk",
        "SystemMessageChunk",
        "AIMessageChunk",
        "ToolMessageChunk",
    ]
    assert from_langchain([m.model_dump() for m in chunks]) == expected
    assert from_langchain([dumpd(m) for m in chunks]) == expected


def test_from_langchain_keeps_text_blocks_as_parts() -> None:
    payload: list[dict[str, Any]] = [
        {"type": "human", "content": [{"type": "text", "text": "first"}, "second", {"type": "text", "text": "third"}]},
        {"type": "ai", "content": [{"type": "text", "text": "a", "annotations": [], "id": "t1", "index": 0}]},
        {"type": "tool", "tool_call_id": "c1", "content": []},
    ]
    assert from_langchain(payload) == [
        UserMessage(content=(TextPart(text="first"), TextPart(text="second"), TextPart(text="third"))),
        AssistantMessage(content=(TextPart(text="a"),)),
        ToolMessage(tool_call_id="c1", content=()),
    ]


def test_from_langchain_reads_openai_entries_as_from_openai_does() -> None:
    payload: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"type": "ai", "content": "hello"},
        lc.ChatMessage(role="assistant", content="chat").model_dump(),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{ }"}}],
        },
    ]
    assert from_langchain(payload) == [
        UserMessage(content="hi"),
        AssistantMessage(content="hello"),
        AssistantMessage(content="chat"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments="{ }"),)),
    ]


def test_from_langchain_accepts_any_iterable_of_mappings() -> None:
    payload = ({"type": "human", "content": str(i)} for i in range(3))
    assert from_langchain(payload) == [UserMessage(content=str(i)) for i in range(3)]


def _ai(**fields: Any) -> dict[str, Any]:
    return {"type": "ai", "content": "", **fields}


def _call(**overrides: Any) -> dict[str, Any]:
    return {"name": "f", "args": {}, "id": "c1", "type": "tool_call", **overrides}


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"content": "x"}, "missing 'type' (a LangChain message) or 'role' (an OpenAI message)"),
        ({"type": "narrator", "content": "x"}, "unknown type 'narrator'"),
        ({"type": ["human"], "content": "x"}, "unknown type ['human']"),
        (lc.RemoveMessage(id="m1").model_dump(), "append-only"),
        ({"type": "function", "name": "f", "content": "x"}, "function messages are not supported"),
        ({"type": "chat", "content": "x"}, "needs a 'role'"),
        ({"role": "narrator", "content": "x"}, "unknown role 'narrator'"),
        ({"type": "human"}, "'content' must be a string or a list of content blocks, got NoneType"),
        ({"type": "human", "content": 3}, "'content' must be"),
        ({"type": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "an image part"),
        ({"type": "tool", "tool_call_id": "c", "content": [{"type": "image", "url": "x"}]}, "hold no images"),
        ({"type": "ai", "content": [{"type": "reasoning", "reasoning": "x"}]}, "no Chat Completions message"),
        ({"type": "human", "content": [{"type": "image", "file_id": "f"}]}, "needs a url or base64"),
        ({"type": "human", "content": [{"type": "image", "base64": "AA=="}]}, "needs its 'mime_type'"),
        ({"type": "human", "content": [{"type": "audio", "url": "https://x/a.wav"}]}, "send its data"),
        (
            {"type": "human", "content": [{"type": "audio", "base64": "AA==", "mime_type": "audio/ogg"}]},
            "audio/wav or audio/mpeg",
        ),
        ({"type": "human", "content": [{"type": "text", "text": "a", "annotations": [{"x": 1}]}]}, "'annotations'"),
        ({"type": "human", "content": [3]}, "content block 0 must be a string or an object"),
        ({"type": "human", "content": [{"type": "text"}]}, "no string 'text'"),
        ({"type": "human", "content": "x", "name": 3}, "'name' must be a string or null"),
        ({"type": "human", "content": "x", "additional_kwargs": []}, "'additional_kwargs' must be an object"),
        ({"type": "tool", "content": "x"}, "'tool_call_id' must be a string"),
        ({"type": "tool", "content": "x", "tool_call_id": "c1", "status": "ok"}, "'status' must be"),
        (_ai(additional_kwargs={"refusal": 1}), "'additional_kwargs.refusal' must be a string or null"),
        (_ai(tool_calls={"id": "c1"}), "'tool_calls' must be a list"),
        (_ai(tool_calls=["c1"]), "tool call 0 must be an object"),
        (_ai(tool_calls=[_call(type="function")]), "has type 'function', not 'tool_call'"),
        (_ai(tool_calls=[_call(id=None)]), "tool call 0 needs a non-empty string 'id'"),
        (_ai(tool_calls=[_call(id="")]), "non-empty string 'id'"),
        (_ai(tool_calls=[_call(name=None)]), "needs a string 'name'"),
        (_ai(tool_calls=[_call(args='{"a": 1}')]), "'args' must be an object, got str"),
        (_ai(tool_calls=[_call(args={"x": {1, 2}})]), "'args' cannot be written as JSON"),
        (_ai(tool_calls=[_call(args={"x": float("nan")})]), "'args' cannot be written as JSON"),
        (_ai(tool_calls=[_call(), _call()]), "duplicate tool call id 'c1'"),
        (_ai(invalid_tool_calls=[{"name": "f", "args": 3, "id": "c1"}]), "'args' must be a string or null"),
        (_ai(invalid_tool_calls=[{"name": "f", "args": "{", "id": None}]), "invalid tool call 0 needs a non-empty"),
        (_ai(usage_metadata=[1, 2, 3]), "'usage_metadata' must be an object or null"),
        (_ai(usage_metadata={"input_tokens": 1, "output_tokens": 2}), "'usage_metadata.total_tokens' must be an"),
        (_ai(usage_metadata={"input_tokens": True, "output_tokens": 1, "total_tokens": 2}), "input_tokens"),
        (_ai(usage_metadata={"input_tokens": -1, "output_tokens": 1, "total_tokens": 2}), "prompt_tokens"),
        ({"lc": 1, "type": "constructor", "id": ["x", "Runnable"], "kwargs": {}}, "class 'Runnable'"),
        ({"lc": 1, "type": "constructor", "id": "HumanMessage", "kwargs": {}}, "class None"),
        ({"lc": 1, "type": "constructor", "id": ["HumanMessage"], "kwargs": None}, "'kwargs' must be an object"),
        ({"lc": 1, "type": "constructor", "id": ["HumanMessage"], "kwargs": {}}, "'content' must be"),
        ({"type": "human", "data": "hi"}, "'data' must be an object"),
    ],
)
def test_from_langchain_refuses_malformed_entries_naming_the_index(entry: dict[str, Any], match: str) -> None:
    payload: list[dict[str, Any]] = [{"type": "human", "content": "fine"}, entry]
    with pytest.raises(MessageFormatError, match=r"^message 1: ") as caught:
        from_langchain(payload)
    assert match in str(caught.value)
    assert caught.value.index == 1 and isinstance(caught.value, ValueError)


def test_a_legacy_function_call_or_an_audio_answer_langchain_openai_kept_is_refused_not_dropped() -> None:
    # Where langchain-openai keeps what OpenAI's message had; without them the answer would read back empty.
    legacy = lc.AIMessage(content="", additional_kwargs={"function_call": {"name": "f", "arguments": "{}"}})
    audio = {"id": "audio_1", "data": "UklGRg==", "expires_at": 0, "transcript": "Hello"}
    spoken = lc.AIMessage(content="", additional_kwargs={"audio": audio})
    for message, key in [(legacy, "additional_kwargs.function_call"), (spoken, "additional_kwargs.audio")]:
        for entry in (message, message.model_dump(), dumpd(message), lc.messages_to_dict([message])[0]):
            with pytest.raises(MessageFormatError, match=rf"^message 1: .*'{key}'.* cannot be kept") as caught:
                from_langchain([lc.HumanMessage(content="hi"), entry])
            assert caught.value.index == 1
    # Null, they say nothing.
    nothing = lc.AIMessage(content="hi", additional_kwargs={"function_call": None, "audio": None})
    assert from_langchain([nothing]) == [AssistantMessage(content="hi")]


def test_from_langchain_keeps_the_validation_error_as_the_cause() -> None:
    with pytest.raises(MessageFormatError, match="duplicate tool call id 'c1'") as caught:
        from_langchain([{"role": "user", "content": "q"}, _ai(tool_calls=[_call(), _call()])])
    assert caught.value.index == 1 and isinstance(caught.value.__cause__, pydantic.ValidationError)
    # And from an OpenAI entry, read by from_openai.
    openai_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(MessageFormatError, match=r"^message 1: .*duplicate tool call id") as caught:
        from_langchain([{"type": "human", "content": "q"}, {"role": "assistant", "tool_calls": [openai_call] * 2}])
    assert caught.value.index == 1 and isinstance(caught.value.__cause__, pydantic.ValidationError)


def test_from_langchain_refuses_non_object_entries() -> None:
    with pytest.raises(MessageFormatError, match="message 0: expected an object") as caught:
        from_langchain(["human: hi"])  # type: ignore[list-item]
    assert caught.value.index == 0


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_arguments = st.one_of(
    # An object as json.dumps writes it: what a provider sends in practice, and what comes back unchanged.
    st.dictionaries(st.text(max_size=5), _json_values, max_size=4).map(
        lambda args: json.dumps(args, ensure_ascii=False)
    ),
    # Anything that is not a JSON object at all (it travels as an invalid call).
    st.text(max_size=12).filter(lambda text: not text.lstrip(" \t\n\r").startswith("{")),
    st.sampled_from(["", "{", '{"a": NaN}', '{"a": 1e400}', "null"]),
)
_names = st.none() | st.text(max_size=6)
_calls = st.lists(
    st.builds(ToolCall, id=st.text(min_size=1, max_size=4), name=st.text(max_size=6), arguments=_arguments),
    max_size=4,
    unique_by=lambda call: call.id,
)
_usage = st.none() | st.builds(
    TokenUsage,
    prompt_tokens=st.integers(0, 10**6),
    completion_tokens=st.integers(0, 10**6),
    total_tokens=st.integers(0, 10**6),
)
_histories = st.lists(
    st.one_of(
        st.builds(
            SystemMessage, role=st.sampled_from(["system", "developer"]), content=parts.text_contents, name=_names
        ),
        st.builds(UserMessage, content=parts.user_contents, name=_names),
        st.builds(
            AssistantMessage,
            content=parts.assistant_contents.filter(lambda content: content is not None),
            tool_calls=_calls,
            refusal=_names,
            name=_names,
            usage=_usage,
        ),
        st.builds(
            ToolMessage, tool_call_id=st.text(), content=parts.text_contents, name=_names, is_error=st.booleans()
        ),
    ),
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(_histories)
def test_any_history_survives_the_round_trip_and_langchain_reads_it(history: list[Message]) -> None:
    entries = to_langchain(history)
    assert from_langchain(entries) == history
    reloaded = _reloaded(entries)
    assert [m.model_dump() for m in reloaded] == entries
    assert from_langchain([dumpd(m) for m in reloaded]) == history
