"""``SaverContractBase``: what every area of the saver contract needs from the saver's author, and the savers one
check opens.

The author's hooks (``make_saver``, ``reopen``, ``close``) live here once; each area of the contract subclasses this
base, and ``SaverContract`` is all of them. The capability a check may skip on (retention) is detected here too.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from ...checkpoint import CheckpointSaver

__all__ = ["SaverContractBase", "Session", "has_retention", "retention_or_skip"]


class SaverContractBase:
    """The hooks of the ``CheckpointSaver`` contract: subclass an area of it (or ``SaverContract``, every area) as
    ``Test...`` and implement :meth:`make_saver`.

    pytest collects the ``test_*`` methods of the subclass. Each check makes its own saver (or savers, on one
    storage) in a fresh ``tmp_path`` and closes them when it ends, passed or failed.
    """

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        """A new, empty saver. ``tmp_path`` is the check's own directory (pytest's ``tmp_path``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_saver(self, tmp_path)")

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        """A second saver on the storage of ``saver`` (a new reader with nothing cached, as another process would
        open). The default returns ``saver`` itself: storage that instances do not share (in memory, say)."""
        return saver

    def close(self, saver: CheckpointSaver) -> None:
        """Release ``saver`` at the end of a check. The default calls its ``close()`` when it has one."""
        close = getattr(saver, "close", None)
        if callable(close):
            close()


class Session:
    """The savers one check opens: ``saver`` from ``make_saver``, more from ``reopen``; all closed at the end."""

    def __init__(self, contract: SaverContractBase, tmp_path: Path) -> None:
        self._contract = contract
        self._tmp_path = tmp_path
        self.saver = contract.make_saver(tmp_path)
        self._opened = [self.saver]
        self._closed: set[int] = set()

    def fresh(self) -> CheckpointSaver:
        """A saver on the same storage: another instance for durable savers, else ``saver`` itself."""
        other = self._contract.reopen(self.saver, self._tmp_path)
        self._opened.append(other)
        return other

    def second_or_skip(self) -> CheckpointSaver:
        """Another instance on the same storage; skips the check when ``reopen`` gives none."""
        other = self.fresh()
        if other is self.saver:
            import pytest

            pytest.skip("reopen gives the same instance: no second saver on the same storage to check against")
        return other

    def __enter__(self) -> Session:
        return self

    def close(self, saver: CheckpointSaver) -> None:
        """Close ``saver`` with the contract's ``close``, once."""
        if id(saver) not in self._closed:
            self._closed.add(id(saver))
            self._contract.close(saver)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for saver in reversed(self._opened):
            self.close(saver)


def has_retention(saver: CheckpointSaver) -> bool:
    """Whether ``saver`` overrides both ``prune`` and ``delete_thread`` (the base class keeps every checkpoint)."""
    kind = type(saver)
    return kind.prune is not CheckpointSaver.prune and kind.delete_thread is not CheckpointSaver.delete_thread


def retention_or_skip(saver: CheckpointSaver) -> CheckpointSaver:
    """``saver``, when it has retention; else skips the check."""
    if not has_retention(saver):
        import pytest

        pytest.skip(f"{type(saver).__name__} keeps every checkpoint (no prune and delete_thread)")
    return saver
