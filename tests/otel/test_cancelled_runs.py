"""A turn cancelled while a tool runs on a pool — its subscription disposed, or the asyncio task awaiting it cancelled:
its run says ``cancelled``, one rewind event names the checkpoint the thread went back to and the head it left, and no
span stays open — the tool still running included."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest
from otel._recording import Recorded
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

CONFIG = RunnableConfig(thread_id="t")


class _Turn:
    """A thread with one completed turn; the next turn's tool blocks on a pool until ``release``."""

    def __init__(self, pool: ThreadPoolScheduler) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

        @tool(scheduler=pool)
        def weather(city: str) -> str:
            """The weather in a city."""
            self.started.set()
            self.release.wait(10)
            return "sunny"

        model = ScriptedChatModel(
            [
                [text("Hello."), finish("stop")],
                [tool_call("c0", "weather", '{"city": "Paris"}'), finish("tool_calls")],
                [text("Sunny."), finish("stop")],
            ]
        )
        self.saver = MemorySaver()
        self.agent = ReactAgent(model, tools=[weather], checkpointer=self.saver)
        self.agent.invoke("Hi", CONFIG)
        head = self.saver.get("t")
        assert head is not None
        self.before = head.id  # the head the cut turn started from


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


def test_a_turn_cancelled_while_a_pool_tool_runs_is_cancelled_rewound_once_and_leaves_no_span_open(
    otel: Recorded, pool: ThreadPoolScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    turn = _Turn(pool)
    otel.exporter.clear()
    errors: list[Exception] = []
    subscription = turn.agent.stream("Weather in Paris?", CONFIG).subscribe(on_error=errors.append)
    try:
        assert turn.started.wait(10)
        left = turn.saver.get("t")  # the model's checkpoint: the head the cut turn leaves
        assert left is not None and left.node == "model"
        assert "execute_tool weather" in otel.open.names()
        with caplog.at_level(logging.INFO, logger="rxgraph"):
            subscription.dispose()
        assert otel.open.names() == []  # dispose returned: every span of the run ended, the tool's too
    finally:
        turn.release.set()
    assert errors == []

    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "cancelled"
    (rewind,) = [event for event in run.events if event.name == "rxgraph.rewind"]
    head = turn.saver.get("t")
    assert head is not None and head.source == "rewind"
    assert rewind.attributes is not None
    assert rewind.attributes["rxgraph.checkpoint_id"] == turn.before
    assert rewind.attributes["rxgraph.rewind.left_checkpoint_id"] == left.id
    assert rewind.attributes["rxgraph.rewind.head_id"] == head.id
    assert rewind.attributes["rxgraph.rewind.duration"] >= 0
    call = otel.one("execute_tool weather")
    assert call.attributes is not None and call.attributes["rxgraph.cancelled"] is True
    tools_node = otel.parent(call)
    assert tools_node is not None and tools_node.attributes is not None
    assert tools_node.attributes["rxgraph.outcome"] == "cancelled"
    assert "rxgraph.checkpoint_id" not in tools_node.attributes  # it wrote nothing
    assert otel.parent(tools_node) == run

    # One INFO record says so, and where the thread stands now.
    run_id = run.attributes["rxgraph.run_id"]
    (record,) = [r for r in caplog.records if str(run_id) in r.getMessage()]
    assert record.levelno == logging.INFO and record.name == "rxgraph"
    assert record.getMessage() == (
        f"thread 't': run {run_id} was cancelled and rewound to checkpoint {turn.before}; its head is now "
        f"checkpoint {head.id} (seq {head.seq})"
    )


@pytest.mark.parametrize("how", ["ainvoke", "astream"])
def test_a_task_cancelled_while_a_pool_tool_runs_ends_every_span_before_its_await_returns(
    otel: Recorded, pool: ThreadPoolScheduler, how: str
) -> None:
    # The asyncio way a turn ends: the task awaiting it is cancelled (a server's request task, a client gone).
    turn = _Turn(pool)
    otel.exporter.clear()

    async def consume() -> None:
        if how == "ainvoke":
            await turn.agent.ainvoke("Weather in Paris?", CONFIG)
        else:
            async for _ in turn.agent.astream("Weather in Paris?", CONFIG):
                pass

    async def main() -> list[str]:
        task = asyncio.create_task(consume())
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, turn.started.wait, 10)
            assert "execute_tool weather" in otel.open.names()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return otel.open.names()  # what is still open once the cancelled task has ended
        finally:
            turn.release.set()

    assert asyncio.run(main()) == []
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "cancelled"
    assert [event.name for event in run.events].count("rxgraph.rewind") == 1
    call = otel.one("execute_tool weather")
    assert call.attributes is not None and call.attributes["rxgraph.cancelled"] is True
    head = turn.saver.get("t")
    assert head is not None and head.source == "rewind"
