"""The saver contract between savers on one storage (durable savers only): a second saver, as another process would
open, sees every write, and the compare-and-set holds between the two.

Its checks run when ``reopen`` gives another instance, and are skipped otherwise. Subclass
``SharedStorageContract`` as ``Test...`` with your ``make_saver`` and ``reopen`` to run only these checks.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointConflictError, InvalidCheckpointError
from ._base import SaverContractBase, Session
from ._support import chain, make_cp, race_on_one_head

__all__ = ["SharedStorageContract"]


class SharedStorageContract(SaverContractBase):
    """The checks of two savers on one storage: no stale cache, and one compare-and-set across both."""

    def test_a_second_saver_on_the_same_storage_sees_every_write(self, tmp_path: Path) -> None:
        """Durable storage only: a saver never answers from a stale cache, and the compare-and-set and unique ids
        hold between savers (as between processes)."""
        import pytest

        with Session(self, tmp_path) as session:
            first, second = session.saver, session.second_or_skip()
            assert second.get("t") is None and second.threads() == []
            written = chain(first, [True, True])
            assert first.get("t") == second.get("t") == written[-1]
            second.put(make_cp(3, "t3", "t2", safe=False, n=3), expected_head="t2")
            head = first.get("t")  # the first saver has "t2" cached as the head: it must look again
            assert head is not None and head.id == "t3" and head.values == {"n": 3}
            assert [c.seq for c in first.list("t")] == [3, 2, 1]
            found = first.latest_safe("t")
            assert found is not None and found.id == "t2"
            with pytest.raises(CheckpointConflictError) as caught:
                first.put(make_cp(3, "x", "t2"), expected_head="t2")
            assert caught.value.actual_head == "t3"
            with pytest.raises(InvalidCheckpointError, match="already stored"):
                first.put(make_cp(1, "t3", thread="u"), expected_head=None)
            assert first.threads() == ["t"] and [c.id for c in second.list("t")] == ["t3", "t2", "t1"]

    def test_concurrent_writers_on_two_savers_on_one_storage_exactly_one_wins(self, tmp_path: Path) -> None:
        """Durable storage only: the compare-and-set holds when the writers go through different savers."""
        with Session(self, tmp_path) as session:
            race_on_one_head([session.saver, session.second_or_skip()], session.saver)
