"""Reading threads over HTTP (real uvicorn, real savers): a thread that does not exist is a 404 with an error body, a
``limit`` beyond the maximum is a 422, and a run's input nested deeper than the limit is a 422 that stores nothing,
while the deepest input allowed runs and reads back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict
from serve._serving import WAIT, Server
from starlette.types import ASGIApp

from rxgraph import END, START, CheckpointSaver, StateGraph
from rxgraph._frozen import MAX_DEPTH
from rxgraph.checkpoint import register_model
from rxgraph.serve import create_app


@register_model
class Attachment(BaseModel):
    """Registered with the savers' default registry (under a name of this module's own)."""

    model_config = ConfigDict(frozen=True)

    data: Any = None


def _graph_app(saver: CheckpointSaver, update: dict[str, Any] | None = None) -> ASGIApp:
    """One node, ``count``, which returns ``update`` (default ``{"count": 1}``)."""
    answer = update if update is not None else {"count": 1}
    graph = StateGraph().add_node("count", lambda state: answer).add_edge(START, "count").add_edge("count", END)
    return create_app(graph.compile(checkpointer=saver))


def _run(server: Server, thread: str, state: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/threads/{thread}/runs/stream", json={"input": state}, timeout=WAIT)


def _get(server: Server, path: str) -> httpx.Response:
    return httpx.get(server.url + path, timeout=WAIT)


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for level in range(levels):
        value = [value] if level % 2 == 0 else {"k": value}
    return value


def test_reading_a_thread_with_no_checkpoint_is_a_404_with_an_error_body(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(_graph_app(saver_factory()))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    for path in ("/threads/typo/state", "/threads/typo/history", "/threads/typo/history?limit=1"):
        missing = _get(server, path)
        assert missing.status_code == 404, path
        assert missing.headers["content-type"] == "application/json"
        assert missing.json() == {
            "type": "ThreadNotFoundError",
            "message": "thread 'typo' has no checkpoint: check its id (a thread exists once a run has written to it)",
        }
    state = _get(server, "/threads/t/state")
    assert state.status_code == 200 and state.json()["values"] == {"word": "hi", "count": 1}
    history = _get(server, "/threads/t/history")
    assert history.status_code == 200 and [c["seq"] for c in history.json()["checkpoints"]] == [2, 1]


def test_a_history_limit_beyond_the_maximum_is_refused_with_422(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(_graph_app(saver_factory()))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    for absurd in ("99999999999999999999", "10001", "9" * 5000):
        refused = _get(server, f"/threads/t/history?limit={absurd}")
        assert refused.status_code == 422, absurd
        assert refused.json() == {"type": "ValidationError", "message": "limit: must be a whole number from 1 to 10000"}
    for fine in ("10000", "0002"):
        assert [c["seq"] for c in _get(server, f"/threads/t/history?limit={fine}").json()["checkpoints"]] == [2, 1]


def test_an_input_nested_deeper_than_the_limit_is_a_422_and_the_deepest_allowed_runs(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    saver = saver_factory()
    server = serve(_graph_app(saver))

    refused = _run(server, "deep", {"tree": _nested(MAX_DEPTH + 1)})
    assert refused.status_code == 422
    assert refused.json()["type"] == "InvalidArgumentError"
    assert f"more than {MAX_DEPTH} levels deep" in refused.json()["message"]
    assert saver.threads() == []

    assert _run(server, "deep", {"tree": _nested(MAX_DEPTH)}).status_code == 200
    state = _get(server, "/threads/deep/state")
    assert state.status_code == 200 and state.json()["values"] == {"tree": _nested(MAX_DEPTH), "count": 1}


def test_an_int_too_long_for_decimal_text_is_stored_and_shown_not_a_server_error(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    big = 10**5000 + 1  # no JSON body carries it (Python's parser refuses it too): a node makes it
    server = serve(_graph_app(saver_factory(), update={"count": big}))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    shown = {"word": "hi", "count": {"$int": format(big, "x")}}
    assert _get(server, "/threads/t/state").json()["values"] == shown
    assert _get(server, "/threads/t/history").json()["checkpoints"][0]["values"] == shown


def test_a_model_holding_what_pydantics_json_cannot_show_is_shown_not_a_server_error(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    attachment = Attachment(data=(b"\xff\x00", float("nan")))  # bytes that are not UTF-8: stored exactly
    server = serve(_graph_app(saver_factory(), update={"count": attachment}))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    state = _get(server, "/threads/t/state")
    assert state.status_code == 200
    assert state.json()["values"]["count"] == {"data": [{"$bytes": "/wA="}, "nan"]}
