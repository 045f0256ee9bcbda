"""A run that is cancelled or fails logs one INFO record on the ``rxgraph`` logger: the thread, the run, and where
the thread now stands. A completed run, and a subgraph's run (its parent's record says it), log none."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from reactivex import operators as ops

from rxgraph import END, START, KeyStrategy, MemorySaver, RunnableConfig, StateGraph

CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="rxgraph"):
        yield caplog


def _ours(records: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in records.records if r.name == "rxgraph" and r.levelno == logging.INFO]


def _fails(state: Mapping[str, Any]) -> dict[str, Any]:
    raise ValueError("no luck")


def _graph(saver: MemorySaver, on_error: str = "keep", second: Any = _fails) -> Any:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", second)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(saver, on_error=on_error)  # type: ignore[arg-type]
    )


def test_a_failed_run_that_keeps_its_progress_says_where_a_resume_goes_on(records: pytest.LogCaptureFixture) -> None:
    saver = MemorySaver()
    with pytest.raises(ValueError):
        _graph(saver).invoke({}, CONFIG)
    head = saver.get("t")
    assert head is not None and head.source == "error"
    (line,) = _ours(records)
    assert line == (
        f"thread 't': run {head.run_id} failed (ValueError: no luck); what it wrote is kept (on_error='keep'): its "
        f"head is now checkpoint {head.id} (seq {head.seq}), which records the error, and a resume goes on from b"
    )


def test_a_failed_run_that_is_rewound_says_to_which_checkpoint(records: pytest.LogCaptureFixture) -> None:
    saver = MemorySaver()
    graph = _graph(saver, on_error="rewind")
    with pytest.raises(ValueError):
        graph.invoke({}, CONFIG)
    head = saver.get("t")
    assert head is not None and head.source == "rewind"
    (line,) = _ours(records)
    assert line == (
        f"thread 't': run {head.run_id} failed (ValueError: no luck) and was rewound to its empty start (no "
        f"checkpoint); its head is now checkpoint {head.id} (seq {head.seq}), which records the error"
    )


def test_a_cancelled_run_says_where_it_was_rewound_to(records: pytest.LogCaptureFixture) -> None:
    saver = MemorySaver()
    graph = _graph(saver, second=lambda s: {"log": "b"})
    graph.invoke({}, CONFIG)
    before = saver.get("t")
    assert before is not None
    assert _ours(records) == []  # a completed run logs nothing
    graph.stream({}, CONFIG).pipe(ops.take(1)).subscribe()  # cut after node a
    head = saver.get("t")
    assert head is not None and head.source == "rewind"
    (line,) = _ours(records)
    assert line == (
        f"thread 't': run {head.run_id} was cancelled and rewound to checkpoint {before.id}; its head is now "
        f"checkpoint {head.id} (seq {head.seq})"
    )


def test_a_run_cancelled_before_it_started_leaves_the_thread_unchanged(records: pytest.LogCaptureFixture) -> None:
    saver = MemorySaver()
    graph = _graph(saver, second=lambda s: {"log": "b"})
    graph.stream({}, CONFIG.model_copy(update={"scheduler": _Never()})).subscribe().dispose()
    (line,) = _ours(records)
    assert line.startswith("thread 't': run ") and line.endswith(
        " was cancelled before it started; the thread is unchanged"
    )


def test_a_failed_subgraph_is_logged_once_by_its_parent(records: pytest.LogCaptureFixture) -> None:
    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("i", _fails).add_edge(START, "i").add_edge("i", END)
    outer = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("sub", inner.compile())
        .add_edge(START, "sub")
        .add_edge("sub", END)
        .compile(MemorySaver())
    )
    with pytest.raises(ValueError):
        outer.invoke({}, CONFIG)
    (line,) = _ours(records)
    assert line.startswith("thread 't': run ") and "failed (ValueError: no luck)" in line


class _Never:
    """A scheduler that never runs what it is given: a run on it is subscribed and never starts."""

    def schedule(self, action: Any, state: Any = None) -> Any:
        from reactivex.disposable import Disposable

        return Disposable()
