"""``HistoryWriter`` against the functions it stands in for: whatever histories it was shown before (a growing one,
a prefix of it, another branch, the same messages as other objects), it answers as ``to_langchain``,
``message_ids`` and ``next_message_id`` do."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rxgraph.errors import InvalidTypeError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
    message_ids,
    next_message_id,
    to_langchain,
)
from rxgraph.messages._langchain import HistoryWriter

_CALL_IDS = st.sampled_from(["call_1", "call_2", "call_3"])
_TEXT = st.sampled_from(["", "hi", "the weather?", "sunny"])
_MESSAGE: st.SearchStrategy[Message] = st.one_of(
    st.builds(UserMessage, content=_TEXT),
    st.builds(SystemMessage, content=_TEXT),
    st.builds(
        AssistantMessage,
        content=_TEXT,
        tool_calls=st.lists(
            st.builds(ToolCall, id=_CALL_IDS, name=st.just("weather"), arguments=st.just('{"city":"Paris"}')),
            max_size=2,
            unique_by=lambda call: call.id,
        ),
        usage=st.none() | st.just(TokenUsage(prompt_tokens=3, completion_tokens=2, total_tokens=5)),
    ),
    st.builds(ToolMessage, content=_TEXT, tool_call_id=_CALL_IDS),
)

# How the next history is made from the last one: grown, cut back, branched, or read back (equal, other objects).
_STEP = st.one_of(
    st.tuples(st.just("grow"), st.lists(_MESSAGE, max_size=3)),
    st.tuples(st.just("cut"), st.integers(0, 6)),
    st.tuples(st.just("branch"), st.integers(0, 6), st.lists(_MESSAGE, min_size=1, max_size=3)),
    st.tuples(st.just("reload"), st.none()),
)


def _next(history: list[Message], step: tuple[object, ...]) -> list[Message]:
    kind = step[0]
    if kind == "grow":
        return history + list(step[1])  # type: ignore[call-overload]
    if kind == "cut":
        return history[: step[1]]  # type: ignore[misc]
    if kind == "branch":
        return history[: step[1]] + list(step[2])  # type: ignore[call-overload, misc]
    return [message.model_copy() for message in history]


@given(st.lists(_STEP, min_size=1, max_size=8), st.sampled_from(["write", "ids", "next", "tool"]))
def test_it_answers_as_the_functions_do_whatever_it_saw_before(steps: list[tuple[object, ...]], first: str) -> None:
    writer = HistoryWriter()
    history: list[Message] = []
    for i, step in enumerate(steps):
        history = _next(history, step)
        asked = first if i == 0 else ("write", "ids", "next", "tool")[i % 4]  # answers in every order
        for question in (asked, "write", "ids", "next", "tool"):
            if question == "write":
                assert writer.write(history) == to_langchain(history)
            elif question == "ids":
                assert writer.ids(history) == message_ids(history)
            elif question == "next":
                assert writer.next_id(history) == next_message_id(history)
            else:
                for call in ("call_1", "call_2", "call_9"):
                    assert writer.next_id(history, tool_call_id=call) == next_message_id(history, tool_call_id=call)


def test_a_grown_history_reuses_what_was_written_for_its_start() -> None:
    writer = HistoryWriter()
    start: list[Message] = [UserMessage(content="hi"), AssistantMessage(content="hello")]
    first = writer.write(start)
    grown = writer.write([*start, UserMessage(content="and now?")])
    assert grown[:2] == first and grown[0] is first[0] and grown[1] is first[1]
    assert writer.write([m.model_copy() for m in start]) == first  # other objects: written again, equal


def test_it_refuses_what_is_not_a_message_naming_the_index() -> None:
    writer = HistoryWriter()
    writer.write([UserMessage(content="hi")])
    with pytest.raises(InvalidTypeError, match="message 1"):
        writer.write([UserMessage(content="hi"), "not a message"])  # type: ignore[list-item]
