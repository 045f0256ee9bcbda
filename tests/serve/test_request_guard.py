"""A run's request is refused before anything starts when it is not JSON (a cross-site form or ``text/plain`` post,
which a browser sends without asking first), when a browser says it comes from another site, or when its body is
larger than the server takes — on a real server, with the runs that did not start checked."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
from serve._serving import WAIT, Server
from serve.test_app import Tool, weather_agent
from starlette.types import ASGIApp

from rxgraph import MemorySaver
from rxgraph.serve import create_app
from rxgraph.testing import finish, text


def test_a_body_that_is_not_json_is_refused_with_415_and_starts_nothing(serve: Callable[[ASGIApp], Server]) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent))
    body = b'{"input": "Hello?"}'  # valid JSON, sent as a cross-site form would send it
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"content-type": content_type} if content_type else {}
        refused = httpx.post(f"{server.url}/threads/t/runs/stream", content=body, headers=headers, timeout=WAIT)
        assert (refused.status_code, refused.json()["type"]) == (415, "UnsupportedMediaType"), content_type
    assert model.calls == 0 and saver.threads() == []


def test_a_browser_request_from_another_site_is_refused_with_403_unless_its_origin_is_allowed(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, _ = weather_agent(saver, Tool(), [[text("Hi again!"), finish()]])
    server = serve(create_app(agent, allowed_origins=["https://app.example"]))
    url = f"{server.url}/threads/t/runs/stream"
    for origin in ("https://evil.example", "null", "http://127.0.0.1:1"):
        refused = httpx.post(url, json={"input": "Hello?"}, headers={"origin": origin}, timeout=WAIT)
        assert (refused.status_code, refused.json()["type"]) == (403, "CrossSiteRequest"), origin
    assert saver.threads() == []
    own = httpx.post(url, json={"input": "Hello?"}, headers={"origin": server.url}, timeout=WAIT)
    allowed = httpx.post(url, json={"input": "Again?"}, headers={"origin": "https://app.example"}, timeout=WAIT)
    assert (own.status_code, allowed.status_code) == (200, 200)
    assert "event: end" in own.text and "event: end" in allowed.text
    assert saver.threads() == ["t"]


def test_a_body_larger_than_max_body_is_refused_with_413_declared_or_streamed(
    serve: Callable[[ASGIApp], Server],
) -> None:
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    server = serve(create_app(agent, max_body=1000))
    url = f"{server.url}/threads/t/runs/stream"
    big = b'{"input": "' + b"x" * 2000 + b'"}'
    declared = httpx.post(url, content=big, headers={"content-type": "application/json"}, timeout=WAIT)

    def chunked() -> Iterator[bytes]:  # no Content-Length: the server counts while it reads
        yield big[:600]
        yield big[600:]

    streamed = httpx.post(url, content=chunked(), headers={"content-type": "application/json"}, timeout=WAIT)
    for refused in (declared, streamed):
        assert (refused.status_code, refused.json()["type"]) == (413, "RequestTooLarge")
        assert "1000 bytes" in refused.json()["message"]
    assert model.calls == 0 and saver.threads() == []


def test_only_the_allowed_host_names_are_served_on_every_route(serve: Callable[[ASGIApp], Server]) -> None:
    """Another site's page whose name was made to resolve to this server (DNS rebinding) sends its own name as the
    Host: refused with 400, on reads as on runs. This machine's own names are served by default."""
    saver = MemorySaver()
    agent, model = weather_agent(saver, Tool())
    default = serve(create_app(agent))
    port = default.url.rsplit(":", 1)[1]

    def status(server: Server, host: str, path: str = "/threads/t/state") -> int:
        return httpx.get(server.url + path, headers={"host": host}, timeout=WAIT).status_code

    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert status(default, host) == 404, host  # served: the thread simply has no checkpoint
    for host in (f"evil.example:{port}", "127.0.0.2", "localhost.evil.example", ""):
        assert status(default, host) == 400, host
    refused = httpx.post(
        default.url + "/threads/t/runs/stream", json={"input": "Hello?"}, headers={"host": "evil.example"}, timeout=WAIT
    )
    assert (refused.status_code, refused.json()["type"]) == (400, "InvalidHost")
    assert model.calls == 0 and saver.threads() == []

    subdomains = serve(create_app(agent, allowed_hosts=["*.example.com", "api.other.org"]))
    assert [status(subdomains, h) for h in ("a.example.com", "b.a.example.com:80", "api.other.org")] == [404] * 3
    assert [status(subdomains, h) for h in ("example.com", "localhost", "other.org")] == [400] * 3
    anything = serve(create_app(agent, allowed_hosts=["*"]))
    assert status(anything, "whatever.example") == 404
