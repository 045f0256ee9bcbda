"""Checkpoints form a chain: ids, parents, per-thread seq, node, next, run id, source; history newest first."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import reactivex as rx
from reactivex.testing import TestScheduler

from rxgraph import (
    END,
    START,
    Checkpoint,
    CheckpointConflictError,
    CheckpointNotFoundError,
    InvalidConfigError,
    KeyStrategy,
    MemorySaver,
    RunnableConfig,
    StateGraph,
)


def _two_step_graph(saver: MemorySaver) -> Any:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )


def test_history_is_newest_first_with_parent_links_seq_nodes_next_and_sources() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "in1"}, config)
    app.invoke({"log": "in2"}, config)
    history = app.get_state_history(config)
    checkpoints = [s.checkpoint for s in history]
    assert all(c is not None for c in checkpoints)
    assert [c.seq for c in checkpoints if c] == [6, 5, 4, 3, 2, 1]
    assert [c.node for c in checkpoints if c] == ["b", "a", "__start__", "b", "a", "__start__"]
    assert [c.source for c in checkpoints if c] == ["loop", "loop", "input"] * 2
    assert [s.next for s in history] == [(), ("b",), ("a",), (), ("b",), ("a",)]
    for newer, older in itertools.pairwise(history):
        assert newer.parent_id == older.checkpoint_id
    assert history[-1].parent_id is None
    first_run, second_run = {c.run_id for c in checkpoints[3:] if c}, {c.run_id for c in checkpoints[:3] if c}
    assert len(first_run) == 1 and len(second_run) == 1 and first_run != second_run
    assert history[0].values == {"log": ["in1", "a", "b", "in2", "a", "b"]}
    assert app.get_state(config).checkpoint_id == history[0].checkpoint_id


def test_a_run_given_an_id_writes_its_checkpoints_under_it_and_each_other_run_gets_a_new_one() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    app.invoke({"log": []}, RunnableConfig(thread_id="t", run_id="turn-1"))
    app.invoke({"log": []}, RunnableConfig(thread_id="t"))
    run_ids = [c.run_id for c in reversed(saver.list("t"))]
    assert run_ids[:3] == ["turn-1"] * 3 and len(set(run_ids[3:])) == 1 and run_ids[3] != "turn-1"
    with pytest.raises(InvalidConfigError, match="run_id"):
        RunnableConfig(thread_id="t", run_id=" ")


def test_state_of_an_unknown_thread_is_empty() -> None:
    app = _two_step_graph(MemorySaver())
    snapshot = app.get_state(RunnableConfig(thread_id="nobody"))
    assert snapshot.values == {} and snapshot.checkpoint_id is None and snapshot.next == ()
    assert app.get_state_history(RunnableConfig(thread_id="nobody")) == []


def test_get_state_at_a_checkpoint_id_and_an_unknown_one() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "x"}, config)
    middle = app.get_state_history(config)[1]
    snapshot = app.get_state(config.model_copy(update={"checkpoint_id": middle.checkpoint_id}))
    assert snapshot.values == {"log": ["x", "a"]} and snapshot.next == ("b",)
    with pytest.raises(CheckpointNotFoundError, match="'t' has no checkpoint 'nope'"):
        app.get_state(config.model_copy(update={"checkpoint_id": "nope"}))


def test_a_run_from_a_checkpoint_id_forks_from_it() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "x"}, config)
    first = app.get_state_history(config)[-1]
    app.invoke({"log": "y"}, config.model_copy(update={"checkpoint_id": first.checkpoint_id}))
    head = app.get_state(config)
    assert head.values == {"log": ["x", "y", "a", "b"]}
    run_start = app.get_state_history(config)[2]
    assert run_start.parent_id == first.checkpoint_id
    assert run_start.checkpoint is not None and run_start.checkpoint.rolled_back_from is None  # a fork, not a rollback


def test_resuming_without_input_continues_from_next() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "x"}, config)
    after_a = app.get_state_history(config)[1]
    resumed = app.invoke(None, config.model_copy(update={"checkpoint_id": after_a.checkpoint_id}))
    assert resumed == {"log": ["x", "a", "b"]}
    assert app.invoke(None, config) == {"log": ["x", "a", "b"]}  # nothing next: nothing runs


def test_a_run_whose_head_moved_fails_with_a_conflict() -> None:
    # Another process sharing the saver moves the head while this run waits: its next write must not win.
    scheduler = TestScheduler()
    saver = MemorySaver()
    app = (
        StateGraph()
        .add_node("slow", lambda s: rx.timer(10.0).pipe(rx.operators.map(lambda _: {"done": True})))
        .add_edge(START, "slow")
        .add_edge("slow", END)
        .compile(checkpointer=saver)
    )
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    errors: list[Exception] = []
    app.stream({"who": "first"}, config).subscribe(on_error=errors.append)
    scheduler.advance_by(1.0)
    head = saver.get("t")
    assert head is not None
    moved = Checkpoint(
        id="elsewhere", thread_id="t", seq=head.seq + 1, parent_id=head.id, values={"who": "other"},
        run_id="other-run", source="input",
    )  # fmt: skip
    saver.put(moved, expected_head=head.id)
    scheduler.start()
    assert len(errors) == 1 and isinstance(errors[0], CheckpointConflictError)
    assert errors[0].thread_id == "t" and errors[0].actual_head == "elsewhere"
    assert app.get_state(RunnableConfig(thread_id="t")).values == {"who": "other"}


def test_a_second_run_on_a_busy_thread_starts_after_the_first_has_ended() -> None:
    scheduler = TestScheduler()
    saver = MemorySaver()
    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("slow", lambda s: rx.timer(10.0).pipe(rx.operators.map(lambda _: {"log": "slow"})))
        .add_edge(START, "slow")
        .add_edge("slow", END)
        .compile(checkpointer=saver)
    )
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    completed: list[tuple[str, float]] = []
    app.stream({"log": "first"}, config).subscribe(on_completed=lambda: completed.append(("first", scheduler.clock)))
    app.stream({"log": "second"}, config).subscribe(on_completed=lambda: completed.append(("second", scheduler.clock)))
    scheduler.start()
    assert completed == [("first", 10.0), ("second", 20.0)]
    assert app.get_state(RunnableConfig(thread_id="t")).values == {"log": ["first", "slow", "second", "slow"]}


def test_a_checkpointer_needs_a_thread_id() -> None:
    app = _two_step_graph(MemorySaver())
    with pytest.raises(ValueError, match="thread_id"):
        app.stream({})
    with pytest.raises(ValueError, match="no checkpointer"):
        StateGraph().add_node("a", lambda s: None).add_edge(START, "a").add_edge("a", END).compile().get_state(
            RunnableConfig(thread_id="t")
        )


def test_a_run_from_the_threads_start_forks_from_the_empty_state() -> None:
    saver = MemorySaver()
    app = _two_step_graph(saver)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": ["first"]}, config)
    head = saver.get("t")
    assert head is not None

    forked = app.invoke({"log": ["again"]}, RunnableConfig(thread_id="t", checkpoint_id=START))

    assert forked == {"log": ["again", "a", "b"]}
    history = saver.list("t")
    first_of_fork = history[2]
    assert first_of_fork.source == "input" and first_of_fork.parent_id is None and first_of_fork.seq == head.seq + 1
    assert [c.seq for c in history] == list(range(head.seq + 3, 0, -1))  # one chain: the fork is written on the head
