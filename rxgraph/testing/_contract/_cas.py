"""The saver contract's compare-and-set: a ``put`` writes only on the head it expects, with the next ``seq`` and an
id no checkpoint has.

Subclass ``CompareAndSetContract`` as ``Test...`` with your ``make_saver`` to run only these checks.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointConflictError, InvalidCheckpointError
from ._base import SaverContractBase, Session
from ._support import make_cp

__all__ = ["CompareAndSetContract"]


class CompareAndSetContract(SaverContractBase):
    """The checks of ``put``: a compare-and-set on the head, ``seq`` the head's plus one, ids unique across threads."""

    def test_put_is_a_compare_and_set_on_the_head(self, tmp_path: Path) -> None:
        import pytest

        with Session(self, tmp_path) as session:
            saver = session.saver
            saver.put(make_cp(1, "a"), expected_head=None)
            with pytest.raises(CheckpointConflictError, match="head is 'a', expected None") as caught:
                saver.put(make_cp(2, "b", "a"), expected_head=None)
            assert (caught.value.thread_id, caught.value.expected_head, caught.value.actual_head) == ("t", None, "a")
            assert "read the thread again" in str(caught.value).lower()
            with pytest.raises(CheckpointConflictError) as caught:
                saver.put(make_cp(2, "b", "a"), expected_head="zzz")
            assert caught.value.actual_head == "a" and caught.value.expected_head == "zzz"
            assert [c.id for c in saver.list("t")] == ["a"]  # a refused write leaves nothing behind
            saver.put(make_cp(2, "b", "a"), expected_head="a")
            head = saver.get("t")
            assert head is not None and head.id == "b"
            with pytest.raises(CheckpointConflictError, match="head is None, expected 'a'"):
                saver.put(make_cp(1, "x", thread="new"), expected_head="a")

    def test_seq_must_be_the_heads_plus_one(self, tmp_path: Path) -> None:
        import pytest

        with Session(self, tmp_path) as session:
            saver = session.saver
            with pytest.raises(InvalidCheckpointError, match="has seq 2, expected 1") as caught:
                saver.put(make_cp(2, "a"), expected_head=None)
            assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", "a")
            assert isinstance(caught.value, ValueError)
            saver.put(make_cp(1, "a"), expected_head=None)
            with pytest.raises(InvalidCheckpointError, match="has seq 3, expected 2"):
                saver.put(make_cp(3, "b", "a"), expected_head="a")
            with pytest.raises(InvalidCheckpointError, match="has seq 1, expected 2"):
                saver.put(make_cp(1, "b", "a"), expected_head="a")
            assert [c.seq for c in saver.list("t")] == [1]

    def test_checkpoint_ids_are_unique_across_threads(self, tmp_path: Path) -> None:
        import pytest

        with Session(self, tmp_path) as session:
            saver = session.saver
            saver.put(make_cp(1, "a"), expected_head=None)
            with pytest.raises(InvalidCheckpointError, match="already stored") as caught:
                saver.put(make_cp(2, "a", "a"), expected_head="a")
            assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", "a")
            with pytest.raises(InvalidCheckpointError, match="already stored") as caught:
                saver.put(make_cp(1, "a", thread="other"), expected_head=None)
            assert (caught.value.thread_id, caught.value.checkpoint_id) == ("other", "a")
            assert isinstance(caught.value, ValueError)
            assert saver.threads() == ["t"]
            saver.put(make_cp(2, "b", "a"), expected_head="a")  # the saver is still usable
