"""The saver contract's reads: ``get``, ``list``, ``threads`` and ``latest_safe``, on chains the checks write.

Subclass ``ReadContract`` as ``Test...`` with your ``make_saver`` to run only these checks.
"""

from __future__ import annotations

from pathlib import Path

from ...checkpoint import CheckpointSaver
from ...errors import InvalidArgumentError
from ._base import SaverContractBase, Session
from ._support import chain

__all__ = ["ReadContract"]


class ReadContract(SaverContractBase):
    """The checks of the reads: the head or one checkpoint, pages newest first, the threads, the newest safe
    checkpoint."""

    def test_get_reads_the_head_or_one_checkpoint_of_the_thread(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            saver = session.saver
            assert saver.get("t") is None and saver.get("t", "a") is None
            written = chain(saver, [True, True, True])
            chain(saver, [True], thread="u")
            head = saver.get("t")
            assert head is not None and head.id == written[-1].id and head.seq == 3
            middle = saver.get("t", written[1].id)
            assert middle is not None and middle.seq == 2 and middle.values == {"n": 2}
            assert saver.get("t", "u1") is None  # another thread's checkpoint
            assert saver.get("u", written[0].id) is None
            assert saver.get("t", "missing") is None and saver.get("nobody") is None

    def test_list_is_newest_first_with_limit_and_before_seq(self, tmp_path: Path) -> None:
        import pytest

        with Session(self, tmp_path) as session:
            saver = session.saver
            chain(saver, [True] * 5)
            assert [c.seq for c in saver.list("t")] == [5, 4, 3, 2, 1]
            assert [c.seq for c in saver.list("t", limit=2)] == [5, 4]
            assert [c.seq for c in saver.list("t", before_seq=3)] == [2, 1]
            assert [c.seq for c in saver.list("t", limit=1, before_seq=5)] == [4]
            assert [c.seq for c in saver.list("t", limit=10, before_seq=99)] == [5, 4, 3, 2, 1]
            assert saver.list("t", limit=0) == [] and saver.list("t", before_seq=1) == []
            assert saver.list("other") == []
            assert [c.values["n"] for c in saver.list("t")] == [5, 4, 3, 2, 1]
            with pytest.raises(InvalidArgumentError, match="limit") as caught:
                saver.list("t", limit=-1)
            assert caught.value.argument == "limit" and isinstance(caught.value, ValueError)

    def test_threads_lists_every_thread_with_a_checkpoint(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            saver = session.saver
            assert saver.threads() == []
            for thread in ("b", "a", "c"):
                chain(saver, [True, True], thread=thread)
            assert sorted(saver.threads()) == ["a", "b", "c"]

    # -- latest_safe -----------------------------------------------------------------------------------------------

    def test_latest_safe_is_the_head_when_it_is_safe(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            saver = session.saver
            written = chain(saver, [True, False, True])
            found = saver.latest_safe("t")
            assert found is not None and found.id == written[-1].id
            below = saver.latest_safe("t", before_seq=3)
            assert below is not None and below.id == written[0].id

    def test_latest_safe_skips_an_unsafe_checkpoint(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            _check_latest_safe_skips(session.saver, unsafe=1)

    def test_latest_safe_skips_a_hundred_unsafe_checkpoints(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            _check_latest_safe_skips(session.saver, unsafe=100)

    def test_latest_safe_is_none_without_a_safe_checkpoint(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            saver = session.saver
            assert saver.latest_safe("t") is None
            chain(saver, [False, False, False])
            assert saver.latest_safe("t") is None
            assert saver.latest_safe("t", before_seq=3) is None
            chain(saver, [True], thread="u")
            assert saver.latest_safe("u", before_seq=1) is None


def _check_latest_safe_skips(saver: CheckpointSaver, *, unsafe: int) -> None:
    written = chain(saver, [True, True] + [False] * unsafe)
    head = saver.get("t")
    assert head is not None and not head.safe
    for before in (None, head.seq, 3):
        found = saver.latest_safe("t", before_seq=before)
        assert found is not None and found.id == written[1].id and found.safe
    found = saver.latest_safe("t", before_seq=2)
    assert found is not None and found.id == written[0].id
