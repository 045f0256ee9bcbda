"""Subgraphs: a compiled graph as a node — its outputs surface with their path, its updates merge into the parent,
an interrupt inside it resumes into it, and cancelling the parent cancels it and rewinds the parent's turn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import reactivex as rx
from _subgraph_worker import CONFIG, build
from reactivex import operators as ops
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import TestScheduler

import rxgraph
from rxgraph import (
    END,
    START,
    Checkpoint,
    CheckpointSaver,
    Command,
    CompiledGraph,
    InterruptOutput,
    InvalidTypeError,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    RunnableConfig,
    Send,
    SqliteSaver,
    StateGraph,
    StreamingOutput,
    SubgraphEvent,
    interrupt,
)
from rxgraph.testing import DelegatingSaver


def _logs(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda state: {"log": name}


def _inner(*, ask: bool = False) -> CompiledGraph:
    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("i1", _logs("i1"))
    if ask:
        graph.add_node("ask", lambda s: {"log": f"ask:{interrupt('ok?')}"}).add_edge("i1", "ask").add_edge("ask", END)
    else:
        graph.add_edge("i1", END)
    return graph.add_edge(START, "i1").compile()


def _outer(sub: CompiledGraph, saver: CheckpointSaver | None = None) -> CompiledGraph:
    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", _logs("a")).add_node("sub", sub)
    graph.add_node("b", _logs("b")).add_edge(START, "a").add_edge("a", "sub").add_edge("sub", "b")
    return graph.add_edge("b", END).compile(saver)


def _outputs(app: CompiledGraph, input: Any, config: RunnableConfig | None = None) -> list[Any]:
    outputs: list[Any] = []
    app.stream(input, config).subscribe(outputs.append)
    return outputs


def test_the_subgraph_streams_its_outputs_with_their_path_and_its_updates_merge_once() -> None:
    outputs = _outputs(_outer(_inner()), {"log": "in"})
    events = [o.chunk for o in outputs if isinstance(o, StreamingOutput)]
    assert all(isinstance(e, SubgraphEvent) for e in events)
    assert [e.path for e in events] == [("sub", "i1")]
    final = outputs[-1]
    assert isinstance(final, NodeOutput) and final.node == "b"
    assert final.state["log"] == ["in", "a", "i1", "b"]  # the inner history was not merged in a second time


def test_nested_subgraphs_give_the_whole_path() -> None:
    middle = StateGraph({"log": KeyStrategy.APPEND}).add_node("inner", _inner())
    middle_graph = middle.add_edge(START, "inner").add_edge("inner", END).compile()
    outputs = _outputs(_outer(middle_graph), {"log": "in"})
    paths = [o.chunk.path for o in outputs if isinstance(o, StreamingOutput)]
    assert paths == [("sub", "inner", "i1"), ("sub", "inner")]
    assert outputs[-1].state["log"] == ["in", "a", "i1", "b"]


def test_an_interrupt_inside_the_subgraph_surfaces_and_the_resume_goes_on_inside_it(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    app = _outer(_inner(ask=True), saver_factory())
    config = RunnableConfig(thread_id="t")
    stop = _outputs(app, {"log": "in"}, config)[-1]
    assert isinstance(stop, InterruptOutput) and stop.node == "sub" and stop.value == "ok?"
    pending = app.get_state(config).interrupt
    assert pending is not None and pending.subgraph is not None and pending.subgraph["next"] == ["ask"]
    assert app.get_state(config).values["log"] == ["in", "a"]  # nothing of the subgraph lands before it ends
    resumed = _outputs(app, Command(resume="yes"), config)
    assert [o.chunk.path for o in resumed if isinstance(o, StreamingOutput)] == [("sub", "ask")]  # i1 not again
    assert app.get_state(config).values["log"] == ["in", "a", "i1", "ask:yes", "b"]


def test_an_interrupted_subgraph_resumes_in_another_process_from_a_sqlite_file(tmp_path: Path) -> None:
    config = RunnableConfig(thread_id="t")
    with SqliteSaver(tmp_path / "sub.db") as saver:
        _outputs(_outer(_inner(ask=True), saver), {"log": "in"}, config)
    with SqliteSaver(tmp_path / "sub.db") as reopened:
        app = _outer(_inner(ask=True), reopened)
        assert app.invoke(Command(resume="later"), config)["log"] == ["in", "a", "i1", "ask:later", "b"]


def test_a_subgraph_can_be_sent_payloads() -> None:
    inner = StateGraph().add_node("square", lambda s: {"squares": [s["n"] * s["n"]]})
    inner_graph = inner.add_edge(START, "square").add_edge("square", END).compile()
    graph = StateGraph({"squares": KeyStrategy.APPEND}).add_node("split", lambda s: None)
    graph.add_node("each", inner_graph).add_edge(START, "split")
    graph.add_conditional_edges("split", lambda s: [Send("each", {"n": n}) for n in s["items"]])
    app = graph.add_edge("each", END).compile()
    assert app.invoke({"items": [1, 2, 3]})["squares"] == [1, 4, 9]


def test_a_subgraph_node_takes_no_reduce() -> None:
    with pytest.raises(InvalidTypeError, match="runs a subgraph"):
        StateGraph().add_node("sub", _inner(), reduce=lambda chunks: {})


def test_cancelling_the_parent_cancels_the_subgraph_and_rewinds_the_parent_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    started: list[float] = []
    ended: list[float] = []

    def slow(state: Any) -> rx.Observable[dict[str, Any]]:
        started.append(scheduler.clock)
        return rx.timer(10, scheduler=scheduler).pipe(
            ops.map(lambda _: {"log": "slow"}), ops.finally_action(lambda: ended.append(scheduler.clock))
        )

    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("i1", _logs("i1")).add_node("slow", slow)
    inner_graph = inner.add_edge(START, "i1").add_edge("i1", "slow").add_edge("slow", END).compile()
    saver = saver_factory()
    app = _outer(inner_graph, saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    scheduler.start(lambda: app.stream({"log": "turn 1"}, config))
    before = saver.get("t")
    scheduler.start(lambda: app.stream({"log": "turn 2"}, config), created=1000, subscribed=1000, disposed=1005)
    assert started == [200.0, 1000.0] and ended == [210.0, 1005.0]  # the inner timer was disposed with the parent
    head = saver.get("t")
    assert before is not None and head is not None and head.source == "rewind" and head.values == before.values


def test_a_subgraph_blocking_on_a_pool_is_cancelled_in_real_time(saver_factory: Callable[[], CheckpointSaver]) -> None:
    pool = ThreadPoolScheduler(1)
    entered = threading.Event()
    release = threading.Event()
    returned = threading.Event()

    def blocking(state: Any) -> dict[str, Any]:
        if "turn 2" in state["log"]:
            entered.set()
            release.wait(30)
            returned.set()
        return {"log": "blocked"}

    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("block", blocking, scheduler=pool)
    inner_graph = inner.add_edge(START, "block").add_edge("block", END).compile()
    saver = saver_factory()
    app = _outer(inner_graph, saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "turn 1"}, config)
    before = saver.get("t")
    subscription = app.stream({"log": "turn 2"}, config).subscribe()
    assert entered.wait(30)
    subscription.dispose()
    release.set()
    assert returned.wait(30)
    head = app.get_state(config)
    assert before is not None and head.values == before.values
    assert app.invoke({"log": "turn 3"}, config)["log"] == [
        "turn 1",
        "a",
        "blocked",
        "b",
        "turn 3",
        "a",
        "blocked",
        "b",
    ]


def test_each_inner_step_is_saved_in_the_parents_thread_under_the_nodes_namespace(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("i1", _logs("i1")).add_node("i2", _logs("i2"))
    inner_graph = inner.add_edge(START, "i1").add_edge("i1", "i2").add_edge("i2", END).compile()
    saver = saver_factory()
    app = _outer(inner_graph, saver)
    app.invoke({"log": "in"}, RunnableConfig(thread_id="t"))
    steps = [(c.node, c.next, list(c.values["log"])) for c in reversed(saver.list("t"))]
    assert steps == [
        ("__start__", ("a",), ["in"]),
        ("a", ("sub",), ["in", "a"]),
        ("sub/i1", ("sub",), ["in", "a"]),  # the parent's state as it was; the inner state is in `pending`
        ("sub/i2", ("sub",), ["in", "a"]),
        ("sub", ("b",), ["in", "a", "i1", "i2"]),
        ("b", (), ["in", "a", "i1", "i2", "b"]),
    ]
    progress = saver.list("t")[3].pending  # newest first: the one after i1
    assert progress is not None and progress["subgraph"]["0"]["next"] == ["i2"]
    assert saver.list("t")[0].pending is None


def test_a_failure_inside_the_subgraph_resumes_inside_it(saver_factory: Callable[[], CheckpointSaver]) -> None:
    ran: list[str] = []

    def step(name: str, fail_once: bool = False) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            ran.append(name)
            if fail_once and ran.count(name) == 1:
                raise ConnectionError("flaky")
            return {"log": name}

        return action

    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("i1", step("i1")).add_node("i2", step("i2", True))
    inner_graph = inner.add_edge(START, "i1").add_edge("i1", "i2").add_edge("i2", END).compile()
    app = _outer(inner_graph, saver_factory())  # a graph keeps what a failed run wrote (on_error="keep")
    config = RunnableConfig(thread_id="t")
    with pytest.raises(ConnectionError):
        app.invoke({"log": "in"}, config)
    assert app.get_state(config).next == ("sub",)
    assert app.invoke(None, config)["log"] == ["in", "a", "i1", "i2", "b"]
    assert ran == ["i1", "i2", "i2"]  # i1 did not run again: the subgraph went on from its saved step


def test_a_process_killed_inside_the_subgraph_resumes_inside_it(tmp_path: Path) -> None:
    worker = Path(__file__).parent.parent / "_subgraph_worker.py"
    db, log = tmp_path / "job.db", tmp_path / "ran.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(rxgraph.__file__).parent.parent), str(worker.parent)])}
    process = subprocess.Popen(
        [sys.executable, str(worker), str(db), str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "inside"
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert log.read_text().split() == ["a", "i1", "i2"]

    with SqliteSaver(db) as saver:
        app = build(saver, log, block=False)
        head = app.get_state(CONFIG)
        assert head.checkpoint is not None and head.checkpoint.node == "sub/i1" and head.next == ("sub",)
        assert app.invoke(None, CONFIG)["log"] == ["in", "a", "i1", "i2", "b"]
    assert log.read_text().split() == ["a", "i1", "i2", "i2", "b"]  # i1 ran once: the resume went on inside


class _NoProgress(DelegatingSaver):
    """A saver that refuses the checkpoints a subgraph's progress writes."""

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        if checkpoint.node is not None and checkpoint.node.startswith("sub/"):
            raise OSError("disk full")
        return super().put(checkpoint, expected_head=expected_head)


def test_a_failed_progress_write_fails_the_run_like_any_write() -> None:
    saver = _NoProgress(MemorySaver())
    app = _outer(_inner(), saver)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(OSError, match="disk full"):
        app.invoke({"log": "in"}, config)
    head = app.get_state(config)
    assert head.checkpoint is not None and head.checkpoint.source == "error" and head.next == ("sub",)
    assert head.values["log"] == ["in", "a"]
