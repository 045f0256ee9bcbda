"""``LangChainChatModel``'s calls as GenAI ``chat`` spans (named for the provider's model, with the provider, the
tokens and the finish reasons LangChain reported), and a LangChain tool's call as an ``execute_tool`` span whose
result is the tool's text."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI
from otel._recording import Recorded

import rxgraph.otel
from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent
from rxgraph.models.langchain import LangChainChatModel
from rxgraph.testing import ChatCompletionsServer, Reply, StreamedCall


@langchain_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def test_each_call_is_one_chat_span_and_the_tool_call_one_execute_tool_span(
    otel: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(rxgraph.otel.CAPTURE_MESSAGE_CONTENT, "true")
    rxgraph.otel.instrument(tracer_provider=otel.tracer_provider)
    script = [
        Reply(StreamedCall("call_1", "weather", '{"city": "Paris"}'), usage=(31, 7)),
        Reply("Sunny ", "in Paris.", usage=(45, 4)),
    ]
    with ChatCompletionsServer(script) as server:
        chat = ChatOpenAI(base_url=server.base_url, api_key="t", model="gpt-test", max_retries=0, stream_usage=True)
        agent = ReactAgent(LangChainChatModel(chat), tools=[weather], checkpointer=MemorySaver())
        assert agent.invoke("Weather in Paris?", RunnableConfig(thread_id="t")).content == "Sunny in Paris."
    chats = otel.named("chat gpt-test")
    assert len(chats) == 2  # the adapter traces its calls; the agent does not trace them again
    for span, (tokens_in, tokens_out, reason) in zip(chats, [(31, 7, "tool_calls"), (45, 4, "stop")], strict=True):
        attributes: dict[str, Any] = dict(span.attributes or {})
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "gpt-test"
        assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
            tokens_in,
            tokens_out,
        )
        assert attributes["gen_ai.response.finish_reasons"] == (reason,)
    call = otel.one("execute_tool weather")
    assert call.attributes is not None and call.attributes["gen_ai.tool.call.result"] == "Paris: sunny"
    assert otel.open.names() == []
