"""The run routes of LangGraph's server API: start a run (streamed, waited for, or in the background; on a thread
or stateless), join it, follow its stream again, read, list, cancel and delete runs.

A stream's client that goes away cancels its run when the run was started with ``on_disconnect="cancel"`` (the
default of a stream): the run is torn down and rewound before the request's handling ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTypeError,
    MessageFormatError,
    ThreadBusyError,
    UnsafeHistoryError,
)
from ._api_requests import RunCreate
from ._registry import RunRecord, ThreadRecord, live, shown_status
from ._relay import CancelAction
from ._runs import ActiveRun
from ._service import Refusal, Service, answer, refuse
from ._sse import EventStream
from ._wire import run_json, wire

__all__ = ["run_routes", "sse_bytes"]

_REFUSED = (MessageFormatError, InvalidArgumentError, InvalidTypeError, InvalidConfigError, UnsafeHistoryError)
"""What a run's request can be wrong with (the input, the config, a history the sequence rules refuse): 422."""

_POLL = 0.25
"""Seconds between looks at the record of a run another process executes (for ``join``)."""


def run_routes(service: Service, ping: float) -> list[Route]:
    runs = _Runs(service, ping)
    return [
        Route("/threads/{thread_id}/runs/stream", _Asgi(runs.stream), methods=["POST"]),
        Route("/threads/{thread_id}/runs/wait", _Asgi(runs.wait), methods=["POST"]),
        Route("/threads/{thread_id}/runs", runs.create, methods=["POST"]),
        Route("/threads/{thread_id}/runs", runs.list, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}", runs.get, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}", runs.delete, methods=["DELETE"]),
        Route("/threads/{thread_id}/runs/{run_id}/join", runs.join, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}/stream", _Asgi(runs.join_stream), methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}/cancel", runs.cancel, methods=["POST"]),
        Route("/runs/stream", _Asgi(runs.stream), methods=["POST"]),
        Route("/runs/wait", _Asgi(runs.wait), methods=["POST"]),
        Route("/runs", runs.create, methods=["POST"]),
    ]


class _Asgi:
    """A route handled as a plain ASGI app (``handler(request, send)``), so that one ``try``/``finally`` owns a run
    from its start to its teardown, whatever ends the request; a ``Refusal`` is answered as its status."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            await self._handler(request, send)
        except Refusal as refusal:
            await answer({"detail": refusal.detail}, refusal.status)(scope, receive, send)


class _Runs:
    def __init__(self, service: Service, ping: float) -> None:
        self.s = service
        self._ping = ping

    async def _start(self, request: Request) -> tuple[ActiveRun, RunCreate]:
        identity = await self.s.identity(request)
        body = await self.s.body(request, RunCreate, empty_ok=False)
        target = self.s.target(body.assistant_id)
        asked = request.path_params.get("thread_id")
        thread_id = asked if asked is not None else str(uuid.uuid4())  # a stateless run's thread is its own
        temporary = asked is None and body.on_completion == "delete"
        if not thread_id.strip():
            raise refuse(422, "thread_id: a thread id must be a non-empty string, not blank")
        made: list[str] = []  # the thread, when made for this run: removed again if the run is refused

        def find_thread() -> None:
            # In the trip off the loop that writes the run's record: a run's start waits for one worker thread.
            if self._thread_for(asked, thread_id, identity, body, target.name):
                made.append(thread_id)

        try:
            run = await self.s.runs.start(target, thread_id, body, identity, temporary=temporary, prepare=find_thread)
        except BaseException as error:
            if made:
                with anyio.CancelScope(shield=True):
                    await run_in_threadpool(self.s.registry.delete_thread, made[0])
            if isinstance(error, ThreadBusyError):
                raise refuse(409, str(error)) from None
            if isinstance(error, _REFUSED):
                raise refuse(422, f"{type(error).__name__}: {error}") from None
            raise
        return run, body

    def _thread_for(
        self, asked: str | None, thread_id: str, identity: str | None, body: RunCreate, graph_id: str
    ) -> bool:
        """Find or make the thread a run goes on (blocking); whether it was made for this run: a stateless run's own
        (``asked`` None); the caller's; or, with ``if_not_exists="create"``, a new one.

        Raises:
            Refusal: 404 (no such thread of the caller's), 409 (its id is taken).
        """
        registry = self.s.registry
        made = ThreadRecord(thread_id, identity, {"graph_id": graph_id})
        if asked is None:
            registry.create_thread(made)
            return True
        # With "create", made first: a new thread (the usual case) costs one write, not a search of the records and
        # of the saver's threads.
        if body.if_not_exists == "create" and registry.create_thread(made) is not None:
            return True
        record = self.s.find_thread(thread_id, identity)
        if record is None:
            if body.if_not_exists != "create":
                raise refuse(404, f"thread {thread_id!r} not found")
            raise refuse(409, f"thread {thread_id!r} already exists")  # someone else's: not this caller's to run on
        if record.metadata.get("graph_id") != graph_id:
            registry.update_thread(thread_id, {"graph_id": graph_id})
        return False

    def _where(self, run: ActiveRun) -> dict[str, str]:
        base = f"/threads/{run.thread_id}/runs/{run.run_id}"
        return {"Location": f"{base}/stream", "Content-Location": base}

    async def stream(self, request: Request, send: Send) -> None:
        run, body = await self._start(request)
        cancel = (body.on_disconnect or "cancel") == "cancel"
        await self._follow(request, send, run, after=0, modes=None, cancel_on_disconnect=cancel)

    async def join_stream(self, request: Request, send: Send) -> None:
        """Follow a run's stream: from its first event, or after the one ``Last-Event-ID`` names (``-1``: from the
        first too). A run another process executes is followed through the relay."""
        record = await self._record(request)
        last = request.headers.get("last-event-id")
        after = 0 if last is None or last.strip() == "-1" else _event_number(last)
        modes = [m for m in request.query_params.getlist("stream_mode") if m] or None
        cancel = request.query_params.get("cancel_on_disconnect", "false").lower() in ("true", "1")
        run = self.s.runs.get(record.run_id)
        if run is not None:
            await self._follow(request, send, run, after=after, modes=modes, cancel_on_disconnect=cancel)
            return
        if not self.s.relay.shared:
            raise refuse(404, f"run {record.run_id!r} is not executing on this server, and its events are gone")
        base = f"/threads/{record.thread_id}/runs/{record.run_id}"
        response = EventStream(
            _sse(self._remote(record, after), modes),
            ping=self._ping,
            headers={"Location": f"{base}/stream", "Content-Location": base},
        )
        try:
            await response(request.scope, request.receive, send)
        finally:
            if cancel:
                self.s.relay.request_cancel(record.run_id, "interrupt")

    async def _remote(self, record: RunRecord, after: int) -> AsyncIterator[list[tuple[int, str, str]]]:
        """The events of a run another process executes, numbered above ``after``, as the relay brings them (each
        read's events together)."""
        relay = self.s.relay
        relay.request_follow(record.run_id)
        number = after
        while True:
            changed = relay.changed(record.run_id)
            events, ended = await run_in_threadpool(relay.read, record.run_id, number)
            if events:
                number = events[-1][0]
                yield events
            if ended:
                return
            with anyio.move_on_after(_POLL * 4):
                await changed.wait()
            if changed.is_set():
                continue
            # Quiet: the run may have ended in a process that is gone (its events never close). Its record says.
            found = await run_in_threadpool(self.s.registry.get_run, record.run_id)
            if found is None or not live(found):
                events, ended = await run_in_threadpool(relay.read, record.run_id, number)
                if events:
                    yield events
                return

    async def _follow(
        self,
        request: Request,
        send: Send,
        run: ActiveRun,
        *,
        after: int,
        modes: list[str] | None,
        cancel_on_disconnect: bool,
    ) -> None:
        try:
            response = EventStream(_sse(run.log.follow(after), modes), ping=self._ping, headers=self._where(run))
            await response(request.scope, request.receive, send)
        finally:
            if cancel_on_disconnect and not run.ended.is_set():
                self.s.runs.cancel(run)
                await self.s.runs.wait(run)  # shielded: the rewind has landed before this request ends

    async def wait(self, request: Request, send: Send) -> None:
        run, body = await self._start(request)
        cancel = body.on_disconnect == "cancel"
        try:
            gone = await _ended_or_gone(run, request.receive)
            if gone:
                return
            await answer(await self._result(run), headers=self._where(run))(request.scope, request.receive, send)
        finally:
            if cancel and not run.ended.is_set():
                self.s.runs.cancel(run)
                await self.s.runs.wait(run)

    async def _result(self, run: ActiveRun) -> Any:
        """What ``wait`` and ``join`` answer: the run's last values (with ``__interrupt__`` when it stopped for a
        human), or ``{"__error__": ...}`` for a run that failed."""
        if run.error is not None:
            return {"__error__": run.error}
        if run.values is not None:
            return run.values
        if run.temporary:
            return {}
        return await self._thread_values(run.thread_id)

    async def _thread_values(self, thread_id: str) -> Any:
        record = await self.s.thread(thread_id, None) if self.s.auth is None else None
        target = self.s.graph_for(record) if record is not None else next(iter(self.s.targets.values()))
        snapshot = await run_in_threadpool(self.s.snapshot, target, thread_id)
        return wire(dict(snapshot.values))

    async def create(self, request: Request) -> Response:
        run, _ = await self._start(request)
        return answer(run_json(run.record), headers=self._where(run))

    async def _record(self, request: Request) -> RunRecord:
        identity = await self.s.identity(request)
        thread = await self.s.thread(request.path_params["thread_id"], identity)
        run_id = request.path_params["run_id"]
        local = self.s.runs.get(run_id)
        record = local.record if local is not None else await run_in_threadpool(self.s.registry.get_run, run_id)
        if record is None or record.thread_id != thread.thread_id:
            raise refuse(404, f"run {run_id!r} not found in thread {thread.thread_id!r}")
        return record

    async def get(self, request: Request) -> Response:
        return answer(run_json(await self._record(request)))

    async def list(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        thread = await self.s.thread(request.path_params["thread_id"], identity)
        try:
            limit = int(request.query_params.get("limit", "10"))
            offset = int(request.query_params.get("offset", "0"))
        except ValueError:
            raise refuse(422, "limit and offset must be whole numbers") from None
        status = request.query_params.get("status")
        records = await run_in_threadpool(self.s.registry.runs, thread.thread_id)
        records = [r for r in records if status is None or shown_status(r) == status]
        return answer([run_json(r) for r in records[offset : offset + limit]])

    async def join(self, request: Request) -> Response:
        record = await self._record(request)
        run = self.s.runs.get(record.run_id)
        if run is not None:
            await run.ended.wait()
            return answer(await self._result(run))
        while live(record):  # executing in another process: its record says when it ends (or that it died)
            await asyncio.sleep(_POLL)
            found = await run_in_threadpool(self.s.registry.get_run, record.run_id)
            if found is None:
                break
            record = found
        return answer(await self._thread_values(record.thread_id))

    async def cancel(self, request: Request) -> Response:
        record = await self._record(request)
        action = request.query_params.get("action", "interrupt")
        if action not in ("interrupt", "rollback"):
            raise refuse(422, f"action must be 'interrupt' or 'rollback', got {action!r}")
        wait = request.query_params.get("wait", "false").lower() in ("true", "1")
        chosen: CancelAction = "rollback" if action == "rollback" else "interrupt"
        run = self.s.runs.get(record.run_id)
        if run is not None:
            self.s.runs.cancel(run, chosen)
            if wait:
                await self.s.runs.wait(run)
                return Response(status_code=204)
            return Response(status_code=202)
        if not live(record):
            return Response(status_code=204)
        if not self.s.relay.shared:  # a record left by a process that stopped: nothing runs it
            raise refuse(409, f"run {record.run_id!r} is {record.status}, but no server process executes it")
        self.s.relay.request_cancel(record.run_id, chosen)
        if not wait:
            return Response(status_code=202)
        while (found := await run_in_threadpool(self.s.registry.get_run, record.run_id)) is not None:
            if not live(found):
                break
            await asyncio.sleep(_POLL)
        return Response(status_code=204)

    async def delete(self, request: Request) -> Response:
        record = await self._record(request)
        local = self.s.runs.get(record.run_id)
        if not local.ended.is_set() if local is not None else live(record):
            raise refuse(409, f"run {record.run_id!r} is {record.status}; cancel it first")
        await run_in_threadpool(self.s.registry.delete_run, record.run_id)
        self.s.runs.forget(record.run_id)
        return Response(status_code=204)


def _event_number(text: str) -> int:
    try:
        return max(int(text.strip()), 0)
    except ValueError:
        raise refuse(422, f"Last-Event-ID must be an event's number, got {text!r}") from None


async def _sse(batches: AsyncIterator[list[tuple[int, str, str]]], modes: list[str] | None) -> AsyncIterator[bytes]:
    """A run's events as server-sent events, those of ``modes`` only (all the run's when None); ``metadata`` and
    ``error`` always. The events of a batch (those that were there at once) go out together, as one piece of the
    response's body: one write to the socket for them all, not one each."""
    if modes is not None:
        modes = ["messages" if m == "messages-tuple" else m for m in modes]
    async for batch in batches:
        body = b"".join(
            sse_bytes(number, event, data)
            for number, event, data in batch
            if modes is None or event in ("metadata", "error") or event.split("|")[0] in modes
        )
        if body:
            yield body


def sse_bytes(number: int, event: str, data: str) -> bytes:
    """One event as ``ServerSentEvent(data=data, event=event, id=str(number)).encode()`` writes it. A run's data is
    JSON on one line (its line breaks are escaped), so it is written straight; anything with a line break goes
    through ``ServerSentEvent``, which splits it into ``data:`` lines."""
    if "\n" in data or "\r" in data or "\n" in event or "\r" in event:
        return ServerSentEvent(data=data, event=event, id=str(number)).encode()
    return f"id: {number}\r\nevent: {event}\r\ndata: {data}\r\n\r\n".encode()


async def _ended_or_gone(run: ActiveRun, receive: Receive) -> bool:
    """Wait until the run ends (False) or the client goes away (True)."""

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async with anyio.create_task_group() as group:
        result = {"gone": False}

        async def watch() -> None:
            await gone()
            result["gone"] = True
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await run.ended.wait()
        group.cancel_scope.cancel()
    return result["gone"]
