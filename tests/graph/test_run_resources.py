"""A run keeps what it needs, not everything it wrote; blocking calls refuse to deadlock their own event loop."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.scheduler.eventloop import AsyncIOScheduler, AsyncIOThreadSafeScheduler

from rxgraph import END, START, Checkpoint, CompiledGraph, DeadlockError, RunnableConfig, SqliteSaver, StateGraph


def test_a_long_run_does_not_hold_on_to_the_checkpoints_it_wrote(tmp_path: Path) -> None:
    # With a durable saver whose cache is small, a run of 500 steps keeps only a few checkpoints alive, not 500
    # (counted against those alive before it: earlier tests in this process may have left some).
    alive: list[int] = []

    def checkpoints() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Checkpoint)

    def step(state: Any) -> dict[str, Any]:
        if state["n"] == 400:
            alive.append(checkpoints() - before)
        return {"n": state["n"] + 1, "payload": "x" * 1000}

    before = checkpoints()

    with SqliteSaver(tmp_path / "long.db", cache_size=4) as saver:
        app = (
            StateGraph()
            .add_node("step", step)
            .add_edge(START, "step")
            .add_conditional_edges("step", lambda s: END if s["n"] >= 500 else "step")
            .compile(checkpointer=saver)
        )
        app.invoke({"n": 0}, RunnableConfig(thread_id="t", recursion_limit=1000))
    assert len(alive) == 1 and alive[0] < 20, alive


def _waits_on_a_timer() -> CompiledGraph:
    return (
        StateGraph()
        .add_node("wait", lambda s: rx.timer(0.01).pipe(ops.map(lambda _: {"done": True})))
        .add_edge(START, "wait")
        .add_edge("wait", END)
        .compile()
    )


def test_invoke_on_the_event_loop_of_its_own_scheduler_raises_instead_of_deadlocking() -> None:
    app = _waits_on_a_timer()

    async def handler() -> dict[str, Any]:
        scheduler = AsyncIOScheduler(asyncio.get_running_loop())
        return app.invoke({"done": False}, RunnableConfig(scheduler=scheduler))

    with pytest.raises(DeadlockError, match="event loop that its run's scheduler runs on"):
        asyncio.run(handler())


def test_invoke_from_another_thread_with_the_loops_thread_safe_scheduler_still_works() -> None:
    app = _waits_on_a_timer()

    async def handler() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        # From another thread, the loop must be woken up: AsyncIOThreadSafeScheduler does that, AsyncIOScheduler not.
        config = RunnableConfig(scheduler=AsyncIOThreadSafeScheduler(loop))
        return await loop.run_in_executor(None, app.invoke, {"done": False}, config)

    assert asyncio.run(handler()) == {"done": True}
