"""A turn that fails is undone like a cancelled one (agents default to ``on_error="rewind"``): the error reaches the
subscriber, the rewind records it, and the next turn's request holds nothing of the failed turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reactivex.testing import TestScheduler

from rxgraph import CheckpointSaver, NodeOutput, RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import UserMessage, check_ready_for_user_input, check_request
from rxgraph.testing import ScriptedChatModel, finish, marbles, text, tool_call


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


def test_a_model_error_after_the_tool_step_rewinds_the_turn_and_records_the_error(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver, scheduler = saver_factory(), TestScheduler()
    model = ScriptedChatModel(
        [
            [text("Hello!")],
            marbles("-a-b|", a=tool_call("call-1", "get_weather", '{"city": "Paris"}'), b=finish("tool_calls")),
            marbles("-x-#", x=text("It is "), error=RuntimeError("context length exceeded")),
            [text("Still here.")],
        ]
    )
    agent = ReactAgent(model, tools=[get_weather], checkpointer=saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    agent.invoke("Hi", config)
    before = agent.get_state(config)
    outputs: list[Any] = []
    errors: list[Exception] = []
    agent.stream("Weather in Paris?", config).subscribe(outputs.append, errors.append)
    scheduler.advance_by(50.0)

    assert [o.node for o in outputs if type(o) is NodeOutput] == ["model", "tools"]  # the tool step was written
    assert len(errors) == 1 and type(errors[0]) is RuntimeError and str(errors[0]) == "context length exceeded"
    head = saver.get("t")
    assert head is not None and head.source == "rewind"
    assert head.error == "RuntimeError: context length exceeded"
    assert head.values == before.values
    assert model.calls == 3

    assert agent.invoke("Are you there?", config).content == "Still here."
    request = model.requests[-1].messages
    check_request(request)
    assert UserMessage(content="Weather in Paris?") not in request
    assert list(request) == [*before.values["messages"], UserMessage(content="Are you there?")]
    check_ready_for_user_input(agent.get_state(config).values["messages"])
