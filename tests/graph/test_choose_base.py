"""``choose_base``: the checkpoint a run starts from, what a cancel of it puts back, and when it refuses."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from rxgraph import Checkpoint, CheckpointNotFoundError, CheckpointSaver, UnsafeHistoryError
from rxgraph.graph._choose_base import BaseChoice, choose_base


def _thread(saver: CheckpointSaver, safety: Sequence[bool], thread: str = "t") -> list[Checkpoint]:
    """A chain of checkpoints whose `safe` flags are ``safety`` (oldest first)."""
    chain: list[Checkpoint] = []
    for seq, safe in enumerate(safety, start=1):
        checkpoint = Checkpoint(
            id=f"c{seq}",
            thread_id=thread,
            seq=seq,
            parent_id=chain[-1].id if chain else None,
            values={"seq": seq},
            run_id="r",
            source="loop",
            safe=safe,
            unsafe_reason=None if safe else "ends with a tool message",
        )
        saver.put(checkpoint, expected_head=chain[-1].id if chain else None)
        chain.append(checkpoint)
    return chain


def _choose(saver: CheckpointSaver, **overrides: Any) -> BaseChoice:
    options: dict[str, Any] = {"checkpoint_id": None, "has_input": True, "on_unsafe_head": "rollback"}
    options.update(overrides)
    return choose_base(saver, "t", **options)


def test_a_new_thread_starts_from_nothing(saver_factory: Callable[[], CheckpointSaver]) -> None:
    assert _choose(saver_factory()) == BaseChoice(None, None, rewind_to=None)


def test_a_safe_head_is_the_base_and_what_a_cancel_puts_back(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    head = _thread(saver, [True, True])[-1]
    choice = _choose(saver)
    assert (choice.head, choice.base, choice.rewind_to, choice.rolled_back_from) == (head, head, head, None)


def test_an_unsafe_head_rolls_back_to_the_newest_safe_checkpoint_and_says_so(
    saver_factory: Callable[[], CheckpointSaver], caplog: pytest.LogCaptureFixture
) -> None:
    saver = saver_factory()
    chain = _thread(saver, [True, True, False, False])
    with caplog.at_level(logging.WARNING, logger="rxgraph"):
        choice = _choose(saver)
    assert choice.head == chain[3] and choice.base == chain[1] and choice.rewind_to == chain[1]
    assert choice.rolled_back_from == "c4"
    assert "thread 't': head checkpoint c4 (seq 4) is not safe" in caplog.text


@pytest.mark.parametrize(
    ("options", "why"),
    [({"has_input": False}, "resuming its own turn"), ({"on_unsafe_head": "ignore"}, "the policy says so")],
)
def test_an_unsafe_head_is_the_base_when(
    options: dict[str, Any], why: str, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    saver = saver_factory()
    head = _thread(saver, [True, False])[-1]
    choice = _choose(saver, **options)
    assert choice.base == head and choice.rolled_back_from is None, why


def test_an_unsafe_head_with_the_error_policy_names_the_thread_and_the_checkpoint(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    _thread(saver, [True, False])
    with pytest.raises(UnsafeHistoryError, match="ends with a tool message") as raised:
        _choose(saver, on_unsafe_head="error")
    assert (raised.value.thread_id, raised.value.checkpoint_id) == ("t", "c2")


def test_no_safe_checkpoint_at_all_is_an_error(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    _thread(saver, [False, False])
    with pytest.raises(UnsafeHistoryError, match="no checkpoint has a history that can take new input"):
        _choose(saver)


def test_an_explicit_checkpoint_is_the_base_and_a_cancel_puts_the_head_back(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    chain = _thread(saver, [True, False, True])
    choice = _choose(saver, checkpoint_id="c2")  # a replay from an unsafe checkpoint is the caller's choice
    assert choice.base == chain[1] and choice.rewind_to == chain[2] and choice.rolled_back_from is None


def test_an_unknown_explicit_checkpoint_is_not_found(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    _thread(saver, [True])
    with pytest.raises(CheckpointNotFoundError) as raised:
        _choose(saver, checkpoint_id="nope")
    assert (raised.value.thread_id, raised.value.checkpoint_id) == ("t", "nope")
