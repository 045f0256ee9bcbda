"""Nodes on other threads: a completion that arrives after dispose writes nothing (events, no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import reactivex as rx

from rxgraph import END, START, MemorySaver, RunnableConfig, StateGraph


def test_a_node_on_a_thread_pool_completing_after_dispose_writes_no_checkpoint() -> None:
    saver = MemorySaver()
    pool = ThreadPoolExecutor(max_workers=1)
    tail_entered, released = threading.Event(), threading.Event()
    after_ran, go = threading.Event(), threading.Event()

    def job() -> str:
        assert go.wait(10)  # complete on the worker, after subscribe() returned
        return "result"

    def slow(state: Any) -> rx.Observable[str]:
        return rx.from_future(pool.submit(job))

    def reduce(chunks: Sequence[str]) -> dict[str, Any]:
        # Runs on the worker, in the tail of the step: hold it there until the subscriber has gone.
        tail_entered.set()
        assert released.wait(10)
        return {"result": chunks[0]}

    app = (
        StateGraph()
        .add_node("slow", slow, reduce=reduce)
        .add_node("after", lambda s: after_ran.set())
        .add_edge(START, "slow")
        .add_edge("slow", "after")
        .add_edge("after", END)
        .compile(checkpointer=saver)
    )
    subscription = app.stream({"q": 1}, RunnableConfig(thread_id="t")).subscribe()
    go.set()
    assert tail_entered.wait(10)
    subscription.dispose()
    heads_after_dispose = [c.id for c in saver.list("t")]
    released.set()
    pool.shutdown(wait=True)  # the worker finished the tail (the future's callbacks run inside its task)
    assert [c.id for c in saver.list("t")] == heads_after_dispose
    assert "slow" not in [c.node for c in saver.list("t")]
    assert not after_ran.is_set()


def test_invoke_blocks_until_a_run_on_other_threads_ends() -> None:
    pool = ThreadPoolExecutor(max_workers=2)
    worker_threads: set[int] = set()

    def work(state: Any) -> rx.Observable[dict[str, Any]]:
        def job() -> dict[str, Any]:
            worker_threads.add(threading.get_ident())
            return {"n": state["n"] + 1}

        return rx.from_future(pool.submit(job))

    app = (
        StateGraph()
        .add_node("work", work)
        .add_edge(START, "work")
        .add_conditional_edges("work", lambda s: END if s["n"] >= 5 else "work")
        .compile()
    )
    assert app.invoke({"n": 0}) == {"n": 5}
    assert threading.get_ident() not in worker_threads
    pool.shutdown()
