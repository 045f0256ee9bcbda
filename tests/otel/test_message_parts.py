"""Messages with content parts, as the GenAI conventions' ``gen_ai.input.messages`` name them when contents are
captured: text, images and audio as ``uri`` or ``blob`` parts, files by id or as blobs, tool calls and answers."""

from __future__ import annotations

from rxgraph.messages import (
    AssistantMessage,
    AudioPart,
    FilePart,
    ImagePart,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from rxgraph.otel._genai import message_parts


def test_each_part_is_named_as_the_conventions_name_it() -> None:
    user = UserMessage(
        content=[
            TextPart(text="What is in these?"),
            ImagePart(url="https://example.com/cat.png", detail="low"),
            ImagePart(url="data:image/png;base64,iVBORw0K"),
            AudioPart(data="UklGRg==", format="wav"),
            FilePart(file_id="file-1"),
            FilePart(file_data="data:application/pdf;base64,JVBERi0=", filename="a.pdf"),
        ]
    )
    call = AssistantMessage(tool_calls=[ToolCall(id="c1", name="look", arguments='{"at": 1}')])
    answer = ToolMessage(content=[TextPart(text="a cat"), TextPart(text="a dog")], tool_call_id="c1")
    assert message_parts([user, call, answer]) == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "What is in these?"},
                {"type": "uri", "modality": "image", "uri": "https://example.com/cat.png"},
                {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0K"},
                {"type": "blob", "modality": "audio", "mime_type": "audio/wav", "content": "UklGRg=="},
                {"type": "file", "modality": "file", "file_id": "file-1"},
                {"type": "blob", "modality": "file", "mime_type": "application/pdf", "content": "JVBERi0="},
            ],
        },
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "look", "arguments": {"at": 1}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "a cat\na dog"}]},
    ]
