"""``Service``: what every route of the API shares — the served targets, the registry, the runs, who the caller is,
whose threads they may see — and the answers common to all of them (JSON, errors as ``{"detail": ...}``)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ..checkpoint._base import CheckpointSaver
from ..errors import InvalidTypeError, RxGraphError
from ..graph._config import RunnableConfig
from ..graph._outputs import StateSnapshot
from ._guard import read_body
from ._registry import Registry, ThreadRecord, live
from ._relay import Relay
from ._runs import RunManager
from ._targets import Target

__all__ = ["Auth", "Refusal", "Service", "answer", "refuse", "rx_refusal"]

_Body = TypeVar("_Body", bound=BaseModel)

Auth = Callable[[Mapping[str, str]], "str | Awaitable[str | None] | None"]
"""Who the caller is, from the request's headers: their identity, or ``None`` (401)."""


class Refusal(Exception):
    """A request answered with an error status: ``{"detail": message}``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def refuse(status: int, detail: str) -> Refusal:
    return Refusal(status, detail)


class _JSON(JSONResponse):
    """JSON as rxgraph writes it: ASCII with escapes (a streamed emoji cut in two is still sent), non-finite
    floats refused."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def answer(content: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return _JSON(content, status_code=status, headers=dict(headers) if headers else None)


@dataclass
class Service:
    """The state of one app."""

    targets: dict[str, Target]
    registry: Registry
    relay: Relay
    runs: RunManager
    auth: Auth | None
    max_body: int

    async def identity(self, request: Request) -> str | None:
        """The caller's identity (``None`` without auth).

        Raises:
            Refusal: 401, the auth function said no one.
        """
        if self.auth is None:
            return None
        found = self.auth(request.headers)
        if inspect.isawaitable(found):
            found = await found
        if found is None:
            raise refuse(401, "not authenticated")
        if not isinstance(found, str) or not found:
            raise InvalidTypeError(
                f"the auth function must return an identity (a non-empty str) or None, got {found!r}", argument="auth"
            )
        return found

    async def body(self, request: Request, model: type[_Body], *, empty_ok: bool = True) -> _Body:
        """The request's JSON body, checked.

        Raises:
            Refusal: 415 / 413 (``read_body``'s), or 422 with what is wrong.
        """
        try:
            raw = await read_body(request, max_body=self.max_body)
        except ClientDisconnect:
            raise refuse(400, "the client went away before its request was whole") from None
        if isinstance(raw, Response):
            detail = json.loads(bytes(raw.body)).get("detail", "refused")
            raise refuse(raw.status_code, detail)
        try:
            return model.model_validate_json(raw if raw.strip() or not empty_ok else b"{}")
        except ValidationError as error:
            raise refuse(422, _problems(error)) from None

    def target(self, assistant_id: str) -> Target:
        found = self.targets.get(assistant_id)
        if found is None:
            raise refuse(404, f"assistant {assistant_id!r} not found; this server has {', '.join(self.targets)}")
        return found

    @property
    def saver(self) -> CheckpointSaver:
        saver = next(iter(self.targets.values())).graph.checkpointer
        assert saver is not None
        return saver

    async def thread(self, thread_id: str, identity: str | None) -> ThreadRecord:
        """The caller's thread.

        Raises:
            Refusal: 404, no such thread, or it belongs to someone else (the same answer: a caller learns nothing
                of another's threads).
        """
        record = await self.runs.records(self.find_thread, thread_id, identity)
        if record is None:
            raise refuse(404, f"thread {thread_id!r} not found")
        return record

    def find_thread(self, thread_id: str, identity: str | None) -> ThreadRecord | None:
        """The caller's thread, or ``None`` (blocking: call it off the loop).

        Raises:
            Refusal: 422, a blank thread id.
        """
        if not thread_id.strip():
            raise refuse(422, "thread_id: a thread id must be a non-empty string, not blank")
        record = self.registry.get_thread(thread_id)
        if record is None and self.auth is None:
            record = self._adopt(thread_id)
        if record is None or (self.auth is not None and record.owner != identity):
            return None
        return record

    def _adopt(self, thread_id: str) -> ThreadRecord | None:
        """A thread with checkpoints and no record (written before the server kept records, or by another program):
        recorded now, owned by no one. Only without auth, where every caller may see every thread."""
        if self.saver.get(thread_id) is None:
            return None
        return self.registry.create_thread(ThreadRecord(thread_id, None)) or self.registry.get_thread(thread_id)

    def graph_for(self, record: ThreadRecord) -> Target:
        """The target whose graph reads a thread's state (the one that last ran on it; the first target if none)."""
        graph_id = record.metadata.get("graph_id")
        if isinstance(graph_id, str) and graph_id in self.targets:
            return self.targets[graph_id]
        return next(iter(self.targets.values()))

    def snapshot(self, target: Target, thread_id: str, checkpoint_id: str | None = None) -> StateSnapshot:
        """The thread's state (blocking: call it off the loop). Waits for a rewind in flight."""
        return target.graph.get_state(RunnableConfig(thread_id=thread_id, checkpoint_id=checkpoint_id))

    def status(self, thread_id: str, snapshot: StateSnapshot | None) -> str:
        """``busy`` while a run is pending or running on it (here, or per the live records of another process),
        ``interrupted`` while it waits for a human, ``error`` when its last run failed, ``idle`` otherwise."""
        if self.runs.busy(thread_id) or any(live(r) for r in self.registry.runs(thread_id)):
            return "busy"
        if snapshot is None or snapshot.checkpoint is None:
            return "idle"
        if snapshot.interrupts:
            return "interrupted"
        return "error" if snapshot.checkpoint.error is not None else "idle"


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors())


def rx_refusal(error: RxGraphError) -> Refusal:
    """An rxgraph error about what a client sent, as a 422."""
    return refuse(422, f"{type(error).__name__}: {error}")
