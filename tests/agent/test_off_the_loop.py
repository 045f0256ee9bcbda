"""Saver I/O and sync tools never run on an event loop: a model streaming on an event loop (the async ``openai``
client on the loop of the code that awaits the run, or on rxgraph's background loop) hands what follows back to the
run's own threads.

One loop serves every run's model stream (and a server's requests); a checkpoint written on it would hold up all of
them (and a blocking tool, all the more). Real parts: the official client, a local OpenAI-compatible server, a real
saver."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import openai
import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxgraph import Checkpoint, CheckpointSaver, MemorySaver, RunnableConfig
from rxgraph.agent import ChatChunk, ReactAgent, ToolSpec, tool
from rxgraph.messages import Message
from rxgraph.models.openai import OpenAIChatModel
from rxgraph.rx._awaitable import background_loop, running_loop
from rxgraph.testing import ChatCompletionsServer, DelegatingSaver, Reply, StreamedCall


class LoopWatchingSaver(DelegatingSaver):
    """Notes the thread of every write, and whether an event loop was running on it."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.writes: list[tuple[str, bool]] = []

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        self.writes.append((threading.current_thread().name, running_loop() is not None))
        return super().put(checkpoint, expected_head=expected_head)


def _reply(body: dict[str, object]) -> Reply:
    messages = body["messages"]
    assert isinstance(messages, list)
    if messages[-1]["role"] == "tool":
        return Reply("Sunny ", "today.")
    return Reply(StreamedCall("c1", "get_weather", '{"city": "Paris"}'))


class ThreadNoting:
    """A model that notes the thread each of its chunks arrives on (the thread of the loop its request runs on)."""

    def __init__(self, inner: OpenAIChatModel) -> None:
        self.inner = inner
        self.threads: set[str] = set()

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        return self.inner.stream(messages, tools).pipe(
            ops.do_action(lambda _: self.threads.add(threading.current_thread().name))
        )


@pytest.fixture
def server() -> Iterator[ChatCompletionsServer]:
    with ChatCompletionsServer(_reply) as running:
        yield running


def _client(server: ChatCompletionsServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def _agent(client: openai.AsyncOpenAI) -> tuple[ReactAgent, LoopWatchingSaver, list[bool], ThreadNoting]:
    tool_on_a_loop: list[bool] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        tool_on_a_loop.append(running_loop() is not None)
        return f"Sunny in {city}"

    saver = LoopWatchingSaver(MemorySaver())
    model = ThreadNoting(OpenAIChatModel(client, "m"))
    return ReactAgent(model, [get_weather], checkpointer=saver), saver, tool_on_a_loop, model


def test_astream_writes_and_calls_tools_off_every_loop_and_asks_the_model_on_the_callers(
    server: ChatCompletionsServer,
) -> None:
    async def main() -> tuple[LoopWatchingSaver, list[bool], ThreadNoting, str]:
        async with _client(server) as client:  # used, and closed, on this loop: its connections are this loop's
            react, saver, tool_on_a_loop, model = _agent(client)
            async for _ in react.astream("Weather?", RunnableConfig(thread_id="t")):
                pass
            return saver, tool_on_a_loop, model, threading.current_thread().name

    saver, tool_on_a_loop, model, loop_thread = asyncio.run(main())
    assert len(saver.writes) == 4 and tool_on_a_loop == [False]
    assert [name for name, on_a_loop in saver.writes if on_a_loop] == []
    # The model's requests, like the run's async nodes and tools, on the loop of the code that awaits the run.
    assert model.threads == {loop_thread}


def test_invoke_with_an_async_model_writes_and_calls_tools_off_the_models_loop(server: ChatCompletionsServer) -> None:
    client = _client(server)
    try:
        react, saver, tool_on_a_loop, model = _agent(client)
        assert react.invoke("Weather?", RunnableConfig(thread_id="t")).content == "Sunny today."
        assert len(saver.writes) == 4 and tool_on_a_loop == [False]
        assert [name for name, on_a_loop in saver.writes if on_a_loop] == []
        assert model.threads == {"rxgraph-asyncio"}  # no loop awaits the run: rxgraph's own
    finally:  # its connections live on the loop that used them: rxgraph's background loop
        asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(10)
