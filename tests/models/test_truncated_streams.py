"""A model stream that ends before the model finished — closed early by the server, with or without ``[DONE]``, or
dropped in the middle of its body — fails ``OpenAIChatModel`` with ``ModelAPIError`` on both ``openai`` clients,
never completes as if the answer were whole; in an agent, the turn fails, is rewound, and no tool runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from reactivex import Observable

from rxgraph import RunnableConfig
from rxgraph.agent import ChatChunk, ReactAgent, ToolSpec, merge_chunks, tool
from rxgraph.checkpoint import SqliteSaver
from rxgraph.errors import ModelAPIError
from rxgraph.messages import AssistantMessage, Message, UserMessage
from rxgraph.models.openai import OpenAIChatModel
from rxgraph.testing import ChatCompletionsServer, Cut, Reply, StreamedCall

HI: list[Message] = [UserMessage(content="What is six times seven?")]
WEATHER = ToolSpec(name="weather", description="the weather in a city", parameters={"type": "object"})
CUTS = ["end", "done", "drop"]

Client = openai.OpenAI | openai.AsyncOpenAI


class Outcome:
    """What one subscription to a model's stream heard, once it ended."""

    def __init__(self, source: Observable[ChatChunk]) -> None:
        self.chunks: list[ChatChunk] = []
        self.error: Exception | None = None
        self.completed = False
        ended = threading.Event()

        def fail(error: Exception) -> None:
            self.error = error
            ended.set()

        def complete() -> None:
            self.completed = True
            ended.set()

        source.subscribe(self.chunks.append, fail, complete)
        assert ended.wait(5), "the stream did not end"

    def failure(self) -> ModelAPIError:
        assert not self.completed, f"the stream completed: {merge_chunks(self.chunks)!r}"
        assert isinstance(self.error, ModelAPIError), self.error
        return self.error


def _check_cut(error: ModelAPIError, how: str, provider: str) -> None:
    assert error.status_code is None and error.body is None and error.provider == provider
    assert "stream was cut before the model finished" in str(error)
    if how == "drop":  # the HTTP client saw the broken body: its error is the cause (wrapped by openai from 3 on)
        cause = error.__cause__
        assert isinstance(cause, openai.APIConnectionError) or type(cause).__name__ == "RemoteProtocolError", cause
    else:  # to the HTTP client, the stream ended normally
        assert error.__cause__ is None


@pytest.mark.parametrize("how", CUTS)
def test_a_text_answer_cut_before_its_finish_reason_fails_with_model_api_error(
    how: str, make_client: Callable[[str], Client]
) -> None:
    with ChatCompletionsServer([Reply("The answer is ", "forty", Cut(how))]) as server:  # type: ignore[arg-type]
        model = OpenAIChatModel(make_client(server.base_url), "m", provider="vllm")
        outcome = Outcome(model.stream(HI, ()))
        _check_cut(outcome.failure(), how, "vllm")
        assert "".join(chunk.content for chunk in outcome.chunks) == "The answer is forty"  # streamed, not finished
        assert server.request(0).wait() == "cut"


@pytest.mark.parametrize("how", CUTS)
def test_a_tool_call_cut_in_its_arguments_fails_with_model_api_error(
    how: str, make_client: Callable[[str], Client]
) -> None:
    reply = Reply(StreamedCall("call_1", "weather", '{"city": "Par', pieces=2), Cut(how))  # type: ignore[arg-type]
    with ChatCompletionsServer([reply]) as server:
        outcome = Outcome(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, [WEATHER]))
        _check_cut(outcome.failure(), how, "openai")
        assert all(chunk.finish_reason is None for chunk in outcome.chunks)


def test_a_stream_cut_before_its_first_chunk_fails_too(make_client: Callable[[str], Client]) -> None:
    with ChatCompletionsServer([Reply(Cut())]) as server:  # a 200 with an empty body
        outcome = Outcome(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ()))
        _check_cut(outcome.failure(), "end", "openai")
        assert outcome.chunks == []


def test_an_answer_whose_finish_reason_came_is_complete_without_done(make_client: Callable[[str], Client]) -> None:
    # Some servers never send [DONE]; once the finish_reason is there, the answer is all there.
    with ChatCompletionsServer([Reply("The answer is ", "forty-two", done=False)]) as server:
        outcome = Outcome(OpenAIChatModel(make_client(server.base_url), "m").stream(HI, ()))
        assert outcome.completed and outcome.error is None
        assert merge_chunks(outcome.chunks).content == "The answer is forty-two"


# -- in an agent ---------------------------------------------------------------------------------------------------


def test_an_agent_turn_whose_tool_calls_are_cut_fails_is_rewound_on_disk_and_runs_no_tool(
    make_client: Callable[[str], Client], tmp_path: Path
) -> None:
    sent: list[dict[str, Any]] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append({"to": to, "body": body})
        return "sent"

    script = [
        Reply("Hello!"),
        # The first call is whole, the second has half its arguments, and the model never finished its answer.
        Reply(
            StreamedCall("call_1", "send_email", '{"to": "bob", "body": "Lunch?"}'),
            StreamedCall("call_2", "send_email", '{"to": "al'),
            Cut(),
        ),
        Reply("Still here."),
    ]
    path = tmp_path / "agent.db"
    config = RunnableConfig(thread_id="t")
    with ChatCompletionsServer(script) as server:
        model = OpenAIChatModel(make_client(server.base_url), "m")
        with SqliteSaver(path) as saver:
            agent = ReactAgent(model, [send_email], checkpointer=saver)
            assert agent.invoke("Hi", config).content == "Hello!"
            before = agent.get_state(config).values["messages"]

            with pytest.raises(ModelAPIError, match="stream was cut before the model finished") as failed:
                agent.invoke("Email Bob and Al about lunch", config)
            assert failed.value.status_code is None
            assert sent == []  # neither the whole call nor the half one ran
            assert agent.get_state(config).values["messages"] == before

        with SqliteSaver(path) as reopened:  # the rewind is what the file holds
            head = reopened.get("t")
            assert head is not None and head.source == "rewind" and "ModelAPIError" in (head.error or "")
            agent = ReactAgent(model, [send_email], checkpointer=reopened)
            assert agent.get_state(config).values["messages"] == before
            assert agent.invoke("Are you there?", config).content == "Still here."
            assert sent == []

        assert [served.wait() for served in server.requests] == ["completed", "cut", "completed"]
        third = server.request(2).messages  # accepted by the strict server: nothing of the cut turn in it
        assert [m["role"] for m in third] == ["user", "assistant", "user"]
        assert third[1] == {"role": "assistant", "content": "Hello!"}
        assert before == [UserMessage(content="Hi"), AssistantMessage(content="Hello!", usage=before[1].usage)]
