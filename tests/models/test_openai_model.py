"""``OpenAIChatModel`` against a real local server (``ChatCompletionsServer``), with the blocking and the async client:
what it sends, what it streams back, how it fails, and that disposing closes the HTTP stream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable

import openai
import pytest
from reactivex import Observable, abc
from reactivex.scheduler import ImmediateScheduler, NewThreadScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxgraph import MemorySaver, RunnableConfig, StreamingOutput
from rxgraph.agent import ChatChunk, ReactAgent, ToolCallDelta, ToolSpec, merge_chunks
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, ModelAPIError, RunError
from rxgraph.messages import AssistantMessage, Message, TokenUsage, ToolCall, ToolMessage, UserMessage, to_openai
from rxgraph.models.openai import OpenAIChatModel
from rxgraph.rx._awaitable import background_loop
from rxgraph.testing import ChatCompletionsServer, ErrorReply, Gate, Refusal, Reply, StreamedCall

HI: list[Message] = [UserMessage(content="hi")]
WEATHER = ToolSpec(name="weather", description="the weather in a city", parameters={"type": "object"})

Client = openai.OpenAI | openai.AsyncOpenAI


class Collector:
    """Subscribes to a model's stream and records what it hears, and on which thread."""

    def __init__(self, source: Observable[ChatChunk], scheduler: abc.SchedulerBase | None = None) -> None:
        self.chunks: list[ChatChunk] = []
        self.threads: set[str] = set()
        self.error: Exception | None = None
        self.completed = False
        self.first = threading.Event()
        self.ended = threading.Event()
        self.subscription = source.subscribe(self._next, self._error, self._completed, scheduler=scheduler)

    def _next(self, chunk: ChatChunk) -> None:
        self.chunks.append(chunk)
        self.threads.add(threading.current_thread().name)
        self.first.set()

    def _error(self, error: Exception) -> None:
        self.error = error
        self.ended.set()

    def _completed(self) -> None:
        self.completed = True
        self.ended.set()

    def wait(self) -> Collector:
        assert self.ended.wait(5), "the stream did not end"
        return self

    def message(self) -> AssistantMessage:
        self.wait()
        if self.error is not None:
            raise self.error
        return merge_chunks(self.chunks)


def _failure(collector: Collector) -> ModelAPIError:
    collector.wait()
    assert not collector.completed and isinstance(collector.error, ModelAPIError), collector.error
    return collector.error


# -- what comes back ---------------------------------------------------------------------------------------------


def test_text_arrives_in_pieces_with_the_usage_last(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer([Reply("Hel", "lo", usage=(11, 2))]) as server:
        model = OpenAIChatModel(make_client(server.base_url), "gpt-test")
        collector = Collector(model.stream(HI, ()))
        message = collector.message()
        usage = TokenUsage(prompt_tokens=11, completion_tokens=2, total_tokens=13)
        assert collector.chunks == [
            ChatChunk(content="Hel"),
            ChatChunk(content="lo"),
            ChatChunk(finish_reason="stop"),
            ChatChunk(usage=usage),
        ]
        assert message == AssistantMessage(content="Hello", usage=usage)
        served = server.request(0)
        assert served.wait() == "completed"
        assert served.body == {
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }


def test_tool_calls_split_over_chunks_and_parallel_ones_merge(make_client: Callable[..., Client]) -> None:
    reply = Reply(
        "Checking.",
        StreamedCall("call_a", "weather", '{"city": "Paris"}', pieces=3),
        StreamedCall("call_b", "weather", '{"city": "Rome"}', pieces=2),
    )
    with ChatCompletionsServer([reply]) as server:
        collector = Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, [WEATHER]))
        message = collector.message()
        assert message.content == "Checking."
        assert message.tool_calls == (
            ToolCall(id="call_a", name="weather", arguments='{"city": "Paris"}'),
            ToolCall(id="call_b", name="weather", arguments='{"city": "Rome"}'),
        )
        deltas = [d for chunk in collector.chunks for d in chunk.tool_calls]
        assert deltas[0] == ToolCallDelta(index=0, id="call_a", name="weather", arguments="")
        assert all(d.id is None and d.name is None and d.arguments for d in deltas[1:4])
        assert deltas[4] == ToolCallDelta(index=1, id="call_b", name="weather", arguments="")
        assert [c.finish_reason for c in collector.chunks if c.finish_reason] == ["tool_calls"]
        assert server.request(0).body["tools"] == [WEATHER.to_openai()]


def test_a_refusal_is_kept(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer([Reply(Refusal("I can"), Refusal("not."))]) as server:
        message = Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ())).message()
        assert message.refusal == "I cannot." and message.content == ""


# -- what goes out ---------------------------------------------------------------------------------------------


def test_request_options_reach_the_server(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer([Reply("a"), Reply("b")]) as server:
        model = OpenAIChatModel(
            make_client(server.base_url),
            "qwen-plus",
            temperature=0.2,
            max_tokens=50,
            tool_choice="auto",
            parallel_tool_calls=False,
            extra_body={"top_k": 5, "enable_thinking": False},
            extra_headers={"X-Trace": "t-1"},
        )
        Collector(model.stream(HI, [WEATHER])).message()
        body = server.request(0).body
        assert (body["temperature"], body["max_tokens"], body["top_k"], body["enable_thinking"]) == (0.2, 50, 5, False)
        assert (body["tool_choice"], body["parallel_tool_calls"]) == ("auto", False)
        assert server.request(0).headers["x-trace"] == "t-1"
        # Without tools (an agent's last allowed call), the options an API refuses without tools are left out.
        Collector(model.stream(HI, ())).message()
        assert server.request(1).wait() == "completed"
        assert "tool_choice" not in server.request(1).body and "parallel_tool_calls" not in server.request(1).body


def test_the_history_goes_out_as_to_openai_writes_it(make_client: Callable[..., Client]) -> None:
    history: list[Message] = [
        UserMessage(content="weather?", name="alice"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="weather", arguments="{}"),)),
        ToolMessage(tool_call_id="c1", content="sunny", name="weather", is_error=False),
    ]
    with ChatCompletionsServer([Reply("Sunny.")]) as server:
        Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(history, [WEATHER])).message()
        assert server.request(0).messages == to_openai(history)
        assert "name" not in server.request(0).messages[2]


def test_without_stream_options_no_usage_is_asked_for(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer([Reply("a")]) as server:
        model = OpenAIChatModel(make_client(server.base_url), "m", stream_options=None)
        assert Collector(model.stream(HI, ())).message().usage is None
        assert "stream_options" not in server.request(0).body


# -- how it fails ------------------------------------------------------------------------------------------------


def test_a_400_becomes_a_model_api_error_with_the_json_error(make_client: Callable[..., Client]) -> None:
    script = [ErrorReply(400, "This model's maximum context length is 8192 tokens.", code="context_length_exceeded")]
    with ChatCompletionsServer(script) as server:
        model = OpenAIChatModel(make_client(server.base_url), "m", provider="dashscope")
        error = _failure(Collector(model.stream(HI, ())))
        assert isinstance(error, RunError) and error.status_code == 400 and error.provider == "dashscope"
        assert error.body == {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "param": None,
            "code": "context_length_exceeded",
        }
        assert "HTTP 400: This model's maximum context length" in str(error)
        assert isinstance(error.__cause__, openai.BadRequestError)


def test_a_request_the_api_refuses_fails_with_what_it_said(make_client: Callable[..., Client]) -> None:
    unanswered: list[Message] = [
        UserMessage(content="a"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),)),
        UserMessage(content="b"),
    ]
    with ChatCompletionsServer([Reply("never")]) as server:
        error = _failure(Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(unanswered, ())))
        assert error.status_code == 400 and isinstance(error.body, dict)
        assert "must be followed by tool messages" in error.body["message"] and "'c1'" in error.body["message"]
        assert server.request(0).wait() == "rejected"


def test_a_500_becomes_a_model_api_error(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer([ErrorReply(500, "the engine is overloaded")]) as server:
        error = _failure(Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ())))
        assert error.status_code == 500 and isinstance(error.body, dict) and error.body["type"] == "server_error"
        assert isinstance(error.__cause__, openai.InternalServerError) and error.provider == "openai"


def test_a_refused_connection_becomes_a_model_api_error_without_status(make_client: Callable[..., Client]) -> None:
    with ChatCompletionsServer() as server:
        base_url = server.base_url
    # The server is stopped: nothing listens on its port any more.
    error = _failure(Collector(OpenAIChatModel(make_client(base_url), "m").stream(HI, ())))
    assert error.status_code is None and error.body is None and "no connection" in str(error)
    assert isinstance(error.__cause__, openai.APIConnectionError)


def test_a_stream_that_stalls_past_the_timeout_becomes_a_model_api_error(make_client: Callable[..., Client]) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("a", gate)]) as server:
        error = _failure(Collector(OpenAIChatModel(make_client(server.base_url), "m", timeout=0.2).stream(HI, ())))
        assert error.status_code is None and "timed out" in str(error)
        # The client's timeout error: openai's (clients from 3 on) or its HTTP client's (before 3).
        assert isinstance(error.__cause__, openai.APITimeoutError) or type(error.__cause__).__name__ == "ReadTimeout"
        assert server.request(0).wait() == "aborted"  # the client gave up on the stream
        gate.open()


@pytest.mark.parametrize("module", ["httpx", "httpx2"])
def test_the_http_clients_own_errors_read_as_the_openai_errors_they_stand_for(module: str) -> None:
    # The openai clients before 3 let the HTTP client's error out of a stream they were reading, unwrapped: a cut
    # stream and a timeout must read the same as the APIConnectionError / APITimeoutError later clients raise.
    http = pytest.importorskip(module)
    model = OpenAIChatModel(openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"), "m")
    broke = http.RemoteProtocolError("peer closed connection without sending complete message body")
    cut = model._error(broke, finished=False)
    assert "the stream was cut before the model finished: RemoteProtocolError(" in str(cut)
    assert cut.__cause__ is broke and cut.status_code is None
    assert "the stream broke after the model finished" in str(model._error(broke, finished=True))
    assert "no connection: " in str(model._error(http.ConnectError("refused"), finished=None))
    stalled = http.ReadTimeout("timed out")
    assert "the request timed out" in str(model._error(stalled, finished=False))
    assert "ValueError: odd" in str(model._error(ValueError("odd"), finished=False))  # anything else: as it is


# -- disposing closes the HTTP stream ------------------------------------------------------------------------------


def test_disposing_mid_answer_closes_the_stream_while_the_server_still_generates(
    make_client: Callable[..., Client],
) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("first", gate, "never")]) as server:
        collector = Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ()))
        assert collector.first.wait(5)
        gate.wait_for_arrivals(1)
        collector.subscription.dispose()
        served = server.request(0)
        assert served.wait() == "aborted"
        assert [c.content for c in collector.chunks] == ["first"]
        assert not collector.ended.is_set()  # a disposed subscription hears no end either
        gate.open()


def test_disposing_before_the_first_chunk_closes_the_stream_too(make_client: Callable[..., Client]) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply(gate, "never")]) as server:
        collector = Collector(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ()))
        gate.wait_for_arrivals(1)  # the request was answered with headers; no chunk yet
        collector.subscription.dispose()
        assert server.request(0).wait() == "aborted"
        assert collector.chunks == [] and not collector.ended.is_set()


def test_a_disposed_stream_leaves_the_client_usable(make_client: Callable[..., Client]) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("a", gate), Reply("next")]) as server:
        model = OpenAIChatModel(make_client(server.base_url), "m")
        first = Collector(model.stream(HI, ()))
        gate.wait_for_arrivals(1)
        first.subscription.dispose()
        assert server.request(0).wait() == "aborted"
        assert Collector(model.stream(HI, ())).message().content == "next"


def test_an_answer_read_to_its_end_leaves_its_connection_for_the_next_request() -> None:
    # The dispose that follows the completion (reactivex disposes a subscription once it completed) must not cancel
    # the reader: it closes the finished stream itself, and the client's pool keeps the connection alive. (The async
    # client, as a server uses it; the blocking client opens a connection per request against this server anyway.)
    with ChatCompletionsServer([Reply("one"), Reply("two"), Reply("three")]) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        model = OpenAIChatModel(client, "m")
        answers = [Collector(model.stream(HI, ())).message().content for _ in range(3)]
        clients = {server.request(index).client for index in range(3)}
        asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(5)

    assert answers == ["one", "two", "three"]
    assert len(clients) == 1 and None not in clients, clients


# -- where it runs -----------------------------------------------------------------------------------------------


def _named_threads(name: str) -> NewThreadScheduler:
    return NewThreadScheduler(lambda target: threading.Thread(target=target, name=name, daemon=True))


def test_the_blocking_client_reads_on_the_pool_it_is_subscribed_with_else_on_its_own() -> None:
    with (
        ChatCompletionsServer(lambda body: Reply("a")) as server,
        openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client,
    ):
        model = OpenAIChatModel(client, "m")
        on_pool = Collector(model.stream(HI, ()), scheduler=_named_threads("the-run-pool")).wait()
        assert on_pool.threads == {"the-run-pool"}
        elsewhere = Collector(model.stream(HI, ()), scheduler=ImmediateScheduler.singleton()).wait()
        assert elsewhere.completed and threading.current_thread().name not in elsewhere.threads
        assert not any(name == "the-run-pool" for name in elsewhere.threads)
        own = OpenAIChatModel(client, "m", scheduler=_named_threads("given"))
        assert Collector(own.stream(HI, ()), scheduler=_named_threads("the-run-pool")).wait().threads == {"given"}


def test_the_async_client_runs_on_the_loop_of_its_scheduler() -> None:
    with ChatCompletionsServer(lambda body: Reply("a", "b")) as server:

        async def main() -> tuple[list[str], set[str], str]:
            loop = asyncio.get_running_loop()
            done = asyncio.Event()
            seen: list[str] = []
            threads: set[str] = set()
            async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client:

                def on_next(chunk: ChatChunk) -> None:
                    seen.append(chunk.content)
                    threads.add(threading.current_thread().name)

                OpenAIChatModel(client, "m").stream(HI, ()).subscribe(
                    on_next, lambda e: done.set(), done.set, scheduler=AsyncIOScheduler(loop)
                )
                await asyncio.wait_for(done.wait(), 5)
            return seen, threads, threading.current_thread().name

        seen, threads, loop_thread = asyncio.run(main())
        assert "".join(seen) == "ab" and threads == {loop_thread}


def test_the_async_client_without_a_loop_runs_on_rxgraphs_background_loop() -> None:
    with ChatCompletionsServer(lambda body: Reply("a")) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            collector = Collector(OpenAIChatModel(client, "m").stream(HI, ())).wait()
            assert collector.completed and collector.threads == {"rxgraph-asyncio"}
        finally:
            asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(5)


# -- in an agent ---------------------------------------------------------------------------------------------------


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def test_an_agent_turn_with_a_tool_through_a_strict_server(make_client: Callable[..., Client]) -> None:
    script = [
        Reply(StreamedCall("call_1", "get_weather", '{"city": "Paris"}'), usage=(20, 5)),
        Reply("Sunny ", "in Paris.", usage=(40, 3)),
    ]
    with ChatCompletionsServer(script) as server:
        model = OpenAIChatModel(make_client(server.base_url), "m")
        agent = ReactAgent(model, [get_weather], checkpointer=MemorySaver(), system_prompt="Be brief.")
        config = RunnableConfig(thread_id="t")
        answer = agent.invoke("Weather in Paris?", config)
        assert answer.content == "Sunny in Paris."
        assert answer.usage == TokenUsage(prompt_tokens=40, completion_tokens=3, total_tokens=43)
        history = agent.get_state(config).values["messages"]
        assert history[1].usage == TokenUsage(prompt_tokens=20, completion_tokens=5, total_tokens=25)
        assert [r.wait() for r in server.requests] == ["completed", "completed"]
        second = server.request(1).messages
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
        assert second[3] == {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Paris"}


def test_cancelling_an_agent_turn_closes_the_model_stream(make_client: Callable[..., Client]) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("Thinking", gate, " more")]) as server:
        agent = ReactAgent(OpenAIChatModel(make_client(server.base_url), "m"), checkpointer=MemorySaver())
        config = RunnableConfig(thread_id="t")
        streamed = threading.Event()
        subscription = agent.stream("hi", config).subscribe(
            lambda output: streamed.set() if isinstance(output, StreamingOutput) else None
        )
        assert streamed.wait(5)
        gate.wait_for_arrivals(1)
        subscription.dispose()
        assert server.request(0).wait() == "aborted"
        assert agent.get_state(config).values.get("messages", ()) == ()  # the turn was rewound


# -- the object itself ---------------------------------------------------------------------------------------------


def test_bad_arguments_are_refused_when_the_model_is_made() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
    try:
        with pytest.raises(InvalidTypeError) as not_a_client:
            OpenAIChatModel(object(), "m")  # type: ignore[arg-type]
        assert not_a_client.value.argument == "client"
        with pytest.raises(InvalidArgumentError):
            OpenAIChatModel(client, "")
        for key in ("messages", "stream", "tools"):
            with pytest.raises(InvalidArgumentError) as own:
                OpenAIChatModel(client, "m", **{key: True})
            assert own.value.argument == key
        with pytest.raises(InvalidArgumentError, match="n must be 1"):
            OpenAIChatModel(client, "m", n=2)
        with pytest.raises(InvalidTypeError):
            OpenAIChatModel(client, "m", scheduler="pool")  # type: ignore[arg-type]
        model = OpenAIChatModel(client, "m", stream_options={"include_obfuscation": False})
        assert model.request(HI, ())["stream_options"] == {"include_usage": True, "include_obfuscation": False}
        assert "'m'" in repr(model) and "sync" in repr(model)
    finally:
        client.close()


def test_nothing_is_sent_until_subscribed() -> None:
    with (
        ChatCompletionsServer([Reply("a")]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client,
    ):
        source = OpenAIChatModel(client, "m").stream(HI, ())
        assert server.requests == []
        Collector(source).message()
        assert len(server.requests) == 1


def test_importing_rxgraph_models_does_not_import_openai() -> None:
    code = "import sys, rxgraph, rxgraph.models, rxgraph.agent, rxgraph.testing; print('openai' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
