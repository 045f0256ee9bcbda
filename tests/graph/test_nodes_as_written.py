"""Nodes as users write them: blocking functions on a scheduler of their choice, ``async def``, the run's
``RunInfo`` and ``context``; failed runs recorded, rewound or resumable; a resume needs a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    CompiledGraph,
    InvalidArgumentError,
    KeyStrategy,
    MemorySaver,
    RunInfo,
    RunnableConfig,
    StateGraph,
    ThreadNotFoundError,
)
from rxgraph.rx import SignalType, do_finally


def _one_node(action: Callable[..., Any], saver: CheckpointSaver | None = None, **node: Any) -> CompiledGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("work", action, **node)
        .add_edge(START, "work")
        .add_edge("work", END)
        .compile(checkpointer=saver)
    )


# -- blocking work on a scheduler --------------------------------------------------------------------------------


def test_a_blocking_node_on_a_thread_pool_never_runs_on_the_subscribing_thread_and_sees_the_cancel(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    pool = ThreadPoolScheduler(2)
    entered, ran_on, saw_cancel = threading.Event(), [], []
    ended = threading.Event()

    def blocking(state: Any, run: RunInfo) -> dict[str, Any]:
        ran_on.append(threading.get_ident())
        entered.set()
        saw_cancel.append(run.cancelled.wait(10))  # a blocking call that polls its cancellation
        return {"log": "too late"}

    app = _one_node(blocking, saver_factory(), scheduler=pool)
    config = RunnableConfig(thread_id="t")
    subscription = app.stream({"log": "go"}, config).pipe(do_finally(lambda _: ended.set())).subscribe()
    assert entered.wait(10)
    subscription.dispose()
    assert ended.wait(10)
    pool.executor.shutdown(wait=True)
    assert ran_on and ran_on[0] != threading.get_ident()
    assert saw_cancel == [True]
    head = app.get_state(config).checkpoint
    assert head is not None and head.source == "rewind"  # nothing the node returned after the cancel landed


def test_a_graph_wide_node_scheduler_applies_to_nodes_without_their_own() -> None:
    pool = ThreadPoolScheduler(1)
    threads: dict[str, int] = {}

    def record(name: str) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            threads[name] = threading.get_ident()
            return {"log": name}

        return action

    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("pooled", record("pooled"))
        .add_node("inline", record("inline"), scheduler=rx.scheduler.CurrentThreadScheduler.singleton())
        .add_edge(START, "pooled")
        .add_edge("pooled", "inline")
        .add_edge("inline", END)
        .compile(node_scheduler=pool)
    )
    assert app.invoke({"log": "go"}) == {"log": ["go", "pooled", "inline"]}
    assert threads["pooled"] != threading.get_ident()
    pool.executor.shutdown(wait=True)


# -- async def -------------------------------------------------------------------------------------------------


async def _answer(state: Any, run: RunInfo) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"log": f"awaited on {'the running loop' if asyncio.get_running_loop() is run.loop else '?'}"}


def test_an_async_node_is_awaited_on_a_background_loop_when_there_is_none() -> None:
    assert _one_node(_answer).invoke({"log": "go"}) == {"log": ["go", "awaited on the running loop"]}


def test_an_async_node_is_awaited_on_the_loop_the_run_was_subscribed_from() -> None:
    async def main() -> tuple[Any, asyncio.AbstractEventLoop, set[int]]:
        loop, done = asyncio.get_running_loop(), asyncio.Event()
        outputs: list[Any] = []
        seen_loops: set[int] = set()

        async def node(state: Any, run: RunInfo) -> dict[str, Any]:
            seen_loops.add(id(asyncio.get_running_loop()))
            return {"log": "from the caller's loop" if run.loop is loop else "elsewhere"}

        _one_node(node).stream({"log": "go"}).subscribe(outputs.append, on_completed=done.set)
        await done.wait()
        return outputs[-1].state, loop, seen_loops

    state, loop, seen = asyncio.run(main())
    assert list(state["log"]) == ["go", "from the caller's loop"] and seen == {id(loop)}


def test_an_async_node_is_awaited_on_the_loop_of_the_runs_asyncio_scheduler() -> None:
    async def main() -> list[str]:
        loop, done = asyncio.get_running_loop(), asyncio.Event()
        logs: list[str] = []

        async def node(state: Any) -> dict[str, Any]:
            return {"log": "on the scheduler's loop" if asyncio.get_running_loop() is loop else "elsewhere"}

        config = RunnableConfig(scheduler=AsyncIOScheduler(loop))
        _one_node(node).stream({"log": "go"}, config).subscribe(
            lambda o: logs.extend(o.state["log"]), on_completed=done.set
        )
        await done.wait()
        return logs

    assert asyncio.run(main())[-1] == "on the scheduler's loop"


def test_disposing_the_run_cancels_the_awaited_node() -> None:
    started, cancelled = threading.Event(), threading.Event()
    signals: list[SignalType] = []

    async def slow(state: Any) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {"log": "never"}

    subscription = _one_node(slow).stream({"log": "go"}).pipe(do_finally(signals.append)).subscribe()
    assert started.wait(10)
    subscription.dispose()
    assert cancelled.wait(10)
    assert signals == [SignalType.CANCEL]


def test_an_async_node_that_raises_fails_the_run_with_its_error() -> None:
    async def broken(state: Any) -> dict[str, Any]:
        raise ConnectionError("upstream closed")

    with pytest.raises(ConnectionError, match="upstream closed"):
        _one_node(broken).invoke({"log": "go"})


# -- context ---------------------------------------------------------------------------------------------------


def test_the_context_reaches_nodes_and_is_never_stored(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    seen: list[Any] = []

    def by_config(state: Any, config: RunnableConfig) -> dict[str, Any]:
        seen.append(config.context["user_id"])
        return {"log": "config"}

    def by_run(state: Any, run: RunInfo) -> dict[str, Any]:
        seen.append((run.context["user_id"], run.thread_id))
        return {"log": "run"}

    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", by_config)
        .add_node("b", by_run)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )
    config = RunnableConfig(thread_id="t", context={"user_id": "u-secret-42", "token": "tok-9"})
    app.invoke({"log": "go"}, config)
    assert seen == ["u-secret-42", ("u-secret-42", "t")]
    stored = repr([dict(c.values) for c in saver.list("t")])
    assert "u-secret-42" not in stored and "tok-9" not in stored
    assert "tok-9" not in repr(config)  # configs appear in logs: their context shows its keys only
    with pytest.raises(TypeError):
        config.context["user_id"] = "other"  # type: ignore[index]


# -- failed runs -----------------------------------------------------------------------------------------------


def _flaky_workflow(saver: CheckpointSaver, failures: list[Exception], **compile_kwargs: Any) -> CompiledGraph:
    def b(state: Any) -> dict[str, Any]:
        if failures:
            raise failures.pop(0)
        return {"log": "b"}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", b)
        .add_node("c", lambda s: {"log": "c"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END)
        .compile(checkpointer=saver, **compile_kwargs)
    )


def test_a_workflow_that_keeps_its_failures_resumes_from_the_failed_node(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    app = _flaky_workflow(saver, [TimeoutError("the service did not answer")])
    config = RunnableConfig(thread_id="t")
    with pytest.raises(TimeoutError):
        app.invoke({"log": "start"}, config)
    head = app.get_state(config)
    assert head.next == ("b",) and list(head.values["log"]) == ["start", "a"]
    assert head.checkpoint is not None and head.checkpoint.error == "TimeoutError: the service did not answer"
    assert app.invoke(None, config) == {"log": ["start", "a", "b", "c"]}  # a resumes nothing: b runs again


def test_a_graph_can_rewind_its_failed_runs_and_record_why(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    app = _flaky_workflow(saver, [], on_error="rewind")
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "first"}, config)
    app_failing = _flaky_workflow(saver, [ValueError("bad row")], on_error="rewind")
    errors: list[Exception] = []
    app_failing.stream({"log": "second"}, config).subscribe(on_error=errors.append)
    assert [str(e) for e in errors] == ["bad row"]
    head = app.get_state(config)
    assert list(head.values["log"]) == ["first", "a", "b", "c"]
    assert head.checkpoint is not None and head.checkpoint.source == "rewind"
    assert head.checkpoint.error == "ValueError: bad row"


def test_a_run_that_fails_before_reading_its_thread_records_nothing() -> None:
    saver = MemorySaver()
    app = _one_node(lambda s: {"log": "x"}, saver)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(ThreadNotFoundError, match="thread 't' has no checkpoint"):
        app.invoke(None, config)
    assert saver.list("t") == []


def test_resuming_needs_a_thread_and_a_checkpointer() -> None:
    with pytest.raises(InvalidArgumentError, match="needs a checkpointer") as raised:
        _one_node(lambda s: {"log": "x"}).invoke(None)
    assert raised.value.argument == "input"
