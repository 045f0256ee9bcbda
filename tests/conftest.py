"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _support import StepPath

import rxgraph.otel
from rxgraph import CheckpointSaver, MemorySaver, SqliteSaver
from rxgraph.testing._explorer import CancelMode

REPO = Path(__file__).resolve().parents[1]

SAVER_KINDS = ("memory", "sqlite", "postgres")
"""Every saver the promise is checked on: in memory, a real SQLite file, and a real PostgreSQL server."""

POSTGRES_ENV = "RXGRAPH_TEST_POSTGRES"
"""A ``postgresql://`` URL of a server (and a database on it) the tests may use; its user must be allowed to create
databases. Without it, the tests start a throwaway cluster of their own with ``.ci/postgres``."""


@pytest.fixture(params=("direct", "general"))
def step_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> StepPath:
    """Runs the test twice: with the run's direct step (its fast path for a one-node superstep, see ``Run._drive``)
    and with every superstep on the general path. Both must behave alike; ``StepPath.check`` says the path was taken."""
    from rxgraph.graph import _interrupt, _landing, _run

    path = StepPath(direct=request.param == "direct")
    saver = request.node.callspec.params.get("saver_factory") if hasattr(request.node, "callspec") else None
    if saver == "postgres" and not path.direct:
        pytest.skip(
            "the general path is run on the in-memory and SQLite savers: which path a step takes does not "
            "depend on the saver"
        )
    monkeypatch.setattr(_run, "DIRECT_STEPS", path.direct)
    land_step, call_direct = _landing.Landing.step, _interrupt.DirectCalls.call

    def landed(landing: _landing.Landing, name: str, update: dict[str, Any] | None, view: Any) -> bool:
        path.landed += 1
        return land_step(landing, name, update, view)

    def called(
        calls: _interrupt.DirectCalls, node: str, action: Callable[..., Any], state: Any, config: Any = None
    ) -> Any:
        path.called += 1
        return call_direct(calls, node, action, state, config)

    monkeypatch.setattr(_landing.Landing, "step", landed)
    monkeypatch.setattr(_interrupt.DirectCalls, "call", called)
    return path


@pytest.fixture(autouse=True)
def _not_instrumented() -> Iterator[None]:
    """A test that instruments rxgraph (a documentation example, say) leaves it as it found it: not instrumented."""
    yield
    rxgraph.otel.uninstrument()


ALL_CANCEL_MODES: tuple[CancelMode, ...] = ("dispose", "timeout", "take_until")
"""The ways a subscriber cuts a turn short that the scenario explorer tries."""


@pytest.fixture
def cancel_modes(request: pytest.FixtureRequest) -> tuple[CancelMode, ...]:
    """The cancel modes an explorer test tries on its saver kind: every one on the in-memory and SQLite savers, the
    dispose alone on PostgreSQL. However the subscriber cuts the turn (disposing, an idle timeout's error, a
    ``take_until``'s completion), the run itself is disposed at that tick, and the saver sees the same calls; the
    dispose points cover every tick where something happens and every gap between two. What differs is on the
    subscriber's side, which the other two savers cover. (``test_one_tool_call_has_no_violations_in_any_mode``
    still tries every mode on PostgreSQL.)"""
    saver = request.node.callspec.params.get("saver_factory") if hasattr(request.node, "callspec") else None
    return ("dispose",) if saver == "postgres" else ALL_CANCEL_MODES


@pytest.fixture(params=SAVER_KINDS)
def saver_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], CheckpointSaver]]:
    """Makes fresh savers of one kind (each SQLite saver on a new file in the test's directory, each PostgreSQL saver
    on a new schema of its own); closes them all when the test ends. Tests that take it run once per saver kind."""
    kind = request.param
    made: list[CheckpointSaver] = []
    pool: Any = None
    if kind == "postgres":
        from psycopg_pool import ConnectionPool

        from rxgraph.checkpoint import PostgresSaver

        # One pool for the test's savers (a scenario explorer makes dozens of them), each on a schema of its own.
        schema = request.getfixturevalue("postgres_schema")
        pool = ConnectionPool(request.getfixturevalue("postgres_server"), min_size=1, max_size=8, open=True)

    def make() -> CheckpointSaver:
        if kind == "memory":
            saver: CheckpointSaver = MemorySaver()
        elif kind == "sqlite":
            saver = SqliteSaver(tmp_path / f"cp-{len(made)}.db")
        else:
            saver = PostgresSaver(pool, schema=f"{schema}_{len(made)}")
        made.append(saver)
        return saver

    yield make
    for saver in made:
        close = getattr(saver, "close", None)
        if callable(close):
            close()
    if pool is not None:
        pool.close()


# -- PostgreSQL ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL database for the session: ``$RXGRAPH_TEST_POSTGRES``, or else a throwaway cluster
    started with ``.ci/postgres start`` in a temporary directory and stopped when the session ends. Fails (never
    skips) the tests that need it when neither works."""
    given = os.environ.get(POSTGRES_ENV)
    if given:
        yield given
        return
    # Directly under the temporary directory: the server's user (postgres, when the tests run as root) must reach it.
    folder = tempfile.mkdtemp(prefix="rxgraph-postgres-")
    script = str(REPO / ".ci" / "postgres")
    try:
        started = subprocess.run([script, "start", folder], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as error:
        started = subprocess.CompletedProcess([script], 1, "", str(error))
    urls = [line.partition("=")[2] for line in started.stdout.splitlines() if line.startswith(f"{POSTGRES_ENV}=")]
    if started.returncode != 0 or not urls:
        _stop_postgres(script, folder)
        pytest.fail(
            f"PostgreSQL could not be started for the tests ({script} start {folder} exited with "
            f"{started.returncode}):\n{started.stderr.strip() or started.stdout.strip()}\n"
            f"Install the PostgreSQL server (Debian: apt-get install postgresql), or set {POSTGRES_ENV} to the URL "
            "of a database on a running server whose user may create databases.",
            pytrace=False,
        )
    try:
        yield urls[0]
    finally:
        _stop_postgres(script, folder)


def _stop_postgres(script: str, folder: str) -> None:
    try:
        subprocess.run([script, "stop", folder], capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _PostgresAdmin:
    """One connection for the session that makes room for the tests: schemas, dropped when their test ends, and
    databases, dropped when the session ends (by then no connection is still closing on them, which a drop would
    have to wait for)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.databases: list[str] = []

    def new_database(self) -> str:
        from psycopg import sql

        name = f"rxgraph_test_{uuid.uuid4().hex[:16]}"
        self.conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(sql.Identifier(name)))
        self.databases.append(name)
        return name

    def drop_schemas(self, prefix: str) -> None:
        """Drop the schema ``prefix`` and those named ``prefix_...``."""
        from psycopg import sql

        found = self.conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = %s OR starts_with(nspname, %s)", (prefix, prefix + "_")
        ).fetchall()
        for (name,) in found:
            self.conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))

    def drop_databases(self) -> None:
        from psycopg import sql

        while self.databases:
            name = self.databases.pop()
            self.conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _postgres_admin(postgres_server: str) -> Iterator[_PostgresAdmin]:
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '30s'")  # a test that leaves a lock behind fails its teardown, not the run
        admin = _PostgresAdmin(conn)
        try:
            yield admin
        finally:
            admin.drop_databases()


@pytest.fixture
def postgres_schema(_postgres_admin: _PostgresAdmin) -> Iterator[str]:
    """A name for this test's PostgreSQL schema (and prefix of its others: ``name_...``) in the ``postgres_server``
    database: the cheap way for a test to start from an empty store. They are dropped when the test ends."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    yield name
    _postgres_admin.drop_schemas(name)


@pytest.fixture
def postgres_dsn(postgres_server: str, _postgres_admin: _PostgresAdmin) -> str:
    """The connection string of a new, empty database for this test only, for the tests that need a whole
    database (its default schema, its encoding); ``postgres_schema`` costs less."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(postgres_server, dbname=_postgres_admin.new_database())
