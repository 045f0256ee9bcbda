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
from datetime import datetime
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


class _PruneKeepsOnlyTheHead(MemorySaver):
    """Drops the newest safe checkpoint too: a new turn after an unsafe head has no base left."""

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        older = self.list(thread_id)[1:]
        with self._lock:
            self._chains[thread_id] = self._chains[thread_id][-1:]
            for checkpoint in older:
                del self._by_id[checkpoint.id]
        return len(older)


class _PrunedStillFound(MemorySaver):
    """Prunes the chain but still answers ``get`` for a pruned id."""

    def prune(self, thread_id: str, *, keep_last: int | None = None, before: datetime | None = None) -> int:
        kept = dict(self._by_id)
        dropped = super().prune(thread_id, keep_last=keep_last, before=before)
        self._by_id = kept
        return dropped


class _TrustsItsCache(SqliteSaver):
    """Reuses the rows it has cached without checking that a prune (its own or another's) left them there."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._store.confirm = lambda plan, *_: plan  # type: ignore[method-assign]


class _AnswersWhenClosed(SqliteSaver):
    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        try:
            return super().get(thread_id, checkpoint_id)
        except RuntimeError:
            return None


class _NoRetention(DelegatingSaver):
    """Forwards the contract's methods, but has no retention (the base class's prune and delete_thread)."""

    prune = CheckpointSaver.prune
    delete_thread = CheckpointSaver.delete_thread


class _BrokenOnMemory(SaverContract):
    def __init__(self, wrapper: type[DelegatingSaver]) -> None:
        self.wrapper = wrapper

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return self.wrapper(MemorySaver())


class _BrokenMemory(SaverContract):
    def __init__(self, kind: type[MemorySaver]) -> None:
        self.kind = kind

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        return self.kind()


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
        (_BrokenMemory(_PruneKeepsOnlyTheHead), "test_prune_keeps_the_head_the_newest_safe_and_the_newest_ones"),
        (_BrokenMemory(_PruneKeepsOnlyTheHead), "test_a_new_turn_runs_on_a_valid_history_after_prune_and_delete"),
        (_BrokenMemory(_PrunedStillFound), "test_prune_keeps_the_head_the_newest_safe_and_the_newest_ones"),
        (_BrokenOnFile(_TrustsItsCache), "test_values_of_pruned_checkpoints_are_stored_again_when_reused"),
    ],
    ids=[
        "no-cas",
        "no-cas-race",
        "ignores-limit",
        "stale-head",
        "answers-when-closed",
        "forgetful-reopen",
        "prune-drops-the-base",
        "prune-drops-the-base-of-a-turn",
        "pruned-still-found",
        "reuses-freed-rows",
    ],
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
    forwarding = _BrokenOnMemory(_NoRetention)
    for check in (
        forwarding.test_prune_keeps_the_head_the_newest_safe_and_the_newest_ones,
        forwarding.test_delete_thread_removes_it_and_the_thread_can_start_again,
        forwarding.test_values_of_pruned_checkpoints_are_stored_again_when_reused,
        forwarding.test_a_new_turn_runs_on_a_valid_history_after_prune_and_delete,
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
