"""on_cancel="rewind" (the default): a cancelled run puts the thread back to its pre-turn state, as the last writer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from _support import DelegatingSaver
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import END, START, Checkpoint, CheckpointSaver, KeyStrategy, RunnableConfig, StateGraph


def _graph(saver: CheckpointSaver, delay: float = 10.0, **compile_kwargs: Any) -> Any:
    def slow(state: Any) -> rx.Observable[dict[str, Any]]:
        return rx.timer(delay).pipe(ops.map(lambda _: {"log": "slow"}))

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("fast", lambda s: {"log": "fast"})
        .add_node("slow", slow)
        .add_edge(START, "fast")
        .add_edge("fast", "slow")
        .add_edge("slow", END)
        .compile(checkpointer=saver, **compile_kwargs)
    )


def _cancel_at(app: Any, config: RunnableConfig, scheduler: TestScheduler, tick: float, text: str) -> None:
    subscription = app.stream({"log": text}, config).subscribe()
    scheduler.schedule_relative(tick, lambda *_: subscription.dispose())
    scheduler.advance_by(tick + 100)


def test_cancel_mid_turn_writes_a_new_head_equal_to_the_pre_turn_state(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler, saver = TestScheduler(), saver_factory()
    app = _graph(saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    app.invoke({"log": "turn1"}, config)
    before = saver.get("t")
    assert before is not None
    _cancel_at(app, config, scheduler, 5.0, "turn2")
    head = saver.get("t")
    assert head is not None and head.source == "rewind"
    assert head.values == before.values and head.values is before.values  # shared, not copied
    assert head.parent_id == before.id and head.seq == before.seq + 3  # input, fast, then the rewind
    cancelled = [c for c in saver.list("t") if c.seq > before.seq]
    assert len({c.run_id for c in cancelled}) == 1  # the cancelled run's checkpoints stay, tagged with its run id
    assert [c.node for c in reversed(cancelled)] == ["__start__", "fast", None]


def test_a_cancelled_first_ever_turn_rewinds_to_an_empty_state(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler, saver = TestScheduler(), saver_factory()
    app = _graph(saver)
    _cancel_at(app, RunnableConfig(thread_id="t", scheduler=scheduler), scheduler, 5.0, "first")
    head = saver.get("t")
    assert head is not None and head.source == "rewind" and head.values == {} and head.parent_id is None
    assert app.invoke({"log": "again"}, RunnableConfig(thread_id="t", scheduler=scheduler)) == {
        "log": ["again", "fast", "slow"]
    }


def test_completion_and_error_do_not_rewind(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler, saver = TestScheduler(), saver_factory()
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    _graph(saver).invoke({"log": "ok"}, config)
    assert all(c.source != "rewind" for c in saver.list("t"))

    def broken(state: Any) -> None:
        raise RuntimeError("boom")

    failing = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("broken", broken)
        .add_edge(START, "broken")
        .add_edge("broken", END)
        .compile(checkpointer=saver)
    )
    with pytest.raises(RuntimeError):
        failing.invoke({"log": "err"}, config)
    # on_error="keep" (a graph's default): no rewind; the failure is recorded on a checkpoint of the same state,
    # which sends a resume back to the failed node.
    head = saver.get("t")
    assert head is not None and head.source == "error" and head.error == "RuntimeError: boom"
    assert head.next == ("broken",) and list(head.values["log"])[-1] == "err"
    assert all(c.source != "rewind" for c in saver.list("t"))


def test_dispose_after_completion_keeps_the_turn(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    app = _graph(saver, delay=0.0)
    subscription = app.stream({"log": "x"}, RunnableConfig(thread_id="t")).subscribe()
    subscription.dispose()
    assert app.get_state(RunnableConfig(thread_id="t")).values == {"log": ["x", "fast", "slow"]}


def test_on_cancel_keep_leaves_what_the_run_wrote(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler, saver = TestScheduler(), saver_factory()
    app = _graph(saver, on_cancel="keep")
    _cancel_at(app, RunnableConfig(thread_id="t", scheduler=scheduler), scheduler, 5.0, "x")
    head = saver.get("t")
    assert head is not None and head.node == "fast"


def test_the_rewind_does_not_clobber_a_newer_writer(saver_factory: Callable[[], CheckpointSaver]) -> None:
    # Runs of one process never overlap on a thread (its slot); the writer that moves the head meanwhile is another
    # process, here a checkpoint put straight into the shared saver, as that process's run would.
    scheduler, saver = TestScheduler(), saver_factory()
    app = _graph(saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    first = app.stream({"log": "A"}, config).subscribe()
    scheduler.advance_by(2.0)  # A wrote its input and "fast", and waits for "slow"
    a_head = saver.get("t")
    assert a_head is not None and a_head.values["log"][-1] == "fast"
    other = Checkpoint(
        id="other-process",
        thread_id="t",
        seq=a_head.seq + 1,
        parent_id=a_head.id,
        values={"log": ["B"]},
        run_id="other-run",
        source="input",
    )
    saver.put(other, expected_head=a_head.id)
    first.dispose()  # A's rewind expects A's last write as the head: the other writer moved it, so A leaves it alone
    assert saver.get("t") == other
    assert all(c.source != "rewind" for c in saver.list("t"))


def test_a_cancel_before_anything_was_written_writes_nothing(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver, scheduler = saver_factory(), TestScheduler()
    app = _graph(saver)
    app.invoke({"log": "x"}, RunnableConfig(thread_id="t", scheduler=scheduler))
    count = len(saver.list("t"))
    # No input: a resume of a finished thread has nothing to run and nothing to undo.
    app.stream(None, RunnableConfig(thread_id="t", scheduler=scheduler)).subscribe().dispose()
    assert len(saver.list("t")) == count


class _FailingRewindSaver(DelegatingSaver):
    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        if checkpoint.source == "rewind":
            raise OSError("disk full")
        return super().put(checkpoint, expected_head=expected_head)


def test_a_failing_rewind_is_logged_with_the_thread_and_never_masks_the_cancel(
    caplog: pytest.LogCaptureFixture, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    scheduler, saver = TestScheduler(), _FailingRewindSaver(saver_factory())
    app = _graph(saver)
    with caplog.at_level(logging.ERROR, logger="rxgraph"):
        _cancel_at(app, RunnableConfig(thread_id="thread-9", scheduler=scheduler), scheduler, 5.0, "x")
    assert any("thread-9" in r.getMessage() and "rewinding" in r.getMessage() for r in caplog.records)
    head = saver.get("thread-9")
    assert head is not None and head.node == "fast"  # the half turn stays; safe-head selection covers it
