"""Conversion to and from the OpenAI chat-completions wire format.

DashScope's OpenAI-compatible mode uses the same format.

``ToolMessage.is_error`` has no counterpart on the wire: ``to_openai`` drops it and leaves ``content`` as it
is, so a tool that wants the model to know it failed must say so in its content. ``from_openai`` therefore
always produces ``is_error=False``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from rxgraph.errors import InvalidTypeError, MessageFormatError
from rxgraph.messages._types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["from_openai", "to_openai"]


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Render messages as OpenAI chat-completions ``messages`` entries.

    An assistant message with tool calls and no text gets ``"content": None``, as OpenAI itself sends it; the
    ``tool_calls`` key appears only when there are calls. A tool message's ``name`` appears only when set.

    Args:
        messages: rxgraph messages, in order.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage | UserMessage):
            out.append({"role": message.role, "content": message.content})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {
                "role": "assistant",
                "content": None if not message.content and message.tool_calls else message.content,
            }
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            out.append(entry)
        elif isinstance(message, ToolMessage):
            entry = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            if message.name is not None:
                entry["name"] = message.name
            out.append(entry)
        else:
            raise InvalidTypeError(
                f"message {i}: expected an rxgraph message, got {type(message).__name__}", argument="messages"
            )
    return out


def from_openai(payload: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Parse OpenAI chat-completions ``messages`` entries (or response ``message`` objects) into messages.

    ``content`` may be a string, ``None`` (read as ``""``) or a list of text parts, which are concatenated.
    Keys this package has no field for, such as ``refusal`` or ``annotations`` on responses, are ignored.

    Args:
        payload: the entries, in order.

    Raises:
        MessageFormatError: an entry is not a message rxgraph can represent (``index`` is its position): not an
            object, an unknown role (including the legacy ``"function"`` role), a non-text content part, a tool
            call whose type is not ``"function"``, or a missing or mistyped field. A pydantic ``ValidationError``
            behind it is its ``__cause__``.
    """
    messages: list[Message] = []
    for i, entry in enumerate(payload):
        if not isinstance(entry, Mapping):
            raise MessageFormatError(f"message {i}: expected an object, got {type(entry).__name__}", index=i)
        try:
            messages.append(_parse_entry(entry))
        except ValidationError as exc:
            details = "; ".join(_format_error(error) for error in exc.errors())
            raise MessageFormatError(f"message {i}: {details}", index=i) from exc
        except _EntryError as exc:
            raise MessageFormatError(f"message {i}: {exc}", index=i) from None
    return messages


class _EntryError(Exception):
    pass


def _format_error(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else str(error["msg"])


def _parse_entry(entry: Mapping[str, Any]) -> Message:
    role = entry.get("role")
    if role == "system":
        return SystemMessage(content=_content(entry))
    if role == "user":
        return UserMessage(content=_content(entry))
    if role == "assistant":
        return AssistantMessage(content=_content(entry), tool_calls=_tool_calls(entry.get("tool_calls")))
    if role == "tool":
        return ToolMessage(
            tool_call_id=_required_str(entry, "tool_call_id"),
            content=_content(entry),
            name=entry.get("name"),
        )
    if role == "function":
        raise _EntryError("the legacy 'function' role is not supported; use 'tool' messages with tool_call_id")
    if role is None:
        raise _EntryError("missing 'role'")
    raise _EntryError(f"unknown role {role!r}")


def _required_str(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise _EntryError(f"{key!r} must be a string, got {type(value).__name__}")
    return value


def _content(entry: Mapping[str, Any]) -> str:
    content = entry.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise _EntryError(f"content part {j} must be an object, got {type(part).__name__}")
            if part.get("type") != "text":
                raise _EntryError(f"content part {j} has type {part.get('type')!r}; only 'text' parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise _EntryError(f"content part {j} has no string 'text'")
            texts.append(text)
        return "".join(texts)
    raise _EntryError(f"'content' must be a string, a list of text parts or null, got {type(content).__name__}")


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _EntryError(f"'tool_calls' must be a list, got {type(raw).__name__}")
    calls: list[ToolCall] = []
    for j, call in enumerate(raw):
        if not isinstance(call, Mapping):
            raise _EntryError(f"tool call {j} must be an object, got {type(call).__name__}")
        call_type = call.get("type")
        if call_type != "function":
            raise _EntryError(f"tool call {j} has type {call_type!r}; only 'function' tool calls are supported")
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise _EntryError(f"tool call {j} has no 'function' object")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            # Re-serialising a parsed object would not reproduce the provider's text, so refuse instead.
            raise _EntryError(
                f"tool call {j}: 'function.arguments' must be the JSON text as a string, got {type(arguments).__name__}"
            )
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _EntryError(f"tool call {j} needs a non-empty string 'id', got {call_id!r}")
        name = function.get("name")
        if not isinstance(name, str):
            raise _EntryError(f"tool call {j} needs a string 'function.name', got {type(name).__name__}")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return tuple(calls)
