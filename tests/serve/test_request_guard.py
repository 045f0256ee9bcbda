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
