"""A subscriber whose ``on_next`` raises: the output did not get through, so the run stops as if cancelled (rewound)
and the error reaches the subscriber's ``on_error`` — on every path, also from a thread pool."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import END, START, CheckpointSaver, KeyStrategy, NodeOutput, RunnableConfig, StateGraph, StreamingOutput


class ClientGone(Exception):
    pass


def _graph(saver: CheckpointSaver, first: Callable[[Any], Any]) -> Any:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", first)
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )


def _raise_on(node: str, kind: type[NodeOutput]) -> Callable[[NodeOutput], None]:
    def on_next(output: NodeOutput) -> None:
        if output.node == node and type(output) is kind:
            raise ClientGone(f"the client could not take {node}'s output")

    return on_next


def test_on_next_raising_after_a_step_on_a_thread_pool_ends_the_run_with_on_error_and_rewinds(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    go, done = threading.Event(), threading.Event()
    errors: list[Exception] = []

    def job() -> dict[str, Any]:
        assert go.wait(10)  # completes on the worker, after subscribe() returned
        return {"log": "a"}

    app = _graph(saver_factory(), lambda s: rx.from_future(pool.submit(job)))
    config = RunnableConfig(thread_id="t")
    app.stream({"log": "in"}, config).subscribe(
        _raise_on("a", NodeOutput), lambda e: (errors.append(e), done.set()), done.set
    )
    go.set()
    assert done.wait(10)  # a terminal event arrived: the run did not hang on the worker
    pool.shutdown(wait=True)
    assert len(errors) == 1 and isinstance(errors[0], ClientGone)
    head = app.get_state(config).checkpoint
    assert head is not None and head.source == "rewind" and dict(head.values) == {}


@pytest.mark.parametrize("kind", [NodeOutput, StreamingOutput])
def test_on_next_raising_on_a_synchronous_run_ends_it_with_on_error_and_rewinds(
    kind: type[NodeOutput], saver_factory: Callable[[], CheckpointSaver]
) -> None:
    ran: list[str] = []

    def streaming(state: Any) -> rx.Observable[dict[str, Any]]:
        ran.append("a")
        return rx.of({"log": "a1"}, {"log": "a2"})

    app = _graph(saver_factory(), streaming)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "turn 1"}, config)
    before = dict(app.get_state(config).values)
    errors: list[Exception] = []
    app.stream({"log": "turn 2"}, config).subscribe(_raise_on("a", kind), errors.append)
    assert [type(e) for e in errors] == [ClientGone]
    assert dict(app.get_state(config).values) == before
    assert app.get_state(config).checkpoint.source == "rewind"  # type: ignore[union-attr]


def test_on_next_raising_in_virtual_time_stops_the_stream_at_that_chunk() -> None:
    scheduler = TestScheduler()
    emitted: list[int] = []

    def ticking(state: Any) -> rx.Observable[dict[str, Any]]:
        return rx.interval(1.0).pipe(ops.take(5), ops.do_action(emitted.append), ops.map(lambda i: {"log": i}))

    app = (
        StateGraph({"log": KeyStrategy.APPEND}).add_node("a", ticking).add_edge(START, "a").add_edge("a", END).compile()
    )
    errors: list[Exception] = []

    def on_next(output: NodeOutput) -> None:
        if isinstance(output, StreamingOutput) and output.chunk == {"log": 1}:
            raise ClientGone("gone at the second chunk")

    app.stream({"log": "in"}, RunnableConfig(scheduler=scheduler)).subscribe(on_next, errors.append)
    scheduler.advance_by(10.0)
    assert emitted == [0, 1]  # the stream was disposed at the chunk that failed
    assert [type(e) for e in errors] == [ClientGone]


def test_an_unhandled_subscriber_error_still_leaves_the_thread_rewound(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # No on_error given: reactivex raises the error from subscribe(), as for its own sources; the rewind came first.
    app = _graph(saver_factory(), lambda s: {"log": "a"})
    config = RunnableConfig(thread_id="t")
    with pytest.raises(ClientGone):
        app.stream({"log": "in"}, config).subscribe(_raise_on("a", NodeOutput))
    head = app.get_state(config).checkpoint
    assert head is not None and head.source == "rewind"
