"""Merging streamed chunks into one assistant message, the way OpenAI-compatible APIs stream tool calls."""

from __future__ import annotations

import pytest

from rxgraph.agent import ChatChunk, ToolCallDelta, merge_chunks
from rxgraph.errors import InvalidTypeError, MessageFormatError
from rxgraph.messages import TokenUsage, ToolCall
from rxgraph.testing import finish, text, tool_call


def test_one_call_split_over_many_chunks() -> None:
    parts = tool_call("c1", "get_weather", '{"city": "Paris", "unit": "C"}', split=5)
    assert isinstance(parts, tuple) and len(parts) == 5
    assert parts[1].tool_calls[0].id is None and parts[1].tool_calls[0].name is None
    message = merge_chunks([*parts, finish("tool_calls")])
    assert message.tool_calls == (ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris", "unit": "C"}'),)
    assert message.content == ""


def test_two_calls_interleaved_by_index() -> None:
    a = tool_call("ca", "first", '{"x": 1}', index=0, split=2)
    b = tool_call("cb", "second", '{"y": 2}', index=1, split=2)
    assert isinstance(a, tuple) and isinstance(b, tuple)
    message = merge_chunks([b[0], a[0], b[1], a[1]])
    assert message.tool_calls == (
        ToolCall(id="ca", name="first", arguments='{"x": 1}'),
        ToolCall(id="cb", name="second", arguments='{"y": 2}'),
    )


def test_text_before_tool_calls_and_several_deltas_in_one_chunk() -> None:
    both = ChatChunk(
        tool_calls=(
            ToolCallDelta(index=0, id="c1", name="f", arguments='{"a"'),
            ToolCallDelta(index=1, id="c2", name="g", arguments="{}"),
        )
    )
    message = merge_chunks(
        [text("Let me "), text("check."), both, ChatChunk(tool_calls=(ToolCallDelta(index=0, arguments=": 1}"),))]
    )
    assert message.content == "Let me check."
    assert [(c.id, c.arguments) for c in message.tool_calls] == [("c1", '{"a": 1}'), ("c2", "{}")]


def test_plain_text_answer() -> None:
    message = merge_chunks([text("Hello"), text(", world"), finish()])
    assert message.content == "Hello, world" and message.tool_calls == ()


def test_a_call_without_id_or_name_is_an_error() -> None:
    with pytest.raises(MessageFormatError, match="tool call #0 without an id") as no_id:
        merge_chunks([ChatChunk(tool_calls=(ToolCallDelta(index=0, name="f"),))])
    assert no_id.value.index == 0 and isinstance(no_id.value, ValueError)
    with pytest.raises(MessageFormatError, match="tool call #2 without a name") as no_name:
        merge_chunks([ChatChunk(tool_calls=(ToolCallDelta(index=2, id="x"),))])
    assert no_name.value.index == 2


def test_non_chunks_are_rejected() -> None:
    with pytest.raises(InvalidTypeError, match="must stream ChatChunk values, got str") as caught:
        merge_chunks(["text"])  # type: ignore[list-item]
    assert caught.value.argument == "chunks" and isinstance(caught.value, TypeError)


def test_the_last_reported_usage_goes_on_the_message() -> None:
    early = TokenUsage(prompt_tokens=10, completion_tokens=1, total_tokens=11)
    final = TokenUsage(prompt_tokens=10, completion_tokens=2, total_tokens=12)
    message = merge_chunks(
        [
            text(
                "Hi",
            ),
            ChatChunk(content="!", usage=early),
            finish(),
            ChatChunk(usage=final),
            text(""),
        ]
    )
    assert message.usage == final and message.content == "Hi!"
    assert merge_chunks([text("Hi"), finish()]).usage is None


def test_refusal_pieces_are_joined_apart_from_the_text() -> None:
    message = merge_chunks([ChatChunk(refusal="I can"), ChatChunk(refusal="not."), finish()])
    assert message.refusal == "I cannot." and message.content == ""
    assert merge_chunks([text("ok")]).refusal is None
