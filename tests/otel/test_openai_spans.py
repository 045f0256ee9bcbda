"""``OpenAIChatModel``'s calls as GenAI ``chat`` spans, against the local OpenAI-compatible server: the model, the
server, the token counts the API reported and the finish reasons; message contents only when asked for."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from _openai_clients import Client
from otel._recording import Recorded

import rxgraph.otel
from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.models.openai import OpenAIChatModel
from rxgraph.testing import ChatCompletionsServer, Reply, StreamedCall

CONFIG = RunnableConfig(thread_id="t")


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def _script() -> list[Reply]:
    return [
        Reply(StreamedCall("call_1", "weather", '{"city": "Paris"}'), usage=(31, 7)),
        Reply("Sunny ", "in Paris.", usage=(45, 4)),
    ]


def test_each_model_call_is_one_chat_span_with_the_model_and_the_tokens_the_server_reported(
    otel: Recorded, make_client: Callable[[str], Client]
) -> None:
    with ChatCompletionsServer(_script()) as server:
        client = make_client(server.base_url)
        agent = ReactAgent(OpenAIChatModel(client, "gpt-test"), tools=[weather], checkpointer=MemorySaver())
        assert agent.invoke("Weather in Paris?", CONFIG).content == "Sunny in Paris."
    chats = otel.named("chat gpt-test")
    assert len(chats) == 2  # the adapter traces its calls; the agent does not trace them again
    host, port = client.base_url.host, client.base_url.port
    for chat, (tokens_in, tokens_out, reason) in zip(chats, [(31, 7, "tool_calls"), (45, 4, "stop")], strict=True):
        assert chat.attributes is not None
        assert dict(chat.attributes) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-test",
            "gen_ai.provider.name": "openai",
            "server.address": host,
            "server.port": port,
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "gen_ai.response.finish_reasons": (reason,),
        }
        node = otel.parent(chat)
        assert node is not None and node.attributes is not None and node.attributes["rxgraph.node"] == "model"
    assert otel.open.names() == []


def test_message_contents_are_on_the_spans_only_when_the_application_asks(
    otel: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(rxgraph.otel.CAPTURE_MESSAGE_CONTENT, "true")
    rxgraph.otel.instrument(tracer_provider=otel.tracer_provider)  # the switch is read when instrumenting
    with ChatCompletionsServer(_script()) as server, openai.OpenAI(base_url=server.base_url, api_key="t") as client:
        agent = ReactAgent(OpenAIChatModel(client, "gpt-test"), tools=[weather], checkpointer=MemorySaver())
        agent.invoke("Weather in Paris?", CONFIG)
    _, second = otel.named("chat gpt-test")
    attributes: dict[str, Any] = dict(second.attributes or {})
    assert json.loads(attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "weather", "arguments": {"city": "Paris"}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "Paris: sunny"}]},
    ]
    assert json.loads(attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Sunny in Paris."}], "finish_reason": "stop"}
    ]
    call = otel.one("execute_tool weather")
    assert call.attributes is not None
    assert call.attributes["gen_ai.tool.call.arguments"] == '{"city": "Paris"}'
    assert call.attributes["gen_ai.tool.call.result"] == "Paris: sunny"

    otel.exporter.clear()
    monkeypatch.delenv(rxgraph.otel.CAPTURE_MESSAGE_CONTENT)
    rxgraph.otel.instrument(tracer_provider=otel.tracer_provider)
    with ChatCompletionsServer(_script()) as server, openai.OpenAI(base_url=server.base_url, api_key="t") as client:
        agent = ReactAgent(OpenAIChatModel(client, "gpt-test"), tools=[weather], checkpointer=MemorySaver())
        agent.invoke("Weather in Paris?", CONFIG)
    for span in otel.spans():
        assert not any(
            key.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
            for key in span.attributes or {}
        )
