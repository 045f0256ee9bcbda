"""The message events' fast path against the general one: a text-only chunk is written straight into its JSON
shape, and the event's metadata is encoded once per node; the text must be what ``json.dumps`` of the dicts gives,
for every chunk."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rxgraph.agent import ChatChunk, ToolCallDelta
from rxgraph.graph import StreamingOutput
from rxgraph.messages import AssistantMessage, TokenUsage, UserMessage
from rxgraph.serve._runs import RunEncoder
from rxgraph.serve._wire import chunk_json, chunk_text

# Any text a model may stream, half surrogate pairs and control characters included.
_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
_DELTA = st.builds(
    ToolCallDelta,
    index=st.integers(0, 3),
    id=st.none() | _TEXT,
    name=st.none() | _TEXT,
    arguments=_TEXT,
)
_USAGE = st.builds(
    TokenUsage, prompt_tokens=st.integers(0, 99), completion_tokens=st.integers(0, 99), total_tokens=st.integers(0, 198)
)
_CHUNKS = st.builds(
    ChatChunk,
    content=_TEXT,
    tool_calls=st.lists(_DELTA, max_size=2).map(tuple) | st.just(()),
    finish_reason=st.none() | st.sampled_from(["stop", "tool_calls", "length"]) | _TEXT,
    refusal=st.just("") | _TEXT,
    usage=st.none() | _USAGE,
)


def _general(payload: Any) -> str:
    return json.dumps(payload, allow_nan=False, separators=(",", ":"))


@given(_CHUNKS, _TEXT)
def test_a_chunks_text_is_the_json_of_its_dict(chunk: ChatChunk, message: str) -> None:
    assert chunk_text(chunk, message) == _general(chunk_json(chunk, message))


@given(st.lists(_CHUNKS, min_size=1, max_size=4), st.sampled_from(["agent", "model"]), _TEXT, _TEXT)
def test_a_message_event_is_the_json_of_its_chunk_and_metadata(
    chunks: list[ChatChunk], node: str, run_id: str, thread_id: str
) -> None:
    state = {"messages": [UserMessage(content="hi"), AssistantMessage(content="hello")]}
    encoder = RunEncoder(("messages-tuple",), subgraphs=False, run_id=run_id, thread_id=thread_id)
    for chunk in chunks:
        [(event, data)] = encoder.take(StreamingOutput(node, state, chunk))
        message, metadata = json.loads(data)
        assert event == "messages"
        assert metadata == {
            "langgraph_node": node,
            "langgraph_path": [node],
            "langgraph_checkpoint_ns": "",
            "run_id": run_id,
            "thread_id": thread_id,
        }
        assert data == _general([chunk_json(chunk, message["id"]), metadata])
