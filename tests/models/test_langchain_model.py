"""``LangChainChatModel``: LangChain's own fake chat models for the conversions (text, tool calls, usage, finish
reasons), and LangChain's ``ChatOpenAI`` against the local OpenAI-compatible server for what goes over the wire: the
request it sends, its errors, and that disposing the stream aborts the HTTP stream — in an agent's turn too, which is
rewound, so that the next request is one a strict API takes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages import ToolMessage as LangChainToolMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from models.test_openai_model import HI, WEATHER, Collector
from pydantic import Field
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxgraph import MemorySaver, RunnableConfig, StreamingOutput
from rxgraph.agent import ChatChunk, ReactAgent, ToolCallDelta, ToolSpec
from rxgraph.errors import InvalidTypeError, ModelAPIError
from rxgraph.messages import (
    AssistantMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
    check_request,
    to_openai,
)
from rxgraph.messages import SystemMessage as RxSystemMessage
from rxgraph.models.langchain import LangChainChatModel, to_langchain_messages
from rxgraph.testing import ChatCompletionsServer, Cut, ErrorReply, Gate, Reply, StreamedCall


class ChunksChatModel(GenericFakeChatModel):
    """LangChain's generic fake model streaming the chunks it is given, as a provider's integration streams its own
    (tool-call chunks, usage, response metadata), and keeping the tools it was bound with."""

    chunks: list[AIMessageChunk]
    bound: list[Any] = Field(default_factory=list)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self.chunks:
            yield ChatGenerationChunk(message=chunk)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound.append((list(tools), kwargs))
        return self.bind(tools=tools, **kwargs)


class ToolCallingFake(FakeMessagesListChatModel):
    """LangChain's fake model of whole answers (it does not stream: each answer comes in one piece), able to take
    tools as real chat models do."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=tools, **kwargs)


@pytest.fixture
def chat_openai() -> Iterator[Any]:
    """Makes LangChain ``ChatOpenAI`` models on a local server: no retries, token usage streamed."""

    def make(server: ChatCompletionsServer, **options: Any) -> ChatOpenAI:
        options.setdefault("max_retries", 0)
        options.setdefault("stream_usage", True)
        return ChatOpenAI(base_url=server.base_url, api_key="test", model="gpt-test", **options)

    yield make


def _chunks(model: LangChainChatModel, messages: Sequence[Message] = HI, tools: Sequence[ToolSpec] = ()) -> Collector:
    return Collector(model.stream(messages, tools)).wait()


def _call_chunk(index: int | None, id: str | None, name: str | None, args: str) -> AIMessageChunk:
    return AIMessageChunk(content="", tool_call_chunks=[{"index": index, "id": id, "name": name, "args": args}])


# -- what comes back, from LangChain's fake models -----------------------------------------------------------------


def test_text_streams_as_the_model_streams_it() -> None:
    model = LangChainChatModel(GenericFakeChatModel(messages=iter(["Hello there, friend"])))
    collector = _chunks(model)
    assert collector.completed
    assert [c.content for c in collector.chunks] == ["Hello", " ", "there,", " ", "friend"]
    assert collector.message() == AssistantMessage(content="Hello there, friend")


def test_a_whole_answer_with_tool_calls_and_usage_becomes_one_chunk() -> None:
    answer = AIMessage(
        content="Let me check.",
        tool_calls=[
            {"id": "c1", "name": "weather", "args": {"city": "Zürich"}},
            {"id": "c2", "name": "time", "args": {}},
        ],
        usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
        response_metadata={"finish_reason": "tool_calls"},
    )
    collector = _chunks(LangChainChatModel(ToolCallingFake(responses=[answer])), tools=[WEATHER])
    assert collector.chunks == [
        ChatChunk(
            content="Let me check.",
            tool_calls=(
                ToolCallDelta(index=0, id="c1", name="weather", arguments='{"city": "Zürich"}'),
                ToolCallDelta(index=1, id="c2", name="time", arguments="{}"),
            ),
            finish_reason="tool_calls",
            usage=TokenUsage(prompt_tokens=12, completion_tokens=5, total_tokens=17),
        )
    ]


def test_tool_call_chunks_become_deltas_by_index_and_merge_into_calls() -> None:
    chunks = [
        _call_chunk(0, "c1", "weather", ""),
        _call_chunk(1, "c2", "weather", '{"ci'),
        _call_chunk(0, None, None, '{"city": "Oslo"}'),
        _call_chunk(1, None, None, 'ty": "Rome"}'),
        AIMessageChunk(content="", response_metadata={"finish_reason": "tool_calls"}),
    ]
    collector = _chunks(LangChainChatModel(ChunksChatModel(messages=iter(()), chunks=chunks)), tools=[WEATHER])
    assert collector.chunks[2].tool_calls == (ToolCallDelta(index=0, arguments='{"city": "Oslo"}'),)
    assert collector.message() == AssistantMessage(
        tool_calls=[
            ToolCall(id="c1", name="weather", arguments='{"city": "Oslo"}'),
            ToolCall(id="c2", name="weather", arguments='{"city": "Rome"}'),
        ]
    )
    assert collector.chunks[-1].finish_reason == "tool_calls"


def test_calls_without_an_index_are_calls_of_their_own_as_langchain_merges_them() -> None:
    chunks = [_call_chunk(None, "a", "weather", "{}"), _call_chunk(None, "b", "weather", "{}")]
    message = _chunks(LangChainChatModel(ChunksChatModel(messages=iter(()), chunks=chunks)), tools=[WEATHER]).message()
    assert [call.id for call in message.tool_calls] == ["a", "b"]


def test_usage_adds_up_over_the_chunks_as_langchain_adds_it() -> None:
    # Anthropic's way: the prompt's tokens on the first chunk, the answer's on the last.
    chunks = [
        AIMessageChunk(content="Hi", usage_metadata={"input_tokens": 30, "output_tokens": 1, "total_tokens": 31}),
        AIMessageChunk(content="!", usage_metadata={"input_tokens": 0, "output_tokens": 6, "total_tokens": 6}),
        AIMessageChunk(content="", response_metadata={"stop_reason": "end_turn"}),
    ]
    collector = _chunks(LangChainChatModel(ChunksChatModel(messages=iter(()), chunks=chunks)))
    assert [c.usage for c in collector.chunks] == [
        TokenUsage(prompt_tokens=30, completion_tokens=1, total_tokens=31),
        TokenUsage(prompt_tokens=30, completion_tokens=7, total_tokens=37),
        None,
    ]
    assert collector.message().usage == TokenUsage(prompt_tokens=30, completion_tokens=7, total_tokens=37)
    assert collector.chunks[-1].finish_reason == "end_turn"  # the provider's own word for it


def test_text_blocks_of_a_list_content_are_the_text_and_other_blocks_are_not_kept() -> None:
    chunks = [
        AIMessageChunk(content=[{"type": "thinking", "thinking": "hmm", "index": 0}]),
        AIMessageChunk(content=[{"type": "text", "text": "Forty-two.", "index": 1}]),
    ]
    collector = _chunks(LangChainChatModel(ChunksChatModel(messages=iter(()), chunks=chunks)))
    assert [c.content for c in collector.chunks] == ["Forty-two."]


def test_a_refusal_is_kept() -> None:
    chunks = [AIMessageChunk(content="", additional_kwargs={"refusal": "I can't help with that."})]
    message = _chunks(LangChainChatModel(ChunksChatModel(messages=iter(()), chunks=chunks))).message()
    assert message.refusal == "I can't help with that."


def test_the_tools_are_bound_in_openai_format_with_the_tool_options() -> None:
    fake = ChunksChatModel(messages=iter(()), chunks=[AIMessageChunk(content="ok")], bound=[])
    model = LangChainChatModel(fake, tool_choice="auto", parallel_tool_calls=False)
    _chunks(model, tools=[WEATHER])
    _chunks(model)  # a request without tools binds none
    assert fake.bound == [([WEATHER.to_openai()], {"tool_choice": "auto", "parallel_tool_calls": False})]


def test_tools_offered_to_a_model_that_cannot_bind_them_fail_the_stream() -> None:
    collector = _chunks(LangChainChatModel(GenericFakeChatModel(messages=iter(["a"]))), tools=[WEATHER])
    assert isinstance(collector.error, InvalidTypeError) and collector.error.argument == "model"
    assert "bind_tools" in str(collector.error)


def test_a_provider_error_becomes_a_model_api_error() -> None:
    class Failing(GenericFakeChatModel):
        def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
            raise ConnectionError("the provider went away")

    collector = _chunks(LangChainChatModel(Failing(messages=iter(())), provider="fake"))
    error = collector.error
    assert isinstance(error, ModelAPIError) and error.status_code is None and error.provider == "fake"
    assert isinstance(error.__cause__, ConnectionError) and "the provider went away" in str(error)


def test_without_a_finish_reason_a_stream_completes_unless_one_is_required() -> None:
    def fake() -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter(["half an"]))

    assert _chunks(LangChainChatModel(fake())).completed
    error = _chunks(LangChainChatModel(fake(), require_finish_reason=True)).error
    assert isinstance(error, ModelAPIError) and "without a finish reason" in str(error)


# -- the history, converted ------------------------------------------------------------------------------------------

HISTORY: list[Message] = [
    RxSystemMessage(content="Be brief."),
    UserMessage(content="Weather in Oslo?", name="ann"),
    AssistantMessage(content="Checking.", tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city": "Oslo"}')]),
    ToolMessage(tool_call_id="c1", content="Sunny", name="weather"),
    AssistantMessage(content="Sunny.", usage=TokenUsage(prompt_tokens=9, completion_tokens=2, total_tokens=11)),
    UserMessage(content="Thanks!"),
]


def test_the_history_becomes_langchain_message_objects() -> None:
    converted = to_langchain_messages(HISTORY)
    assert [type(m) for m in converted] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        LangChainToolMessage,
        AIMessage,
        HumanMessage,
    ]
    assert converted[1].name == "ann"
    assert isinstance(converted[2], AIMessage)
    assert converted[2].tool_calls == [{"id": "c1", "name": "weather", "args": {"city": "Oslo"}, "type": "tool_call"}]
    assert isinstance(converted[3], LangChainToolMessage) and converted[3].tool_call_id == "c1"
    assert isinstance(converted[4], AIMessage) and converted[4].usage_metadata == {
        "input_tokens": 9,
        "output_tokens": 2,
        "total_tokens": 11,
    }


def test_chat_openai_sends_the_history_as_rxgraphs_own_wire_format_writes_it(chat_openai: Any) -> None:
    with ChatCompletionsServer([Reply("You're welcome.")]) as server:
        _chunks(LangChainChatModel(chat_openai(server)), HISTORY, [WEATHER]).message()
        served = server.request(0)
        assert served.status == 200 and served.messages == to_openai(HISTORY)
        assert served.body["tools"] == [WEATHER.to_openai()]


def test_a_users_image_audio_and_file_parts_reach_the_api_exactly(chat_openai: Any) -> None:
    question = UserMessage(
        content=(
            TextPart(text="What is in these?"),
            ImagePart(url="https://example.com/chart.png", detail="low"),
            AudioPart(data="UklGRg==", format="wav"),
            FilePart(file_id="file-7"),
        )
    )
    with ChatCompletionsServer([Reply("A chart, a sound and a file.")]) as server:
        _chunks(LangChainChatModel(chat_openai(server)), [question]).message()
        served = server.request(0)
        assert served.status == 200 and served.messages == to_openai([question])


# -- ChatOpenAI against a local server -----------------------------------------------------------------------------


def test_chat_openai_streams_text_tool_calls_usage_and_the_finish_reason(chat_openai: Any) -> None:
    reply = Reply("Let me check.", StreamedCall("c1", "weather", '{"city": "Paris"}', pieces=3), usage=(20, 5))
    with ChatCompletionsServer([reply]) as server:
        model = LangChainChatModel(chat_openai(server))
        collector = _chunks(model, tools=[WEATHER])
        assert collector.message() == AssistantMessage(
            content="Let me check.",
            tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}')],
            usage=TokenUsage(prompt_tokens=20, completion_tokens=5, total_tokens=25),
        )
        assert [c.finish_reason for c in collector.chunks if c.finish_reason] == ["tool_calls"]
        assert model.provider == "openai" and model.model_name == "gpt-test"
        assert "ChatOpenAI" in repr(model)


def test_an_api_error_becomes_a_model_api_error_with_its_status_and_body(chat_openai: Any) -> None:
    with ChatCompletionsServer([ErrorReply(429, "slow down")]) as server:
        error = _chunks(LangChainChatModel(chat_openai(server))).error
        assert isinstance(error, ModelAPIError) and error.status_code == 429 and error.provider == "openai"
        assert isinstance(error.__cause__, openai.RateLimitError) and "slow down" in str(error)
        assert isinstance(error.body, dict) and error.body["message"] == "slow down"


def test_a_stream_cut_by_the_server_fails_when_a_finish_reason_is_required(chat_openai: Any) -> None:
    with ChatCompletionsServer([Reply("The answer is ", "forty", Cut())] * 2) as server:
        lenient = _chunks(LangChainChatModel(chat_openai(server)))
        assert lenient.completed  # LangChain's stream ends without an error: only the finish reason tells
        strict = _chunks(LangChainChatModel(chat_openai(server), require_finish_reason=True))
        assert isinstance(strict.error, ModelAPIError) and strict.error.provider == "openai"
        assert [c.content for c in strict.chunks] == ["The answer is ", "forty"]


def test_nothing_is_sent_until_subscribed(chat_openai: Any) -> None:
    with ChatCompletionsServer([Reply("a")]) as server:
        source = LangChainChatModel(chat_openai(server)).stream(HI, ())
        assert server.requests == []
        assert _collect(source).message().content == "a"
        assert len(server.requests) == 1


def _collect(source: Any) -> Collector:
    return Collector(source).wait()


def test_disposing_mid_answer_aborts_the_http_stream(chat_openai: Any) -> None:
    gate = Gate()
    with ChatCompletionsServer([Reply("first", gate, "never"), Reply("next")]) as server:
        model = LangChainChatModel(chat_openai(server))
        collector = Collector(model.stream(HI, ()))
        assert collector.first.wait(5)
        gate.wait_for_arrivals(1)
        collector.subscription.dispose()
        assert server.request(0).wait() == "aborted"
        assert [c.content for c in collector.chunks] == ["first"]
        assert not collector.ended.is_set()  # a disposed subscription hears no end
        assert _chunks(model).message().content == "next"  # the model is still usable
        gate.open()


def test_the_stream_runs_on_rxgraphs_background_loop_whatever_loop_subscribes_it(chat_openai: Any) -> None:
    # langchain-openai keeps one async HTTP client per base_url, bound to the first loop that used it: streaming on
    # the subscriber's loop would break the next stream subscribed from another.
    with ChatCompletionsServer(lambda body: Reply("a", "b")) as server:
        model = LangChainChatModel(chat_openai(server))
        assert _chunks(model).threads == {"rxgraph-asyncio"}

        async def main() -> Collector:
            collector = Collector(model.stream(HI, ()), scheduler=AsyncIOScheduler(asyncio.get_running_loop()))
            await asyncio.get_running_loop().run_in_executor(None, collector.wait)
            return collector

        from_a_coroutine = asyncio.run(main())
        assert from_a_coroutine.message().content == "ab" and from_a_coroutine.threads == {"rxgraph-asyncio"}


# -- in an agent -----------------------------------------------------------------------------------------------------


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def test_an_agent_turn_with_a_tool_through_chat_openai_and_a_strict_server(chat_openai: Any) -> None:
    script = [
        Reply(StreamedCall("call_1", "get_weather", '{"city": "Paris"}'), usage=(20, 5)),
        Reply("Sunny ", "in Paris.", usage=(40, 3)),
    ]
    with ChatCompletionsServer(script) as server:
        agent = ReactAgent(LangChainChatModel(chat_openai(server)), [get_weather], checkpointer=MemorySaver())
        config = RunnableConfig(thread_id="t")
        answer = agent.invoke("Weather in Paris?", config)
        assert answer == AssistantMessage(
            content="Sunny in Paris.", usage=TokenUsage(prompt_tokens=40, completion_tokens=3, total_tokens=43)
        )
        assert [r.wait() for r in server.requests] == ["completed", "completed"]
        assert server.request(1).messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Paris"}


def test_a_turn_cut_while_the_model_streams_aborts_the_stream_is_rewound_and_the_next_request_is_valid(
    chat_openai: Any,
) -> None:
    gate = Gate()  # never opened: the model is still generating when the turn is cut
    script = [
        Reply("Hello!"),
        Reply(StreamedCall("call_1", "get_weather", '{"city": "Paris"}')),
        Reply("Sunny", gate, " today."),
        Reply("You're welcome."),
    ]
    with ChatCompletionsServer(script) as server:
        saver = MemorySaver()
        agent = ReactAgent(LangChainChatModel(chat_openai(server)), [get_weather], checkpointer=saver)
        config = RunnableConfig(thread_id="t")
        assert agent.invoke("Hi", config).content == "Hello!"
        before = agent.get_state(config)
        streaming = threading.Event()

        def on_output(output: Any) -> None:
            if isinstance(output, StreamingOutput) and output.node == "model" and output.chunk.content == "Sunny":
                streaming.set()

        turn = agent.stream("Weather in Paris?", config).subscribe(on_output)
        assert streaming.wait(5)
        gate.wait_for_arrivals(1)
        turn.dispose()
        assert server.request(2).wait() == "aborted"  # the HTTP stream was closed while the model generated
        after = agent.get_state(config)
        assert after.checkpoint.source == "rewind" and after.values == before.values
        assert agent.invoke("Thanks!", config).content == "You're welcome."
        following = server.request(3)
        assert (following.status, following.wait()) == (200, "completed")  # a strict API took it
        assert [(m["role"], m["content"]) for m in following.messages] == [
            ("user", "Hi"),
            ("assistant", "Hello!"),
            ("user", "Thanks!"),
        ]
        check_request(agent.get_state(config).values["messages"])
        gate.open()


# -- the object itself -----------------------------------------------------------------------------------------------


def test_a_model_that_is_not_a_langchain_chat_model_is_refused() -> None:
    with pytest.raises(InvalidTypeError) as caught:
        LangChainChatModel(object())  # type: ignore[arg-type]
    assert caught.value.argument == "model"
    with pytest.raises(InvalidTypeError) as flag:
        LangChainChatModel(GenericFakeChatModel(messages=iter(())), require_finish_reason="yes")  # type: ignore[arg-type]
    assert flag.value.argument == "require_finish_reason"


def test_importing_rxgraph_models_and_agent_does_not_import_langchain() -> None:
    code = (
        "import sys, rxgraph, rxgraph.models, rxgraph.tools, rxgraph.agent, rxgraph.testing\n"
        "from rxgraph.agent import ReactAgent\n"
        "from rxgraph.testing import ScriptedChatModel, text\n"
        "def f(x: int) -> int:\n    return x\n"
        "ReactAgent(ScriptedChatModel([[text('a')]]), tools=[f]).invoke('hi')\n"
        "print(sorted(m for m in sys.modules if m.startswith('langchain')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr
