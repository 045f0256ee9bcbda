"""A run that never reached its end is handled, the next time its thread is used, as its policy says: an agent's turn
(``on_error="rewind"``) is rewound before the next turn reads; a workflow (``on_error="keep"``) keeps its progress for
``stream(None)``. Here the dead run is one that lost its thread to a second saver on the same SQLite file (as a second
process would have it) while its tool ran on a real pool thread; killed processes are in
tests/checkpoint/test_run_exclusivity.py and test_crash.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import (
    END,
    START,
    CheckpointConflictError,
    KeyStrategy,
    RunnableConfig,
    SqliteSaver,
    StateGraph,
)
from rxgraph.agent import ReactAgent, tool
from rxgraph.messages import UserMessage, check_ready_for_user_input, check_request
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

WAIT = 30
POOL = ThreadPoolScheduler(2)


class HeldTool:
    """``get_weather`` on a pool thread, held until ``release``; it says when it started."""

    def __init__(self) -> None:
        self.started, self.released = threading.Event(), threading.Event()

        @tool(scheduler=POOL)
        def get_weather(city: str) -> str:
            """Current weather for a city."""
            self.started.set()
            assert self.released.wait(WAIT), "the test never released the tool"
            return f"Sunny in {city}"

        self.tool = get_weather


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:
            outcome.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    return runner, outcome


def test_a_turn_that_lost_its_thread_is_rewound_before_the_next_turn_reads(tmp_path: Path) -> None:
    config = RunnableConfig(thread_id="t")
    held = HeldTool()
    first_model = ScriptedChatModel(
        [[text("Hello!")], [tool_call("c1", "get_weather", '{"city": "Paris"}'), finish("tool_calls")], [text("?")]]
    )
    second_model = ScriptedChatModel([[text("Forty-two.")]])
    with SqliteSaver(tmp_path / "chat.db") as one, SqliteSaver(tmp_path / "chat.db") as two:
        first = ReactAgent(first_model, tools=[held.tool], checkpointer=one)
        second = ReactAgent(second_model, tools=[held.tool], checkpointer=two)
        first.invoke("Hi", config)
        after_first = one.get("t")
        assert after_first is not None
        runner, outcome = _in_thread(lambda: first.invoke("question that dies", config))
        assert held.started.wait(WAIT)

        # The second saver's slots cannot see the first's run (as another process could not): to it, the head's run
        # is not running anywhere, so it is dead, and its turn is rewound before this turn reads the thread.
        assert second.graph.get_base_state(config).values == after_first.values  # where the next turn starts
        assert second.get_state(config).values != after_first.values  # what is stored until then
        assert second.invoke("next question", config).content == "Forty-two."
        held.released.set()
        runner.join(WAIT)

        assert isinstance(outcome[0], CheckpointConflictError)  # the cut run's next write lost: it wrote nothing more
        sent = second_model.requests[0].messages
        check_request(sent)
        assert [m.content for m in sent if isinstance(m, UserMessage)] == ["Hi", "next question"]
        final = two.get("t")
        assert final is not None
        check_ready_for_user_input(final.values["messages"])
        assert [m.role for m in final.values["messages"]] == ["user", "assistant", "user", "assistant"]
        rewind = next(c for c in two.list("t") if c.source == "rewind")
        assert rewind.values == after_first.values and rewind.parent_id == after_first.id
        assert rewind.error is not None and "never ended" in rewind.error
        dead = {c.run_id for c in two.list("t") if c.source == "input" and c.seq > after_first.seq}
        assert rewind.run_id in dead  # the rewind is the dead run's, as its cancel would have been


def _workflow(saver: SqliteSaver, gate: threading.Event, started: threading.Event, **policy: Any) -> Any:
    def slow(state: Any) -> dict[str, Any]:
        started.set()
        assert gate.wait(WAIT)
        return {"log": ["slow"]}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("fast", lambda s: {"log": ["fast"]})
        .add_node("slow", slow, scheduler=POOL)
        .add_edge(START, "fast")
        .add_edge("fast", "slow")
        .add_edge("slow", END)
        .compile(checkpointer=saver, **policy)
    )


@pytest.mark.parametrize(
    ("policy", "resumed"), [({}, ["go", "fast", "slow"]), ({"on_error": "rewind"}, [])], ids=["keep", "rewind"]
)
def test_a_dead_workflow_run_keeps_its_progress_for_a_resume_unless_its_policy_rewinds(
    tmp_path: Path, policy: dict[str, Any], resumed: list[str]
) -> None:
    config = RunnableConfig(thread_id="w")
    gate, started, free = threading.Event(), threading.Event(), threading.Event()
    free.set()
    with SqliteSaver(tmp_path / "flow.db") as one, SqliteSaver(tmp_path / "flow.db") as two:
        dying = _workflow(one, gate, started, **policy)
        runner, outcome = _in_thread(lambda: dying.invoke({"log": ["go"]}, config))
        assert started.wait(WAIT)  # "fast" is stored, "slow" runs: to the second saver, a run that died there

        state = _workflow(two, free, threading.Event(), **policy).invoke(None, config)

        # keep (a workflow's default): stream(None) goes on from the dead run's last step; "fast" does not run again.
        # rewind: the dead run is undone first, so there is nothing left to resume.
        assert list(state.get("log", [])) == resumed
        gate.set()
        runner.join(WAIT)
        assert isinstance(outcome[0], CheckpointConflictError)
