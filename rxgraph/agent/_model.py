"""The chat model a ``ReactAgent`` talks to, and how its streamed chunks become one assistant message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from reactivex import Observable

from ..errors import InvalidTypeError, MessageFormatError
from ..graph._modes import add_message_type
from ..messages._types import AssistantMessage, Message, TokenUsage, ToolCall

__all__ = ["ChatChunk", "ChatModel", "ToolCallDelta", "ToolSpec", "merge_chunks"]


class ToolCallDelta(BaseModel):
    """A piece of one tool call, as OpenAI-compatible APIs stream them.

    The first delta of a call carries its ``index``, ``id`` and ``name``; later deltas with the same ``index`` carry
    more of its ``arguments`` text.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class ChatChunk(BaseModel):
    """One streamed piece of a model's answer: some text, some tool-call deltas, and on the last one the reason the
    model stopped (``"stop"``, ``"tool_calls"``, ``"length"``...).

    ``refusal`` is a piece of the model's refusal text (OpenAI streams it apart from the content). ``usage`` is the
    tokens the whole call used, on the chunk that reports them (OpenAI sends them last, in a chunk of their own,
    when asked to with ``stream_options={"include_usage": True}``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    refusal: str = ""
    usage: TokenUsage | None = None


add_message_type(ChatChunk)  # a model's token: what "messages" stream mode emits


class ToolSpec(BaseModel):
    """What a model is told about a tool: its name, what it does, and the JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools`` request format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@runtime_checkable
class ChatModel(Protocol):
    """A streaming chat model.

    ``stream`` returns a cold Observable of ``ChatChunk``s for one request: the full history (system prompt first
    when there is one) and the tools the model may call. It should do nothing until subscribed, stop its request
    when disposed, and use the scheduler it is subscribed with for anything time-related (the agent subscribes it
    with the run's scheduler, so tests can run it in virtual time).
    """

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        """A cold Observable of the answer's chunks for one request.

        Args:
            messages: the whole request, system prompt first when there is one; it passes ``check_request``.
            tools: the tools the model may call now (none on an agent's last allowed call).

        A failed request should fail the Observable (``on_error``); the agent's turn then fails with that error.
        """
        ...


def merge_chunks(chunks: Sequence[ChatChunk]) -> AssistantMessage:
    """Merge a model's streamed chunks into one ``AssistantMessage``.

    Text is concatenated in order, and so is refusal text (the message's ``refusal`` stays None when no chunk
    had any). Tool-call deltas are grouped by ``index`` (calls may interleave): the id and name come from the first
    delta that has them, the arguments are the concatenation of every delta's piece. Calls are ordered by index.
    The message's ``usage`` is the last one a chunk reported (some APIs repeat a running total on every chunk).

    Args:
        chunks: the chunks, in the order the model streamed them.

    Raises:
        MessageFormatError: a tool call never received an id or a name (``index`` is its index).
        InvalidTypeError: an element is not a ``ChatChunk``.
    """
    text: list[str] = []
    refusal: list[str] = []
    usage: TokenUsage | None = None
    calls: dict[int, list[Any]] = {}  # index -> [id, name, argument pieces]
    for chunk in chunks:
        if not isinstance(chunk, ChatChunk):
            raise InvalidTypeError(
                f"a chat model must stream ChatChunk values, got {type(chunk).__name__}", argument="chunks"
            )
        if chunk.content:
            text.append(chunk.content)
        if chunk.refusal:
            refusal.append(chunk.refusal)
        if chunk.usage is not None:
            usage = chunk.usage
        for delta in chunk.tool_calls:
            call = calls.get(delta.index)
            if call is None:
                call = calls[delta.index] = [None, None, []]
            if call[0] is None and delta.id:
                call[0] = delta.id
            if call[1] is None and delta.name:
                call[1] = delta.name
            if delta.arguments:
                call[2].append(delta.arguments)
    tool_calls = []
    for index in sorted(calls):
        call_id, name, pieces = calls[index]
        if not call_id or not name:
            missing = "an id" if not call_id else "a name"
            raise MessageFormatError(f"the model streamed tool call #{index} without {missing}", index=index)
        tool_calls.append(ToolCall(id=call_id, name=name, arguments="".join(pieces)))
    return AssistantMessage(
        content="".join(text),
        tool_calls=tuple(tool_calls),
        refusal="".join(refusal) if refusal else None,
        usage=usage,
    )
