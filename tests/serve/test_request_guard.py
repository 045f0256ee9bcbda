"""A run's request is refused before anything starts when it is not JSON (a cross-site form or ``text/plain`` post,
which a browser sends without asking first), when a browser says it comes from another site, or when its body is
larger than the server takes; a request naming a host the server does not answer for is refused on every route — on
a real server, with the runs that did not start checked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing

import httpx
from langgraph_sdk import get_sync_client
from serve._serving import WAIT, Server, run_body
from serve.test_app import Tool, weather_agent
from starlette.types import ASGIApp

from rxgraph import MemorySaver
from rxgraph.serve import create_app
from rxgraph.testing import finish, text

HELLO = run_body({"input": {"messages": "Hello?"}})


def _no_thread(server: Server) -> None:
    """Nothing was stored, nor recorded: no checkpoint, no thread."""
    with closing(get_sync_client(url=server.url)) as client:
        assert client.threads.search() == []


def test_a_body_that_is_not_json_is_refused_with_415_and_starts_nothing(serve: Callable[[ASGIApp], Server]) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))
    body = json.dumps(HELLO).encode()  # valid JSON, sent as a cross-site form would send it
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"content-type": content_type} if content_type else {}
        refused = httpx.post(f"{server.url}/threads/t/runs/stream", content=body, headers=headers, timeout=WAIT)
        assert refused.status_code == 415, content_type
        assert refused.json()["detail"].startswith(
            "a request's body is JSON: send it with Content-Type: application/json"
        )
    assert model.calls == 0 and saver.threads() == []
    _no_thread(server)


def test_a_browser_request_from_another_site_is_refused_with_403_unless_its_origin_is_allowed(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, _ = weather_agent(saver, Tool(), [[text("Hi again!"), finish()]])
    server = serve(create_app(agent, allowed_origins=["https://app.example"]))
    url = f"{server.url}/threads/t/runs/stream"
    for origin in ("https://evil.example", "null", "http://127.0.0.1:1"):
        refused = httpx.post(url, json=HELLO, headers={"origin": origin}, timeout=WAIT)
        assert refused.status_code == 403, origin
        assert refused.json()["detail"].startswith(f"a request from {origin!r}, another site, cannot change")
        assert "access-control-allow-origin" not in refused.headers
    assert saver.threads() == []
    _no_thread(server)
    # A change without a body is refused alike: another site's page cannot cancel a run or delete a thread.
    with get_sync_client(url=server.url) as client:
        client.threads.create(thread_id="kept")
    evil = {"origin": "https://evil.example"}
    for method, path in (("POST", "/threads/kept/runs/r/cancel"), ("DELETE", "/threads/kept")):
        assert httpx.request(method, server.url + path, headers=evil, timeout=WAIT).status_code == 403, path
    assert httpx.get(server.url + "/threads/kept", headers=evil, timeout=WAIT).status_code == 200  # a read is not
    httpx.delete(server.url + "/threads/kept", timeout=WAIT).raise_for_status()
    own = httpx.post(url, json=HELLO, headers={"origin": server.url}, timeout=WAIT)
    again = run_body({"input": {"messages": "Again?"}})
    allowed = httpx.post(url, json=again, headers={"origin": "https://app.example"}, timeout=WAIT)
    assert (own.status_code, allowed.status_code) == (200, 200)
    assert "event: values" in own.text and "event: values" in allowed.text and "event: error" not in allowed.text
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"  # its page may read the answer
    assert saver.threads() == ["t"]


def test_a_body_larger_than_max_body_is_refused_with_413_declared_or_streamed(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent, max_body=1000))
    url = f"{server.url}/threads/t/runs/stream"
    big = json.dumps(run_body({"input": {"messages": "x" * 2000}})).encode()
    declared = httpx.post(url, content=big, headers={"content-type": "application/json"}, timeout=WAIT)

    def chunked() -> Iterator[bytes]:  # no Content-Length: the server counts while it reads
        yield big[:600]
        yield big[600:]

    streamed = httpx.post(url, content=chunked(), headers={"content-type": "application/json"}, timeout=WAIT)
    for refused in (declared, streamed):
        assert refused.status_code == 413
        assert "at most 1000 bytes" in refused.json()["detail"]
    assert model.calls == 0 and saver.threads() == []
    _no_thread(server)


ROUTES = [
    ("GET", "/threads/t/state"),
    ("GET", "/threads/t/history"),
    ("POST", "/threads/search"),
    ("GET", "/assistants/agent"),
    ("GET", "/ok"),
]


def test_only_the_allowed_host_names_are_served_on_every_route(serve: Callable[[ASGIApp], Server]) -> None:
    """Another site's page whose name was made to resolve to this server (DNS rebinding) sends its own name as the
    Host: refused with 400, on reads as on runs. This machine's own names are served by default."""
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    default = serve(create_app(agent))
    port = default.url.rsplit(":", 1)[1]

    def status(server: Server, host: str, method: str = "GET", path: str = "/threads/t/state") -> int:
        body = {} if method == "POST" else None
        return httpx.request(method, server.url + path, json=body, headers={"host": host}, timeout=WAIT).status_code

    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert status(default, host) == 404, host  # served: the thread simply does not exist
    for host in (f"evil.example:{port}", "127.0.0.2", "localhost.evil.example", ""):
        assert status(default, host) == 400, host
    for method, path in ROUTES:
        assert status(default, "evil.example", method, path) == 400, path
        assert status(default, "localhost", method, path) in (200, 404), path
    refused = httpx.post(
        default.url + "/threads/t/runs/stream", json=HELLO, headers={"host": "evil.example"}, timeout=WAIT
    )
    assert refused.status_code == 400 and "allowed_hosts" in refused.text
    assert model.calls == 0 and saver.threads() == []
    _no_thread(default)

    subdomains = serve(create_app(agent, allowed_hosts=["*.example.com", "api.other.org"]))
    assert [status(subdomains, h) for h in ("a.example.com", "b.a.example.com:80", "api.other.org")] == [404] * 3
    assert [status(subdomains, h) for h in ("example.com", "localhost", "other.org")] == [400] * 3
    anything = serve(create_app(agent, allowed_hosts=["*"]))
    assert status(anything, "whatever.example") == 404


def test_a_refused_host_is_answered_with_the_apis_error_body(serve: Callable[[ASGIApp], Server]) -> None:
    agent, _ = weather_agent(MemorySaver(), Tool())
    server = serve(create_app(agent))

    refused = httpx.get(server.url + "/threads/t/state", headers={"host": "evil.example"}, timeout=WAIT)

    assert refused.status_code == 400
    assert refused.json() == {
        "detail": "this server does not serve that host name (create_app(allowed_hosts=...))",
    }
