"""The CheckpointSaver contract (``rxgraph.testing.SaverContract``), run against every saver of the project, and
checks that the contract itself fails a saver that breaks it.

Tests specific to one saver live beside it (``test_sqlite.py``, ``test_postgres.py``).
"""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxgraph import Checkpoint, CheckpointSaver, MemorySaver
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.testing import DelegatingSaver, SaverContract

REPO = Path(__file__).resolve().parents[2]


class TestMemorySaver(SaverContract):
    """In memory: no storage shared between instances, nothing to close; those checks are skipped."""

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return MemorySaver()


class TestSqliteSaver(SaverContract):
    """On a file: every check runs, a second saver on the file stands in for another process."""

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return SqliteSaver(tmp_path / "checkpoints.db")

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        return SqliteSaver(tmp_path / "checkpoints.db")


class TestSqliteSaverInMemory(SaverContract):
    """``":memory:"``: a saver to close, but no storage to share."""

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return SqliteSaver(":memory:")


class TestPostgresSaver(SaverContract):
    """On a schema of the check's own in a PostgreSQL database, through the saver's own pool: every check runs, a
    second saver on the schema stands in for another process."""

    @pytest.fixture(autouse=True)
    def _database(self, postgres_server: str, postgres_schema: str) -> None:
        self.dsn, self.schema = postgres_server, postgres_schema

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return PostgresSaver(self.dsn, schema=self.schema)

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        return PostgresSaver(self.dsn, schema=self.schema)


class TestPostgresSaverOnAPool(SaverContract):
    """Through a pool of the caller's, whose connections are not in autocommit mode (psycopg's default); savers share
    the pool, which outlives them."""

    @pytest.fixture(autouse=True)
    def _pool(self, postgres_server: str, postgres_schema: str) -> Iterator[None]:
        from psycopg_pool import ConnectionPool

        self.schema = f"{postgres_schema}_on pool"
        with ConnectionPool(postgres_server, min_size=1, max_size=12, open=True) as pool:
            self.pool: Any = pool
            yield

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return PostgresSaver(self.pool, schema=self.schema)

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        return PostgresSaver(self.pool, schema=self.schema)


# -- the contract can fail -------------------------------------------------------------------------------------------


class _NoCompareAndSet(DelegatingSaver):
    """Writes over whatever the head is."""

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        head = self.inner.get(checkpoint.thread_id)
        return self.inner.put(checkpoint, expected_head=head.id if head is not None else None)


class _IgnoresLimit(DelegatingSaver):
    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        return self.inner.list(thread_id, before_seq=before_seq)


class _StaleHead(SqliteSaver):
    """Answers ``get(thread)`` with the first head it saw: a cache that is never refreshed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.seen: dict[str, Checkpoint | None] = {}

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        if checkpoint_id is not None:
            return super().get(thread_id, checkpoint_id)
        if self.seen.get(thread_id) is None:
            self.seen[thread_id] = super().get(thread_id)
        return self.seen[thread_id]


class _AnswersWhenClosed(SqliteSaver):
    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        try:
            return super().get(thread_id, checkpoint_id)
        except RuntimeError:
            return None


class _BrokenOnMemory(SaverContract):
    def __init__(self, wrapper: type[DelegatingSaver]) -> None:
        self.wrapper = wrapper

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return self.wrapper(MemorySaver())


class _BrokenOnFile(SaverContract):
    def __init__(self, kind: type[SqliteSaver]) -> None:
        self.kind = kind

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return self.kind(tmp_path / "checkpoints.db")

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        return self.kind(tmp_path / "checkpoints.db")


class _ForgetfulReopen(SaverContract):
    """Claims durable storage, but a reopened saver starts empty."""

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return MemorySaver()

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        return MemorySaver()


@pytest.mark.parametrize(
    ("contract", "check"),
    [
        (_BrokenOnMemory(_NoCompareAndSet), "test_put_is_a_compare_and_set_on_the_head"),
        (_BrokenOnMemory(_NoCompareAndSet), "test_concurrent_writers_on_one_head_exactly_one_wins"),
        (_BrokenOnMemory(_IgnoresLimit), "test_list_is_newest_first_with_limit_and_before_seq"),
        (_BrokenOnFile(_StaleHead), "test_a_second_saver_on_the_same_storage_sees_every_write"),
        (_BrokenOnFile(_AnswersWhenClosed), "test_a_closed_saver_raises_instead_of_answering"),
        (_ForgetfulReopen(), "test_values_round_trip"),
    ],
    ids=["no-cas", "no-cas-race", "ignores-limit", "stale-head", "answers-when-closed", "forgetful-reopen"],
)
def test_the_contract_fails_a_saver_that_breaks_it(contract: SaverContract, check: str, tmp_path: Path) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        getattr(contract, check)(tmp_path)


def test_checks_of_a_capability_the_saver_lacks_are_skipped(tmp_path: Path) -> None:
    contract = TestMemorySaver()
    for check in (
        contract.test_a_second_saver_on_the_same_storage_sees_every_write,
        contract.test_concurrent_writers_on_two_savers_on_one_storage_exactly_one_wins,
        contract.test_a_closed_saver_raises_instead_of_answering,
    ):
        with pytest.raises(pytest.skip.Exception):
            check(tmp_path / check.__name__)


def test_the_contract_needs_make_saver(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="make_saver"):
        SaverContract().test_threads_lists_every_thread_with_a_checkpoint(tmp_path)


def test_rxgraph_testing_imports_without_pytest() -> None:
    # pytest is a test extra: an application that imports rxgraph.testing without it must still start.
    code = (
        "import sys\n"
        "sys.modules['pytest'] = sys.modules['_pytest'] = None  # any import of them fails\n"
        "import rxgraph.testing\n"
        "assert rxgraph.testing.SaverContract.__name__ == 'SaverContract'\n"
        "assert 'pytest' not in [name.split('.')[0] for name, module in sys.modules.items() if module]\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
