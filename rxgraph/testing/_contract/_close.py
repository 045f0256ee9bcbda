"""The saver contract for a closed saver (savers with a ``close`` method only): every call raises, rather than answer
as if the thread were empty.

Its check runs when the saver has a ``close`` method, and is skipped otherwise. Subclass ``CloseContract`` as
``Test...`` with your ``make_saver`` to run only this check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._base import SaverContractBase, Session, has_retention
from ._support import chain, make_cp

__all__ = ["CloseContract"]


class CloseContract(SaverContractBase):
    """The check of a closed saver: it raises on every call."""

    def test_a_closed_saver_raises_instead_of_answering(self, tmp_path: Path) -> None:
        """Savers with a ``close`` method only: after it, every call raises (``rxgraph.errors.SaverClosedError`` is
        the error made for it) rather than answer as if the thread were empty."""
        import pytest

        with Session(self, tmp_path) as session:
            saver = session.saver
            if not callable(getattr(saver, "close", None)):
                pytest.skip(f"{type(saver).__name__} has no close method")
            chain(saver, [True])
            session.close(saver)
            calls: list[tuple[str, Callable[[], object]]] = [
                ("get", lambda: saver.get("t")),
                ("list", lambda: saver.list("t")),
                ("latest_safe", lambda: saver.latest_safe("t")),
                ("threads", saver.threads),
                ("put", lambda: saver.put(make_cp(2, "t2", "t1"), expected_head="t1")),
            ]
            if has_retention(saver):
                calls.append(("prune", lambda: saver.prune("t", keep_last=1)))
                calls.append(("delete_thread", lambda: saver.delete_thread("t")))
            for name, call in calls:
                try:
                    answer = call()
                except Exception:
                    continue
                raise AssertionError(f"{name}() on a closed {type(saver).__name__} answered {answer!r}; it must raise")
