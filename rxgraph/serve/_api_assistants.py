"""The assistant routes of LangGraph's server API: each served target is one assistant, read-only (its
``assistant_id`` and ``graph_id`` are the target's name). Creating, changing and versioning assistants is not
served."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..graph._compiled import spec_of
from ..graph._draw import graph_json
from ._api_requests import AssistantSearch
from ._service import Service, answer
from ._targets import Target
from ._wire import assistant_json

__all__ = ["assistant_routes"]


def assistant_routes(service: Service) -> list[Route]:
    assistants = _Assistants(service)
    return [
        Route("/assistants/search", assistants.search, methods=["POST"]),
        Route("/assistants/count", assistants.count, methods=["POST"]),
        Route("/assistants/{assistant_id}", assistants.get, methods=["GET"]),
        Route("/assistants/{assistant_id}/graph", assistants.graph, methods=["GET"]),
        Route("/assistants/{assistant_id}/schemas", assistants.schemas, methods=["GET"]),
        Route("/assistants/{assistant_id}/subgraphs", assistants.subgraphs, methods=["GET"]),
        Route("/assistants/{assistant_id}/subgraphs/{namespace}", assistants.subgraphs, methods=["GET"]),
    ]


def _json(target: Target) -> dict[str, Any]:
    description = "a ReAct agent" if target.agent is not None else None
    return assistant_json(target.name, description, target.created_at)


def _schema(target: Target, keys: frozenset[str] | None) -> dict[str, Any]:
    """A JSON schema of the state's keys (``keys``: only those): a pydantic state's own schema, else an object whose
    properties are the declared keys; an agent's state is its ``messages``."""
    if target.agent is not None:
        messages = {"type": "array", "items": {"type": "object"}, "description": "LangChain message dicts"}
        return {"title": target.name, "type": "object", "properties": {"messages": messages}}
    schema = spec_of(target.graph).schema
    if schema.model is not None:
        document = schema.model.model_json_schema()
        if keys is not None:
            document["properties"] = {k: v for k, v in document.get("properties", {}).items() if k in keys}
            document["required"] = [k for k in document.get("required", []) if k in keys]
        return document
    declared = keys if keys is not None else schema.keys
    return {"title": target.name, "type": "object", "properties": {k: {} for k in sorted(declared or ())}}


class _Assistants:
    def __init__(self, service: Service) -> None:
        self.s = service

    def _found(self, body: AssistantSearch) -> list[dict[str, Any]]:
        found = [
            _json(t)
            for t in self.s.targets.values()
            if (body.graph_id is None or t.name == body.graph_id)
            and (body.name is None or t.name == body.name)
            and all(_json(t)["metadata"].get(k) == v for k, v in body.metadata.items())
        ]
        if body.sort_by is not None:
            found.sort(key=lambda a: str(a.get(body.sort_by or "")), reverse=body.sort_order == "desc")
        return found

    async def search(self, request: Request) -> Response:
        await self.s.identity(request)
        body = await self.s.body(request, AssistantSearch)
        page = self._found(body)[body.offset : body.offset + body.limit]
        if body.select is not None:
            page = [{k: v for k, v in a.items() if k in body.select} for a in page]
        return answer(page)

    async def count(self, request: Request) -> Response:
        await self.s.identity(request)
        return answer(len(self._found(await self.s.body(request, AssistantSearch))))

    async def get(self, request: Request) -> Response:
        await self.s.identity(request)
        return answer(_json(self.s.target(request.path_params["assistant_id"])))

    async def graph(self, request: Request) -> Response:
        await self.s.identity(request)
        target = self.s.target(request.path_params["assistant_id"])
        return answer(graph_json(spec_of(target.graph)))

    async def schemas(self, request: Request) -> Response:
        await self.s.identity(request)
        target = self.s.target(request.path_params["assistant_id"])
        schema = spec_of(target.graph).schema
        context = {"title": "context", "type": "object", "additionalProperties": True}
        return answer(
            {
                "graph_id": target.name,
                "input_schema": _schema(target, schema.input_keys),
                "output_schema": _schema(target, schema.output_keys),
                "state_schema": _schema(target, None),
                "config_schema": {"title": "config", "type": "object", "properties": {}},
                "context_schema": context,
            }
        )

    async def subgraphs(self, request: Request) -> Response:
        await self.s.identity(request)
        self.s.target(request.path_params["assistant_id"])
        return answer({})
