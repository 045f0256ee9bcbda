"""The tool calls of one assistant message run concurrently, at most ``max_parallel_tools`` at a time; the history
keeps their messages in call order whatever order they finish in. Timing is checked in virtual time."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import MemorySaver, NodeOutput, RunnableConfig, StreamingOutput
from rxgraph.agent import ReactAgent, Tool
from rxgraph.errors import InvalidArgumentError, InvalidTypeError
from rxgraph.messages import ToolMessage, check_ready_for_user_input
from rxgraph.rx import SignalType, do_finally
from rxgraph.testing import ScriptedChatModel, ScriptedTool, finish, marbles, text, tool_call


def _turn(tools: list[ScriptedTool], **agent: Any) -> tuple[list[tuple[float, Any]], ReactAgent, ScriptedChatModel]:
    """One turn whose model calls each tool once, in the order given (call ids c0, c1, ...), on a TestScheduler.
    Returns every output with the virtual time it arrived at."""
    calls = [tool_call(f"c{i}", t.name, index=i) for i, t in enumerate(tools)]
    model = ScriptedChatModel([[*calls, finish("tool_calls")], [text("done")]])
    react = ReactAgent(model, tools=tools, checkpointer=MemorySaver(), **agent)
    scheduler = TestScheduler()
    seen: list[tuple[float, Any]] = []
    errors: list[Exception] = []
    react.stream("go", RunnableConfig(thread_id="t", scheduler=scheduler)).subscribe(
        lambda output: seen.append((scheduler.clock, output)), errors.append
    )
    scheduler.advance_by(100.0)
    assert not errors
    return seen, react, model


def _ticks_of_tools(seen: list[tuple[float, Any]]) -> float:
    """Virtual time from the model's first NodeOutput (the tools start then) to the tools' NodeOutput."""
    model_done = next(t for t, o in seen if type(o) is NodeOutput and o.node == "model")
    tools_done = next(t for t, o in seen if type(o) is NodeOutput and o.node == "tools")
    return tools_done - model_done


def _wait(name: str, ticks: int) -> ScriptedTool:
    return ScriptedTool(name, marbles("-" * ticks + "r|", r=f"{name} after {ticks}"))


def test_two_tools_of_four_ticks_each_finish_together_at_tick_four() -> None:
    seen, agent, _ = _turn([_wait("a", 4), _wait("b", 4)])
    assert _ticks_of_tools(seen) == 4.0  # not 8: they ran side by side
    history = agent.get_state(RunnableConfig(thread_id="t")).values["messages"]
    assert [m.tool_call_id for m in history if isinstance(m, ToolMessage)] == ["c0", "c1"]
    check_ready_for_user_input(history)


def test_the_history_has_the_call_order_even_when_the_second_call_finishes_first() -> None:
    seen, agent, model = _turn([_wait("slow", 4), _wait("quick", 3)])
    streamed = [o.chunk.tool_call_id for _, o in seen if isinstance(o, StreamingOutput) and o.node == "tools"]
    assert streamed == ["c1", "c0"]  # the subscriber hears of each as it finishes
    assert _ticks_of_tools(seen) == 4.0
    tools_output = next(o for _, o in seen if type(o) is NodeOutput and o.node == "tools")
    recorded = [m for m in tools_output.state["messages"] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in recorded] == [("c0", "slow after 4"), ("c1", "quick after 3")]
    assert [m.tool_call_id for m in model.requests[1].messages if isinstance(m, ToolMessage)] == ["c0", "c1"]
    history = agent.get_state(RunnableConfig(thread_id="t")).values["messages"]
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.tool_call_id for m in history if isinstance(m, ToolMessage)] == ["c0", "c1"]


def test_max_parallel_tools_one_runs_them_one_after_the_other() -> None:
    seen, _, _ = _turn([_wait("slow", 4), _wait("quick", 3)], max_parallel_tools=1)
    assert _ticks_of_tools(seen) == 7.0  # 4 then 3
    streamed = [o.chunk.tool_call_id for _, o in seen if isinstance(o, StreamingOutput) and o.node == "tools"]
    assert streamed == ["c0", "c1"]
    seen, _, _ = _turn([_wait("a", 4), _wait("b", 4)], max_parallel_tools=1)
    assert _ticks_of_tools(seen) == 8.0


def test_at_most_max_parallel_tools_run_at_a_time() -> None:
    seen, agent, _ = _turn([_wait("a", 4), _wait("b", 4), _wait("c", 4)], max_parallel_tools=2)
    assert _ticks_of_tools(seen) == 8.0  # a and b, then c
    assert agent.max_parallel_tools == 2
    history = agent.get_state(RunnableConfig(thread_id="t")).values["messages"]
    assert [m.tool_call_id for m in history if isinstance(m, ToolMessage)] == ["c0", "c1", "c2"]


def test_the_default_runs_four_at_a_time() -> None:
    seen, agent, _ = _turn([_wait(name, 4) for name in "abcde"])
    assert agent.max_parallel_tools == 4
    assert _ticks_of_tools(seen) == 8.0  # four, then the fifth


def test_every_call_gets_one_message_when_tools_fail_finish_out_of_order_or_are_unknown() -> None:
    failing = ScriptedTool("failing", marbles("--#", error=TimeoutError("upstream")))
    calls = [
        tool_call("c0", "slow", index=0),
        tool_call("c1", "failing", index=1),
        tool_call("c2", "nowhere", index=2),
        tool_call("c3", "slow", "[1]", index=3),
    ]
    model = ScriptedChatModel([[*calls, finish("tool_calls")], [text("done")]])
    agent = ReactAgent(model, tools=[_wait("slow", 4), failing], checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t", scheduler=TestScheduler())
    assert agent.invoke("go", config).content == "done"
    answers = [m for m in agent.get_state(config).values["messages"] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("c0", False), ("c1", True), ("c2", True), ("c3", True)]
    assert "TimeoutError: upstream" in answers[1].content and "unknown tool 'nowhere'" in answers[2].content


def test_cancelling_the_turn_disposes_every_running_tool() -> None:
    scheduler = TestScheduler()
    ended: dict[str, tuple[float, SignalType]] = {}

    def waiting(name: str, ticks: float) -> Tool:
        def wait() -> rx.Observable[str]:
            return rx.timer(ticks).pipe(
                ops.map(lambda _: name), do_finally(lambda signal: ended.setdefault(name, (scheduler.clock, signal)))
            )

        return Tool(wait, name=name)

    tools = [waiting("a", 4.0), waiting("b", 6.0), waiting("queued", 1.0)]
    calls = [tool_call(f"c{i}", t.name, index=i) for i, t in enumerate(tools)]
    model = ScriptedChatModel([[text("Hi")], [*calls, finish("tool_calls")], [text("never")]])
    agent = ReactAgent(model, tools=tools, checkpointer=MemorySaver(), max_parallel_tools=2)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    agent.invoke("hello", config)
    before = agent.get_state(config).values
    seen: list[Any] = []
    subscription = agent.stream("go", config).subscribe(seen.append)
    scheduler.advance_by(3.0)  # the model has answered: a and b are running, the third call waits for a slot
    assert [o.node for o in seen if type(o) is NodeOutput] == ["model"] and not ended
    cancelled_at = scheduler.clock
    subscription.dispose()
    assert ended == {"a": (cancelled_at, SignalType.CANCEL), "b": (cancelled_at, SignalType.CANCEL)}
    scheduler.advance_by(20.0)
    assert "queued" not in ended  # never started
    assert not any(isinstance(o, StreamingOutput) and o.node == "tools" for o in seen)
    assert model.calls == 2
    assert agent.get_state(config).values == before


@pytest.mark.parametrize(
    ("value", "error"), [(0, InvalidArgumentError), (True, InvalidTypeError), ("2", InvalidTypeError)]
)
def test_max_parallel_tools_is_a_positive_int(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_parallel_tools") as caught:
        ReactAgent(ScriptedChatModel([]), max_parallel_tools=value)
    assert getattr(caught.value, "argument", None) == "max_parallel_tools"


def test_the_tool_scheduler_must_be_a_reactivex_scheduler() -> None:
    with pytest.raises(InvalidTypeError, match="tool_scheduler must be a reactivex scheduler") as caught:
        ReactAgent(ScriptedChatModel([]), tool_scheduler=object())  # type: ignore[arg-type]
    assert caught.value.argument == "tool_scheduler"
