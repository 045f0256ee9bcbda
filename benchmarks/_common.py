"""What every benchmark shares: sizes, timing with a fixed GC policy, interleaved repetitions, and result records.

Timing policy, the same for rxgraph and LangGraph:

- every timed call runs with the garbage collector disabled (``timed``), so a collection triggered by one side's
  garbage never lands in the other side's figure; full collections run between timed calls, never inside;
- repetitions alternate between the systems (``interleave``), and the order is reversed every round, so slow drift
  of the machine (frequency, other processes, a filling page cache) hits both sides alike;
- warm-up repetitions run first and are thrown away;
- figures are medians.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from rxgraph import MemorySaver
from rxgraph.checkpoint._base import CheckpointSaver
from rxgraph.checkpoint._sqlite import SqliteSaver

__all__ = [
    "FULL",
    "NOT_INSTALLED",
    "QUICK",
    "TINY",
    "BenchResult",
    "Figure",
    "FileSize",
    "Sizes",
    "Target",
    "gc_paused",
    "interleave",
    "langgraph_installed",
    "median",
    "median_window",
    "ms",
    "sqlite_size",
    "timed",
    "us",
]


@dataclass(frozen=True)
class Sizes:
    """How big each benchmark is. ``FULL`` is the real run, ``QUICK`` a short one, ``TINY`` what the smoke test uses."""

    label: str
    # step: a chain of no-op nodes
    step_nodes: int
    step_repeats: int
    # instructions: runs of each step chain counted under callgrind (only where count_instructions is set)
    instruction_runs: int
    # history: one chat turn after another on one thread
    history_turns: int
    history_marks: tuple[int, ...]
    # streaming: one node streaming this many chunks
    stream_chunks: int
    stream_repeats: int
    # agent: ReAct turns on SQLite, with cancelled turns probed at the marks
    agent_turns: int
    agent_marks: tuple[int, ...]
    agent_probes: int
    # safe_head: turns that must skip this many unsafe checkpoints
    safe_head_skips: tuple[int, ...]
    safe_head_repeats: int
    # serve: concurrent streaming turns through a real HTTP server, in this many rounds per side
    serve_turns: int
    serve_rounds: int
    # postgres: chat turns on one thread (figures at history_marks), then writers x turns at once
    postgres_turns: int
    postgres_writers: int
    postgres_writer_turns: int
    # fanout: a run with this many parallel branches against a run with one, this many repetitions each
    fanout_branches: int
    fanout_repeats: int
    # relay: a run's events followed from another server process: a burst of this many, this many paced at one
    # every relay_interval seconds, each kind of round this many times
    relay_events: int
    relay_paced_events: int
    relay_interval: float
    relay_rounds: int
    # repetitions (or turns, on a separate thread) thrown away before measuring
    warmup: int
    # half-width of the window of turns whose median is reported at a mark
    window: int
    # full GC collections between timed repetitions; off only for the smoke test, whose figures mean nothing
    collect_garbage: bool = True
    # count instructions under valgrind (tens of seconds); otherwise the instructions worker runs without counting
    count_instructions: bool = True

    def collect(self) -> None:
        """A full GC collection, outside any timed section (a no-op when ``collect_garbage`` is off)."""
        if self.collect_garbage:
            gc.collect()


FULL = Sizes(
    label="full",
    step_nodes=200,
    step_repeats=15,
    instruction_runs=3,
    history_turns=1000,
    history_marks=(10, 100, 500, 1000),
    stream_chunks=100_000,
    stream_repeats=9,
    agent_turns=500,
    agent_marks=(10, 100, 500),
    agent_probes=7,
    safe_head_skips=(0, 1, 100),
    safe_head_repeats=25,
    serve_turns=200,
    serve_rounds=3,
    postgres_turns=1000,
    postgres_writers=8,
    postgres_writer_turns=100,
    fanout_branches=100,
    fanout_repeats=31,
    relay_events=5000,
    relay_paced_events=300,
    relay_interval=0.01,
    relay_rounds=3,
    warmup=3,
    window=5,
)

QUICK = Sizes(
    label="quick",
    step_nodes=200,
    step_repeats=5,
    instruction_runs=2,
    history_turns=200,
    history_marks=(10, 100, 200),
    stream_chunks=20_000,
    stream_repeats=5,
    agent_turns=100,
    agent_marks=(10, 100),
    agent_probes=3,
    safe_head_skips=(0, 1, 100),
    safe_head_repeats=7,
    serve_turns=50,
    serve_rounds=1,
    postgres_turns=200,
    postgres_writers=8,
    postgres_writer_turns=25,
    fanout_branches=100,
    fanout_repeats=9,
    relay_events=1000,
    relay_paced_events=100,
    relay_interval=0.01,
    relay_rounds=1,
    warmup=2,
    window=3,
    count_instructions=False,
)

TINY = Sizes(
    label="tiny",
    step_nodes=5,
    step_repeats=2,
    instruction_runs=1,
    history_turns=12,
    history_marks=(10, 12),
    stream_chunks=200,
    stream_repeats=2,
    agent_turns=12,
    agent_marks=(10, 12),
    agent_probes=1,
    safe_head_skips=(0, 1, 3),
    safe_head_repeats=2,
    serve_turns=4,
    serve_rounds=1,
    postgres_turns=12,
    postgres_writers=2,
    postgres_writer_turns=2,
    fanout_branches=50,
    fanout_repeats=5,
    relay_events=20,
    relay_paced_events=5,
    relay_interval=0.002,
    relay_rounds=1,
    warmup=1,
    window=1,
    collect_garbage=False,
    count_instructions=False,
)


def langgraph_installed() -> bool:
    """Whether the LangGraph halves can run (the ``bench`` extra is installed)."""
    return importlib.util.find_spec("langgraph") is not None


# -- timing ------------------------------------------------------------------------------------------------------


@contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector off inside the block (for timed sections that measure more than one interval)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` took, with the garbage collector off for the duration."""
    with gc_paused():
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def interleave(
    trials: Mapping[str, Callable[[], float]],
    repeats: int,
    *,
    warmup: int = 0,
    collect: Callable[[], None] = gc.collect,
    collect_every: int = 1,
) -> dict[str, list[float]]:
    """Call each trial ``warmup`` times, then ``repeats`` times, alternating between them.

    A trial is one timed repetition and returns the seconds it measured (so it can leave its own setup untimed).
    Round ``r`` runs the trials in their given order when ``r`` is even and reversed when odd, so no side is
    always first. ``collect()`` (a full GC collection) runs before every ``collect_every``-th round.
    """
    names = list(trials)
    for _ in range(warmup):
        for name in names:
            trials[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        if round_ % collect_every == 0:
            collect()
        for name in names if round_ % 2 == 0 else reversed(names):
            samples[name].append(trials[name]())
    return samples


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def median_window(series: Sequence[float], mark: int, half_width: int) -> float:
    """The median of a per-turn series around turn ``mark`` (turns count from 1), clipped to the series."""
    low = max(1, mark - half_width)
    high = min(len(series), mark + half_width)
    return median(series[low - 1 : high])


# -- files -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSize:
    """An SQLite database's size on disk, in bytes: as the run left it, and after a WAL checkpoint."""

    before_checkpoint: int
    after_checkpoint: int


def sqlite_size(path: str) -> FileSize:
    """Size of ``path`` with its ``-wal`` and ``-shm`` files, before and after ``PRAGMA wal_checkpoint(TRUNCATE)``.

    The checkpoint goes through a connection of its own, so it works whichever saver wrote the file.
    """

    def total() -> int:
        return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal", "-shm") if os.path.exists(path + suffix))

    before = total()
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        connection.close()
    return FileSize(before, total())


# -- results -----------------------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured quantity, for rxgraph, (where it exists) LangGraph, and (where the benchmark has one) its floor.

    ``langgraph`` is None when there is no LangGraph figure; ``langgraph_note`` then says why ("not installed",
    "no rewind"...). ``floor`` is the same quantity for the least that the same work can cost, measured in the same
    run (the benchmark's ``floor`` says what it is); None where the benchmark has no floor for this figure.
    ``lower_is_better`` is False for rates.
    """

    measure: str
    unit: str
    rxgraph: float | None
    langgraph: float | None = None
    langgraph_note: str = ""
    note: str = ""
    lower_is_better: bool = True
    floor: float | None = None

    @property
    def ratio(self) -> float | None:
        """rxgraph / LangGraph."""
        return _ratio(self.rxgraph, self.langgraph)

    @property
    def floor_ratio(self) -> float | None:
        """rxgraph / the floor: how many floors rxgraph's figure is (below 1 for a rate under the floor's)."""
        return _ratio(self.rxgraph, self.floor)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["floor_ratio"] = self.floor_ratio
        return data


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


@dataclass
class Target:
    """A design target and whether this run met it (None: this run could not tell, ``measured`` says why)."""

    goal: str
    measured: str
    met: bool | None

    @property
    def verdict(self) -> str:
        return "n/a" if self.met is None else "met" if self.met else "NOT MET"

    def to_json(self) -> dict[str, Any]:
        return {"goal": self.goal, "measured": self.measured, "met": self.met}


@dataclass
class BenchResult:
    """What one benchmark reports: its figures, the targets it checks, notes, and every raw sample (seconds).

    ``floor`` says what the figures' ``floor`` values measure (empty: this benchmark has no floor).
    """

    name: str
    description: str
    floor: str = ""
    figures: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    samples: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def figure(self, measure: str) -> Figure:
        """The figure named ``measure`` (for tests and for targets computed from figures)."""
        for candidate in self.figures:
            if candidate.measure == measure:
                return candidate
        raise KeyError(f"{self.name}: no figure {measure!r}; figures: {[f.measure for f in self.figures]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "floor": self.floor,
            "figures": [f.to_json() for f in self.figures],
            "targets": [t.to_json() for t in self.targets],
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
            "samples": _rounded(self.samples),
        }


def _rounded(value: Any) -> Any:
    # Samples are seconds; nanoseconds are as precise as perf_counter gets on this kind of machine.
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, Mapping):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def us(seconds: float) -> float:
    """Seconds to microseconds."""
    return seconds * 1e6


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1e3


NOT_INSTALLED = "not installed"


def rxgraph_saver(kind: str, path: str, stack: ExitStack) -> CheckpointSaver:
    """A fresh rxgraph saver: ``"sqlite"`` on the file ``path`` (closed with ``stack``), else a ``MemorySaver``."""
    if kind == "sqlite":
        saver = SqliteSaver(path)
        stack.callback(saver.close)
        return saver
    return MemorySaver()
