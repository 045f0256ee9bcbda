"""The thread routes of LangGraph's server API: create, get, search, update, delete a thread; read its state (at its
head or a checkpoint) and its history; write its state."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import CheckpointNotFoundError, GraphValidationError, InvalidUpdateError, RxGraphError, ThreadBusyError
from ..graph._config import RunnableConfig
from ..graph._constants import START
from ..graph._outputs import StateSnapshot
from ._api_requests import HistoryQuery, StateQuery, StateUpdate, ThreadCreate, ThreadPatch, ThreadSearch
from ._registry import ThreadRecord, live
from ._service import Service, answer, refuse, rx_refusal
from ._wire import start_json, state_json, thread_json

__all__ = ["thread_routes"]


def thread_routes(service: Service) -> list[Route]:
    threads = _Threads(service)
    return [
        Route("/threads", threads.create, methods=["POST"]),
        Route("/threads/search", threads.search, methods=["POST"]),
        Route("/threads/count", threads.count, methods=["POST"]),
        Route("/threads/{thread_id}", threads.get, methods=["GET"]),
        Route("/threads/{thread_id}", threads.patch, methods=["PATCH"]),
        Route("/threads/{thread_id}", threads.delete, methods=["DELETE"]),
        Route("/threads/{thread_id}/state", threads.state, methods=["GET"]),
        Route("/threads/{thread_id}/state", threads.update_state, methods=["POST"]),
        Route("/threads/{thread_id}/state/checkpoint", threads.state_at_body, methods=["POST"]),
        Route("/threads/{thread_id}/state/{checkpoint_id}", threads.state_at, methods=["GET"]),
        Route("/threads/{thread_id}/history", threads.history, methods=["GET", "POST"]),
    ]


class _Threads:
    def __init__(self, service: Service) -> None:
        self.s = service

    async def _view(self, record: ThreadRecord) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            target = self.s.graph_for(record)
            snapshot = self.s.snapshot(target, record.thread_id)
            return thread_json(record, self.s.status(record.thread_id, snapshot), snapshot)

        return await run_in_threadpool(read)

    async def create(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        body = await self.s.body(request, ThreadCreate)
        if body.graph_id is not None:
            self.s.target(body.graph_id)
        metadata = dict(body.metadata)
        if body.graph_id is not None:
            metadata["graph_id"] = body.graph_id
        thread_id = body.thread_id or str(uuid.uuid4())
        if not thread_id.strip():
            raise refuse(422, "thread_id: a thread id must be a non-empty string, not blank")
        created = await run_in_threadpool(self.s.registry.create_thread, ThreadRecord(thread_id, identity, metadata))
        if created is None:
            existing = await run_in_threadpool(self.s.registry.get_thread, thread_id)
            if body.if_exists == "do_nothing" and existing is not None and existing.owner == identity:
                return answer(await self._view(existing))
            raise refuse(409, f"thread {thread_id!r} already exists")
        return answer(await self._view(created))

    async def get(self, request: Request) -> Response:
        record = await self.s.thread(request.path_params["thread_id"], await self.s.identity(request))
        return answer(await self._view(record))

    async def patch(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        record = await self.s.thread(request.path_params["thread_id"], identity)
        body = await self.s.body(request, ThreadPatch)
        changed = await run_in_threadpool(self.s.registry.update_thread, record.thread_id, body.metadata)
        if changed is None:
            raise refuse(404, f"thread {record.thread_id!r} not found")
        return answer(await self._view(changed))

    async def delete(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        record = await self.s.thread(request.path_params["thread_id"], identity)
        for run in list(self.s.runs.running_on(record.thread_id)):
            self.s.runs.cancel(run)
            await self.s.runs.wait(run)
        for elsewhere in await run_in_threadpool(self.s.registry.runs, record.thread_id):
            if live(elsewhere) and self.s.runs.get(elsewhere.run_id) is None:
                self.s.relay.request_cancel(elsewhere.run_id, "interrupt")  # a run of another server process
        await run_in_threadpool(self._remove, record.thread_id)
        return Response(status_code=204)

    def _remove(self, thread_id: str) -> None:
        self.s.registry.delete_thread(thread_id)
        # A saver that keeps every checkpoint: the thread is gone from the API, its history stays stored.
        with contextlib.suppress(NotImplementedError):
            self.s.saver.delete_thread(thread_id)

    async def search(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        body = await self.s.body(request, ThreadSearch)
        return answer(await run_in_threadpool(self._search, identity, body))

    async def count(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        body = await self.s.body(request, ThreadSearch)
        found = await run_in_threadpool(self._search, identity, body.model_copy(update={"limit": 10**9, "offset": 0}))
        return answer(len(found))

    def _search(self, identity: str | None, body: ThreadSearch) -> list[dict[str, Any]]:
        records = self.s.registry.threads(identity)
        if body.ids is not None:
            wanted = set(body.ids)
            records = [r for r in records if r.thread_id in wanted]
        records = [r for r in records if all(r.metadata.get(k) == v for k, v in body.metadata.items())]
        if body.status is None and body.values is None and body.sort_by in (None, "created_at", "thread_id"):
            # Known from the records alone: only the page's threads are read.
            if body.sort_by == "thread_id":
                records.sort(key=lambda r: r.thread_id, reverse=body.sort_order != "asc")
            elif body.sort_order == "asc":
                records.reverse()
            records = records[body.offset : body.offset + body.limit]
            body = body.model_copy(update={"offset": 0, "sort_by": None})
        found = []
        for record in records:
            snapshot = self.s.snapshot(self.s.graph_for(record), record.thread_id)
            view = thread_json(record, self.s.status(record.thread_id, snapshot), snapshot)
            if body.status is not None and view["status"] != body.status:
                continue
            if body.values is not None and not all((view["values"] or {}).get(k) == v for k, v in body.values.items()):
                continue
            found.append(view)
        if body.sort_by is not None:
            found.sort(key=lambda v: str(v.get(body.sort_by or "") or ""), reverse=body.sort_order != "asc")
        page = found[body.offset : body.offset + body.limit]
        if body.select is not None:
            page = [{k: v for k, v in view.items() if k in body.select} for view in page]
        return page

    async def _state(self, request: Request, checkpoint_id: str | None) -> Response:
        identity = await self.s.identity(request)
        record = await self.s.thread(request.path_params["thread_id"], identity)
        if checkpoint_id == START:
            return answer(start_json(record.thread_id, record.created_at))
        target = self.s.graph_for(record)
        try:
            snapshot = await run_in_threadpool(self.s.snapshot, target, record.thread_id, checkpoint_id)
        except CheckpointNotFoundError:
            raise refuse(404, f"checkpoint {checkpoint_id!r} not found in thread {record.thread_id!r}") from None
        return answer(state_json(record.thread_id, snapshot))

    async def state(self, request: Request) -> Response:
        return await self._state(request, None)

    async def state_at(self, request: Request) -> Response:
        return await self._state(request, request.path_params["checkpoint_id"])

    async def state_at_body(self, request: Request) -> Response:
        body = await self.s.body(request, StateQuery, empty_ok=False)
        return await self._state(request, body.checkpoint.checkpoint_id)

    async def update_state(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        record = await self.s.thread(request.path_params["thread_id"], identity)
        body = await self.s.body(request, StateUpdate)
        target = self.s.graph_for(record)
        values = target.state_input(body.values) if body.values is not None else None
        try:
            snapshot: StateSnapshot = await run_in_threadpool(
                target.graph.update_state, RunnableConfig(thread_id=record.thread_id), values, as_node=body.as_node
            )
        except ThreadBusyError as busy:
            raise refuse(409, str(busy)) from None
        except (GraphValidationError, InvalidUpdateError) as error:
            raise rx_refusal(error) from None
        except RxGraphError as error:
            raise rx_refusal(error) from None
        return answer(
            {
                "checkpoint": {
                    "thread_id": record.thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": snapshot.checkpoint_id,
                    "checkpoint_map": None,
                }
            }
        )

    async def history(self, request: Request) -> Response:
        identity = await self.s.identity(request)
        record = await self.s.thread(request.path_params["thread_id"], identity)
        if request.method == "POST":
            body = await self.s.body(request, HistoryQuery)
        else:
            try:
                body = HistoryQuery(limit=int(request.query_params.get("limit", "10")))
            except ValueError:
                raise refuse(422, "limit: must be a whole number from 1 to 10000") from None
        return answer(await run_in_threadpool(self._history, record, body))

    def _history(self, record: ThreadRecord, body: HistoryQuery) -> list[dict[str, Any]]:
        target = self.s.graph_for(record)
        config = RunnableConfig(thread_id=record.thread_id)
        before = body.before.checkpoint_id if not isinstance(body.before, str) and body.before else body.before
        start = body.checkpoint.checkpoint_id if body.checkpoint is not None else None
        wanted = body.limit
        snapshots = target.graph.get_state_history(config, limit=None if (before or start or body.metadata) else wanted)
        out: list[dict[str, Any]] = []
        skipping = before is not None or start is not None
        for snapshot in snapshots:
            if skipping:
                if snapshot.checkpoint_id == start:
                    skipping = False
                elif snapshot.checkpoint_id == before:
                    skipping = False
                    continue
                else:
                    continue
            if body.metadata and snapshot.checkpoint is not None:
                shown = state_json(record.thread_id, snapshot)["metadata"]
                if not all(shown.get(k) == v for k, v in body.metadata.items()):
                    continue
            out.append(state_json(record.thread_id, snapshot))
            if len(out) >= wanted:
                return out
        if snapshots and snapshots[-1].checkpoint is not None and snapshots[-1].checkpoint.parent_id is None:
            out.append(start_json(record.thread_id, record.created_at))  # the walk reached the thread's start
        return out
