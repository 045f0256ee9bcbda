"""Conversion to and from the OpenAI Chat Completions wire format.

DashScope's OpenAI-compatible mode, vLLM and Ollama use the same format. ``to_openai`` writes only what the API's
request message types allow (``openai.types.chat.ChatCompletionMessageParam``, checked by the tests with the
``openai`` package's own types, unknown keys refused); ``from_openai`` reads request entries and response
``message`` objects. What each side keeps:

==============================  =================================  ==============================================
on the wire                     rxgraph                            why
==============================  =================================  ==============================================
role ``system`` / ``developer`` ``SystemMessage(role=...)``        the same kind of message; the role is kept, so
                                                                   a history is sent back as it came
``name`` (system, developer,    ``.name``, both ways               the API's participant name
user, assistant)
assistant ``refusal``           ``AssistantMessage.refusal``,      a refusal-only answer is not an empty message
                                both ways
``content`` as text parts       ``.content``: the texts joined     rxgraph holds text; the newline keeps parts
                                with ``"\\n"`` (assistant           apart, as vLLM joins them for string-only
                                ``refusal`` parts go to            templates. ``to_openai`` writes one string.
                                ``.refusal``)
``content: null``               ``""``                             an assistant message with calls and no text is
                                                                   written back as ``null``, as OpenAI sends it
image, audio and file parts     refused (``MessageFormatError``)   rxgraph messages hold text only; dropping a
                                                                   part would change what the user asked
role ``function`` (legacy)      refused (``MessageFormatError``)   superseded by tool calls and ``tool`` messages
tool-call ``type`` other than   refused (``MessageFormatError``)   only function tools are modelled
``"function"``
—                               ``ToolMessage.name``: not written  the tool message type has no ``name``; strict
                                                                   endpoints refuse it (the call id says which
                                                                   call it answers). Read when present.
—                               ``ToolMessage.is_error``: not      no such field: a tool that wants the model to
                                written, read as ``False``         know it failed says so in its content
—                               ``AssistantMessage.usage``: not    the API reports usage, it is never sent back
                                written, not read
response-only keys              ignored                            ``annotations``, ``audio``, ``function_call``
                                                                   and the like say nothing rxgraph keeps
==============================  =================================  ==============================================
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
    """Render messages as OpenAI Chat Completions ``messages`` entries (see the module's table for each field).

    An assistant message with tool calls and no text gets ``"content": None``, as OpenAI itself sends it; the
    ``tool_calls`` key appears only when there are calls, ``name`` and ``refusal`` only when set. A tool message
    carries ``role``, ``tool_call_id`` and ``content`` only.

    Args:
        messages: rxgraph messages, in order.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage | UserMessage):
            entry: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.name is not None:
                entry["name"] = message.name
            out.append(entry)
        elif isinstance(message, AssistantMessage):
            entry = {
                "role": "assistant",
                "content": None if not message.content and message.tool_calls else message.content,
            }
            if message.name is not None:
                entry["name"] = message.name
            if message.refusal is not None:
                entry["refusal"] = message.refusal
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
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        else:
            raise InvalidTypeError(
                f"message {i}: expected an rxgraph message, got {type(message).__name__}", argument="messages"
            )
    return out


def from_openai(payload: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Parse OpenAI Chat Completions ``messages`` entries (or response ``message`` objects) into messages.

    ``content`` may be a string, ``None`` (read as ``""``) or a list of text parts, joined with ``"\\n"`` (an
    assistant's ``refusal`` parts go to its ``refusal``, joined the same way). A ``developer`` message becomes a
    ``SystemMessage`` with that role. ``name`` and ``refusal`` are kept; keys rxgraph has no field for, such as
    ``annotations`` on responses, are ignored (see the module's table).

    Args:
        payload: the entries, in order.

    Raises:
        MessageFormatError: an entry is not a message rxgraph can represent (``index`` is its position): not an
            object, an unknown role (including the legacy ``"function"`` role), an image, audio or file content
            part, a tool call whose type is not ``"function"``, or a missing or mistyped field. A pydantic
            ``ValidationError`` behind it is its ``__cause__``.
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
    if role == "system" or role == "developer":
        return SystemMessage(role=role, content=_text(entry, role)[0], name=_optional_str(entry, "name"))
    if role == "user":
        return UserMessage(content=_text(entry, role)[0], name=_optional_str(entry, "name"))
    if role == "assistant":
        content, refused = _text(entry, role)
        refusal = _optional_str(entry, "refusal")
        if refused is not None:
            refusal = refused if refusal is None else refusal + "\n" + refused
        return AssistantMessage(
            content=content,
            tool_calls=_tool_calls(entry.get("tool_calls")),
            refusal=refusal,
            name=_optional_str(entry, "name"),
        )
    if role == "tool":
        return ToolMessage(
            tool_call_id=_required_str(entry, "tool_call_id"),
            content=_text(entry, role)[0],
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


def _optional_str(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise _EntryError(f"{key!r} must be a string or null, got {type(value).__name__}")
    return value


_NOT_TEXT = {"image_url": "an image", "input_audio": "audio", "file": "a file"}


def _text(entry: Mapping[str, Any], role: str) -> tuple[str, str | None]:
    """The entry's text, and (for an assistant's content parts) the text of its refusal parts, if it has any."""
    content = entry.get("content")
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        raise _EntryError(f"'content' must be a string, a list of text parts or null, got {type(content).__name__}")
    texts: list[str] = []
    refusals: list[str] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise _EntryError(f"content part {j} must be an object, got {type(part).__name__}")
        kind = part.get("type")
        if kind == "text":
            key, into = "text", texts
        elif kind == "refusal" and role == "assistant":
            key, into = "refusal", refusals
        elif kind in _NOT_TEXT:
            raise _EntryError(
                f"content part {j} is {_NOT_TEXT[kind]} (type {kind!r}): rxgraph messages hold text only, so it "
                "cannot be kept; send such parts to the API yourself"
            )
        else:
            raise _EntryError(f"content part {j} has type {kind!r}; only 'text' parts are supported")
        value = part.get(key)
        if not isinstance(value, str):
            raise _EntryError(f"content part {j} has no string {key!r}")
        into.append(value)
    return "\n".join(texts), ("\n".join(refusals) if refusals else None)


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
