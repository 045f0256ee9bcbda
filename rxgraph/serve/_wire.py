"""What the server sends, in the shapes of LangGraph's server API: values with messages as LangChain message dicts,
a model's chunks as ``AIMessageChunk`` dicts, interrupts, thread states, threads, runs and assistants.

One rule for messages: a list of rxgraph messages anywhere in a state becomes a list of LangChain message dicts,
with the ids ``message_ids`` gives them (so a message of a thread's history has the same id in every state and every
event, and a streamed message the id it will have: ``next_message_id``), and a single message becomes one dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Any

from .._json import to_json
from ..agent._model import ChatChunk
from ..graph._constants import START
from ..graph._interrupt import PendingInterrupt
from ..graph._outputs import StateSnapshot
from ..messages._langchain import HistoryWriter, message_ids, to_langchain
from ..messages._types import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from ._registry import RunRecord, ThreadRecord, shown_status

__all__ = [
    "assistant_json",
    "chunk_json",
    "chunk_text",
    "interrupt_json",
    "run_json",
    "start_json",
    "state_json",
    "thread_json",
    "wire",
    "wire_update",
    "wire_values",
]

_MESSAGES = (AssistantMessage, SystemMessage, ToolMessage, UserMessage)


def wire(value: Any) -> Any:
    """``value`` as JSON for a client: lists of messages as LangChain message dicts, the rest as ``to_json`` shows
    it."""
    if isinstance(value, _MESSAGES):
        return to_langchain([value])[0]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray) and value:
        if all(isinstance(item, _MESSAGES) for item in value):
            return to_langchain(list(value))
        return [wire(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): wire(v) for k, v in value.items()}
    return to_json(value)


def wire_values(state: Mapping[str, Any], messages_key: str | None, writer: HistoryWriter) -> dict[str, Any]:
    """``wire(dict(state))``, with the history under ``messages_key`` written by ``writer`` (which reuses what it
    wrote for the earlier states of the same run)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key == messages_key and _is_history(value):
            out[str(key)] = writer.write(value)
        else:
            out[str(key)] = wire(value)
    return out


def _is_history(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str | bytes | bytearray)
        and all(isinstance(item, _MESSAGES) for item in value)
    )


def wire_update(update: Any, state: Mapping[str, Any], writer: HistoryWriter | None = None) -> Any:
    """A node's update as JSON. Messages it appended get the ids they have in ``state`` (the state after it):
    an appended list is the tail of the state's list. ``writer``, when given, names them (a run's own, which
    remembers the ids of its earlier states)."""
    if not isinstance(update, Mapping):
        return wire(update)
    out: dict[str, Any] = {}
    for key, value in update.items():
        whole = state.get(key)
        appended = [value] if isinstance(value, _MESSAGES) else value
        if (
            isinstance(appended, Sequence)
            and not isinstance(appended, str)
            and appended
            and all(isinstance(item, _MESSAGES) for item in appended)
            and isinstance(whole, Sequence)
            and len(whole) >= len(appended)
            and list(whole[len(whole) - len(appended) :]) == list(appended)
        ):
            ids = (writer.ids(whole) if writer is not None else message_ids(whole))[len(whole) - len(appended) :]
            written = to_langchain(list(appended), ids=ids)
            out[str(key)] = written[0] if isinstance(value, _MESSAGES) else written
        else:
            out[str(key)] = wire(value)
    return out


def chunk_json(chunk: ChatChunk, message: str) -> dict[str, Any]:
    """A model's streamed chunk as LangChain's ``AIMessageChunk`` dict; ``message`` is the id of the message it
    is a piece of."""
    return {
        "type": "AIMessageChunk",
        "id": message,
        "content": chunk.content,
        "name": None,
        "additional_kwargs": {"refusal": chunk.refusal} if chunk.refusal else {},
        "response_metadata": {"finish_reason": chunk.finish_reason} if chunk.finish_reason else {},
        "tool_calls": [],
        "invalid_tool_calls": [],
        "tool_call_chunks": [
            {"type": "tool_call_chunk", "index": d.index, "id": d.id, "name": d.name, "args": d.arguments}
            for d in chunk.tool_calls
        ],
        "usage_metadata": None
        if chunk.usage is None
        else {
            "input_tokens": chunk.usage.prompt_tokens,
            "output_tokens": chunk.usage.completion_tokens,
            "total_tokens": chunk.usage.total_tokens,
        },
    }


# A text-only chunk's JSON text, as ``json.dumps(chunk_json(...), separators=(",", ":"))`` writes it: the keys in
# chunk_json's order, the id and the content filled in (each already a JSON string).
_PLAIN_CHUNK = (
    '{{"type":"AIMessageChunk","id":{id},"content":{content},"name":null,"additional_kwargs":{{}},'
    '"response_metadata":{{}},"tool_calls":[],"invalid_tool_calls":[],"tool_call_chunks":[],"usage_metadata":null}}'
)


def chunk_text(chunk: ChatChunk, message: str) -> str:
    """``chunk_json(chunk, message)`` as compact ASCII JSON text. A chunk of text alone (most of a model's stream)
    is written straight into its shape; any other goes through ``chunk_json``, with the same text as the result."""
    if not chunk.tool_calls and chunk.usage is None and chunk.finish_reason is None and not chunk.refusal:
        return _PLAIN_CHUNK.format(id=encode_basestring_ascii(message), content=encode_basestring_ascii(chunk.content))
    return json.dumps(chunk_json(chunk, message), allow_nan=False, separators=(",", ":"))


def interrupt_json(interrupt: PendingInterrupt) -> dict[str, Any]:
    """A pending interrupt as LangGraph shows one: its ``value`` and ``id`` (``Command(resume={id: ...})`` answers
    it), and where the run stopped (``when``: ``before`` / ``after`` / ``inside`` the ``node``)."""
    return {"value": to_json(interrupt.value), "id": interrupt.id, "when": interrupt.when, "node": interrupt.node}


def _time(moment: datetime) -> str:
    return moment.isoformat()


def _checkpoint_ref(thread_id: str, checkpoint_id: str | None) -> dict[str, Any] | None:
    if checkpoint_id is None:
        return None
    return {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id, "checkpoint_map": None}


def state_json(thread_id: str, snapshot: StateSnapshot) -> dict[str, Any]:
    """A thread's state (``ThreadState``): its values, what runs next, the tasks (one per node to run, with the
    interrupts that wait on it), its checkpoint and metadata, its parent's checkpoint."""
    checkpoint = snapshot.checkpoint
    interrupts = snapshot.interrupts
    tasks = [
        {
            "id": f"{i}:{name}",
            "name": name,
            "path": ["__pregel_pull", name],
            "error": None,
            "interrupts": [interrupt_json(p) for p in interrupts if p.node == name],
            "checkpoint": None,
            "state": None,
            "result": None,
        }
        for i, name in enumerate(snapshot.next)
    ]
    metadata: dict[str, Any] = {}
    if checkpoint is not None:
        metadata = {
            "source": checkpoint.source,
            "step": checkpoint.seq,
            "writes": None,
            "parents": {},
            "run_id": checkpoint.run_id,
            "node": checkpoint.node,
            "safe": checkpoint.safe,
            "error": checkpoint.error,
        }
    return {
        "values": wire(dict(snapshot.values)),
        "next": list(snapshot.next),
        "tasks": tasks,
        "interrupts": [interrupt_json(p) for p in interrupts],
        "checkpoint": _checkpoint_ref(thread_id, snapshot.checkpoint_id)
        or {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None, "checkpoint_map": None},
        "metadata": metadata,
        "created_at": _time(checkpoint.created_at) if checkpoint is not None else None,
        # A thread's first checkpoints (its first turn's, and a fork's from its beginning) come from its start.
        "parent_checkpoint": _checkpoint_ref(
            thread_id, snapshot.parent_id if checkpoint is None or checkpoint.parent_id is not None else START
        ),
    }


def start_json(thread_id: str, created_at: datetime) -> dict[str, Any]:
    """The state a thread starts from, before its first checkpoint (LangGraph's empty first checkpoint): its
    ``checkpoint_id`` is ``START`` (``"__start__"``), which a run may start from to fork the thread from there (an
    edit of its first message)."""
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "interrupts": [],
        "checkpoint": _checkpoint_ref(thread_id, START),
        "metadata": {
            "source": "input",
            "step": 0,
            "writes": None,
            "parents": {},
            "run_id": None,
            "node": None,
            "safe": True,
            "error": None,
        },
        "created_at": _time(created_at),
        "parent_checkpoint": None,
    }


def thread_json(
    record: ThreadRecord, status: str, snapshot: StateSnapshot | None, *, values: bool = True
) -> dict[str, Any]:
    """A thread (``Thread``): its record, its status, and its head's values and interrupts."""
    interrupts: dict[str, list[dict[str, Any]]] = {}
    if snapshot is not None:
        for pending in snapshot.interrupts:
            interrupts.setdefault(f"{pending.task}:{pending.node}", []).append(interrupt_json(pending))
    head = snapshot.checkpoint if snapshot is not None else None
    return {
        "thread_id": record.thread_id,
        "created_at": _time(record.created_at),
        "updated_at": _time(max(record.updated_at, head.created_at) if head is not None else record.updated_at),
        "state_updated_at": _time(head.created_at) if head is not None else None,
        "metadata": to_json(record.metadata),
        "config": {},
        "status": status,
        "values": wire(dict(snapshot.values)) if values and snapshot is not None and head is not None else None,
        "interrupts": interrupts,
    }


def run_json(record: RunRecord) -> dict[str, Any]:
    """A run (``Run``): its ids, status, options and times."""
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "assistant_id": record.assistant_id,
        "created_at": _time(record.created_at),
        "updated_at": _time(record.updated_at),
        "status": shown_status(record),
        "metadata": to_json(record.metadata),
        "kwargs": to_json(record.kwargs),
        "multitask_strategy": record.multitask_strategy,
    }


def assistant_json(name: str, description: str | None, created_at: datetime) -> dict[str, Any]:
    """A served target as an assistant (``Assistant``): its id and graph id are its name."""
    return {
        "assistant_id": name,
        "graph_id": name,
        "name": name,
        "description": description,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "created_at": _time(created_at),
        "updated_at": _time(created_at),
    }
