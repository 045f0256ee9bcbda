"""``OpenAIChatModel`` reads each chunk of the stream as its JSON object: checked against the reading of the typed
``ChatCompletionChunk`` the client's ``create`` makes of it (the reference, below), on generated chunks; and the
request goes through ``create`` whenever ``create`` is wrapped, so that instrumentation sees every call."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from typing import Any

import openai
import pytest
from _openai_clients import wrap_create
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from rxgraph.agent import ChatChunk, ToolCallDelta, ToolSpec
from rxgraph.errors import InvalidArgumentError, ModelAPIError
from rxgraph.messages import TokenUsage, UserMessage
from rxgraph.models.openai import OpenAIChatModel, _chunk
from rxgraph.rx._awaitable import background_loop
from rxgraph.testing import ChatCompletionsServer, Reply, StreamedCall

WEATHER = ToolSpec(name="weather", description="the weather in a city", parameters={"type": "object"})


def typed_reading(raw: Any) -> ChatChunk | None:
    """The reference: a ``ChatCompletionChunk``, read attribute by attribute as the client typed it."""
    content = refusal = ""
    calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    for choice in raw.choices or ():
        if choice.index != 0:
            continue
        delta = choice.delta
        if delta is not None:
            content = delta.content or ""
            refusal = getattr(delta, "refusal", None) or ""
            calls = tuple(
                ToolCallDelta(
                    index=call.index if isinstance(getattr(call, "index", None), int) else position,
                    id=call.id or None,
                    name=(call.function.name or None) if call.function is not None else None,
                    arguments=(call.function.arguments or "") if call.function is not None else "",
                )
                for position, call in enumerate(delta.tool_calls or ())
            )
        finish_reason = choice.finish_reason
    reported = getattr(raw, "usage", None)
    usage = (
        None
        if reported is None
        else TokenUsage(
            prompt_tokens=reported.prompt_tokens or 0,
            completion_tokens=reported.completion_tokens or 0,
            total_tokens=reported.total_tokens or 0,
        )
    )
    if not (content or refusal or calls or finish_reason or usage):
        return None
    return ChatChunk(content=content, refusal=refusal, tool_calls=calls, finish_reason=finish_reason, usage=usage)


def _maybe(key: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``{key: value}``, ``{key: None}`` or ``{}``: servers send a field, send it null, or leave it out."""
    return st.one_of(st.just({}), st.just({key: None}), values.map(lambda value: {key: value}))


_text = st.text(max_size=6)
_function = st.fixed_dictionaries({}, optional={"name": st.none() | _text, "arguments": st.none() | _text})
_tool_call = st.builds(
    lambda index, id, function, extra: {**index, **id, **function, **extra, "type": "function"},
    _maybe("index", st.integers(0, 3)),
    _maybe("id", _text),
    _maybe("function", _function),
    st.just({}) | st.just({"extra_field": 1}),
)
_delta = st.builds(
    lambda role, content, refusal, calls, reasoning: {**role, **content, **refusal, **calls, **reasoning},
    _maybe("role", st.just("assistant")),
    _maybe("content", _text),
    _maybe("refusal", _text),
    _maybe("tool_calls", st.lists(_tool_call, max_size=3)),
    _maybe("reasoning_content", _text),  # a field of other APIs (DashScope's thinking models)
)
_choice = st.builds(
    lambda index, delta, finish: {"index": index, "delta": delta, **finish},
    st.integers(0, 1),
    _delta,
    _maybe("finish_reason", st.sampled_from(["stop", "tool_calls", "length", "content_filter"])),
)
_count = st.none() | st.integers(0, 10**6)
_usage = st.builds(
    lambda p, c, t: {"prompt_tokens": p, "completion_tokens": c, "total_tokens": t}, _count, _count, _count
)
_chunk_json = st.builds(
    lambda choices, usage: {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **usage,
    },
    st.lists(_choice, max_size=2),
    _maybe("usage", _usage),
)


@settings(max_examples=400, deadline=None)
@given(_chunk_json)
def test_a_chunk_read_as_json_is_the_chunk_read_as_the_client_types_it(data: dict[str, Any]) -> None:
    typed = ChatCompletionChunk.construct(**data)  # what the client's stream makes of the chunk's JSON
    assert _chunk(data) == typed_reading(typed)
    assert _chunk(typed) == typed_reading(typed)  # a chunk a wrapped create typed is read the same


def test_a_chunk_that_is_not_a_json_object_fails_with_model_api_error() -> None:
    for data in ([1, 2], "text", 3):
        with pytest.raises(ModelAPIError, match="not a JSON object") as failed:
            _chunk(data)
        assert failed.value.status_code is None and failed.value.body == data


@pytest.mark.parametrize("kind", [openai.OpenAI, openai.AsyncOpenAI])
def test_a_plain_client_is_posted_to_and_a_wrapped_create_is_called(kind: type[Any]) -> None:
    script = [Reply(StreamedCall("c1", "weather", '{"city": "Paris"}'), usage=(5, 1)), Reply("Sun", "ny.")] * 2
    with ChatCompletionsServer(script) as server:
        plain, wrapped = (kind(base_url=server.base_url, api_key="test", max_retries=0) for _ in range(2))
        calls = wrap_create(wrapped)
        readings = []
        for client in (plain, wrapped):
            model = OpenAIChatModel(client, "m", temperature=0.5, extra_headers={"X-Trace": "t"})
            readings.append([_read(model, tools) for tools in ([WEATHER], [])])
        assert readings[0] == readings[1]
        assert readings[0][0][-1] == ChatChunk(usage=TokenUsage(prompt_tokens=5, completion_tokens=1, total_tokens=6))
        # The wrapped create saw the second model's two requests, with the options the first model posted.
        assert [call["temperature"] for call in calls] == [0.5, 0.5]
        assert [request.body for request in server.requests[:2]] == [request.body for request in server.requests[2:]]
        assert all(request.headers["x-trace"] == "t" for request in server.requests)
        assert all(request.headers["authorization"] == "Bearer test" for request in server.requests)
        _close(plain)
        _close(wrapped)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request (path, headers, JSON body) and refuses it with a 400."""

    seen: list[tuple[str, dict[str, str], Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.server.seen.append((self.path, headers, json.loads(body)))  # type: ignore[attr-defined]
        answer = b'{"error": {"message": "recorded"}}'
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("kind", ["openai", "azure", "async openai"])
def test_the_request_posted_is_the_one_create_sends(kind: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    client: Any
    if kind == "azure":  # its deployment's URL is made from the body's model, for create and post alike
        client = openai.AzureOpenAI(azure_endpoint=url, api_version="2024-10-21", api_key="k", max_retries=0)
    elif kind == "openai":
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    else:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    try:
        model = OpenAIChatModel(
            client,
            "m",
            temperature=0.1,
            extra_headers={"X-A": "1"},
            extra_query={"q": "1"},
            extra_body={"k": 2},
            timeout=7,
        )
        params = model.request([UserMessage(content="hi")], [WEATHER])
        for send in (lambda: client.chat.completions.create(**params), lambda: model._open(params)):
            with pytest.raises(openai.BadRequestError):
                sent = send()
                if kind == "async openai":
                    asyncio.run(sent)
        created, posted = server.seen  # type: ignore[attr-defined]
        assert posted == created
        assert posted[2]["k"] == 2 and "q=1" in posted[0] and posted[1]["x-a"] == "1"
    finally:
        server.shutdown()
        server.server_close()
        if kind != "async openai":
            client.close()


def test_langsmiths_wrapped_client_goes_through_its_wrapper() -> None:
    wrappers = pytest.importorskip("langsmith.wrappers")
    with ChatCompletionsServer([Reply("Hel", "lo")]) as server:
        client = wrappers.wrap_openai(openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0))
        create = client.chat.completions.create
        model = OpenAIChatModel(client, "m")
        # The adapter keeps out of the way of the wrapper: it calls it, and reads the chunks it gives back.
        stream = model._open(model.request([UserMessage(content="hi")], ()))
        assert isinstance(next(iter(stream)), ChatCompletionChunk)
        stream.close()
        assert client.chat.completions.create is create
        client.close()


def test_unknown_options_are_refused_when_the_model_is_made() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
    try:
        with pytest.raises(InvalidArgumentError, match="extra_body") as unknown:
            OpenAIChatModel(client, "m", temprature=0.2)
        assert unknown.value.argument == "temprature"
        with pytest.raises(InvalidArgumentError) as typed:
            OpenAIChatModel(client, "m", response_format=ChatCompletionChunk)
        assert typed.value.argument == "response_format"
        model = OpenAIChatModel(client, "m", temperature=openai.NOT_GIVEN, max_tokens=5)
        sent = model.request([UserMessage(content="hi")], ())
        assert "temperature" not in sent and sent["max_tokens"] == 5
    finally:
        client.close()


def _read(model: OpenAIChatModel, tools: list[ToolSpec]) -> list[ChatChunk]:
    chunks: list[ChatChunk] = []
    errors: list[Exception] = []
    ended = threading.Event()
    model.stream([UserMessage(content="weather?")], tools).subscribe(
        chunks.append, lambda error: (errors.append(error), ended.set()), ended.set
    )
    assert ended.wait(5), "the stream did not end"
    assert not errors, errors
    return chunks


def _close(client: Any) -> None:
    if isinstance(client, openai.AsyncOpenAI):  # its connections belong to rxgraph's background loop
        asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(5)
    else:
        client.close()
