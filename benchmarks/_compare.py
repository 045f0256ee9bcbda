"""A run's figures against a previous results file: which are worse by more than 20%, and how the floors moved.

Each rxgraph figure of the new run is looked up by benchmark and measure in the previous document. It is flagged when
it is worse by more than ``THRESHOLD`` of the previous value: above ``old * 1.2`` when lower is better, below
``old * 0.8`` for a rate. A figure with a floor is also compared in floors (rxgraph / floor), so that rxgraph
getting slower on a machine that got faster shows too. Next to each flagged figure stand its floor's change (or,
for a figure without a floor, how the run's floors moved) and LangGraph's: a slower machine shows as slower floors
and a slower LangGraph as well, a regression of rxgraph's as rxgraph alone.

The documents are the JSON ``python -m benchmarks`` writes; anything missing or malformed in the previous one is
noted, never raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["THRESHOLD", "Change", "Comparison", "compare", "load"]

THRESHOLD = 0.2
"""A figure worse than its previous value by more than this fraction of it is flagged."""


def _number(value: Any) -> float | None:
    """``value`` as a positive finite number, or None (a figure that cannot be compared)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _change(old: float | None, new: float | None) -> float | None:
    return new / old if old is not None and new is not None else None


@dataclass(frozen=True)
class Change:
    """One figure of the new run against the same figure in the previous file.

    ``in_floors``: the values are rxgraph / floor rather than rxgraph's figure itself. ``floor_old`` and
    ``floor_new`` are the figure's floor in each file, ``langgraph_old`` and ``langgraph_new`` LangGraph's figure
    (None where a file has none).
    """

    benchmark: str
    measure: str
    unit: str
    old: float
    new: float
    lower_is_better: bool
    in_floors: bool = False
    floor_old: float | None = None
    floor_new: float | None = None
    langgraph_old: float | None = None
    langgraph_new: float | None = None

    @property
    def ratio(self) -> float:
        """new / old."""
        return self.new / self.old

    @property
    def worse_by(self) -> float:
        """How much worse the new value is, as a fraction of the old one (negative: better)."""
        return self.ratio - 1 if self.lower_is_better else 1 - self.ratio

    @property
    def cost(self) -> float:
        """What the new value costs against the old one: new / old, or old / new for a rate (above 1: worse)."""
        return self.ratio if self.lower_is_better else 1 / self.ratio

    @property
    def floor_ratio(self) -> float | None:
        """The floor's new / old (None: a file has no floor for this figure)."""
        return _change(self.floor_old, self.floor_new)

    @property
    def langgraph_ratio(self) -> float | None:
        """LangGraph's new / old (None: a file has no LangGraph figure)."""
        return _change(self.langgraph_old, self.langgraph_new)

    @property
    def name(self) -> str:
        return f"{self.benchmark}, {self.measure}" + (", in floors" if self.in_floors else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "worse_by": self.worse_by, "floor_ratio": self.floor_ratio}


@dataclass
class Comparison:
    """What a run's figures say against a previous results file (``path``).

    ``problem`` says why nothing was compared (no such file, not a results document); ``commit``, ``date`` and
    ``sizes`` describe the previous run.
    """

    path: str
    threshold: float = THRESHOLD
    commit: str | None = None
    date: str | None = None
    sizes: str | None = None
    new_sizes: str | None = None
    problem: str | None = None
    compared: int = 0
    regressions: list[Change] = field(default_factory=list)
    floors: list[Change] = field(default_factory=list)
    not_in_old: list[str] = field(default_factory=list)
    not_in_new: list[str] = field(default_factory=list)
    not_comparable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "with": self.path,
            "commit": self.commit,
            "date": self.date,
            "sizes": self.sizes,
            "threshold": self.threshold,
            "problem": self.problem,
            "figures_compared": self.compared,
            "regressions": [change.to_json() for change in self.regressions],
            "floors": [change.to_json() for change in self.floors],
            "not_in_old": self.not_in_old,
            "not_in_new": self.not_in_new,
            "not_comparable": self.not_comparable,
        }

    def format(self) -> str:
        """The printed block: the file compared with, how the floors moved, and every flagged figure."""
        commit = self.commit[:12] if self.commit else "unknown commit"
        sizes = self.sizes or "unknown"
        lines = [f"\n== compared with {self.path} (rxgraph {commit}, {self.date or 'no date'}, sizes {sizes})"]
        if self.problem is not None:
            lines.append(f"  nothing compared: {self.problem}")
            return "\n".join(lines)
        if self.sizes != self.new_sizes:
            lines.append(
                f"  note: this run's sizes ({self.new_sizes}) are not that file's ({sizes}): figures that "
                "depend on the sizes differ for that reason too"
            )
        if self.floors:
            lines.append("  floors, this run against that file:")
            lines.extend(
                f"    {c.benchmark}, {c.measure}: {_value(c.old)} -> {_value(c.new)} {c.unit} (x{c.ratio:.2f}"
                f"{'' if c.lower_is_better else ', higher is better'})"
                for c in self.floors
            )
        else:
            lines.append("  no floor in both files to compare")
        percent = f"{self.threshold:.0%}"
        if self.regressions:
            lines.append(f"  WORSE by more than {percent} ({len(self.regressions)} of {self.compared} compared):")
            lines.extend(f"    {self._describe(change)}" for change in self.regressions)
        else:
            lines.append(f"  nothing worse by more than {percent} ({self.compared} figures compared)")
        if self.not_in_old:
            lines.append(f"  not in that file: {'; '.join(self.not_in_old)}")
        if self.not_in_new:
            lines.append(f"  in that file, not measured by this run: {'; '.join(self.not_in_new)}")
        if self.not_comparable:
            lines.append(f"  not comparable (no positive value in both): {'; '.join(self.not_comparable)}")
        return "\n".join(lines)

    def _describe(self, change: Change) -> str:
        unit = "floors" if change.in_floors else change.unit
        rate = "" if change.lower_is_better else "; higher is better"
        text = (
            f"{change.name}: {_value(change.old)} -> {_value(change.new)} {unit} "
            f"(x{change.ratio:.2f}, {change.worse_by:.0%} worse{rate})"
        )
        if change.floor_ratio is not None:
            assert change.floor_old is not None and change.floor_new is not None
            text += f"; its floor {_value(change.floor_old)} -> {_value(change.floor_new)} (x{change.floor_ratio:.2f})"
        elif self.floors:
            # The floors of the figure's own benchmark say most of its machine; else every floor of the run.
            own = [floor for floor in self.floors if floor.benchmark == change.benchmark]
            costs = sorted(floor.cost for floor in own or self.floors)
            span = f"x{costs[0]:.2f}" if len(costs) == 1 else f"x{costs[0]:.2f} to x{costs[-1]:.2f}"
            whose = "this benchmark's floors" if own else "the run's floors"
            text += f"; no floor of its own ({whose} cost {span} what they did)"
        else:
            text += "; no floor to compare"
        if change.langgraph_ratio is not None:
            text += f"; LangGraph x{change.langgraph_ratio:.2f}"
        return text


def _value(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def load(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The results document at ``path``, or None and why it cannot be compared with."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no such file"
    except (OSError, ValueError) as error:
        return None, f"it could not be read ({type(error).__name__}: {error})"
    if not isinstance(document, dict) or not isinstance(document.get("benchmarks"), dict):
        return None, "it is not a results document (no 'benchmarks')"
    return document, None


def _figures(benchmark: Any) -> dict[str, Mapping[str, Any]]:
    figures = benchmark.get("figures") if isinstance(benchmark, Mapping) else None
    if not isinstance(figures, list):
        return {}
    return {f["measure"]: f for f in figures if isinstance(f, Mapping) and isinstance(f.get("measure"), str)}


def _text(document: Mapping[str, Any], section: str, key: str) -> str | None:
    """``document[section][key]`` when it is a string, else None."""
    part = document.get(section)
    value = part.get(key) if isinstance(part, Mapping) else None
    return value if isinstance(value, str) else None


def compare(
    new: Mapping[str, Any], old: Mapping[str, Any] | None, *, path: str, problem: str | None = None
) -> Comparison:
    """The figures of the ``new`` document against the ``old`` one (read from ``path``; ``problem``: why it is
    None). Only benchmarks of the new run are compared; a figure found in one file only is noted."""
    result = Comparison(path, new_sizes=_text(new, "sizes", "label"), problem=problem)
    if old is None:
        result.problem = result.problem or "no previous results"
        return result
    result.commit = _text(old, "machine", "rxgraph_commit")
    result.date = _text(old, "machine", "date")
    result.sizes = _text(old, "sizes", "label")
    old_benchmarks = old.get("benchmarks")
    if not isinstance(old_benchmarks, Mapping):
        result.problem = "it is not a results document (no 'benchmarks')"
        return result
    for name, benchmark in new.get("benchmarks", {}).items():
        if name not in old_benchmarks:
            result.not_in_old.append(f"{name} (the whole benchmark)")
            continue
        before = _figures(old_benchmarks[name])
        after = _figures(benchmark)
        result.not_in_new.extend(f"{name}, {measure}" for measure in before if measure not in after)
        for measure, figure in after.items():
            if measure not in before:
                result.not_in_old.append(f"{name}, {measure}")
                continue
            _compare_figure(result, name, figure, before[measure])
    return result


def _compare_figure(result: Comparison, name: str, figure: Mapping[str, Any], previous: Mapping[str, Any]) -> None:
    measure, unit = str(figure["measure"]), str(figure.get("unit", ""))
    lower = bool(figure.get("lower_is_better", True))
    old, new = _number(previous.get("rxgraph")), _number(figure.get("rxgraph"))
    if old is None or new is None:
        result.not_comparable.append(f"{name}, {measure}")
        return
    result.compared += 1
    floor_old, floor_new = _number(previous.get("floor")), _number(figure.get("floor"))
    langgraph = (_number(previous.get("langgraph")), _number(figure.get("langgraph")))

    def change(old: float, new: float, unit: str, in_floors: bool) -> Change:
        return Change(name, measure, unit, old, new, lower, in_floors, floor_old, floor_new, *langgraph)

    flagged = [change(old, new, unit, False)]
    if floor_old is not None and floor_new is not None:
        result.floors.append(Change(name, measure, unit, floor_old, floor_new, lower))
        flagged.append(change(old / floor_old, new / floor_new, "floors", True))
    result.regressions.extend(c for c in flagged if c.worse_by > result.threshold)
