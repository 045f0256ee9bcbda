"""Saver I/O and sync tools never run on an event loop the run was not put on: a model streaming on an event loop
(the async ``openai`` client on rxgraph's background loop) hands what follows back to the run's own threads.

One loop serves every run's model stream; a checkpoint written on it would hold up all of them (and a blocking tool,
all the more). Real parts: the official client, a local OpenAI-compatible server, a real saver."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import openai
import pytest

from rxgraph import Checkpoint, CheckpointSaver, MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent, tool
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


@pytest.fixture
def agent() -> Iterator[Callable[[], tuple[ReactAgent, LoopWatchingSaver, list[bool]]]]:
    with ChatCompletionsServer(_reply) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)

        def make() -> tuple[ReactAgent, LoopWatchingSaver, list[bool]]:
            tool_on_a_loop: list[bool] = []

            @tool
            def get_weather(city: str) -> str:
                """The weather in a city."""
                tool_on_a_loop.append(running_loop() is not None)
                return f"Sunny in {city}"

            saver = LoopWatchingSaver(MemorySaver())
            return ReactAgent(OpenAIChatModel(client, "m"), [get_weather], checkpointer=saver), saver, tool_on_a_loop

        try:
            yield make
        finally:  # its connections live on the loop that used them: rxgraph's background loop
            asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(10)


def test_astream_writes_and_calls_tools_off_every_loop(
    agent: Callable[[], tuple[ReactAgent, LoopWatchingSaver, list[bool]]],
) -> None:
    react, saver, tool_on_a_loop = agent()

    async def main() -> None:
        async for _ in react.astream("Weather?", RunnableConfig(thread_id="t")):
            pass

    asyncio.run(main())
    assert len(saver.writes) == 4 and tool_on_a_loop == [False]
    assert [name for name, on_a_loop in saver.writes if on_a_loop] == []


def test_invoke_with_an_async_model_writes_and_calls_tools_off_the_models_loop(
    agent: Callable[[], tuple[ReactAgent, LoopWatchingSaver, list[bool]]],
) -> None:
    react, saver, tool_on_a_loop = agent()
    assert react.invoke("Weather?", RunnableConfig(thread_id="t")).content == "Sunny today."
    assert len(saver.writes) == 4 and tool_on_a_loop == [False]
    assert [name for name, on_a_loop in saver.writes if on_a_loop] == []
