"""Seed 001: cancelling a streaming agent turn rewinds the thread to the turn boundary.

Every test runs in virtual time; see tests/_weather_turn.py for the turn's timeline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import reactivex as rx
from _support import ReadCountingSaver
from _weather_turn import ANSWER, TOOL_CALL, get_weather, weather_agent
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import CheckpointSaver, NodeOutput, RunnableConfig, StreamingOutput
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import UserMessage, check_ready_for_user_input, check_request
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call


def _setup(
    saver_factory: Callable[[], CheckpointSaver], first_turn: bool = False
) -> tuple[Any, Any, TestScheduler, CheckpointSaver, RunnableConfig]:
    scheduler, saver = TestScheduler(), saver_factory()
    agent, model = weather_agent(saver, first_turn=first_turn)
    config = RunnableConfig(thread_id="t1", scheduler=scheduler)
    if not first_turn:
        agent.invoke("Hi", config)
    return agent, model, scheduler, saver, config


def _assert_rewound_and_next_turn_valid(agent: Any, model: Any, saver: CheckpointSaver, pre_turn: Any) -> None:
    head = saver.get("t1")
    assert head is not None and head.source == "rewind"
    assert head.values == pre_turn
    agent.invoke("Are you there?", RunnableConfig(thread_id="t1", scheduler=TestScheduler()))
    request = model.requests[-1].messages
    check_request(request)
    assert list(request) == [*pre_turn.get("messages", []), UserMessage(content="Are you there?")]
    check_ready_for_user_input(agent.get_state(RunnableConfig(thread_id="t1")).values["messages"])


@pytest.mark.parametrize(
    ("tick", "phase"),
    [
        (2.0, "during the first model stream"),
        (4.0, "between the model checkpoint and the tool"),
        (5.0, "during the tool"),
        (7.0, "between the tools checkpoint and the second model call"),
        (10.0, "during the second model stream"),
    ],
)
@pytest.mark.parametrize("first_turn", [False, True], ids=["second-turn", "first-ever-turn"])
def test_cancel_mid_turn_leaves_the_head_at_the_pre_turn_state(
    tick: float, phase: str, first_turn: bool, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    agent, model, scheduler, saver, config = _setup(saver_factory, first_turn)
    pre_turn = dict(agent.get_state(config).values)
    pre_turn_seq = saver.get("t1").seq if not first_turn else 0  # type: ignore[union-attr]
    start = scheduler.clock
    subscription = agent.stream("What's the weather in Paris?", config).subscribe()
    # After the events of that tick: the run's own events at that tick are queued before this nested action.
    scheduler.schedule_absolute(
        start + tick, lambda *_: scheduler.schedule_absolute(start + tick, lambda *_: subscription.dispose())
    )
    scheduler.advance_to(start + 30.0)
    written = [c.node for c in reversed(saver.list("t1")) if c.seq > pre_turn_seq]
    assert written[-1] is None  # the rewind came last
    assert "model" in written[:-1] or tick < 4.0, phase
    _assert_rewound_and_next_turn_valid(agent, model, saver, pre_turn)


def test_dispose_after_completion_keeps_the_full_four_message_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    agent, _, scheduler, saver, config = _setup(saver_factory, first_turn=True)
    subscription = agent.stream("What's the weather in Paris?", config).subscribe()
    scheduler.advance_by(30.0)
    subscription.dispose()
    assert [m.role for m in agent.get_state(config).values["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert all(c.source != "rewind" for c in saver.list("t1"))


def test_a_commit_between_assembly_and_subscription_survives_a_later_cancel(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler, saver = TestScheduler(), saver_factory()
    model = ScriptedChatModel([[text("first answer")], TOOL_CALL, ANSWER])
    agent = ReactAgent(model, tools=[get_weather], checkpointer=saver)
    config = RunnableConfig(thread_id="t1", scheduler=scheduler)
    assembled = agent.stream("late question", config)  # assembled now, subscribed later
    agent.invoke("committed meanwhile", config)
    committed = dict(agent.get_state(config).values)
    subscription = assembled.subscribe()
    scheduler.advance_by(2.0)
    subscription.dispose()
    head = saver.get("t1")
    assert head is not None and head.source == "rewind"
    assert head.values == committed  # not the (empty) state at assembly


def test_resubscribing_the_same_cold_observable_reads_a_fresh_base_each_time(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = ReadCountingSaver(saver_factory())
    model = ScriptedChatModel([[text("one")], [text("two")]])
    agent = ReactAgent(model, checkpointer=saver)
    turn = agent.stream("same question", RunnableConfig(thread_id="t1"))
    assert saver.reads == 0  # nothing read at assembly
    turn.subscribe()
    turn.subscribe()
    assert [m.content for m in model.requests[1].messages] == ["same question", "one", "same question"]


def test_timeout_after_the_streaming_model_node_starts_then_the_next_turn_is_valid(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    agent, model, scheduler, saver, config = _setup(saver_factory)
    pre_turn = dict(agent.get_state(config).values)
    errors: list[Exception] = []
    agent.stream("What's the weather in Paris?", config).pipe(ops.timeout(2.0, scheduler=scheduler)).subscribe(
        on_error=errors.append
    )
    scheduler.advance_by(30.0)
    assert len(errors) == 1 and str(errors[0]) == "Timeout"  # what reactivex's timeout raises
    _assert_rewound_and_next_turn_valid(agent, model, saver, pre_turn)


def test_take_until_a_hot_trigger_at_the_tool_node_then_the_next_turn_is_valid(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    agent, model, scheduler, saver, config = _setup(saver_factory)
    pre_turn = dict(agent.get_state(config).values)
    start = scheduler.clock
    trigger = scheduler.create_hot_observable(ReactiveTest.on_next(start + 5.0, "user pressed stop"))
    seen: list[NodeOutput] = []
    agent.stream("What's the weather in Paris?", config).pipe(ops.take_until(trigger)).subscribe(seen.append)
    scheduler.advance_by(30.0)
    assert [o.node for o in seen if type(o) is NodeOutput] == ["model"]
    _assert_rewound_and_next_turn_valid(agent, model, saver, pre_turn)


def test_a_tool_finishing_on_another_thread_after_dispose_cannot_write_after_the_rewind(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    pool = ThreadPoolExecutor(max_workers=1)
    started, release = threading.Event(), threading.Event()

    @tool
    def slow_lookup(q: str) -> rx.Observable[str]:
        """Blocks a worker thread until released."""

        def job() -> str:
            started.set()
            assert release.wait(10)
            return f"found {q}"

        return rx.from_future(pool.submit(job))

    model = ScriptedChatModel(
        [[tool_call("c1", "slow_lookup", '{"q": "x"}'), finish("tool_calls")], [text("done")], [text("next")]]
    )
    agent = ReactAgent(model, tools=[slow_lookup], checkpointer=saver)
    config = RunnableConfig(thread_id="t1")
    outputs: list[Any] = []
    subscription = agent.stream("look it up", config).subscribe(outputs.append)
    assert started.wait(10)
    subscription.dispose()
    rewind = saver.get("t1")
    assert rewind is not None and rewind.source == "rewind" and rewind.values == {}
    release.set()
    pool.shutdown(wait=True)  # the job finished and its completion was delivered (or dropped) on the worker
    assert saver.get("t1") == rewind  # nothing landed after the rewind
    assert not any(isinstance(o, StreamingOutput) and o.node == "tools" for o in outputs)
    agent.invoke("again", config)
    check_request(model.requests[-1].messages)
