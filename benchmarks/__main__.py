"""``python -m benchmarks``: run the benchmarks, print a table, and write ``benchmarks/results.json``.

Options: ``--quick`` for a short run (well under a minute), ``--only NAME`` (repeatable) to pick benchmarks,
``--output PATH`` to write the results elsewhere (a quick or partial run goes to ``results-partial.json``, so
that it never replaces the record of a full run), ``--compare PATH`` to compare with another results file than the
record. LangGraph's halves run when ``langgraph`` is installed (the ``bench`` extra); otherwise the table says "not
installed" in its column.

When the run finishes, its figures are compared with the same figures in the previous results file (``_compare``):
every figure worse by more than 20% is listed with both values, beside its floor's change, and the comparison is
recorded in the written results (``comparison``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import BENCHMARKS
from ._common import FULL, QUICK, BenchResult, Figure, Sizes, langgraph_installed
from ._compare import compare, load

_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = _ROOT / "benchmarks" / "results.json"
# A quick or partial run must not replace the record of a full one (docs/benchmarks.md quotes results.json).
PARTIAL_OUTPUT = _ROOT / "benchmarks" / "results-partial.json"

_PACKAGES = (
    "rxgraph",
    "reactivex",
    "pydantic",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
)


def machine() -> dict[str, Any]:
    """The machine and software the figures were measured on."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor() or "unknown"
    versions: dict[str, str | None] = {}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    if versions["rxgraph"] is None:  # run from a source tree without installing it
        import rxgraph

        versions["rxgraph"] = f"{rxgraph.__version__} (source tree)"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        **_git_state(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _git_state() -> dict[str, Any]:
    """The commit the rxgraph tree is at, and whether its package had uncommitted changes (None: not a git tree)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    changes = git("status", "--porcelain", "--", "rxgraph") if commit else None
    return {"rxgraph_commit": commit, "rxgraph_uncommitted_changes": None if changes is None else bool(changes)}


def run_benchmarks(
    names: Sequence[str],
    sizes: Sizes,
    *,
    langgraph: bool,
    output: Path | None,
    echo: bool = True,
    compare_with: Path | None = None,
) -> dict[str, Any]:
    """Run the named benchmarks, print each one's table as it finishes (``echo``), compare the figures with the
    results file ``compare_with`` (read before the run: it may be ``output``), write the JSON (``output``), and
    return the JSON document."""
    previous, problem = load(compare_with) if compare_with is not None else (None, None)
    started = time.perf_counter()
    results: list[BenchResult] = []
    info = machine()
    if echo:
        print(describe_machine(info, sizes, langgraph), flush=True)
    for name in names:
        module = BENCHMARKS[name]
        with tempfile.TemporaryDirectory(prefix=f"rxgraph-bench-{name}-") as workdir:
            begin = time.perf_counter()
            result: BenchResult = module.run(sizes, langgraph=langgraph, workdir=workdir)
            result.seconds = time.perf_counter() - begin
        results.append(result)
        if echo:
            print(format_result(result), flush=True)
    total = time.perf_counter() - started
    document = {
        "machine": info,
        "sizes": asdict(sizes),
        "langgraph": "installed" if langgraph else "not installed",
        "total_seconds": round(total, 1),
        "benchmarks": {result.name: result.to_json() for result in results},
    }
    if compare_with is not None:
        comparison = compare(document, previous, path=_shown(compare_with), problem=problem)
        document["comparison"] = comparison.to_json()
    if echo:
        print(format_targets(results))
        if compare_with is not None:
            print(comparison.format())
        print(f"\nTotal: {total:.1f} s", flush=True)
    if output is not None:
        temporary = output.with_name(output.name + ".tmp")
        temporary.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, output)
        if echo:
            print(f"Results written to {output}")
    return document


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is in it (as the results record it), else as given."""
    try:
        return path.resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return str(path)


# -- the table ---------------------------------------------------------------------------------------------------


def describe_machine(info: dict[str, Any], sizes: Sizes, langgraph: bool) -> str:
    versions = info["versions"]
    lg = f"langgraph {versions['langgraph']}" if langgraph else "langgraph not installed (pip install '.[bench]')"
    commit = info.get("rxgraph_commit")
    tree = f" at {commit[:12]}" if commit else ""
    if info.get("rxgraph_uncommitted_changes"):
        tree += " with uncommitted changes"
    return (
        f"{info['cpu']}, {info['cores']} cores, Python {info['python']}\n"
        f"rxgraph {versions['rxgraph']}{tree}, reactivex {versions['reactivex']}, pydantic {versions['pydantic']}, "
        f"{lg}\nsizes: {sizes.label}"
    )


def _number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 10:
        return f"{value:.2f}"
    if magnitude >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def _cells(figure: Figure) -> list[str]:
    rx = _number(figure.rxgraph) if figure.rxgraph is not None else "-"
    lg = _number(figure.langgraph) if figure.langgraph is not None else (figure.langgraph_note or "-")
    ratio = _number(figure.ratio) if figure.ratio is not None else ""
    floor = _number(figure.floor) if figure.floor is not None else ""
    floors = _number(figure.floor_ratio) if figure.floor_ratio is not None else ""
    return [figure.measure, figure.unit, rx, lg, ratio, floor, floors, figure.note]


def format_result(result: BenchResult) -> str:
    """One benchmark's figures as a table: rxgraph, LangGraph, their ratio (rxgraph / LangGraph) and, for a benchmark
    with a floor, the floor and rxgraph's figure in floors (rxgraph / floor)."""
    header = ["measure", "unit", "rxgraph", "LangGraph", "rx/LG", "floor", "rx/floor", ""]
    rows = [header, *(_cells(f) for f in result.figures)]
    if not any(f.floor is not None for f in result.figures):
        rows = [row[:5] + row[7:] for row in rows]
    columns = range(len(rows[0]) - 1)  # the last cell, the note, is not aligned
    widths = [max(len(row[i]) for row in rows) for i in columns]
    lines = [f"\n== {result.name}: {result.description} ({result.seconds:.1f} s)"]
    for row in rows:
        cells = [row[i].ljust(widths[i]) if i < 2 else row[i].rjust(widths[i]) for i in columns]
        lines.append(("  " + "  ".join(cells) + ("  " + row[-1] if row[-1] else "")).rstrip())
    if result.floor:
        lines.append(f"  floor: {result.floor}")
    lines.extend(f"  note: {note}" for note in result.notes)
    return "\n".join(lines)


def format_targets(results: Sequence[BenchResult]) -> str:
    """Every target of the run, with what was measured and met / NOT MET (benchmarks report; they never assert)."""
    rows = [(t.goal, t.measured, t.verdict) for result in results for t in result.targets]
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = ["\n== targets"]
    lines.extend(
        f"  {goal.ljust(widths[0])}  {measured.ljust(widths[1])}  {verdict}" for goal, measured, verdict in rows
    )
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run, well under a minute")
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME", help=f"one of {', '.join(BENCHMARKS)}"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"where to write the JSON results (default: {DEFAULT_OUTPUT.name} for a full run of every benchmark, "
        f"{PARTIAL_OUTPUT.name} otherwise)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        default=DEFAULT_OUTPUT,
        metavar="PATH",
        help=f"the results file to compare this run's figures with (default: {DEFAULT_OUTPUT.name}, the record)",
    )
    args = parser.parse_args(argv)
    names = [name for name in BENCHMARKS if args.only is None or name in args.only]
    output = args.output
    if output is None:
        output = PARTIAL_OUTPUT if args.quick or args.only else DEFAULT_OUTPUT
    sizes = QUICK if args.quick else FULL
    run_benchmarks(names, sizes, langgraph=langgraph_installed(), output=output, compare_with=args.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
