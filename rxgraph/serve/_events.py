"""The events of a run's stream, each a name and a JSON payload (the package's docstring lists them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sse_starlette import ServerSentEvent

from .._json import to_json
from ..errors import ModelAPIError
from ..graph._interrupt import PendingInterrupt
from ..graph._outputs import CustomOutput, InterruptOutput, NodeOutput, RunOutput, StreamingOutput
from ..messages._openai import to_openai
from ..messages._types import Message, ToolMessage

__all__ = ["EventEncoder", "error_json", "interrupt_json"]


def error_json(error: BaseException) -> dict[str, Any]:
    """An error as the client sees it: ``type`` (the exception's class name) and ``message``; a ``ModelAPIError``
    adds the API's ``status_code`` and ``body``."""
    document: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, ModelAPIError):
        document["status_code"] = error.status_code
        document["body"] = to_json(error.body)
    return document


def interrupt_json(interrupt: PendingInterrupt) -> dict[str, Any]:
    """A pending interrupt as the client sees it: the ``node``, ``when`` it stopped, and the ``value`` it asks
    (a tool approval: ``{"kind": "tool_approval", "calls": [...]}``)."""
    return {"node": interrupt.node, "when": interrupt.when, "value": to_json(interrupt.value)}


class EventEncoder:
    """Turns one run's outputs into server-sent events. ``agent``: the run is a ``ReactAgent``'s turn, whose
    ``node`` events also carry the messages the node added, in the OpenAI wire format."""

    def __init__(self, *, thread_id: str, agent: bool) -> None:
        self.thread_id = thread_id
        self.agent = agent
        self.last_checkpoint_id: str | None = None

    def output(self, output: RunOutput) -> ServerSentEvent:
        if isinstance(output, StreamingOutput):
            return _event("chunk", {"node": output.node, "chunk": _chunk_json(output.chunk)})
        if isinstance(output, CustomOutput):
            return _event("custom", {"node": output.node, "value": to_json(output.value)})
        if isinstance(output, InterruptOutput):
            self.last_checkpoint_id = None  # an interrupt inside a node writes one more: `end` reads the head
            return _event("interrupt", {"thread_id": self.thread_id, **interrupt_json(output.interrupt)})
        assert isinstance(output, NodeOutput)
        self.last_checkpoint_id = output.checkpoint_id
        payload: dict[str, Any] = {"node": output.node, "checkpoint_id": output.checkpoint_id}
        if self.agent:
            payload["messages"] = to_openai(_added_messages(output.node, output.state.get("messages", ())))
        return _event("node", payload)

    def end(self, head_id: str | None) -> ServerSentEvent:
        return _event("end", {"thread_id": self.thread_id, "checkpoint_id": head_id})

    def error(self, error: BaseException) -> ServerSentEvent:
        return _event("error", error_json(error))


def _event(name: str, payload: Mapping[str, Any]) -> ServerSentEvent:
    # ASCII JSON: a streamed text may hold half of a surrogate pair, which UTF-8 cannot encode but JSON can escape.
    return ServerSentEvent(data=json.dumps(payload, allow_nan=False, separators=(",", ":")), event=name)


def _chunk_json(chunk: Any) -> Any:
    if isinstance(chunk, ToolMessage):
        return to_openai([chunk])[0]
    return to_json(chunk)


def _added_messages(node: str, history: Sequence[Message]) -> Sequence[Message]:
    """What a ``ReactAgent`` node added to the history: ``tools`` its tool messages (one per call of the assistant
    message before them), ``model`` its one assistant message."""
    if node != "tools":
        return history[-1:]
    start = len(history)
    while start > 0 and isinstance(history[start - 1], ToolMessage):
        start -= 1
    return history[start:]
