"""Conversion to and from the OpenAI Chat Completions wire format.

DashScope's OpenAI-compatible mode, vLLM and Ollama use the same format. ``to_openai`` writes only what the API's
request message types allow (``openai.types.chat.ChatCompletionMessageParam``, checked by the tests with the
``openai`` package's own types, unknown keys refused); ``from_openai`` reads request entries and response
``message`` objects, as dicts or as the ``openai`` package's own objects. ``to_openai(from_openai(x)) == x`` for
every request message the wire types allow, but for the conversions the table names. What each side keeps:

==============================  =================================  ==============================================
on the wire                     rxgraph                            why
==============================  =================================  ==============================================
role ``system`` / ``developer`` ``SystemMessage(role=...)``        the same kind of message; the role is kept, so
                                                                   a history is sent back as it came
``name`` (system, developer,    ``.name``, both ways               the API's participant name
user, assistant)
``content`` as a string         ``.content``, the same string      as it came
``content`` as a list of parts  ``.content``: a tuple of parts,    a list stays a list (text parts are not
                                in order, both ways                joined), so a history is sent as it came; a
                                                                   tuple or another iterable (the types say
                                                                   ``Iterable``) is read, and sent as a list
``content_parts`` (a stored     ``.content``: its parts            the content as it was sent; its ``content``
completion's message)                                              has the text only (the SDK's
                                                                   ``ChatCompletionStoreMessage``)
``text`` part                   ``TextPart``                       system, developer, user, assistant and tool
                                                                   messages
``image_url`` part              ``ImagePart(url, detail)``         user messages; ``detail`` only when set
``input_audio`` part            ``AudioPart(data, format)``        user messages
``file`` part                   ``FilePart(file_id, file_data,     user messages; the keys that are set
                                filename)``
``refusal`` part                ``RefusalPart``                    assistant messages
a part's                        the part's                         as it came
``prompt_cache_breakpoint``     ``prompt_cache_breakpoint``
a part another role cannot      refused (``MessageFormatError``)   what the API's types refuse (an image in a
hold                                                               system message, a refusal in a user's)
a part with a key the type      refused (``MessageFormatError``)   a part comes back exactly or not at all
does not have
assistant ``content: null``     ``content=""`` with tool calls,    no text: what a model's answer with calls and
                                ``None`` without, both ways        no text has in rxgraph (``merge_chunks``), and
                                                                   what OpenAI sends for one
assistant ``content: ""`` with  ``content=""``, written ``null``   the same as no text; ``null`` is what OpenAI
tool calls                      (converted)                        sends, and what some endpoints want
assistant without ``content``   as ``null`` (converted)            the API reads both the same way
assistant ``refusal``           ``AssistantMessage.refusal``,      a refusal-only answer is not an empty message
                                both ways
``"refusal": null`` and the     left out (converted)               the same as leaving the key out
like for an optional key
assistant ``"tool_calls": []``  left out (converted)               no calls, as without the key; ``tool_calls``
                                                                   as a tuple or another iterable is read too
role ``function`` (legacy)      refused (``MessageFormatError``)   superseded by tool calls and ``tool`` messages
assistant ``function_call``     refused (``MessageFormatError``)   the same legacy: rxgraph keeps tool calls only
(legacy)
assistant ``audio`` (a          refused (``MessageFormatError``)   rxgraph keeps no audio answers; send the
previous audio answer)                                             transcript as the content instead
tool-call ``type`` other than   refused (``MessageFormatError``)   only function tools are modelled
``"function"`` (``"custom"``)
—                               ``ToolMessage.name``: not written  the tool message type has no ``name``; strict
                                                                   endpoints refuse it (the call id says which
                                                                   call it answers). Read when present.
—                               ``ToolMessage.is_error``: not      no such field: a tool that wants the model to
                                written, read as ``False``         know it failed says so in its content
—                               ``AssistantMessage.usage``: not    the API reports usage, it is never sent back
                                written, not read
response-only keys              ignored                            ``annotations`` and the like say nothing
                                                                   rxgraph keeps
==============================  =================================  ==============================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from rxgraph.errors import InvalidTypeError, MessageFormatError
from rxgraph.messages._parts import (
    AudioPart,
    CacheBreakpoint,
    FilePart,
    ImagePart,
    RefusalPart,
    TextPart,
)
from rxgraph.messages._types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "AUDIO_ANSWER",
    "LEGACY_FUNCTION_CALL",
    "PartFormatError",
    "from_openai",
    "parse_part",
    "render_part",
    "to_openai",
]

_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Render messages as OpenAI Chat Completions ``messages`` entries (see the module's table for each field).

    ``content`` is written as it is held: a string, a list of parts (``{"type": "image_url", ...}`` for an
    ``ImagePart``, and so on), or ``None``; an assistant message with tool calls and ``""`` gets ``None``, as OpenAI
    itself sends it. The ``tool_calls`` key appears only when there are calls, ``name`` and ``refusal`` only when
    set. A tool message carries ``role``, ``tool_call_id`` and ``content`` only.

    Args:
        messages: rxgraph messages, in order.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        content: Any = message.content if isinstance(message, _MESSAGE_TYPES) else None
        if type(content) is tuple:
            content = [render_part(part) for part in content]
        if isinstance(message, SystemMessage | UserMessage):
            entry: dict[str, Any] = {"role": message.role, "content": content}
            if message.name is not None:
                entry["name"] = message.name
            out.append(entry)
        elif isinstance(message, AssistantMessage):
            # No text beside tool calls is null, as OpenAI sends it (and some endpoints want it).
            entry = {"role": "assistant", "content": None if content == "" and message.tool_calls else content}
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
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": content})
        else:
            raise InvalidTypeError(
                f"message {i}: expected an rxgraph message, got {type(message).__name__}", argument="messages"
            )
    return out


def render_part(part: BaseModel) -> dict[str, Any]:
    """A content part as the API's content part dict."""
    kind = type(part)
    if kind is TextPart:
        assert isinstance(part, TextPart)
        out: dict[str, Any] = {"type": "text", "text": part.text}
    elif kind is ImagePart:
        assert isinstance(part, ImagePart)
        image: dict[str, Any] = {"url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        out = {"type": "image_url", "image_url": image}
    elif kind is AudioPart:
        assert isinstance(part, AudioPart)
        out = {"type": "input_audio", "input_audio": {"data": part.data, "format": part.format}}
    elif kind is FilePart:
        assert isinstance(part, FilePart)
        file = {key: value for key in _FILE_KEYS if (value := getattr(part, key)) is not None}
        out = {"type": "file", "file": file}
    elif kind is RefusalPart:
        assert isinstance(part, RefusalPart)
        return {"type": "refusal", "refusal": part.refusal}
    else:
        raise InvalidTypeError(f"expected a content part, got {kind.__name__}", argument="content")
    breakpoint_ = part.prompt_cache_breakpoint
    if breakpoint_ is not None:
        out["prompt_cache_breakpoint"] = (
            {"mode": breakpoint_.mode}
            if breakpoint_.ttl is None
            else {"mode": breakpoint_.mode, "ttl": breakpoint_.ttl}
        )
    return out


_FILE_KEYS = ("file_data", "file_id", "filename")


def from_openai(payload: Iterable[Mapping[str, Any] | BaseModel]) -> list[Message]:
    """Parse OpenAI Chat Completions ``messages`` entries (or response ``message`` objects) into messages.

    An entry is a dict, or one of the ``openai`` package's objects (``response.choices[0].message``, a
    ``ChatCompletionMessage``): any pydantic model is read as its ``model_dump(exclude_unset=True)``. An rxgraph
    message is taken as it is.

    ``content`` may be a string, ``None`` (an assistant's only: ``""`` when it has tool calls, ``None`` otherwise;
    a missing one is read the same way) or a list of parts (any iterable of them, as the request types allow; a
    stored completion's ``content_parts`` when it has them), kept as a tuple of parts in order: text, image, audio
    and file parts in a user message, text parts in the others, and text and refusal parts in an assistant's (see
    the module's table). A ``developer`` message becomes a ``SystemMessage`` with that role. ``name`` and
    ``refusal`` are kept; keys that only responses have, such as ``annotations``, are ignored, and so is an optional
    key that is ``null``.

    Args:
        payload: the entries, in order.

    Raises:
        MessageFormatError: an entry is not a message rxgraph can represent (``index`` is its position): not an
            object, an unknown role (including the legacy ``"function"`` role), a legacy ``function_call`` or an
            ``audio`` answer, a content part its role cannot hold or that is malformed (the message names the
            part's index), a tool call whose type is not ``"function"``, or a missing or mistyped field. A pydantic
            ``ValidationError`` behind it is its ``__cause__``.
    """
    messages: list[Message] = []
    for i, entry in enumerate(payload):
        if isinstance(entry, BaseModel):
            if isinstance(entry, _MESSAGE_TYPES):
                messages.append(entry)
                continue
            entry = entry.model_dump(exclude_unset=True)
        if not isinstance(entry, Mapping):
            raise MessageFormatError(f"message {i}: expected an object, got {type(entry).__name__}", index=i)
        try:
            messages.append(_parse_entry(entry))
        except ValidationError as exc:
            details = "; ".join(_format_error(error) for error in exc.errors())
            raise MessageFormatError(f"message {i}: {details}", index=i) from exc
        except _EntryError as exc:
            raise MessageFormatError(f"message {i}: {exc}", index=i) from exc.__cause__
    return messages


class _EntryError(Exception):
    pass


LEGACY_FUNCTION_CALL = (
    "the legacy {key} cannot be kept: rxgraph keeps tool calls only; send it as a 'tool_calls' entry (and its "
    "answer as a 'tool' message)"
)
"""Why an assistant message's ``function_call`` is refused; ``{key}`` is where it was (``from_langchain`` says it
too)."""

AUDIO_ANSWER = (
    "an assistant {key} (a previous audio answer) cannot be kept: rxgraph messages hold no audio answers; send its "
    "transcript as the content instead"
)
"""Why an assistant message's ``audio`` is refused; ``{key}`` is where it was (``from_langchain`` says it too)."""


def _format_error(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else str(error["msg"])


def _parse_entry(entry: Mapping[str, Any]) -> Message:
    role = entry.get("role")
    if role == "system" or role == "developer":
        return SystemMessage(role=role, content=_content(entry, role), name=_optional_str(entry, "name"))
    if role == "user":
        return UserMessage(content=_content(entry, role), name=_optional_str(entry, "name"))
    if role == "assistant":
        if entry.get("function_call") is not None:
            raise _EntryError(LEGACY_FUNCTION_CALL.format(key="'function_call'"))
        if entry.get("audio") is not None:
            raise _EntryError(AUDIO_ANSWER.format(key="'audio'"))
        content = _content(entry, role)
        tool_calls = _tool_calls(entry.get("tool_calls"))
        return AssistantMessage(
            content="" if content is None and tool_calls else content,  # written back as null
            tool_calls=tool_calls,
            refusal=_optional_str(entry, "refusal"),
            name=_optional_str(entry, "name"),
        )
    if role == "tool":
        return ToolMessage(
            tool_call_id=_required_str(entry, "tool_call_id"),
            content=_content(entry, role),
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


# The parts each role may hold, as the API's request types have them.
_ROLE_PARTS = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "tool": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
}
_WHAT = {"text": "text", "image_url": "an image", "input_audio": "audio", "file": "a file", "refusal": "a refusal"}
_HOLDS = {
    "system": "text parts only",
    "developer": "text parts only",
    "tool": "text parts only",
    "user": "text, image_url, input_audio and file parts",
    "assistant": "text and refusal parts only",
}


def _content(entry: Mapping[str, Any], role: str) -> Any:
    """The content of an entry: a string, a tuple of parts its role may hold, or None (an assistant's only)."""
    content = entry.get("content")
    sent_parts = entry.get("content_parts")
    if sent_parts is not None:  # a stored completion's message: its content as it was sent, where content is text
        content = sent_parts
    if type(content) is str:
        return content
    if content is None:
        if role == "assistant":
            return None
        raise _EntryError(f"a {role} message needs a 'content' (a string or a list of parts), got null")
    allowed = _ROLE_PARTS[role]
    parts: list[Any] = []
    for j, part in enumerate(_items(content, "'content' must be a string, a list of parts or null")):
        if not isinstance(part, Mapping):
            raise _EntryError(f"content part {j} must be an object, got {type(part).__name__}")
        kind = part.get("type")
        if kind not in allowed:
            if kind in _WHAT:
                raise _EntryError(
                    f"content part {j} is {_WHAT[kind]} (type {kind!r}), which a {role} message cannot hold: "
                    f"the API takes {_HOLDS[role]} there"
                )
            raise _EntryError(f"content part {j} has type {kind!r}; a {role} message takes {_HOLDS[role]}")
        try:
            parts.append(parse_part(part))
        except PartFormatError as exc:
            raise _EntryError(f"content part {j} ({kind}): {exc}") from exc.__cause__
    return tuple(parts)


def _items(value: Any, expected: str) -> list[Any]:
    """The items of a list the request types declare ``Iterable`` (content parts, tool calls): a list, a tuple, or any
    other iterable but a string or an object, read once."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise _EntryError(f"{expected}, got {type(value).__name__}")
    return list(value)


class PartFormatError(MessageFormatError):
    """A content part that is not one rxgraph keeps, or is malformed; the caller raises a ``MessageFormatError``
    that says where it is."""


def parse_part(part: Mapping[str, Any]) -> Any:
    """The rxgraph part of one of the API's content part dicts.

    Raises:
        PartFormatError: not a part rxgraph keeps, or malformed.
    """
    kind = part.get("type")
    if kind == "text":
        _only(part, "text")
        return TextPart(text=_part_str(part, "text"), prompt_cache_breakpoint=_breakpoint(part))
    if kind == "refusal":
        _only(part, "refusal", cache=False)
        return RefusalPart(refusal=_part_str(part, "refusal"))
    if kind == "image_url":
        _only(part, "image_url")
        image = _inner(part, "image_url", ("url", "detail"))
        detail = image.get("detail")
        if detail is not None and detail not in ("auto", "low", "high", "original"):
            raise PartFormatError(f"'image_url.detail' must be 'auto', 'low', 'high' or 'original', got {detail!r}")
        return ImagePart(
            url=_part_str(image, "url", "image_url."), detail=detail, prompt_cache_breakpoint=_breakpoint(part)
        )
    if kind == "input_audio":
        _only(part, "input_audio")
        audio = _inner(part, "input_audio", ("data", "format"))
        audio_format = audio.get("format")
        if audio_format not in ("wav", "mp3"):
            raise PartFormatError(f"'input_audio.format' must be 'wav' or 'mp3', got {audio_format!r}")
        return AudioPart(
            data=_part_str(audio, "data", "input_audio."),
            format=audio_format,
            prompt_cache_breakpoint=_breakpoint(part),
        )
    if kind == "file":
        _only(part, "file")
        file = _inner(part, "file", _FILE_KEYS)
        for key, value in file.items():
            if not isinstance(value, str):
                raise PartFormatError(f"'file.{key}' must be a string, got {type(value).__name__}")
        if "file_id" not in file and "file_data" not in file:
            raise PartFormatError("'file' needs a 'file_id' or 'file_data'")
        return FilePart(**file, prompt_cache_breakpoint=_breakpoint(part))
    raise PartFormatError(f"unknown part type {kind!r}")


def _only(part: Mapping[str, Any], key: str, *, cache: bool = True) -> None:
    """Refuse keys rxgraph would not keep: a part comes back exactly or not at all."""
    extra = [k for k in part if k != "type" and k != key and not (cache and k == "prompt_cache_breakpoint")]
    if extra:
        raise PartFormatError(f"it has {', '.join(map(repr, extra))}, which rxgraph does not keep")


def _inner(part: Mapping[str, Any], key: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    inner = part.get(key)
    if not isinstance(inner, Mapping):
        raise PartFormatError(f"{key!r} must be an object, got {type(inner).__name__}")
    extra = [k for k in inner if k not in keys]
    if extra:
        raise PartFormatError(f"{key!r} has {', '.join(map(repr, extra))}, which rxgraph does not keep")
    return inner


def _part_str(part: Mapping[str, Any], key: str, prefix: str = "") -> str:
    value = part.get(key)
    if not isinstance(value, str):
        raise PartFormatError(f"no string {prefix + key!r}")
    return value


def _breakpoint(part: Mapping[str, Any]) -> CacheBreakpoint | None:
    raw = part.get("prompt_cache_breakpoint")
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("mode") != "explicit" or not set(raw) <= {"mode", "ttl"}:
        raise PartFormatError(
            f"'prompt_cache_breakpoint' must be {{'mode': 'explicit'}} with an optional 'ttl', got {raw!r}"
        )
    ttl = raw.get("ttl")
    if "ttl" in raw and ttl not in ("30m", "12h"):
        raise PartFormatError(f"'prompt_cache_breakpoint.ttl' must be '30m' or '12h', got {ttl!r}")
    return CacheBreakpoint(ttl=ttl)


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    calls: list[ToolCall] = []
    for j, call in enumerate(_items(raw, "'tool_calls' must be a list")):
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
