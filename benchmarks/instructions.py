"""instructions: the step's cost in CPU instructions, which a busy machine does not move.

The ``step`` benchmark's chains (``step_nodes`` no-op nodes; no checkpointer, the in-memory saver, SQLite) and its
floor (the bare loop), each run ``instruction_runs`` times in one process under valgrind's callgrind, which counts
the instructions executed (``Ir``) between two calls of a marker function (``_count_worker``). The per-step figure
is a side's instructions over its runs divided by the steps they took, the same division as ``step``'s time.

Time per step moves with the machine: the same tree has measured 2.3 and 4.1 us a step on two days of one machine,
and a 20% regression hides in that. The number of instructions does not move: the same tree counts the same to
within a few tenths of a percent, so the comparison with the previous results file flags a step that does more work
whatever the machine's state. It does not see what costs time without instructions: cache misses, waits on a lock
or on the disk (SQLite's ``fsync`` is the kernel's work, not counted), the GIL passing between threads.

Counting needs ``valgrind`` on the ``PATH`` and symbols for ``math_gcd`` in the Python that runs it (a Python built
from source, as pyenv does, has them). The run is about 50x slower than natively, most of it importing the
libraries, so the quick and tiny sizes run the worker without valgrind (the same work, nothing counted) and report
no figures. LangGraph's chains are counted too when it is installed, in a second process at the same time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes
from ._count_worker import MARKER
from .step import _LABELS, SAVERS

__all__ = ["NAME", "CountError", "callgrind_phases", "run"]

NAME = "instructions"
_ROOT = Path(__file__).resolve().parent.parent
_VALGRIND_LINE = re.compile(r"^==\d+==")
_TOTALS = re.compile(rb"^(?:totals|summary):\s*(\d+)", re.MULTILINE)


class CountError(Exception):
    """Instructions could not be counted (no valgrind, the command failed, no dumps)."""


def callgrind_phases(command: Sequence[str], *, cwd: str | Path, outdir: str | Path, marker: str = MARKER) -> list[int]:
    """Run ``command`` under callgrind with a counter dump before every call of the C function ``marker``; returns
    the instructions executed in each stretch that ends at a marker call, in order (what ran after the last one is
    left out). Python's hash seed is fixed (``PYTHONHASHSEED=0``) so that two counts of one tree agree.

    Raises:
        CountError: valgrind is not installed, or the command exited with an error.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise CountError("valgrind is not installed (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="callgrind-", dir=outdir) as directory:
        out = os.path.join(directory, "callgrind.out")
        finished = subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", f"--dump-before={marker}", *command],
            cwd=cwd,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            check=False,
        )
        if finished.returncode != 0:
            # The command's own last words, without valgrind's lines (each starts with ==pid==).
            lines = finished.stderr.decode(errors="replace").splitlines()
            tail = [line for line in lines if line.strip() and not _VALGRIND_LINE.match(line)][-5:]
            raise CountError(f"the counted command exited with {finished.returncode}: {' | '.join(tail)}")
        phases = []
        # callgrind names the dumps callgrind.out.1, .2, ... in the order they were taken, and the last one, at exit,
        # callgrind.out itself.
        for number in range(1, len(os.listdir(directory))):
            with open(f"{out}.{number}", "rb") as dump:
                totals = _TOTALS.search(dump.read())
            if totals is None:
                raise CountError(f"callgrind's dump {number} has no totals")
            phases.append(int(totals.group(1)))
        return phases


def _worker(sides: Sequence[str], nodes: int, runs: int, workdir: str) -> list[str]:
    """The command that runs ``_count_worker`` over ``sides``."""
    return [sys.executable, "-m", "benchmarks._count_worker", str(nodes), str(runs), workdir, *sides]


def _count(sides: Sequence[str], nodes: int, runs: int, workdir: str) -> dict[str, float]:
    """Each side's instructions per step, counted in one process under callgrind.

    Raises:
        CountError: nothing was counted (see ``callgrind_phases``), or not one dump per marker call.
    """
    phases = callgrind_phases(_worker(sides, nodes, runs, workdir), cwd=_ROOT, outdir=workdir)
    if len(phases) != 2 * len(sides):
        raise CountError(
            f"{len(phases)} dumps for {2 * len(sides)} marker calls (a Python without symbols for {MARKER}, or "
            "something else calling math.gcd)"
        )
    # Each side's second dump is its measured runs (its first: building the chain and the warm-up run).
    return {side: phases[2 * index + 1] / (runs * nodes) for index, side in enumerate(sides)}


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    nodes, runs = sizes.step_nodes, sizes.instruction_runs
    result = BenchResult(
        NAME,
        f"CPU instructions per step (valgrind's callgrind), the step benchmark's chain of {nodes} no-op nodes",
        floor="the step benchmark's bare loop, counted the same way",
    )
    ours = [f"rxgraph:{saver}" for saver in SAVERS] + ["bare:none"]
    if not sizes.count_instructions:
        # The same work without valgrind, so that the worker keeps working; nothing is counted.
        subprocess.run(_worker(ours, nodes, runs, workdir), cwd=_ROOT, check=True, capture_output=True)
        result.notes.append(f"not counted at the {sizes.label} sizes: the worker ran without valgrind")
        return result
    # Two processes at once (instructions do not depend on what else runs). LangGraph's step executes about 100 times
    # as many instructions as rxgraph's, and one run of its chains is counted.
    groups = [(ours, runs)] + ([([f"langgraph:{saver}" for saver in SAVERS], 1)] if langgraph else [])
    try:
        with ThreadPoolExecutor(len(groups)) as pool:
            counted = [pool.submit(_count, sides, nodes, group_runs, workdir) for sides, group_runs in groups]
            per_step = {side: figure for future in counted for side, figure in future.result().items()}
    except CountError as error:
        result.notes.append(f"not counted: {error}")
        return result
    result.samples = {"instructions per step": per_step}
    for saver in SAVERS:
        theirs = per_step.get(f"langgraph:{saver}")
        result.figures.append(
            Figure(
                f"per step, {_LABELS[saver]}",
                "instructions",
                per_step[f"rxgraph:{saver}"],
                theirs,
                langgraph_note="" if theirs is not None else NOT_INSTALLED,
                floor=per_step["bare:none"] if saver == "none" else None,
            )
        )
    result.notes.append(
        f"rxgraph and the floor: {runs} runs of each chain counted, LangGraph: 1, each after a run to warm it up; "
        "Python's hash seed fixed at 0. Instructions leave out cache misses, waits and the kernel's work (SQLite's "
        "writes): the step benchmark's times hold those."
    )
    return result
