"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rxgraph import CheckpointSaver, MemorySaver, SqliteSaver

SAVER_KINDS = ("memory", "sqlite")
"""Every saver the promise is checked on: in memory, and a real SQLite file."""


@pytest.fixture(params=SAVER_KINDS)
def saver_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], CheckpointSaver]]:
    """Makes fresh savers of one kind (each SQLite saver on a new file in the test's directory); closes them all
    when the test ends. Tests that take it run once per saver kind."""
    made: list[CheckpointSaver] = []

    def make() -> CheckpointSaver:
        kind = request.param
        saver: CheckpointSaver = MemorySaver() if kind == "memory" else SqliteSaver(tmp_path / f"cp-{len(made)}.db")
        made.append(saver)
        return saver

    yield make
    for saver in made:
        if isinstance(saver, SqliteSaver):
            saver.close()
