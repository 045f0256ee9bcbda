"""Reading threads over HTTP (real uvicorn, real savers): a thread that does not exist is a 404 with an error body and
one created without a run reads as empty, a ``limit`` beyond the maximum is a 422, a run's input nested deeper than
the limit is a 422 that stores nothing while the deepest input allowed runs and reads back, and values JSON cannot
carry as they are are shown, not a server error."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any

import httpx
from langgraph_sdk import get_sync_client
from pydantic import BaseModel, ConfigDict
from serve._serving import WAIT, Server, post_turn, run_body
from starlette.types import ASGIApp

from rxgraph import END, START, CheckpointSaver, MemorySaver, StateGraph
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
    """A run of the graph on ``thread`` (created by it), read whole."""
    return httpx.post(f"{server.url}/threads/{thread}/runs/stream", json=run_body({"input": state}), timeout=WAIT)


def _get(server: Server, path: str) -> httpx.Response:
    return httpx.get(server.url + path, timeout=WAIT)


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for level in range(levels):
        value = [value] if level % 2 == 0 else {"k": value}
    return value


def test_reading_an_unknown_thread_is_a_404_with_an_error_body_and_a_new_thread_reads_empty(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(_graph_app(saver_factory()))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    for method, path in [
        ("GET", "/threads/typo"),
        ("GET", "/threads/typo/state"),
        ("GET", "/threads/typo/history"),
        ("GET", "/threads/typo/history?limit=1"),
        ("POST", "/threads/typo/history"),
    ]:
        missing = httpx.request(method, server.url + path, json={} if method == "POST" else None, timeout=WAIT)
        assert missing.status_code == 404, path
        assert missing.headers["content-type"] == "application/json"
        assert missing.json() == {"detail": "thread 'typo' not found"}
    with closing(get_sync_client(url=server.url)) as client:
        state = client.threads.get_state("t")
        assert state["values"] == {"word": "hi", "count": 1}
        assert [h["metadata"]["step"] for h in client.threads.get_history("t")] == [2, 1, 0]  # 0: its start
        # A thread created without a run exists: its state is empty, its history has no checkpoint yet.
        client.threads.create(thread_id="fresh")
        fresh = client.threads.get_state("fresh")
        assert (fresh["values"], fresh["next"], fresh["checkpoint"]["checkpoint_id"]) == ({}, [], None)
        assert client.threads.get_history("fresh") == []


def test_a_history_limit_beyond_the_maximum_is_refused_with_422(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    server = serve(_graph_app(saver_factory()))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    for absurd in ("99999999999999999999", "10001", "9" * 5000):
        refused = _get(server, f"/threads/t/history?limit={absurd}")
        assert refused.status_code == 422, absurd
        assert refused.json() == {"detail": "limit: must be a whole number from 1 to 10000"}
    for absurd_json in (10001, 10**20, 0):
        refused = httpx.post(f"{server.url}/threads/t/history", json={"limit": absurd_json}, timeout=WAIT)
        assert refused.status_code == 422, absurd_json
        assert refused.json()["detail"].startswith("limit: Input should be"), refused.text
    for fine, steps in (("10000", [2, 1, 0]), ("0002", [2, 1])):
        assert [h["metadata"]["step"] for h in _get(server, f"/threads/t/history?limit={fine}").json()] == steps
    with closing(get_sync_client(url=server.url)) as client:
        assert [h["metadata"]["step"] for h in client.threads.get_history("t", limit=10000)] == [2, 1, 0]


def test_an_input_nested_deeper_than_the_limit_is_a_422_and_the_deepest_allowed_runs(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    saver = saver_factory()
    server = serve(_graph_app(saver))

    refused = _run(server, "deep", {"tree": _nested(MAX_DEPTH + 1)})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("InvalidArgumentError: ")
    assert f"more than {MAX_DEPTH} levels deep" in refused.json()["detail"]
    assert saver.threads() == []

    assert _run(server, "deep", {"tree": _nested(MAX_DEPTH)}).status_code == 200
    with closing(get_sync_client(url=server.url)) as client:
        assert client.threads.get_state("deep")["values"] == {"tree": _nested(MAX_DEPTH), "count": 1}


def test_an_int_too_long_for_decimal_text_is_stored_and_shown_not_a_server_error(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    big = 10**5000 + 1  # no JSON body carries it (Python's parser refuses it too): a node makes it
    server = serve(_graph_app(saver_factory(), update={"count": big}))

    streamed = post_turn(server.url, "t", {"input": {"word": "hi"}})

    shown = {"word": "hi", "count": {"$int": format(big, "x")}}
    assert streamed[-1] == ("values", shown) and ("updates", {"count": {"count": shown["count"]}}) in streamed
    with closing(get_sync_client(url=server.url)) as client:
        assert client.threads.get_state("t")["values"] == shown
        assert client.threads.get_history("t")[0]["values"] == shown
        assert client.threads.get("t")["values"] == shown


def test_a_model_holding_what_pydantics_json_cannot_show_is_shown_not_a_server_error(
    saver_factory: Callable[[], CheckpointSaver], serve: Callable[[ASGIApp], Server]
) -> None:
    attachment = Attachment(data=(b"\xff\x00", float("nan")))  # bytes that are not UTF-8: stored exactly
    server = serve(_graph_app(saver_factory(), update={"count": attachment}))

    streamed = post_turn(server.url, "t", {"input": {"word": "hi"}})

    shown = {"data": [{"$bytes": "/wA="}, "nan"]}
    assert streamed[-1] == ("values", {"word": "hi", "count": shown})
    state = _get(server, "/threads/t/state")
    assert state.status_code == 200
    assert state.json()["values"]["count"] == shown


def test_a_blank_thread_id_is_refused_with_422_and_breaks_no_read(serve: Callable[[ASGIApp], Server]) -> None:
    saver = MemorySaver()
    server = serve(_graph_app(saver))
    assert _run(server, "t", {"word": "hi"}).status_code == 200

    refused = _run(server, "%20", {"word": "hi"})

    assert refused.status_code == 422 and "thread_id" in refused.json()["detail"]
    assert _get(server, "/threads/%20/state").status_code in (404, 422)
    with closing(get_sync_client(url=server.url)) as client:
        assert [t["thread_id"] for t in client.threads.search()] == ["t"]
    assert saver.threads() == ["t"]


def test_a_checkpoints_metadata_names_the_run_that_wrote_it(serve: Callable[[ASGIApp], Server]) -> None:
    server = serve(_graph_app(MemorySaver()))
    metadata = post_turn(server.url, "t", {"input": {"word": "hi"}})[0]
    assert metadata[0] == "metadata"

    with closing(get_sync_client(url=server.url)) as client:
        written = {h["metadata"]["run_id"] for h in client.threads.get_history("t")[:-1]}  # but the start
        assert written == {metadata[1]["run_id"]}
        assert client.runs.get("t", written.pop())["status"] == "success"
