"""What the checks of the saver contract build with: checkpoints and chains of them, and writers on threads of
their own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from ...checkpoint import Checkpoint, CheckpointSaver
from ...errors import CheckpointConflictError
from ...messages import UserMessage

__all__ = ["WAIT", "chain", "make_cp", "race_on_one_head", "run_threads"]

WAIT = 30.0
"""Seconds a check waits for its own threads before it fails (never reached by a working saver)."""


def make_cp(
    seq: int, cid: str, parent: str | None = None, thread: str = "t", *, safe: bool = True, **values: Any
) -> Checkpoint:
    """A checkpoint ``cid`` of ``thread`` at ``seq``, child of ``parent``, holding ``values``."""
    return Checkpoint(
        id=cid,
        thread_id=thread,
        seq=seq,
        parent_id=parent,
        values=values,
        run_id="r",
        source="loop",
        safe=safe,
        unsafe_reason=None if safe else "ends with a tool call",
    )


def chain(saver: CheckpointSaver, safe: list[bool], thread: str = "t") -> list[Checkpoint]:
    """Put a chain of checkpoints ``{thread}1``, ``{thread}2``, ... with the given ``safe`` flags and ``n`` = seq."""
    written: list[Checkpoint] = []
    parent = None
    for seq, is_safe in enumerate(safe, start=1):
        written.append(
            saver.put(make_cp(seq, f"{thread}{seq}", parent, thread, safe=is_safe, n=seq), expected_head=parent)
        )
        parent = written[-1].id
    return written


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target on a thread of its own, started together; fails when one is still running after ``WAIT``."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a writer is still running"


def race_on_one_head(savers: list[CheckpointSaver], reader: CheckpointSaver) -> None:
    """Eight writers, spread over ``savers``, put a child of the same head at once: exactly one may win."""
    savers[0].put(make_cp(1, "root", messages=[UserMessage(content="hi")]), expected_head=None)
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        saver = savers[i % len(savers)]
        checkpoint = make_cp(2, f"w{i}", "root", messages=[UserMessage(content="hi"), UserMessage(content=f"w{i}")])
        try:
            barrier.wait(WAIT)
            saver.put(checkpoint, expected_head="root")
            result: tuple[str, str | None] = (f"won:w{i}", None)
        except CheckpointConflictError as error:
            result = ("conflict", error.actual_head)
        except BaseException as error:  # reported below, in the test's own thread
            result = (f"error: {error!r}", None)
        with lock:
            outcomes.append(result)

    run_threads([partial(write, i) for i in range(writers)])
    winners = [o for o, _ in outcomes if o.startswith("won")]
    assert len(winners) == 1 and [o for o, _ in outcomes].count("conflict") == writers - 1, outcomes
    for outcome, actual_head in outcomes:
        if outcome == "conflict":
            assert actual_head is not None and actual_head.startswith("w")
    head = reader.get("t")
    assert head is not None and f"won:{head.id}" == winners[0] and len(reader.list("t")) == 2
