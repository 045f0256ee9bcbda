"""MemorySaver: compare-and-set, seq, immutability, thread safety."""

from __future__ import annotations

import threading
from types import MappingProxyType

import pytest
from pydantic import ValidationError

from rxgraph import Checkpoint, CheckpointConflictError, MemorySaver


def _checkpoint(seq: int, cid: str, parent: str | None = None, thread: str = "t", **values: object) -> Checkpoint:
    return Checkpoint(id=cid, thread_id=thread, seq=seq, parent_id=parent, values=values, run_id="r", source="loop")


def test_put_is_a_compare_and_set_on_the_head() -> None:
    saver = MemorySaver()
    saver.put(_checkpoint(1, "a"), expected_head=None)
    with pytest.raises(CheckpointConflictError, match="head is 'a', expected None") as caught:
        saver.put(_checkpoint(2, "b", "a"), expected_head=None)
    assert caught.value.actual_head == "a" and caught.value.expected_head is None
    saver.put(_checkpoint(2, "b", "a"), expected_head="a")
    assert saver.get("t") is not None and saver.get("t").id == "b"  # type: ignore[union-attr]


def test_seq_must_follow_the_head_and_ids_are_unique() -> None:
    saver = MemorySaver()
    with pytest.raises(ValueError, match="has seq 2, expected 1"):
        saver.put(_checkpoint(2, "a"), expected_head=None)
    saver.put(_checkpoint(1, "a"), expected_head=None)
    with pytest.raises(ValueError, match="already stored"):
        saver.put(_checkpoint(2, "a"), expected_head="a")


def test_list_is_newest_first_with_limit_and_before() -> None:
    saver = MemorySaver()
    parent = None
    for seq in range(1, 6):
        saver.put(_checkpoint(seq, f"c{seq}", parent), expected_head=parent)
        parent = f"c{seq}"
    assert [c.seq for c in saver.list("t")] == [5, 4, 3, 2, 1]
    assert [c.seq for c in saver.list("t", limit=2)] == [5, 4]
    assert [c.seq for c in saver.list("t", before_seq=3)] == [2, 1]
    assert saver.list("other") == [] and saver.get("other") is None
    assert saver.get("t", "c2") is not None and saver.get("other", "c2") is None
    assert saver.threads() == ["t"]


def test_checkpoints_cannot_be_mutated_by_callers() -> None:
    saver = MemorySaver()
    values = {"items": [1, 2], "meta": {"k": "v"}}
    saver.put(Checkpoint(id="a", thread_id="t", seq=1, values=values, run_id="r", source="input"), expected_head=None)
    values["items"].append(3)  # the caller's own dict: not what was stored
    stored = saver.get("t")
    assert stored is not None
    assert isinstance(stored.values, MappingProxyType)
    assert stored.values == {"items": [1, 2], "meta": {"k": "v"}}
    with pytest.raises(TypeError):
        stored.values["items"] = ()  # type: ignore[index]
    with pytest.raises(ValidationError):
        stored.id = "b"  # type: ignore[misc]


def test_concurrent_writers_on_one_head_exactly_one_wins() -> None:
    saver = MemorySaver()
    saver.put(_checkpoint(1, "root"), expected_head=None)
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        barrier.wait()
        try:
            saver.put(_checkpoint(2, f"w{i}", "root"), expected_head="root")
            result = "won"
        except CheckpointConflictError:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * (writers - 1) + ["won"]
    assert len(saver.list("t")) == 2
