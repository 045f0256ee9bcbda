"""``ChatCompletionsServer``: the Chat Completions wire format, strict refusals, and how each answer ended — checked
with a plain HTTP client, byte by byte, and against the ``openai`` package's response types."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rxgraph.errors import ConfigurationError, InvalidArgumentError, InvalidTypeError
from rxgraph.testing import (
    ChatCompletionsServer,
    ErrorReply,
    Gate,
    Pause,
    Refusal,
    Reply,
    ServedRequest,
    StreamedCall,
)

USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One plain HTTP client for the module (a new one costs its TLS setup, though it only speaks plain HTTP)."""
    with httpx.Client(timeout=5) as client:
        yield client


def _post(http: httpx.Client, server: ChatCompletionsServer, body: Any, **kwargs: Any) -> httpx.Response:
    return http.post(server.base_url + "/chat/completions", json=body, **kwargs)


def _events(response: httpx.Response) -> list[Any]:
    """The ``data:`` payloads of a server-sent event stream, JSON-decoded but ``[DONE]``."""
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = response.text.split("\n\n")
    assert blocks[-1] == "", "the stream ends with a blank line"
    out: list[Any] = []
    for block in blocks[:-1]:
        assert block.startswith("data: "), block
        payload = block.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _only_known_keys(value: dict[str, Any], model: Any) -> None:
    assert set(value) <= set(model.model_fields), set(value) - set(model.model_fields)


def _check_chunk(chunk: dict[str, Any]) -> ChatCompletionChunk:
    """The chunk is one the openai package reads, with no key its types do not have."""
    parsed = ChatCompletionChunk.model_validate(chunk)
    _only_known_keys(chunk, ChatCompletionChunk)
    for raw, choice in zip(chunk["choices"], parsed.choices, strict=True):
        _only_known_keys(raw, type(choice))
        _only_known_keys(raw["delta"], type(choice.delta))
        for raw_call, call in zip(raw["delta"].get("tool_calls", ()), choice.delta.tool_calls or (), strict=True):
            _only_known_keys(raw_call, type(call))
    return parsed


def _stream_body(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": [USER], "stream": True, **extra}


# -- the wire format ----------------------------------------------------------------------------------------


def test_a_streamed_text_answer_in_the_api_format(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("Hel", "lo", usage=(7, 2))]) as server:
        response = _post(http, server, _stream_body(stream_options={"include_usage": True}))
        assert response.status_code == 200
        events = _events(response)
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        for chunk in chunks:
            _check_chunk(chunk)
            assert chunk["object"] == "chat.completion.chunk" and chunk["model"] == "gpt-test"
            assert chunk["id"] == chunks[0]["id"] and chunk["created"] == chunks[0]["created"]
        deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
        assert deltas == [
            {"role": "assistant", "content": "", "refusal": None},
            {"content": "Hel"},
            {"content": "lo"},
            {},
        ]
        assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "stop"]
        assert all(c["usage"] is None for c in chunks[:-1])
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
        served = server.request(0)
        assert served.wait() == "completed" and served.status == 200 and served.chunks_sent == 5
        assert served.body == _stream_body(stream_options={"include_usage": True}) and served.stream


def test_without_include_usage_there_is_no_usage_at_all(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("a")]) as server:
        chunks = _events(_post(http, server, _stream_body()))[:-1]
        assert all("usage" not in chunk for chunk in chunks)
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]


def test_tool_calls_are_split_as_openai_splits_them_parallel_ones_by_index(http: httpx.Client) -> None:
    reply = Reply(
        StreamedCall("call_a", "weather", '{"city": "Paris"}', pieces=3),
        StreamedCall("call_b", "time", "", pieces=2),
        StreamedCall("call_c", "weather", '{"city": "Rome"}'),
    )
    with ChatCompletionsServer([reply]) as server:
        chunks = [_check_chunk(c) for c in _events(_post(http, server, _stream_body()))[:-1]]
    raw_deltas = [chunk.choices[0].delta for chunk in chunks]
    first = raw_deltas[0]
    assert first.role == "assistant" and first.content is None and first.tool_calls is not None
    head = first.tool_calls[0]
    assert (head.index, head.id, head.type) == (0, "call_a", "function")
    assert head.function is not None and (head.function.name, head.function.arguments) == ("weather", "")
    pieces = [d.tool_calls[0] for d in raw_deltas[1:4] if d.tool_calls]
    assert [(p.index, p.id, p.function and p.function.name) for p in pieces] == [(0, None, None)] * 3
    assert "".join(p.function.arguments or "" for p in pieces if p.function) == '{"city": "Paris"}'
    # call_b has empty arguments: its head only; call_c's head and two pieces follow.
    heads = [(d.tool_calls[0].index, d.tool_calls[0].id) for d in raw_deltas if d.tool_calls and d.tool_calls[0].id]
    assert heads == [(0, "call_a"), (1, "call_b"), (2, "call_c")]
    assert len(raw_deltas) == 1 + 3 + 1 + 1 + 2 + 1
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_refusal_pieces_stream_as_refusal_deltas(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply(Refusal("I can"), Refusal("not."))]) as server:
        chunks = _events(_post(http, server, _stream_body()))[:-1]
    assert [c["choices"][0]["delta"] for c in chunks[1:3]] == [{"refusal": "I can"}, {"refusal": "not."}]


def test_a_non_streamed_answer_is_one_chat_completion(http: httpx.Client) -> None:
    reply = Reply("Let me check.", StreamedCall("c1", "weather", '{"city": "Paris"}'), usage=(4, 5))
    with ChatCompletionsServer([reply, Reply("plain")]) as server:
        response = _post(http, server, {"model": "m", "messages": [USER]})
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        body = response.json()
        completion = ChatCompletion.model_validate(body)
        _only_known_keys(body, ChatCompletion)
        _only_known_keys(body["choices"][0]["message"], type(completion.choices[0].message))
        message = completion.choices[0].message
        assert message.content == "Let me check." and completion.choices[0].finish_reason == "tool_calls"
        assert message.tool_calls is not None and message.tool_calls[0].id == "c1"
        assert completion.usage is not None and completion.usage.total_tokens == 9
        plain = ChatCompletion.model_validate(_post(http, server, {"model": "m", "messages": [USER]}).json())
        assert plain.choices[0].message.content == "plain" and plain.choices[0].message.tool_calls is None
        assert [r.wait() for r in server.requests] == ["completed", "completed"]
        assert not server.requests[0].stream


# -- refusing what a strict endpoint refuses ------------------------------------------------------------------


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _asks(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in ids]}


def _answer(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r", **extra}


REFUSED: dict[str, tuple[Any, str]] = {
    "calls never answered": ({"model": "m", "messages": [USER, _asks("c1", "c2"), _answer("c1")]}, "'c2'"),
    "calls cut short by a user": ({"model": "m", "messages": [USER, _asks("c1"), USER]}, "'c1'"),
    "orphan tool message": ({"model": "m", "messages": [USER, _answer("c9")]}, "'c9'"),
    "tool message answering another call": ({"model": "m", "messages": [USER, _asks("c1"), _answer("c2")]}, "'c2'"),
    "user right after tool answers": (
        {"model": "m", "messages": [USER, _asks("c1"), _answer("c1"), USER]},
        "must be an assistant message",
    ),
    "system right after tool answers": (
        {"model": "m", "messages": [USER, _asks("c1"), _answer("c1"), {"role": "system", "content": "s"}]},
        "must be an assistant message",
    ),
    "unknown role": ({"model": "m", "messages": [{"role": "narrator", "content": "x"}]}, "'narrator'"),
    "legacy function role": (
        {"model": "m", "messages": [{"role": "function", "name": "f", "content": "x"}]},
        "'function'",
    ),
    "name on a tool message": (
        {"model": "m", "messages": [USER, _asks("c1"), _answer("c1", name="f")]},
        "name: Extra inputs are not permitted",
    ),
    "unknown key on a message": ({"model": "m", "messages": [{**USER, "is_error": False}]}, "is_error"),
    "mistyped content": ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages.[0]"),
    "unknown key inside a tool call": (
        {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [{**_call("c1"), "x": 1}]}]},
        "x",
    ),
    "empty tool_calls": ({"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": []}]}, "too short"),
    "assistant with nothing": ({"model": "m", "messages": [USER, {"role": "assistant"}]}, "'content' is required"),
    "duplicate call ids": ({"model": "m", "messages": [USER, _asks("c1", "c1")]}, "duplicate tool call id"),
    "no messages": ({"model": "m", "messages": []}, "non-empty"),
    "no model": ({"messages": [USER]}, "'model'"),
    "mistyped temperature": ({"model": "m", "messages": [USER], "temperature": "hot"}, "temperature"),
    "stream_options without stream": (
        {"model": "m", "messages": [USER], "stream_options": {"include_usage": True}},
        "'stream_options'",
    ),
    "tool_choice without tools": ({"model": "m", "messages": [USER], "tool_choice": "auto"}, "'tool_choice'"),
    "parallel_tool_calls without tools": (
        {"model": "m", "messages": [USER], "parallel_tool_calls": False},
        "'parallel_tool_calls'",
    ),
    "not an object": ([USER], "JSON object"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_request_a_strict_endpoint_refuses_is_a_400_and_takes_no_reply(case: str, http: httpx.Client) -> None:
    body, words = REFUSED[case]
    with ChatCompletionsServer([Reply("the first reply")]) as server:
        response = _post(http, server, body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
        assert words in error["message"], error["message"]
        refused = server.request(0)
        assert refused.wait() == "rejected" and refused.error == response.json() and refused.status == 400
        assert refused.body == body
        # The refused request took no reply: the next one gets the first.
        ok = _post(http, server, {"model": "m", "messages": [USER]})
        assert ok.json()["choices"][0]["message"]["content"] == "the first reply"


def test_a_body_that_is_not_json_is_a_400(http: httpx.Client) -> None:
    with ChatCompletionsServer([Reply("x")]) as server:
        response = _post(http, server, None, content=b"{not json", headers={"content-type": "application/json"})
        assert response.status_code == 400 and "parse the JSON body" in response.json()["error"]["message"]
        assert server.request(0).body is None and server.request(0).wait() == "rejected"


def test_what_a_strict_endpoint_accepts_is_accepted(http: httpx.Client) -> None:
    messages = [
        {"role": "developer", "content": "be brief", "name": "ops"},
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}],
        },
        {"role": "assistant", "content": "Checking.", "tool_calls": [_call("c1"), _call("c2")], "name": "helper"},
        _answer("c2"),
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        {"role": "assistant", "content": None, "refusal": "no"},
        {"role": "user", "content": "and now?", "name": "alice"},
        {"role": "assistant", "content": ""},  # a request may end with an assistant message
    ]
    body = {
        "model": "m",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "temperature": 0.2,
        "top_k": 5,  # not an OpenAI parameter: accepted, as vLLM accepts its own
        "enable_thinking": False,
    }
    with ChatCompletionsServer([Reply("ok")]) as server:
        response = _post(http, server, body, headers={"X-Trace": "t1"})
        assert response.status_code == 200, response.text
        served = server.request(0)
        assert served.body == body and served.messages == messages and served.headers["x-trace"] == "t1"


# -- scripted failures -------------------------------------------------------------------------------------


def test_an_error_reply_answers_its_status_and_body(http: httpx.Client) -> None:
    script = [ErrorReply(429, "slow down", code="rate_limit_exceeded"), ErrorReply(500)]
    with ChatCompletionsServer(script) as server:
        limited = _post(http, server, _stream_body())
        assert limited.status_code == 429
        assert limited.json() == {
            "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}
        }
        assert _post(http, server, _stream_body()).json()["error"]["type"] == "server_error"
        exhausted = _post(http, server, _stream_body())
        assert exhausted.status_code == 500 and "no reply left for request #2" in exhausted.json()["error"]["message"]
        assert [r.wait() for r in server.requests] == ["failed"] * 3


def test_a_function_script_is_called_with_each_request(http: httpx.Client) -> None:
    seen: list[Any] = []

    def script(body: dict[str, Any]) -> Reply:
        seen.append(body["messages"][-1]["content"])
        return Reply(f"echo {body['messages'][-1]['content']}")

    with ChatCompletionsServer(script) as server:
        for word in ("a", "b"):
            response = _post(http, server, {"model": "m", "messages": [{"role": "user", "content": word}]})
            assert response.json()["choices"][0]["message"]["content"] == f"echo {word}"
    assert seen == ["a", "b"]


# -- how an answer ended ---------------------------------------------------------------------------------------


def test_a_gate_holds_the_answer_until_opened(http: httpx.Client) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("a", gate, "b")]) as server:
        with http.stream("POST", server.base_url + "/chat/completions", json=_stream_body()) as response:
            lines = response.iter_lines()
            assert gate.reached.wait(5) and gate.arrivals == 1
            served = server.request(0)
            assert served.chunks_sent == 2 and served.outcome == "pending" and not served.ended.is_set()
            assert '"role":"assistant"' in next(lines)
            gate.open()
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and '"content":"b"' in rest[-3]
        assert served.wait() == "completed" and gate.opened


@pytest.mark.parametrize("hold", ["gate", "pause"])
def test_a_client_that_goes_away_is_recorded_as_aborted(hold: str, http: httpx.Client) -> None:
    step = Gate() if hold == "gate" else Pause(30)
    with ChatCompletionsServer([Reply("a", step, "b"), Reply("next")]) as server:
        with http.stream("POST", server.base_url + "/chat/completions", json=_stream_body()) as response:
            server.request(0).wait_for_chunks(2)
            next(response.iter_lines())
        # Leaving the block closed the connection mid-answer.
        served = server.request(0)
        assert served.wait() == "aborted" and served.chunks_sent == 2
        # The server goes on serving.
        assert _post(http, server, _stream_body()).status_code == 200
        assert server.request(1).wait() == "completed"


def test_a_client_that_goes_away_before_a_whole_answer_is_aborted_too() -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("a", gate)]) as server:

        async def give_up() -> None:
            async with httpx.AsyncClient(timeout=5) as client:
                task = asyncio.ensure_future(
                    client.post(server.base_url + "/chat/completions", json={"model": "m", "messages": [USER]})
                )
                await asyncio.to_thread(gate.wait_for_arrivals, 1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(give_up())
        assert server.request(0).wait() == "aborted" and server.request(0).chunks_sent == 0


def test_stopping_ends_the_answers_still_running_and_releases_the_port() -> None:
    gate = Gate()
    server = ChatCompletionsServer([Reply("a", gate, "never")])
    with server, httpx.Client(timeout=5) as client:
        with client.stream("POST", server.base_url + "/chat/completions", json=_stream_body()) as response:
            assert gate.reached.wait(5)
            server.stop()
            lines = [line for line in response.iter_lines() if line]
        assert "never" not in "".join(lines) and "[DONE]" not in "".join(lines)
        assert server.request(0).outcome == "stopped"
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", server.port))
    server.stop()  # again: nothing to do


def test_two_hundred_streams_at_once() -> None:
    gate = Gate()
    count = 200
    payload = json.dumps(_stream_body()).encode()
    with ChatCompletionsServer(lambda body: Reply("a", gate, "b")) as server:

        async def one() -> bytes:
            # A bare HTTP/1.1 client: httpx's own overhead for 200 connections would dwarf the server's.
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + payload)
            answer = await reader.read()
            writer.close()
            await writer.wait_closed()
            return answer

        async def all_at_once() -> list[bytes]:
            tasks = [asyncio.ensure_future(one()) for _ in range(count)]
            await asyncio.to_thread(gate.wait_for_arrivals, count, 10.0)
            # Every stream is open and waiting at the gate at the same time.
            assert not any(t.done() for t in tasks) and all(r.chunks_sent == 2 for r in server.requests)
            gate.open()
            return await asyncio.gather(*tasks)

        answers = asyncio.run(all_at_once())
        assert all(a.startswith(b"HTTP/1.1 200") and b'"content":"b"' in a for a in answers)
        assert all(a.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for a in answers)  # then chunked encoding's end
        assert [r.wait() for r in server.requests] == ["completed"] * count


# -- the object itself -----------------------------------------------------------------------------------------


def test_waiting_for_what_does_not_happen_fails_the_test() -> None:
    with ChatCompletionsServer([Reply("a", Gate())]) as server, pytest.raises(AssertionError, match="did not arrive"):
        server.request(0, timeout=0.01)
    served = ServedRequest(0, {}, {})
    with pytest.raises(AssertionError, match="did not end"):
        served.wait(timeout=0.01)
    with pytest.raises(AssertionError, match="0 chunks sent, not 1"):
        served.wait_for_chunks(1, timeout=0.01)
    with pytest.raises(AssertionError, match="0 answers arrived at the gate"):
        Gate().wait_for_arrivals(1, timeout=0.01)


def test_bad_scripts_are_refused_when_written() -> None:
    with pytest.raises(InvalidTypeError):
        Reply(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        ChatCompletionsServer(["text"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        StreamedCall("c1", "f", "{}", pieces=0)
    with pytest.raises(InvalidArgumentError):
        Pause(-1)
    with pytest.raises(InvalidArgumentError):
        ErrorReply(200)
    with pytest.raises(InvalidArgumentError):
        Reply("a", usage=(1, -1))


def test_a_server_starts_once_and_has_no_url_before() -> None:
    server = ChatCompletionsServer()
    with pytest.raises(ConfigurationError, match="not been started"):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        with pytest.raises(ConfigurationError, match="starts once"):
            server.start()


def test_importing_rxgraph_testing_needs_neither_starlette_nor_uvicorn() -> None:
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "uvicorn"):
            raise ImportError(f"no {name} here")
sys.meta_path.insert(0, Block())
import rxgraph.testing
from rxgraph.errors import ConfigurationError
try:
    rxgraph.testing.ChatCompletionsServer().start()
except ConfigurationError as error:
    assert "serve and openai extras" in str(error), error
    print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr
