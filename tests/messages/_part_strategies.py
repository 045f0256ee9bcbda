"""Hypothesis strategies for messages with content parts: every part of every role, and histories that follow the
sequence rules. Shared by the wire, LangChain and saver round-trip tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from rxgraph.messages import (
    AssistantMessage,
    AudioPart,
    CacheBreakpoint,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

texts = st.text(max_size=8)
names = st.none() | st.text(min_size=1, max_size=5)
usages = st.none() | st.builds(
    TokenUsage,
    prompt_tokens=st.integers(0, 10**6),
    completion_tokens=st.integers(0, 10**6),
    total_tokens=st.integers(0, 2 * 10**6),
)
breakpoints = st.none() | st.builds(CacheBreakpoint, ttl=st.sampled_from([None, "30m", "12h"]))
_base64 = st.binary(max_size=12).map(lambda data: __import__("base64").b64encode(data).decode("ascii"))
_urls = st.sampled_from(["https://example.com/cat.png", "http://x/y.jpg", ""]) | _base64.map(
    lambda data: f"data:image/png;base64,{data}"
)

text_parts = st.builds(TextPart, text=texts, prompt_cache_breakpoint=breakpoints)
refusal_parts = st.builds(RefusalPart, refusal=texts)
image_parts = st.builds(
    ImagePart,
    url=_urls,
    detail=st.sampled_from([None, "auto", "low", "high", "original"]),
    prompt_cache_breakpoint=breakpoints,
)
audio_parts = st.builds(
    AudioPart, data=_base64, format=st.sampled_from(["wav", "mp3"]), prompt_cache_breakpoint=breakpoints
)


@st.composite
def file_parts(draw: st.DrawFn) -> FilePart:
    fields: dict[str, Any] = {}
    by = draw(st.sampled_from(["id", "data", "both"]))
    if by in ("id", "both"):
        fields["file_id"] = draw(st.text(min_size=1, max_size=6))
    if by in ("data", "both"):
        fields["file_data"] = "data:application/pdf;base64," + draw(_base64)
    if draw(st.booleans()):
        fields["filename"] = draw(st.text(max_size=6))
    return FilePart(**fields, prompt_cache_breakpoint=draw(breakpoints))


user_parts = text_parts | image_parts | audio_parts | file_parts()
user_contents = texts | st.lists(user_parts, max_size=4).map(tuple)
text_contents = texts | st.lists(text_parts, max_size=3).map(tuple)
assistant_contents = st.none() | texts | st.lists(text_parts | refusal_parts, max_size=3).map(tuple)


@st.composite
def assistants(
    draw: st.DrawFn, ids: Iterator[int], contents: st.SearchStrategy[Any] = assistant_contents
) -> AssistantMessage:
    """Assistant messages with 0 to 3 tool calls (ids from ``ids``), their content drawn from ``contents``."""
    calls = tuple(
        ToolCall(id=f"call_{next(ids)}", name=draw(st.text(max_size=5)), arguments=draw(texts))
        for _ in range(draw(st.integers(0, 3)))
    )
    return AssistantMessage(
        content=draw(contents),
        tool_calls=calls,
        refusal=draw(st.none() | texts),
        name=draw(names),
        usage=draw(usages),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Histories that follow the sequence rules, with content parts wherever each role may hold them: turns of a
    user message, then assistant messages whose calls are all answered, in any order."""
    ids = iter(range(10**6))
    history: list[Message] = []
    if draw(st.booleans()):
        history.append(
            SystemMessage(
                role=draw(st.sampled_from(["system", "developer"])), content=draw(text_contents), name=draw(names)
            )
        )
    for _ in range(draw(st.integers(0, 3))):
        history.append(UserMessage(content=draw(user_contents), name=draw(names)))
        for _ in range(draw(st.integers(0, 2))):
            answer = draw(assistants(ids))
            history.append(answer)
            calls = draw(st.permutations(answer.tool_calls))
            history.extend(
                ToolMessage(
                    tool_call_id=call.id,
                    content=draw(text_contents),
                    name=draw(names),
                    is_error=draw(st.booleans()),
                )
                for call in calls
            )
        history.append(AssistantMessage(content=draw(assistant_contents), usage=draw(usages)))
    return history


messages = st.one_of(
    st.builds(SystemMessage, role=st.sampled_from(["system", "developer"]), content=text_contents, name=names),
    st.builds(UserMessage, content=user_contents, name=names),
    st.builds(AssistantMessage, content=assistant_contents, refusal=st.none() | texts, name=names, usage=usages),
    st.builds(ToolMessage, tool_call_id=st.text(max_size=4), content=text_contents, is_error=st.booleans()),
)
"""Single messages of every role, with parts."""
