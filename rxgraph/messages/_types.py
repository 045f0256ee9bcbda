"""Chat message types.

Every message is a frozen pydantic model: checkpoints share message objects between versions of a thread's
state, so a message must never change after it has been created. Frozen models are also hashable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

__all__ = [
    "MESSAGES_ADAPTER",
    "MESSAGE_ADAPTER",
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "parse_message",
    "parse_messages",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ToolCall(BaseModel):
    """One tool invocation requested by an assistant message.

    ``arguments`` is the JSON text exactly as the provider sent it. It is kept unparsed so that a history sent
    back to the provider is byte-for-byte what the provider produced, even when the text is not valid JSON.
    """

    model_config = _FROZEN

    id: Annotated[str, Field(min_length=1)]
    name: str
    arguments: str


class SystemMessage(BaseModel):
    """Instructions for the model, usually the first message of a conversation."""

    model_config = _FROZEN

    role: Literal["system"] = "system"
    content: str


class UserMessage(BaseModel):
    """A message written by the end user."""

    model_config = _FROZEN

    role: Literal["user"] = "user"
    content: str


class AssistantMessage(BaseModel):
    """A model reply: text, tool calls, or both.

    ``tool_calls`` accepts any sequence on input and is stored as a tuple. Call ids must be unique within the
    message, because each tool response names the call it answers by id.
    """

    model_config = _FROZEN

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @field_validator("tool_calls")
    @classmethod
    def _call_ids_are_unique(cls, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        seen: set[str] = set()
        for call in calls:
            if call.id in seen:
                raise ValueError(f"duplicate tool call id {call.id!r}")
            seen.add(call.id)
        return calls


class ToolMessage(BaseModel):
    """The result of one tool call, linked to the call by ``tool_call_id``.

    ``is_error`` marks a result that reports a failure of the tool. It is kept for the application's own use
    (routing, retries, display); chat wire formats have no such field.
    """

    model_config = _FROZEN

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    name: str | None = None
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
"""Any chat message; validating a dict picks the class from its ``role`` key."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def parse_message(obj: Any) -> Message:
    """Validate a dict (or an existing message) into a message, choosing the class by ``role``."""
    return MESSAGE_ADAPTER.validate_python(obj)


def parse_messages(objs: Iterable[Any]) -> list[Message]:
    """Validate several dicts (or messages) into a list of messages."""
    return MESSAGES_ADAPTER.validate_python(list(objs))
