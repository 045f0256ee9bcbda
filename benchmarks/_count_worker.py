"""The process that the ``instructions`` benchmark runs under callgrind.

``python -m benchmarks._count_worker NODES RUNS WORKDIR SIDE [SIDE ...]``, each ``SIDE`` one of ``SIDES``
(``system:saver``). For each side in turn it builds the step benchmark's chain of ``NODES`` no-op nodes, runs it
once to warm it up, then calls the marker (``mark``), runs the chain ``RUNS`` times with the garbage collector off,
and calls the marker again. Under ``callgrind --dump-before=math_gcd`` every marker call dumps the counters, so the
second dump of each side holds exactly what its measured runs executed (``callgrind_phases``). Run without
valgrind it does the same work and counts nothing; it prints the number of markers it called.
"""

from __future__ import annotations

import gc
import math
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack

from .step import bare_runner, langgraph_runner, rxgraph_runner

__all__ = ["MARKER", "SIDES", "count", "mark"]

MARKER = "math_gcd"
"""The C function behind ``mark``, as callgrind names it (``--dump-before`` takes it)."""

SIDES = (
    "rxgraph:none",
    "rxgraph:memory",
    "rxgraph:sqlite",
    "bare:none",
    "langgraph:none",
    "langgraph:memory",
    "langgraph:sqlite",
)
"""What the worker can count: the step benchmark's three savers for rxgraph and LangGraph, and its floor."""


def mark() -> None:
    """Where callgrind dumps its counters (math.gcd, which nothing on the measured path calls)."""
    math.gcd(0, 0)


def _runner(side: str, nodes: int, workdir: str, stack: ExitStack) -> Callable[[], object]:
    system, saver = side.split(":")
    if system == "bare":
        return bare_runner(nodes)
    if system == "langgraph":
        return langgraph_runner(nodes, saver, workdir, stack)
    return rxgraph_runner(nodes, saver, workdir, stack)


def count(sides: Sequence[str], nodes: int, runs: int, workdir: str) -> int:
    """Run each side's measured phase between two markers; returns the number of markers called.

    Raises:
        ValueError: a side that is not one of ``SIDES``, or fewer than one node or run.
    """
    unknown = [side for side in sides if side not in SIDES]
    if unknown or nodes < 1 or runs < 1:
        raise ValueError(f"sides must be among {SIDES} (got {unknown}); nodes and runs at least 1 ({nodes}, {runs})")
    marks = 0
    for side in sides:
        with ExitStack() as stack:
            run_once = _runner(side, nodes, workdir, stack)
            run_once()  # warm-up: what a first run does once (lazy imports, caches) stays out of the phase
            gc.collect()
            gc.disable()
            try:
                mark()
                for _ in range(runs):
                    run_once()
                mark()
            finally:
                gc.enable()
            marks += 2
    return marks


def main(argv: Sequence[str]) -> int:
    nodes, runs, workdir, *sides = argv
    print(count(sides, int(nodes), int(runs), workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
