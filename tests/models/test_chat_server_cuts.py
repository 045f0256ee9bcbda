"""``ChatCompletionsServer`` cutting an answer short (``Cut``) and leaving out ``[DONE]`` (``Reply(done=False)``),
read with a plain HTTP client: what bytes the client gets, how the HTTP body ends, and the recorded outcome."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rxgraph.errors import InvalidArgumentError, InvalidTypeError
from rxgraph.testing import ChatCompletionsServer, Cut, Reply, StreamedCall

BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _events(text: str) -> list[Any]:
    """The ``data:`` payloads of a complete event stream, JSON-decoded but ``[DONE]``."""
    blocks = text.split("\n\n")
    assert blocks[-1] == "", "the body ends with a whole event"
    return [
        b.removeprefix("data: ") if b == "data: [DONE]" else json.loads(b.removeprefix("data: ")) for b in blocks[:-1]
    ]


def _finish_reasons(events: list[Any]) -> list[str | None]:
    return [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e["choices"]]


def test_a_cut_that_ends_the_body_sends_no_finish_reason_no_usage_and_no_done(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("The answer is ", "forty", Cut())]) as server:
        response = http.post(
            server.base_url + "/chat/completions", json={**BODY, "stream_options": {"include_usage": True}}
        )
        assert response.status_code == 200  # a whole HTTP response: only the missing finish_reason tells
        events = _events(response.text)
        assert [e["choices"][0]["delta"].get("content") for e in events] == ["", "The answer is ", "forty"]
        assert _finish_reasons(events) == [None, None, None]
        assert all(e["usage"] is None for e in events)
        served = server.request(0)
        assert served.wait() == "cut" and served.chunks_sent == 3


def test_a_cut_with_done_sends_done_but_no_finish_reason(http: httpx.Client) -> None:
    reply = Reply(StreamedCall("c1", "weather", '{"city": "Par', pieces=1), Cut("done"))
    with ChatCompletionsServer([reply]) as server:
        events = _events(http.post(server.base_url + "/chat/completions", json=BODY).text)
        assert events[-1] == "[DONE]"
        assert _finish_reasons(events) == [None, None]
        assert server.request(0).wait() == "cut"


def test_a_dropping_cut_closes_the_connection_halfway_through_an_event_without_an_error_log(
    http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    received = b""
    broken = pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read")
    with (
        ChatCompletionsServer([Reply("The answer is ", "forty", Cut("drop"))]) as server,
        caplog.at_level(logging.INFO),
    ):
        url = server.base_url + "/chat/completions"
        with broken, http.stream("POST", url, json=BODY) as response:
            assert response.status_code == 200
            for data in response.iter_raw():
                received += data
        assert server.request(0).wait() == "cut"
    whole, _, half = received.decode().rpartition("\n\n")
    assert [e["choices"][0]["delta"].get("content") for e in _events(whole + "\n\n")] == ["", "The answer is ", "forty"]
    assert half.startswith('data: {"id":') and not half.endswith("}")  # the finish chunk, cut in two
    assert [r.getMessage() for r in caplog.records if r.name.startswith("uvicorn")] == []


def test_a_cut_non_streamed_answer_stops_halfway_through_its_json(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("The answer is ", "forty-two", Cut())]) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            http.post(server.base_url + "/chat/completions", json={**BODY, "stream": False})
        assert server.request(0).wait() == "cut"


def test_a_reply_without_done_ends_after_its_finish_reason_and_usage(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("Hello", done=False, usage=(3, 1))]) as server:
        response = http.post(
            server.base_url + "/chat/completions", json={**BODY, "stream_options": {"include_usage": True}}
        )
        events = _events(response.text)
        assert "[DONE]" not in events
        assert _finish_reasons(events) == [None, None, "stop"]
        assert events[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        assert server.request(0).wait() == "completed"


def test_a_cut_must_be_the_last_step_and_say_how_it_cuts() -> None:
    with pytest.raises(InvalidArgumentError, match="last step"):
        Reply("a", Cut(), "b")
    with pytest.raises(InvalidArgumentError, match="'end', 'done' or 'drop'"):
        Cut("close")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="done must be a bool"):
        Reply("a", done=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("keep_alive", [0, -1, 2.5, True, "5"])
def test_keep_alive_must_be_a_whole_number_of_seconds(keep_alive: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="keep_alive"):
        ChatCompletionsServer(keep_alive=keep_alive)
