"""postgres: a chat on PostgreSQL — bytes stored, how a turn's cost grows, and checkpoint writes with 8 writers.

The one-node chat graph of ``history`` (each turn adds a user and an assistant message), on a real PostgreSQL server:
rxgraph's ``PostgresSaver`` against LangGraph's own (``langgraph-checkpoint-postgres``, its ``PostgresSaver`` on a
``psycopg_pool.ConnectionPool`` set up as its documentation says), each in a schema of its own.

- ``postgres_turns`` (1,000) turns on one thread, the two systems alternating turn by turn; each turn one timed
  ``invoke``. The figure at turn N is the median of the turns within ``window`` of N.
- Bytes stored afterwards: ``pg_total_relation_size`` (rows, TOAST and indexes) summed over each schema's tables,
  after ``VACUUM`` so that dead rows do not count. Warm-up turns ran on other schemas.
- ``postgres_writers`` (8) threads each run ``postgres_writer_turns`` turns on threads of their own, at the same
  time, through one saver (and one pool of 8 connections) per system: checkpoints written per second over the wall
  time (rxgraph counts its puts; LangGraph's are counted as rows in its ``checkpoints`` table).

The floor is one round trip: a trivial ``SELECT 1`` on a connection of the same type as the savers' (psycopg 3, in
autocommit mode, taken from a ``psycopg_pool.ConnectionPool`` and given back), timed as a third side alternating
with the two systems' turns, turn by turn, and its figure at turn N taken from the same window. The per-turn figures
are given in round trips beside it (rxgraph / floor): a turn reads and writes the thread's checkpoint, so it costs a
few round trips at least.

LangGraph runs with its default durability (``"async"``: a checkpoint is written in the background while the next
step runs); rxgraph writes each checkpoint before the next step. The server is ``$RXGRAPH_BENCH_POSTGRES`` (or
``$RXGRAPH_TEST_POSTGRES``), a database its user may create schemas in; without either, a throwaway cluster is started
with ``.ci/postgres`` for the run.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.messages import AssistantMessage, UserMessage

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, interleave, median_window, ms, timed

NAME = "postgres"
ANSWER = "Sure. Here is a short answer to your question."
_ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def postgres_server() -> Iterator[str | None]:
    """The URL of a PostgreSQL database to measure on (None when there is none and none can be started)."""
    given = os.environ.get("RXGRAPH_BENCH_POSTGRES") or os.environ.get("RXGRAPH_TEST_POSTGRES")
    if given:
        yield given
        return
    folder = tempfile.mkdtemp(prefix="rxgraph-bench-postgres-")
    script = str(_ROOT / ".ci" / "postgres")
    started = subprocess.run([script, "start", folder], capture_output=True, text=True, check=False)
    urls = [line.partition("=")[2] for line in started.stdout.splitlines() if "=postgresql://" in line]
    try:
        yield urls[0] if started.returncode == 0 and urls else None
    finally:
        subprocess.run([script, "stop", folder], capture_output=True, text=True, check=False)


def _rxgraph_graph(saver: Any) -> Any:
    def chat(state: Any) -> dict[str, Any]:
        return {"messages": AssistantMessage(content=ANSWER)}

    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("chat", chat)
        .add_edge(START, "chat")
        .add_edge("chat", END)
        .compile(checkpointer=saver)
    )


class _Rxgraph:
    """rxgraph's side: a ``PostgresSaver`` on its own schema and the chat graph on it."""

    def __init__(self, url: str, schema: str, stack: ExitStack) -> None:
        from rxgraph.checkpoint import PostgresSaver

        self.saver = stack.enter_context(PostgresSaver(url, schema=schema, max_connections=8))
        self.graph = _rxgraph_graph(self.saver)

    def turn(self, thread: str, number: int) -> None:
        self.graph.invoke(
            {"messages": UserMessage(content=f"Question number {number}?")}, RunnableConfig(thread_id=thread)
        )

    def checkpoints(self) -> int:
        return int(self.saver.stats.puts)


class _LangGraph:
    """LangGraph's side: its ``PostgresSaver`` on a pool whose connections use their own schema."""

    def __init__(self, url: str, schema: str, stack: ExitStack) -> None:
        from typing import Annotated, TypedDict

        import langgraph.graph as lg
        import psycopg
        from langchain_core.messages import AIMessage
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph.message import add_messages
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=8,
            kwargs={
                "autocommit": True,
                "prepare_threshold": 0,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
            open=True,
        )
        stack.callback(self.pool.close)
        saver = PostgresSaver(self.pool)  # type: ignore[arg-type]
        saver.setup()
        State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

        def chat(state: Any) -> dict[str, Any]:
            return {"messages": [AIMessage(content=ANSWER)]}

        builder = lg.StateGraph(State)
        builder.add_node("chat", chat)
        builder.add_edge(lg.START, "chat")
        builder.add_edge("chat", lg.END)
        self.graph = builder.compile(checkpointer=saver)

    def turn(self, thread: str, number: int) -> None:
        from langchain_core.messages import HumanMessage

        update = {"messages": [HumanMessage(content=f"Question number {number}?")]}
        self.graph.invoke(update, {"configurable": {"thread_id": thread}})

    def checkpoints(self) -> int:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()
        return int(row["n"]) if row else 0


class _RoundTrip:
    """The floor: one ``SELECT 1`` round trip on a pooled psycopg connection in autocommit mode, as the savers'."""

    def __init__(self, url: str, stack: ExitStack) -> None:
        from psycopg_pool import ConnectionPool

        self.pool: Any = ConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
        stack.callback(self.pool.close)

    def trial(self) -> float:
        def select() -> None:
            with self.pool.connection() as conn:
                conn.execute("SELECT 1").fetchone()

        return timed(select)


_SIDES: dict[str, Callable[[str, str, ExitStack], Any]] = {"rxgraph": _Rxgraph, "langgraph": _LangGraph}


def _schema_bytes(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))]
        total = 0
        for table in tables:
            conn.execute(f'VACUUM "{schema}"."{table}"')
            row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}"."{table}"',)).fetchone()
            total += int(row[0]) if row else 0
    return total


def _drop(url: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _writers(side: Any, writers: int, turns: int, label: str) -> tuple[float, int]:
    """``writers`` threads running ``turns`` turns each at once; (seconds, checkpoints written meanwhile)."""
    before = side.checkpoints()
    go = threading.Barrier(writers + 1)
    failures: list[BaseException] = []

    def writer(index: int) -> None:
        go.wait()
        try:
            for number in range(turns):
                side.turn(f"{label}-writer-{index}", number)
        except BaseException as error:  # reported below: a benchmark that failed must not print a figure
            failures.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    go.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if failures:
        raise failures[0]
    return seconds, side.checkpoints() - before


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    turns = sizes.postgres_turns
    result = BenchResult(
        NAME,
        f"a chat of {turns} turns on PostgreSQL, and checkpoint writes with 8 writers",
        floor="one round trip: SELECT 1 on a pooled psycopg connection in autocommit mode, alternating with the turns",
    )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        result.notes.append("skipped: the postgres extra (psycopg) is not installed")
        return result
    with postgres_server() as url:
        if url is None:
            result.notes.append("skipped: no PostgreSQL server (set RXGRAPH_BENCH_POSTGRES, or install postgresql)")
            return result
        _measure(result, url, sizes, langgraph)
    return result


def _measure(result: BenchResult, url: str, sizes: Sizes, langgraph: bool) -> None:
    turns = sizes.postgres_turns
    names = ["rxgraph", "langgraph"] if langgraph else ["rxgraph"]
    run_id = uuid.uuid4().hex[:8]
    schemas = {name: f"bench_{name}_{run_id}" for name in names}
    warm_schemas = {name: f"bench_{name}_{run_id}_warmup" for name in names}
    note = "" if langgraph else NOT_INSTALLED
    try:
        # Code paths warmed up on throwaway schemas, so that the measured ones hold only the measured thread.
        with ExitStack() as stack:
            warm_sides = {name: _SIDES[name](url, warm_schemas[name], stack) for name in names}
            counters = {name: itertools.count(1) for name in names}
            warm = {name: _trial(warm_sides[name], "warmup", counters[name]) for name in names}
            warm["round trip"] = _RoundTrip(url, stack).trial
            interleave(warm, sizes.warmup * 5, collect=sizes.collect)
        with ExitStack() as stack:
            sides = {name: _SIDES[name](url, schemas[name], stack) for name in names}
            counters = {name: itertools.count(1) for name in names}
            trials = {name: _trial(sides[name], "chat", counters[name]) for name in names}
            trials["round trip"] = _RoundTrip(url, stack).trial
            series = interleave(trials, turns, collect=sizes.collect, collect_every=10)
            stored = {name: _schema_bytes(url, schemas[name]) for name in names}
            result.samples["turns"] = series
            marks = [m for m in sizes.history_marks if m <= turns]
            first, last = marks[0], marks[-1]
            at = {
                name: {m: median_window(series[name], m, sizes.window) for m in (first, last)}
                for name in [*names, "round trip"]
            }
            for mark in (first, last):
                result.figures.append(
                    Figure(
                        f"turn {mark}",
                        "ms",
                        ms(at["rxgraph"][mark]),
                        _get(at, "langgraph", mark),
                        langgraph_note=note,
                        floor=ms(at["round trip"][mark]),
                    )
                )
            growth = {name: at[name][last] / at[name][first] for name in names}
            result.figures.append(
                Figure(
                    f"growth turn {last} / turn {first}",
                    "x",
                    growth["rxgraph"],
                    growth.get("langgraph"),
                    langgraph_note=note,
                )
            )
            result.targets.append(
                Target(
                    f"postgres: turn {last} <= 1.5x turn {first}",
                    f"{ms(at['rxgraph'][first]):.3f} ms -> {ms(at['rxgraph'][last]):.3f} ms: {growth['rxgraph']:.2f}x",
                    growth["rxgraph"] <= 1.5,
                )
            )
            mb = {name: stored[name] / 1e6 for name in names}
            result.figures.append(
                Figure(
                    f"bytes stored for {turns} turns (tables, TOAST, indexes)",
                    "MB",
                    mb["rxgraph"],
                    mb.get("langgraph"),
                    langgraph_note=note,
                )
            )
            if langgraph:
                ratio = stored["rxgraph"] / stored["langgraph"]
                result.targets.append(
                    Target(
                        f"postgres: bytes after {turns} turns <= 1/50 of LangGraph's",
                        f"{mb['rxgraph']:.2f} MB vs {mb['langgraph']:.1f} MB: 1/{1 / ratio:.0f}",
                        ratio <= 1 / 50 if turns >= 1000 else None,
                    )
                )
            writers, per_writer = sizes.postgres_writers, sizes.postgres_writer_turns
            rates: dict[str, float] = {}
            for name in names:
                seconds, written = _writers(sides[name], writers, per_writer, name)
                rates[name] = written / seconds
                result.samples[f"writers {name}"] = [{"seconds": seconds, "checkpoints": written}]
            result.figures.append(
                Figure(
                    f"checkpoint writes per second, {writers} writers on {writers} threads",
                    "writes/s",
                    rates["rxgraph"],
                    rates.get("langgraph"),
                    langgraph_note=note,
                    lower_is_better=False,
                )
            )
    finally:
        _drop(url, [*schemas.values(), *warm_schemas.values()])


def _get(at: dict[str, dict[int, float]], name: str, mark: int) -> float | None:
    return ms(at[name][mark]) if name in at else None


def _trial(side: Any, thread: str, numbers: Iterator[int]) -> Callable[[], float]:
    def trial() -> float:
        number = next(numbers)
        return timed(lambda: side.turn(thread, number))

    return trial
