"""Chat message types.

Every message is a frozen pydantic model: checkpoints share message objects between versions of a thread's
state, so a message must never change after it has been created. Frozen models are also hashable.

A message's ``content`` is a string, or a tuple of content parts (``rxgraph.messages.TextPart``, ``ImagePart``,
``AudioPart``, ``FilePart``, ``RefusalPart``: which role may hold which follows the Chat Completions API); ``.text``
is its text either way. A list given on input is stored as a tuple.

A message's fields are stored in checkpoints as they are (see ``rxgraph.checkpoint``); what reaches a chat API is
``rxgraph.messages.to_openai``'s business, which says what each field becomes on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from rxgraph.messages._parts import AssistantPart, TextPart, UserPart, parts_text

__all__ = [
    "MESSAGES_ADAPTER",
    "MESSAGE_ADAPTER",
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "TokenUsage",
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


class TokenUsage(BaseModel):
    """The tokens one model call used, as the API reported them: the request's (``prompt_tokens``), the answer's
    (``completion_tokens``, reasoning included) and their sum as the API counts it (``total_tokens``)."""

    model_config = _FROZEN

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)


class SystemMessage(BaseModel):
    """Instructions for the model, usually the first message of a conversation.

    ``role`` is ``"system"``, or ``"developer"``: the name newer OpenAI models give the same kind of message. A
    developer message is a system message everywhere in rxgraph (the sequence rules, the agent) and keeps its role
    on the wire, so a history read with ``from_openai`` is sent back as it came. ``content`` is a string or text
    parts (``TextPart``). ``name`` is the API's optional participant name.
    """

    model_config = _FROZEN

    role: Literal["system", "developer"] = "system"
    content: str | tuple[TextPart, ...]
    name: str | None = None

    @property
    def text(self) -> str:
        """The content's text: the string, or the text parts joined with ``"\\n"``."""
        return parts_text(self.content)


class UserMessage(BaseModel):
    """A message written by the end user.

    ``content`` is a string, or parts: text, images, audio and files (``TextPart``, ``ImagePart``, ``AudioPart``,
    ``FilePart``), in the order the model reads them. ``name`` is the API's optional participant name (to tell
    several users apart).
    """

    model_config = _FROZEN

    role: Literal["user"] = "user"
    content: str | tuple[UserPart, ...]
    name: str | None = None

    @property
    def text(self) -> str:
        """The content's text: the string, or the text parts joined with ``"\\n"`` (images, audio and files have
        none)."""
        return parts_text(self.content)


class AssistantMessage(BaseModel):
    """A model reply: text, tool calls, or both.

    ``tool_calls`` accepts any sequence on input and is stored as a tuple. Call ids must be unique within the
    message, because each tool response names the call it answers by id.

    ``content`` is a string, parts (``TextPart`` and ``RefusalPart``), or None: the API's ``null`` for a message
    without tool calls (a refusal-only answer, as OpenAI sends it). A message with tool calls and no text has
    ``""``, sent as ``null`` (see ``to_openai``). ``.text`` is the text either way.

    ``refusal`` is the model's refusal text, when it refused (OpenAI streams it apart from ``content``); ``name``
    the API's optional participant name; ``usage`` the tokens the call that produced the message used, when the
    model reported them (it is not sent back to the model).
    """

    model_config = _FROZEN

    role: Literal["assistant"] = "assistant"
    content: str | tuple[AssistantPart, ...] | None = ""
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    name: str | None = None
    usage: TokenUsage | None = None

    @field_validator("tool_calls")
    @classmethod
    def _call_ids_are_unique(cls, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        seen: set[str] = set()
        for call in calls:
            if call.id in seen:
                raise ValueError(f"duplicate tool call id {call.id!r}")
            seen.add(call.id)
        return calls

    @property
    def text(self) -> str:
        """The content's text: the string, the text parts joined with ``"\\n"`` (refusal parts are not text), or
        ``""`` for no content."""
        return parts_text(self.content)


class ToolMessage(BaseModel):
    """The result of one tool call, linked to the call by ``tool_call_id``.

    ``is_error`` marks a result that reports a failure of the tool. It is kept for the application's own use
    (routing, retries, display); chat wire formats have no such field. ``name`` is the name of the tool that
    answered, kept for the same use: the Chat Completions API has no such field either (the call id says which call
    it answers), so neither goes on the wire. ``content`` is a string or text parts (``TextPart``).
    """

    model_config = _FROZEN

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str | tuple[TextPart, ...]
    name: str | None = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The content's text: the string, or the text parts joined with ``"\\n"``."""
        return parts_text(self.content)


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
