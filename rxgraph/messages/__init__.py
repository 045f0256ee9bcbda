"""Chat messages and their content parts (images, audio, files), the sequence rules a history must follow, the OpenAI
wire format and LangChain's message dicts.

Their errors (``UnsafeHistoryError``, ``MessageFormatError``) are exported by ``rxgraph`` and ``rxgraph.errors``.
"""

from rxgraph.messages._langchain import from_langchain, message_ids, next_message_id, to_langchain
from rxgraph.messages._openai import from_openai, to_openai
from rxgraph.messages._parts import (
    AssistantPart,
    AudioPart,
    CacheBreakpoint,
    ContentPart,
    FilePart,
    ImagePart,
    RefusalPart,
    TextPart,
    UserPart,
)
from rxgraph.messages._rules import (
    SequenceViolation,
    check_ready_for_user_input,
    check_request,
    is_ready_for_user_input,
    readiness_violations,
    request_violations,
    sequence_violations,
)
from rxgraph.messages._tokens import estimate_tokens
from rxgraph.messages._trim import trim_messages
from rxgraph.messages._types import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "AssistantPart",
    "AudioPart",
    "CacheBreakpoint",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "Message",
    "RefusalPart",
    "SequenceViolation",
    "SystemMessage",
    "TextPart",
    "TokenUsage",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "UserPart",
    "check_ready_for_user_input",
    "check_request",
    "estimate_tokens",
    "from_langchain",
    "from_openai",
    "is_ready_for_user_input",
    "message_ids",
    "next_message_id",
    "readiness_violations",
    "request_violations",
    "sequence_violations",
    "to_langchain",
    "to_openai",
    "trim_messages",
]
