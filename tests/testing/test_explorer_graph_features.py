"""The cancellation explorer over the graph features: an interrupt then its resume, a parallel superstep of branches
of different lengths, a ``Send`` fan-out, and a subgraph inside an agent turn — 0 violations on every saver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import reactivex as rx
from _support import StepPath
from _weather_turn import ANSWER, get_weather
from reactivex import operators as ops

from rxgraph import END, START, CheckpointSaver, Command, KeyStrategy, Send, StateGraph, interrupt
from rxgraph.agent import Approve, ReactAgent, tool
from rxgraph.messages import UserMessage
from rxgraph.testing import ScriptedChatModel, assert_cancellation_safe, finish, marbles, text, tool_call
from rxgraph.testing._explorer import CancelMode


@tool(requires_approval=True)
def send_email(to: str) -> rx.Observable[str]:
    """Send an email (takes 2 ticks)."""
    return rx.timer(2.0).pipe(ops.map(lambda _: f"sent to {to}"))


def test_an_interrupt_then_its_resume_has_no_violations(
    saver_factory: Callable[[], CheckpointSaver], step_path: StepPath, cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> ReactAgent:
        call = marbles("-a-b|", a=tool_call("c1", "send_email", '{"to": "ada"}'), b=finish("tool_calls"))
        model = ScriptedChatModel([call, ANSWER, [text("ok")], [text("ok again")]])
        return ReactAgent(model, tools=[send_email], checkpointer=saver)

    report = assert_cancellation_safe(
        make, ["Email Ada", Command(resume={"c1": Approve()})], modes=cancel_modes, saver_factory=saver_factory
    )
    assert {turn for turn, _ in report.points} == {0, 1} and len(report.points) > 40
    step_path.check(lands=False)


def _timed(name: str, ticks: float) -> Callable[[Any], rx.Observable[dict[str, Any]]]:
    return lambda state: rx.timer(ticks).pipe(ops.map(lambda _: {"log": name}))


def test_a_superstep_of_three_branches_of_different_lengths_has_no_violations(
    saver_factory: Callable[[], CheckpointSaver],
    cancel_modes: tuple[CancelMode, ...],
) -> None:
    def make(saver: CheckpointSaver) -> Any:
        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("split", _timed("split", 1.0))
        for name, ticks in (("short", 1.0), ("medium", 3.0), ("long", 5.0)):
            graph.add_node(name, _timed(name, ticks)).add_edge("split", name)
        graph.add_node("join", _timed("join", 1.0)).add_edge(["short", "medium", "long"], "join")
        return graph.add_edge(START, "split").add_edge("join", END).compile(saver, messages_key=None)

    report = assert_cancellation_safe(
        make, [{"log": "turn 1"}, {"log": "turn 2"}], modes=cancel_modes, saver_factory=saver_factory
    )
    assert len(report.points) > 30


def test_a_send_fan_out_has_no_violations(
    saver_factory: Callable[[], CheckpointSaver], cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> Any:
        graph = StateGraph({"results": KeyStrategy.APPEND}).add_node("split", lambda s: None)
        graph.add_node("work", lambda item: rx.timer(float(item["n"])).pipe(ops.map(lambda _: {"results": item["n"]})))
        graph.add_node("total", lambda s: {"total": sum(s["results"])})
        graph.add_conditional_edges("split", lambda s: [Send("work", {"n": n}) for n in (3, 1, 2)])
        graph.add_edge(START, "split").add_edge("work", "total").add_edge("total", END)
        return graph.compile(saver, messages_key=None)

    report = assert_cancellation_safe(
        make, [{"results": []}, {"results": []}], modes=cancel_modes, saver_factory=saver_factory
    )
    assert len(report.points) > 15


def test_a_subgraph_inside_an_agent_turn_has_no_violations(
    saver_factory: Callable[[], CheckpointSaver], cancel_modes: tuple[CancelMode, ...]
) -> None:
    def make(saver: CheckpointSaver) -> Any:
        call = marbles("-a-b|", a=tool_call("c1", "get_weather", '{"city": "Paris"}'), b=finish("tool_calls"))
        agent = ReactAgent(ScriptedChatModel([call, ANSWER, [text("ok")]]), tools=[get_weather])
        graph = StateGraph({"messages": KeyStrategy.APPEND}).add_node("agent", agent.graph)
        graph.add_node("audit", _timed("audit", 1.0))
        return graph.add_edge(START, "agent").add_edge("agent", "audit").add_edge("audit", END).compile(saver)

    inputs = [{"messages": [UserMessage(content="Weather in Paris?")]}, {"messages": [UserMessage(content="Thanks")]}]
    report = assert_cancellation_safe(make, inputs, modes=cancel_modes, saver_factory=saver_factory)
    assert len(report.points) > 30


def test_a_failed_superstep_kept_branch_and_its_resume_have_no_violations(
    saver_factory: Callable[[], CheckpointSaver],
    cancel_modes: tuple[CancelMode, ...],
) -> None:
    # Pending writes under cancellation: turn 1 fails in a parallel superstep after one branch finished (kept in the
    # error checkpoint), turn 2 resumes it (runs only the other branch). A cut resume rewinds to the error checkpoint,
    # pending work included.
    def make(saver: CheckpointSaver) -> Any:
        failures = iter([ConnectionError("flaky")])

        def flaky(state: Any) -> rx.Observable[dict[str, Any]]:
            error = next(failures, None)
            tick = rx.timer(2.0)
            if error is not None:
                return tick.pipe(ops.flat_map(lambda _: rx.throw(error)))
            return tick.pipe(ops.map(lambda _: {"log": "flaky"}))

        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("split", _timed("split", 1.0))
        graph.add_node("quick", _timed("quick", 1.0)).add_node("flaky", flaky).add_node("join", _timed("join", 1.0))
        graph.add_edge(START, "split").add_edge("split", "quick").add_edge("split", "flaky")
        graph.add_edge(["quick", "flaky"], "join").add_edge("join", END)
        return graph.compile(saver, messages_key=None)

    report = assert_cancellation_safe(make, [{"log": "turn 1"}, None], modes=cancel_modes, saver_factory=saver_factory)
    assert {turn for turn, _ in report.points} == {0, 1} and len(report.points) > 15


def test_two_parallel_interrupts_and_their_answers_have_no_violations(
    saver_factory: Callable[[], CheckpointSaver],
    cancel_modes: tuple[CancelMode, ...],
) -> None:
    # Parallel interrupts under cancellation: two branches ask (after a tick each), a third finishes; the next turn
    # answers both with a map of their ids. A cut answer rewinds to the two questions, the finished branch kept.
    def make(saver: CheckpointSaver) -> Any:
        def asker(name: str) -> Callable[[Any], rx.Observable[dict[str, Any]]]:
            def action(state: Any) -> rx.Observable[dict[str, Any]]:
                answer = interrupt(f"{name}?")
                return rx.timer(1.0).pipe(ops.map(lambda _: {"log": f"{name}:{answer}"}))

            return action

        graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", _timed("a", 1.0))
        graph.add_node("x", asker("x")).add_node("y", asker("y")).add_node("plain", _timed("plain", 2.0))
        for name in ("x", "y", "plain"):
            graph.add_edge("a", name).add_edge(name, END)
        return graph.add_edge(START, "a").compile(saver, messages_key=None)

    answers = Command(resume={"0:x:0": "yes", "1:y:0": "no"})
    report = assert_cancellation_safe(
        make, [{"log": "turn 1"}, answers], modes=cancel_modes, saver_factory=saver_factory
    )
    assert {turn for turn, _ in report.points} == {0, 1} and len(report.points) > 10
