"""The saver contract under concurrency: writers racing on one head, and writers of different threads at once,
through one saver.

Subclass ``ConcurrencyContract`` as ``Test...`` with your ``make_saver`` to run only these checks. The race
through two savers on one storage is a check of ``SharedStorageContract``.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

from ..._frozen import FrozenList
from ...messages import UserMessage
from ._base import SaverContractBase, Session
from ._support import WAIT, make_cp, race_on_one_head, run_threads

__all__ = ["ConcurrencyContract"]


class ConcurrencyContract(SaverContractBase):
    """The checks of threads writing at once through one saver: exactly one writer of a head wins, and writers of
    their own threads all land."""

    def test_concurrent_writers_on_one_head_exactly_one_wins(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            race_on_one_head([session.saver], session.saver)

    def test_threads_writing_their_own_threads_in_parallel_all_land(self, tmp_path: Path) -> None:
        writers, steps = 4, 25
        with Session(self, tmp_path) as session:
            saver = session.saver
            barrier = threading.Barrier(writers)
            errors: list[BaseException] = []

            def run(thread_id: str) -> None:
                try:
                    barrier.wait(WAIT)
                    messages: FrozenList[Any] = FrozenList()
                    parent = None
                    for seq in range(1, steps + 1):
                        messages = messages.extended([UserMessage(content=f"{thread_id}-{seq}")])
                        cp = make_cp(seq, f"{thread_id}-{seq}", parent, thread_id, messages=messages)
                        saver.put(cp, expected_head=parent)
                        parent = cp.id
                except BaseException as error:  # reported below, in the test's own thread
                    errors.append(error)

            run_threads([partial(run, f"t{i}") for i in range(writers)])
            assert errors == []
            assert sorted(saver.threads()) == [f"t{i}" for i in range(writers)]
            for i in range(writers):
                head = saver.get(f"t{i}")
                assert head is not None and head.seq == steps
                assert [m.content for m in head.values["messages"]] == [f"t{i}-{s}" for s in range(1, steps + 1)]
