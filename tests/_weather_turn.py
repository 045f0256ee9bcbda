"""The seed-001 scenario, shared by the agent tests: a weather question answered with one tool call.

Timeline of turn 2, in ticks after its subscription (T):
  T+1 tool-call chunk, T+3 finish chunk, T+4 model checkpoint; the tool takes 3 ticks: T+7 tools checkpoint;
  T+9 and T+11 answer chunks, T+12 final model checkpoint.
"""

from __future__ import annotations

from typing import Any

import reactivex as rx
from reactivex import operators as ops

from rxgraph import CheckpointSaver
from rxgraph.agent import ReactAgent, tool
from rxgraph.testing import ScriptedChatModel, finish, marbles, text, tool_call

TOOL_CALL = marbles("-a-b|", a=tool_call("call-1", "get_weather", '{"city": "Paris"}'), b=finish("tool_calls"))
ANSWER = marbles("--x-y|", x=text("Sunny "), y=text("today"))


@tool
def get_weather(city: str) -> rx.Observable[str]:
    """Current weather for a city (takes 3 ticks of the run's scheduler)."""
    return rx.timer(3.0).pipe(ops.map(lambda _: f"Sunny in {city}"))


def weather_agent(
    saver: CheckpointSaver, *, first_turn: bool = False, **kwargs: Any
) -> tuple[ReactAgent, ScriptedChatModel]:
    """Turn 1 (unless ``first_turn``) is a plain greeting; then the weather turn; then spare plain answers."""
    greeting = [[text("Hello!")]] if not first_turn else []
    model = ScriptedChatModel([*greeting, TOOL_CALL, ANSWER, [text("ok")], [text("ok again")]])
    return ReactAgent(model, tools=[get_weather], checkpointer=saver, **kwargs), model
