"""Conversion to and from LangChain message dicts, the form LangGraph's server API carries messages in.

``to_langchain`` writes what LangChain's ``message.model_dump()`` gives (and what LangGraph's server sends);
``from_langchain`` reads those dumps, LangChain's message objects themselves, LangChain's serialized constructor
form (``langchain_core.load.dumpd``), ``messages_to_dict`` entries, and OpenAI-style entries, which clients mix
freely. What each side keeps:

===============================  ===============================  ===============================================
LangChain                        rxgraph                          why
===============================  ===============================  ===============================================
``type`` ``system`` with         ``SystemMessage(role=           what langchain-openai writes for a developer
``additional_kwargs.             "developer")``, both ways        message; a ``developer`` type is read as well
__openai_role__: "developer"``
``tool_calls[].args`` (an        ``ToolCall.arguments``: the      LangChain holds arguments parsed; rxgraph holds
object)                          object re-serialized with        the text. Text that is an object written as
                                 ``json.dumps(args,               ``json.dumps`` writes it (the usual case) comes
                                 ensure_ascii=False)``            back unchanged; other spacing or key repeats
                                                                  come back normalised
``invalid_tool_calls``           a ``ToolCall`` whose             arguments that are not a JSON object (broken
(``args``: the raw text)         ``arguments`` is that text,      JSON, a list, ``NaN``) cannot be parsed, so they
                                 both ways                        travel as LangChain's own "invalid" calls
``additional_kwargs.tool_calls`` the order of the calls, when     LangChain keeps valid and invalid calls apart;
(OpenAI's form)                  some are invalid, both ways      the calls as OpenAI sends them (where
                                                                  langchain-openai used to keep them) say their
                                                                  order, so the round trip is exact
``usage_metadata``               ``AssistantMessage.usage``,      input, output and total tokens; the token
                                 both ways                        details LangChain may add are not kept
``additional_kwargs.refusal``    ``AssistantMessage.refusal``,    where langchain-openai puts a refusal
                                 both ways
``additional_kwargs.             refused (``MessageFormatError``) where langchain-openai puts OpenAI's legacy
function_call`` and                                               ``function_call`` and an audio answer, which
``additional_kwargs.audio``                                       ``from_openai`` refuses too
``status: "error"``              ``ToolMessage.is_error``,        the same fact under two names
                                 both ways
``name``                         ``.name``, both ways             every LangChain message has one
``id``                           written by ``message_ids`` (or   rxgraph messages carry no id; see
                                 ``ids``), not read               ``message_ids``
``content`` as a string          ``.content``, the same string    as it came
``content`` as a list of blocks  ``.content``: a tuple of parts,  written as the OpenAI-style blocks LangChain
                                 in order, both ways              passes to OpenAI models (``{"type":
                                                                  "image_url", ...}``, ``input_audio``, ``file``,
                                                                  ``refusal``); read from those, from plain
                                                                  strings (text parts) and from LangChain's
                                                                  standard blocks (below). Which role may hold
                                                                  which part is as ``from_openai`` has it
standard ``image`` block         ``ImagePart``: its ``url``, or   LangChain's provider-neutral form (v1, and v0's
(``url``, or ``base64`` with     a ``data:`` URL of the base64    ``source_type``/``data``); an image by
``mime_type``)                   data                             ``file_id`` is refused (the API has none)
standard ``audio`` block         ``AudioPart``, ``format`` from   ``audio/wav`` or ``audio/mpeg``; others refused
(``base64``, ``mime_type``)      the MIME type
standard ``file`` block          ``FilePart``: ``file_id``, or    as the API takes a file; ``filename`` from the
(``file_id``, or ``base64``      ``file_data`` as a ``data:``     block (or its ``extras``/``metadata``)
with ``mime_type``)              URL
other blocks (``reasoning``,     refused (``MessageFormatError``) no Chat Completions message holds them; a
``tool_use``, ``text-plain``,                                     block's ``id`` and ``index`` (LangChain's
``video``...)                                                     bookkeeping) are not content and not kept
``content: ""``                  ``content=""``; ``None`` (an     LangChain has no null content
                                 assistant's null) is written
                                 ``""``, and comes back ``""``
type ``remove``, ``function``,   refused                          rxgraph histories are append-only; function
``chat`` without a ``role``      (``MessageFormatError``)         messages are superseded by tool messages
``response_metadata``,           ignored                          nothing rxgraph keeps; a tool's ``artifact`` is
``artifact``, ``example``,                                        never shown to the model
``tool_call_chunks``, other
``additional_kwargs``, ...
===============================  ===============================  ===============================================
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel, ValidationError

from rxgraph.errors import InvalidArgumentError, InvalidTypeError, MessageFormatError
from rxgraph.messages._openai import (
    AUDIO_ANSWER,
    LEGACY_FUNCTION_CALL,
    PartFormatError,
    from_openai,
    parse_part,
    render_part,
    to_openai,
)
from rxgraph.messages._parts import AudioPart, FilePart, ImagePart, TextPart
from rxgraph.messages._types import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["HistoryWriter", "from_langchain", "message_ids", "next_message_id", "to_langchain"]


def to_langchain(messages: Sequence[Message], *, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Render messages as LangChain message dicts, as ``message.model_dump()`` gives them (see the module's table).

    Every dict has ``type`` (``"system"``, ``"human"``, ``"ai"`` or ``"tool"``), ``content``, ``id``, ``name``,
    ``additional_kwargs`` and ``response_metadata``; an ``ai`` dict adds ``tool_calls``, ``invalid_tool_calls``
    and ``usage_metadata``, a ``tool`` dict ``tool_call_id``, ``artifact`` and ``status``.

    Args:
        messages: rxgraph messages, in order.
        ids: the message ids to write, one per message. By default, the ids ``message_ids(messages)`` gives them
            (``messages`` taken as a whole history).

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
        InvalidArgumentError: ``ids`` does not have one id per message.
    """
    if ids is not None and (isinstance(ids, str) or len(ids) != len(messages)):
        count = "a string" if isinstance(ids, str) else f"{len(ids)} ids"
        raise InvalidArgumentError(
            f"ids: got {count} for {len(messages)} messages; give a sequence with one id per message",
            argument="ids",
        )
    written = ids if ids is not None else message_ids(messages)
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        _check_message(i, message)
        out.append(_entry(message, written[i]))
    return out


def message_ids(history: Sequence[Message]) -> list[str]:
    """Deterministic ids for the messages of a history, one per message.

    rxgraph messages carry no id, but a client of LangGraph's API (``useStream``, for one) keys the messages it
    shows by id, and merges a message it is sent in pieces while a model streams it with the whole message it is
    sent afterwards. So an id is known as soon as the message begins, and names its place in its history:

    - an assistant message, at position ``i``: ``"{i}-{digest}"`` of the messages before it (a model's answer is
      named before it is whole);
    - a tool message that answers a call of an assistant message before it: ``"tool-{digest}"`` of that assistant
      message's id and the call's id (tools finish in any order; their answers' ids do not depend on it);
    - any other message (the user's, a system message), at position ``i``: ``"{i}-{digest}"`` of the messages
      before it and of itself.

    The same history always gives the same ids; two histories (two branches of a thread) that differ before a
    position give different ids from there on, and so do two that differ in the user's message at a position (an
    edited message is another message). Two answers of the model to the same history (a regenerated answer) share
    their id, as they share their place. A ``digest`` is 16 hex digits of SHA-256; a message counts by its
    role and every field not at its default (``usage``, a tool message's ``name`` and ``is_error`` included).
    ``next_message_id`` gives the id of the message that comes next, before it is whole.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    return _walk(history)[0]


def next_message_id(history: Sequence[Message], *, tool_call_id: str | None = None) -> str:
    """The id ``message_ids`` gives the assistant message that follows ``history`` — a model's answer while it
    streams — or, with ``tool_call_id``, the tool message that answers that call (wherever it lands among the
    call's siblings).

    Raises:
        InvalidTypeError: an element of ``history`` is not an rxgraph message.
    """
    _, chain, callers = _walk(history)
    if tool_call_id is not None and tool_call_id in callers:
        return f"tool-{_digest(callers[tool_call_id], tool_call_id)}"
    return f"{len(history)}-{_digest('at', chain)}"


def _walk(history: Sequence[Message]) -> tuple[list[str], str, dict[str, str]]:
    """The ids of ``history``'s messages, the digest of all of it, and the assistant message id of each call."""
    ids: list[str] = []
    chain = ""
    callers: dict[str, str] = {}  # call id -> the id of the assistant message that made the call
    for i, message in enumerate(history):
        _check_message(i, message)
        ids.append(_id_after(chain, i, callers, message))
        if isinstance(message, AssistantMessage):
            callers.update((call.id, ids[-1]) for call in message.tool_calls)
        chain = _digest(chain, ids[-1], _canonical(message))
    return ids, chain, callers


def _id_after(chain: str, index: int, callers: Mapping[str, str], message: Message) -> str:
    if isinstance(message, ToolMessage) and message.tool_call_id in callers:
        return f"tool-{_digest(callers[message.tool_call_id], message.tool_call_id)}"
    if isinstance(message, AssistantMessage | ToolMessage):
        return f"{index}-{_digest('at', chain)}"
    return f"{index}-{_digest('at', chain, _canonical(message))}"


class HistoryWriter:
    """``to_langchain`` and ``next_message_id`` for the successive states of one history (a run's, as it grows):
    the ids and dicts of the messages it has already written, the same message objects in the same order, are
    reused, so each state costs what its new messages cost, not what the whole history does.

    ``write(history) == to_langchain(history)`` and ``next_id(history, tool_call_id=...) ==
    next_message_id(history, tool_call_id=...)`` for every history, whatever came before; a history that is not an
    extension of the last one (another branch, the same messages read back from a saver) is walked from where they
    part. The dicts of reused messages are the same objects each time: treat what ``write`` returns as read-only.
    """

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._ids: list[str] = []
        self._chains: list[str] = []  # the digest of the history up to and including each message
        self._added: list[tuple[tuple[str, str], ...]] = []  # the (call id, message id) pairs each message made
        self._entries: list[dict[str, Any] | None] = []
        self._callers: dict[str, str] = {}

    def write(self, history: Sequence[Message]) -> list[dict[str, Any]]:
        """``to_langchain(history)``.

        Raises:
            InvalidTypeError: an element is not an rxgraph message.
        """
        n = self._walk(history)
        entries = self._entries
        for i in range(n):
            if entries[i] is None:
                entries[i] = _entry(self._messages[i], self._ids[i])
        return cast(list[dict[str, Any]], entries[:n])

    def ids(self, history: Sequence[Message]) -> list[str]:
        """``message_ids(history)``.

        Raises:
            InvalidTypeError: an element is not an rxgraph message.
        """
        return self._ids[: self._walk(history)]

    def next_id(self, history: Sequence[Message], *, tool_call_id: str | None = None) -> str:
        """``next_message_id(history, tool_call_id=tool_call_id)``.

        Raises:
            InvalidTypeError: an element is not an rxgraph message.
        """
        n = self._walk(history)
        if tool_call_id is not None:
            callers = (
                self._callers
                if n == len(self._messages)
                else {call: message for added in self._added[:n] for call, message in added}
            )
            if tool_call_id in callers:
                return f"tool-{_digest(callers[tool_call_id], tool_call_id)}"
        return f"{n}-{_digest('at', self._chains[n - 1] if n else '')}"

    def _walk(self, history: Sequence[Message]) -> int:
        """Bring what is known up to ``history`` (a prefix of what was seen changes nothing); its length."""
        seen = self._messages
        keep, limit = 0, min(len(history), len(seen))
        while keep < limit and history[keep] is seen[keep]:
            keep += 1
        if keep == len(history):
            return keep
        if keep < len(seen):  # another history from here on: forget what followed
            for kept in (self._messages, self._ids, self._chains, self._added, self._entries):
                del kept[keep:]
            self._callers = {call: message for added in self._added for call, message in added}
        chain = self._chains[-1] if self._chains else ""
        for i in range(keep, len(history)):
            message = history[i]
            _check_message(i, message)
            id_ = _id_after(chain, i, self._callers, message)
            added: tuple[tuple[str, str], ...] = ()
            if isinstance(message, AssistantMessage):
                added = tuple((call.id, id_) for call in message.tool_calls)
                self._callers.update(added)
            chain = _digest(chain, id_, _canonical(message))
            self._messages.append(message)
            self._ids.append(id_)
            self._chains.append(chain)
            self._added.append(added)
            self._entries.append(None)
        return len(history)


@functools.lru_cache(maxsize=4096)
def _canonical(message: Message) -> str:
    # Cached: a history's ids are asked for again and again as it grows (every state a server sends), and its
    # messages are immutable (and hashable by their fields, so an equal message shares the entry).
    fields = {"role": message.role, **message.model_dump(mode="json", exclude_defaults=True)}
    content = message.content
    if type(content) is tuple:  # each part with its type, which is its default
        fields["content"] = [
            {"type": part.type, **part.model_dump(mode="json", exclude_defaults=True)} for part in content
        ]
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def from_langchain(payload: Iterable[Mapping[str, Any] | BaseModel]) -> list[Message]:
    """Parse messages as a LangChain or LangGraph client sends them into rxgraph messages.

    Each entry is one of: a LangChain message object (``HumanMessage(...)``: any pydantic model is read as its
    ``model_dump()``; an rxgraph message is taken as it is); a LangChain message dict (``type``
    ``"human"``/``"user"``, ``"ai"``/``"assistant"``, ``"system"``/``"developer"``, ``"tool"``, or a chunk type
    such as ``"AIMessageChunk"``); a serialized
    constructor (``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}``); a
    ``messages_to_dict`` entry (``{"type": ..., "data": {...}}``); or an OpenAI-style entry with a ``role``, read
    as ``from_openai`` reads it. Content is a string or a list of blocks, kept as a tuple of parts (see the module's
    table). ``from_langchain(to_langchain(history)) == history`` for any history whose tool-call arguments are JSON
    objects written as ``json.dumps(..., ensure_ascii=False)`` writes them, or not JSON objects at all, and whose
    content is never ``None`` (see the module's table).

    Args:
        payload: the entries, in order.

    Raises:
        MessageFormatError: an entry is not a message rxgraph can represent (``index`` is its position): not an
            object, an unknown type, a content block its role cannot hold or rxgraph does not keep (the message names
            the block's index), a tool call without an id, an AI message's legacy ``function_call`` or ``audio``
            answer (in its ``additional_kwargs``), or a missing or mistyped field. A pydantic
            ``ValidationError`` behind it is its ``__cause__``.
    """
    messages: list[Message] = []
    for i, entry in enumerate(payload):
        if isinstance(entry, BaseModel):
            if isinstance(entry, _MESSAGE_TYPES):
                messages.append(entry)
                continue
            entry = entry.model_dump()  # a LangChain message: its dump is what to_langchain writes
        if not isinstance(entry, Mapping):
            raise MessageFormatError(f"message {i}: expected an object, got {type(entry).__name__}", index=i)
        if "role" in entry and "lc" not in entry:
            # LangChain's own convert_to_messages reads an entry with a role as OpenAI's, whatever its type
            # (a ChatMessage's dump among them).
            try:
                messages.extend(from_openai([entry]))
            except MessageFormatError as exc:
                detail = str(exc).removeprefix("message 0: ")
                raise MessageFormatError(f"message {i}: {detail}", index=i) from exc.__cause__
            continue
        try:
            messages.append(_parse_entry(entry))
        except ValidationError as exc:
            details = "; ".join(_format_error(error) for error in exc.errors())
            raise MessageFormatError(f"message {i}: {details}", index=i) from exc
        except _EntryError as exc:
            raise MessageFormatError(f"message {i}: {exc}", index=i) from None
    return messages


_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def _check_message(index: int, message: object) -> None:
    if not isinstance(message, _MESSAGE_TYPES):
        raise InvalidTypeError(
            f"message {index}: expected an rxgraph message, got {type(message).__name__}", argument="messages"
        )


_TYPE_OF_ROLE = {"system": "system", "developer": "system", "user": "human", "assistant": "ai", "tool": "tool"}


def _entry(message: Message, id_: str) -> dict[str, Any]:
    content: Any = message.content
    if type(content) is not str:
        content = "" if content is None else [render_part(part) for part in content]
    entry: dict[str, Any] = {
        "content": content,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": _TYPE_OF_ROLE[message.role],
        "name": message.name,
        "id": id_,
    }
    if isinstance(message, SystemMessage):
        if message.role == "developer":
            # What langchain-openai writes for a developer message (and reads back as one).
            entry["additional_kwargs"]["__openai_role__"] = "developer"
    elif isinstance(message, AssistantMessage):
        if message.refusal is not None:
            entry["additional_kwargs"]["refusal"] = message.refusal
        entry["tool_calls"], entry["invalid_tool_calls"] = _render_calls(message.tool_calls)
        if entry["invalid_tool_calls"]:
            # LangChain lists valid and invalid calls apart; the calls as OpenAI has them keep their order.
            entry["additional_kwargs"]["tool_calls"] = to_openai([message])[0]["tool_calls"]
        usage = message.usage
        entry["usage_metadata"] = (
            None
            if usage is None
            else {
                "input_tokens": usage.prompt_tokens,
                "output_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            }
        )
    elif isinstance(message, ToolMessage):
        entry.update(
            tool_call_id=message.tool_call_id,
            artifact=None,
            status="error" if message.is_error else "success",
        )
    return entry


def _render_calls(calls: Sequence[ToolCall]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    valid: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for call in calls:
        try:
            args = _parse_arguments(call.arguments)
        except _InvalidArguments as exc:
            invalid.append(
                {
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": f"arguments are not a JSON object: {exc}",
                    "type": "invalid_tool_call",
                }
            )
        else:
            valid.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
    return valid, invalid


class _InvalidArguments(Exception):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _InvalidArguments(f"{text} is out of range")
    return value


def _not_a_number(text: str) -> Any:
    raise _InvalidArguments(f"{text} is not a JSON value")


def _parse_arguments(text: str) -> dict[str, Any]:
    """The arguments as an object, as strict JSON has it (no ``NaN``: the dict is sent on as JSON)."""
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_not_a_number)
    except (ValueError, RecursionError) as exc:
        raise _InvalidArguments(str(exc) or type(exc).__name__) from None
    if not isinstance(value, dict):
        raise _InvalidArguments(f"got a JSON {type(value).__name__}")
    return value


class _EntryError(Exception):
    pass


def _format_error(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else str(error["msg"])


_TYPES = {
    "human": "user",
    "user": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "AIMessageChunk": "assistant",
    "system": "system",
    "SystemMessageChunk": "system",
    "developer": "developer",
    "tool": "tool",
    "ToolMessageChunk": "tool",
}
_CLASSES = {
    "HumanMessage": "user",
    "HumanMessageChunk": "user",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "SystemMessage": "system",
    "SystemMessageChunk": "system",
    "ToolMessage": "tool",
    "ToolMessageChunk": "tool",
}
_UNSUPPORTED = {
    "remove": "a RemoveMessage cannot be kept: rxgraph histories are append-only",
    "function": "function messages are not supported; use 'tool' messages with tool_call_id",
    "FunctionMessageChunk": "function messages are not supported; use 'tool' messages with tool_call_id",
    "chat": "a chat message needs a 'role'",
    "ChatMessageChunk": "a chat message needs a 'role'",
}


def _parse_entry(entry: Mapping[str, Any]) -> Message:
    kind = entry.get("type")
    if entry.get("lc") == 1 and kind == "constructor":
        path = entry.get("id")
        name = path[-1] if isinstance(path, list) and path else None
        if name not in _CLASSES:
            raise _EntryError(f"serialized class {name!r} is not a message class rxgraph reads")
        kwargs = entry.get("kwargs")
        if not isinstance(kwargs, Mapping):
            raise _EntryError(f"'kwargs' must be an object, got {type(kwargs).__name__}")
        return _parse_fields(_CLASSES[name], kwargs)
    if "data" in entry and "content" not in entry:  # a messages_to_dict entry
        data = entry["data"]
        if not isinstance(data, Mapping):
            raise _EntryError(f"'data' must be an object, got {type(data).__name__}")
        entry = data if "type" in data else {**data, "type": kind}
        kind = entry["type"]
    if kind is None:
        raise _EntryError("missing 'type' (a LangChain message) or 'role' (an OpenAI message)")
    if isinstance(kind, str) and kind in _UNSUPPORTED:
        raise _EntryError(_UNSUPPORTED[kind])
    if not isinstance(kind, str) or kind not in _TYPES:
        raise _EntryError(f"unknown type {kind!r}")
    return _parse_fields(_TYPES[kind], entry)


def _parse_fields(kind: str, fields: Mapping[str, Any]) -> Message:
    content = _content(fields, kind)
    name = _optional_str(fields, "name")
    extra = fields.get("additional_kwargs")
    if extra is None:
        extra = {}
    elif not isinstance(extra, Mapping):
        raise _EntryError(f"'additional_kwargs' must be an object, got {type(extra).__name__}")
    if kind == "system" or kind == "developer":
        developer = kind == "developer" or extra.get("__openai_role__") == "developer"
        return SystemMessage(role="developer" if developer else "system", content=content, name=name)
    if kind == "user":
        return UserMessage(content=content, name=name)
    if kind == "assistant":
        # Where langchain-openai keeps what OpenAI's message had: refused as from_openai refuses it, never dropped.
        if extra.get("function_call") is not None:
            raise _EntryError(LEGACY_FUNCTION_CALL.format(key="'additional_kwargs.function_call'"))
        if extra.get("audio") is not None:
            raise _EntryError(AUDIO_ANSWER.format(key="'additional_kwargs.audio'"))
        return AssistantMessage(
            content=content,
            tool_calls=_tool_calls(fields, extra.get("tool_calls")),
            refusal=_optional_str(extra, "refusal", where="'additional_kwargs.refusal'"),
            name=name,
            usage=_usage(fields.get("usage_metadata")),
        )
    status = fields.get("status")
    if status not in (None, "success", "error"):
        raise _EntryError(f"'status' must be 'success' or 'error', got {status!r}")
    tool_call_id = fields.get("tool_call_id")
    if not isinstance(tool_call_id, str):
        raise _EntryError(f"'tool_call_id' must be a string, got {type(tool_call_id).__name__}")
    return ToolMessage(tool_call_id=tool_call_id, content=content, name=name, is_error=status == "error")


def _optional_str(fields: Mapping[str, Any], key: str, *, where: str | None = None) -> str | None:
    value = fields.get(key)
    if value is not None and not isinstance(value, str):
        raise _EntryError(f"{where or repr(key)} must be a string or null, got {type(value).__name__}")
    return value


# The blocks each kind of message may hold: the parts the API's types allow for its role.
_KIND_PARTS = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "tool": frozenset({"text"}),
    "user": frozenset({"text", "image", "audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
}
_HOLDS = {
    "system": "text only",
    "developer": "text only",
    "tool": "text only (the API's tool messages hold no images)",
    "user": "text, images, audio and files",
    "assistant": "text and refusals",
}
_OPENAI_KINDS = {"text": "text", "refusal": "refusal", "image_url": "image", "input_audio": "audio"}
# What LangChain adds to a block about the block, not its content (and empty lists of annotations, extras).
_BOOKKEEPING = ("id", "index")
_AUDIO_FORMATS: dict[str, Literal["wav", "mp3"]] = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _content(fields: Mapping[str, Any], kind: str) -> Any:
    """The content of a LangChain message: a string, or a tuple of the parts its kind may hold."""
    content = fields.get("content")
    if type(content) is str:
        return content
    if not isinstance(content, list | tuple):
        raise _EntryError(f"'content' must be a string or a list of content blocks, got {type(content).__name__}")
    allowed = _KIND_PARTS[kind]
    parts: list[Any] = []
    for j, block in enumerate(content):
        if isinstance(block, str):  # LangChain's content lists may hold plain strings
            part: Any = TextPart(text=block)
        elif not isinstance(block, Mapping):
            raise _EntryError(f"content block {j} must be a string or an object, got {type(block).__name__}")
        else:
            try:
                part = _block(block)
            except PartFormatError as exc:
                raise _EntryError(f"content block {j} (type {block.get('type')!r}): {exc}") from exc.__cause__
        if part.type not in allowed:
            role = "system" if kind == "developer" else kind
            raise _EntryError(
                f"content block {j} is {'an' if part.type == 'image' else 'a'} {part.type} part, which a {role} "
                f"message cannot hold: the API takes {_HOLDS[kind]} there"
            )
        parts.append(part)
    return tuple(parts)


def _block(block: Mapping[str, Any]) -> Any:
    """The part of one LangChain content block: OpenAI-style (what ``to_langchain`` writes) or standard."""
    kind = block.get("type")
    if any(key in block for key in _BOOKKEEPING) or block.get("annotations") == [] or block.get("extras") == {}:
        block = {
            key: value
            for key, value in block.items()
            if key not in _BOOKKEEPING and not (key in ("annotations", "extras") and not value)
        }
    if kind == "image_url" and isinstance(block.get("image_url"), str):  # LangChain's own short form
        block = {**block, "image_url": {"url": block["image_url"]}}
    if kind in _OPENAI_KINDS or (kind == "file" and "file" in block):
        return parse_part(block)
    if kind == "image":
        return ImagePart(url=_standard_source(block, "image", ("url",)))
    if kind == "audio":
        data = _standard_source(block, "audio", ())
        mime = block.get("mime_type")
        if mime not in _AUDIO_FORMATS:
            raise PartFormatError(f"an audio block needs a 'mime_type' of audio/wav or audio/mpeg, got {mime!r}")
        return AudioPart(data=data.partition(",")[2], format=_AUDIO_FORMATS[mime])
    if kind == "file":
        if isinstance(block.get("file_id"), str) and not _has_data(block):
            return FilePart(file_id=block["file_id"], filename=_filename(block))
        return FilePart(file_data=_standard_source(block, "file", ()), filename=_filename(block))
    raise PartFormatError("no Chat Completions message holds such a block, so rxgraph cannot keep it")


def _has_data(block: Mapping[str, Any]) -> bool:
    return "base64" in block or "data" in block or "url" in block


def _standard_source(block: Mapping[str, Any], what: str, by_url: tuple[str, ...]) -> str:
    """The URL of a standard block's content: its ``url`` (where ``by_url`` allows), or a ``data:`` URL of its
    base64 data and ``mime_type`` (v1's ``base64``, v0's ``data`` with ``source_type: "base64"``)."""
    url = block.get("url")
    if url is not None:
        if "url" not in by_url or not isinstance(url, str):
            raise PartFormatError(f"an {what} by URL cannot be sent in a chat message; send its data (base64)")
        return url
    data = block.get("base64", block.get("data") if block.get("source_type") in ("base64", None) else None)
    if not isinstance(data, str):
        raise PartFormatError(f"an {what} block needs {'a url or ' if by_url else ''}base64 data with its mime_type")
    mime = block.get("mime_type")
    if not isinstance(mime, str) or not mime:
        raise PartFormatError(f"an {what} block with base64 data needs its 'mime_type'")
    return f"data:{mime};base64,{data}"


def _filename(block: Mapping[str, Any]) -> str | None:
    for where in (block, block.get("extras"), block.get("metadata")):
        if isinstance(where, Mapping) and isinstance(where.get("filename"), str):
            return str(where["filename"])
    return None


def _list(fields: Mapping[str, Any], key: str) -> list[Any]:
    value = fields.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise _EntryError(f"{key!r} must be a list, got {type(value).__name__}")
    return list(value)


def _call_id_and_name(key: str, j: int, call: Any, expected_type: str) -> tuple[str, str]:
    if not isinstance(call, Mapping):
        raise _EntryError(f"{key} {j} must be an object, got {type(call).__name__}")
    if call.get("type", expected_type) != expected_type:
        raise _EntryError(f"{key} {j} has type {call.get('type')!r}, not {expected_type!r}")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise _EntryError(f"{key} {j} needs a non-empty string 'id', got {call_id!r}")
    name = call.get("name")
    if not isinstance(name, str):
        raise _EntryError(f"{key} {j} needs a string 'name', got {type(name).__name__}")
    return call_id, name


def _tool_calls(fields: Mapping[str, Any], raw_calls: Any) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for j, call in enumerate(_list(fields, "tool_calls")):
        call_id, name = _call_id_and_name("tool call", j, call, "tool_call")
        args = call.get("args")
        if not isinstance(args, Mapping):
            raise _EntryError(f"tool call {j}: 'args' must be an object, got {type(args).__name__}")
        try:
            arguments = json.dumps(dict(args), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _EntryError(f"tool call {j}: 'args' cannot be written as JSON: {exc}") from None
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    for j, call in enumerate(_list(fields, "invalid_tool_calls")):
        call_id, name = _call_id_and_name("invalid tool call", j, call, "invalid_tool_call")
        args = call.get("args")
        if args is not None and not isinstance(args, str):
            raise _EntryError(f"invalid tool call {j}: 'args' must be a string or null, got {type(args).__name__}")
        calls.append(ToolCall(id=call_id, name=name, arguments=args or ""))
    return _in_order(calls, raw_calls)


def _in_order(calls: list[ToolCall], raw_calls: Any) -> tuple[ToolCall, ...]:
    """The calls in the order of ``additional_kwargs.tool_calls``, when that names exactly these calls.

    It is advice, not a field: LangChain reads only ``tool_calls`` and ``invalid_tool_calls``, so a list that
    names other calls (a client changed the calls and left it) is passed over, and the valid calls come first.
    """
    if not isinstance(raw_calls, list | tuple) or len(raw_calls) != len(calls):
        return tuple(calls)
    order = [raw.get("id") if isinstance(raw, Mapping) else None for raw in raw_calls]
    by_id = {call.id: call for call in calls}
    if len(set(order)) != len(order) or set(order) != set(by_id):
        return tuple(calls)
    return tuple(by_id[str(call_id)] for call_id in order)


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _EntryError(f"'usage_metadata.{key}' must be an integer, got {type(value).__name__}")
    return value


def _usage(usage: Any) -> TokenUsage | None:
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise _EntryError(f"'usage_metadata' must be an object or null, got {type(usage).__name__}")
    return TokenUsage(
        prompt_tokens=_count(usage, "input_tokens"),
        completion_tokens=_count(usage, "output_tokens"),
        total_tokens=_count(usage, "total_tokens"),
    )
