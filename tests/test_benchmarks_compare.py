"""The benchmarks' regression check: a run's figures against the previous results file, on hand-made documents."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # `pytest` (unlike `python -m pytest`) does not put the working directory on the path
    sys.path.insert(0, str(_ROOT))

from benchmarks._compare import compare, load  # noqa: E402


def _figure(measure: str, rxgraph: Any, *, lower: bool = True, floor: Any = None, langgraph: Any = None) -> Any:
    return {
        "measure": measure,
        "unit": "ms" if lower else "turns/s",
        "rxgraph": rxgraph,
        "langgraph": langgraph,
        "lower_is_better": lower,
        "floor": floor,
    }


def _document(*figures: Any, benchmark: str = "bench", commit: str = "abc1234def", sizes: str = "full") -> Any:
    return {
        "machine": {"rxgraph_commit": commit, "date": "2026-12-01T00:00:00+00:00"},
        "sizes": {"label": sizes},
        "benchmarks": {benchmark: {"figures": list(figures)}},
    }


def _flagged(new: Any, old: Any) -> list[str]:
    return [change.name for change in compare(new, old, path="old.json").regressions]


def test_a_figure_25_percent_worse_is_flagged_and_one_15_percent_worse_is_not() -> None:
    old = _document(_figure("a", 10.0), _figure("b", 10.0), _figure("c", 10.0))
    new = _document(_figure("a", 12.5), _figure("b", 11.5), _figure("c", 7.0))

    comparison = compare(new, old, path="old.json")

    assert [change.name for change in comparison.regressions] == ["bench, a"]
    change = comparison.regressions[0]
    assert (change.old, change.new) == (10.0, 12.5)
    assert change.ratio == pytest.approx(1.25) and change.worse_by == pytest.approx(0.25)
    assert comparison.compared == 3
    printed = comparison.format()
    assert "WORSE by more than 20% (1 of 3 compared)" in printed
    assert "bench, a: 10 -> 12.5 ms (x1.25, 25% worse)" in printed


def test_a_rate_is_worse_when_it_falls() -> None:
    old = _document(_figure("fell 25%", 100.0, lower=False), _figure("fell 15%", 100.0, lower=False))
    old["benchmarks"]["bench"]["figures"].append(_figure("rose 30%", 100.0, lower=False))
    new = _document(_figure("fell 25%", 75.0, lower=False), _figure("fell 15%", 85.0, lower=False))
    new["benchmarks"]["bench"]["figures"].append(_figure("rose 30%", 130.0, lower=False))

    comparison = compare(new, old, path="old.json")

    assert [change.name for change in comparison.regressions] == ["bench, fell 25%"]
    assert comparison.regressions[0].worse_by == pytest.approx(0.25)
    assert "x0.75, 25% worse; higher is better" in comparison.format()


def test_nothing_flagged_says_so() -> None:
    old = _document(_figure("a", 10.0))
    new = _document(_figure("a", 10.5))

    printed = compare(new, old, path="benchmarks/results.json").format()

    assert "nothing worse by more than 20% (1 figures compared)" in printed
    assert (
        "compared with benchmarks/results.json (rxgraph abc1234def, 2026-12-01T00:00:00+00:00, sizes full)" in printed
    )
    assert "WORSE" not in printed


def test_a_flagged_figure_shows_its_floor_and_langgraph_moving_with_it() -> None:
    # The whole machine slower: rxgraph, its floor and LangGraph 30% slower, rxgraph in floors unchanged.
    old = _document(_figure("a", 10.0, floor=2.0, langgraph=50.0))
    new = _document(_figure("a", 13.0, floor=2.6, langgraph=65.0))

    comparison = compare(new, old, path="old.json")

    assert [change.name for change in comparison.regressions] == ["bench, a"]
    assert [(floor.old, floor.new) for floor in comparison.floors] == [(2.0, 2.6)]
    printed = comparison.format()
    assert "bench, a: 2 -> 2.6 ms (x1.30)" in printed  # the floors, listed before the flagged figures
    assert "bench, a: 10 -> 13 ms (x1.30, 30% worse); its floor 2 -> 2.6 (x1.30); LangGraph x1.30" in printed


def test_rxgraph_slower_in_floors_is_flagged_even_when_the_figure_is_not() -> None:
    # A faster machine hides a regression of rxgraph's: the floor halved, rxgraph's figure 10% better.
    old = _document(_figure("a", 10.0, floor=2.0))
    new = _document(_figure("a", 9.0, floor=1.0))

    assert _flagged(new, old) == ["bench, a, in floors"]
    change = compare(new, old, path="old.json").regressions[0]
    assert (change.old, change.new, change.unit) == (5.0, 9.0, "floors")


def test_a_figure_without_a_floor_is_shown_beside_how_its_benchmarks_floors_moved() -> None:
    old = _document(_figure("with floor", 10.0, floor=2.0), _figure("without", 10.0))
    new = _document(_figure("with floor", 10.0, floor=2.2), _figure("without", 14.0))

    printed = compare(new, old, path="old.json").format()

    expected = "bench, without: 10 -> 14 ms (x1.40, 40% worse); no floor of its own (this benchmark's floors cost x1.10"
    assert expected in printed


def test_a_benchmark_without_floors_is_shown_beside_what_every_floor_of_the_run_costs_now() -> None:
    # A rate's floor that fell from 100 to 80 costs 1.25x what it did; a time's floor from 2 to 1.8, 0.9x.
    old = _document(_figure("time", 10.0, floor=2.0), _figure("rate", 50.0, lower=False, floor=100.0))
    new = _document(_figure("time", 10.0, floor=1.8), _figure("rate", 50.0, lower=False, floor=80.0))
    old["benchmarks"]["plain"] = {"figures": [_figure("c", 10.0)]}
    new["benchmarks"]["plain"] = {"figures": [_figure("c", 13.0)]}

    printed = compare(new, old, path="old.json").format()

    assert "bench, rate: 100 -> 80 turns/s (x0.80, higher is better)" in printed
    assert "plain, c: 10 -> 13 ms (x1.30, 30% worse); no floor of its own (the run's floors cost x0.90 to x1.25" in (
        printed
    )


def test_figures_found_in_one_file_only_are_noted() -> None:
    old = _document(_figure("kept", 10.0), _figure("dropped", 10.0))
    new = _document(_figure("kept", 10.0), _figure("added", 99.0))
    new["benchmarks"]["other"] = {"figures": [_figure("x", 1.0)]}

    comparison = compare(new, old, path="old.json")

    assert comparison.regressions == []
    assert comparison.not_in_old == ["bench, added", "other (the whole benchmark)"]
    assert comparison.not_in_new == ["bench, dropped"]
    printed = comparison.format()
    assert "not in that file: bench, added; other (the whole benchmark)" in printed
    assert "in that file, not measured by this run: bench, dropped" in printed


def test_a_partial_run_compares_only_its_own_benchmarks() -> None:
    old = _document(_figure("a", 10.0))
    old["benchmarks"]["not run"] = {"figures": [_figure("b", 1.0)]}
    new = _document(_figure("a", 10.0))

    comparison = compare(new, old, path="old.json")

    assert comparison.not_in_new == [] and comparison.compared == 1


def test_malformed_previous_documents_are_noted_not_raised() -> None:
    new = _document(_figure("a", 10.0, floor=1.0), _figure("b", 10.0), _figure("c", 10.0), sizes="quick")
    old = {
        "machine": "not a mapping",
        "benchmarks": {
            "bench": {
                "figures": [
                    _figure("a", None, floor="fast"),
                    _figure("b", 0.0),
                    {"measure": "c", "rxgraph": True},
                    "not a figure",
                    {"no measure": 1},
                ]
            }
        },
    }

    comparison = compare(new, old, path="old.json")

    assert comparison.regressions == [] and comparison.compared == 0
    assert comparison.not_comparable == ["bench, a", "bench, b", "bench, c"]
    printed = comparison.format()
    assert "(rxgraph unknown commit, no date, sizes unknown)" in printed
    assert "this run's sizes (quick) are not that file's (unknown)" in printed
    assert compare(new, {"benchmarks": []}, path="old.json").problem == "it is not a results document (no 'benchmarks')"
    assert compare(new, {"benchmarks": {"bench": "garbage"}}, path="old.json").not_in_new == []


def test_a_missing_or_unreadable_file_is_compared_with_nothing(tmp_path: Path) -> None:
    new = _document(_figure("a", 10.0))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    listed = tmp_path / "list.json"
    listed.write_text("[]", encoding="utf-8")

    assert load(tmp_path / "absent.json") == (None, "no such file")
    document, problem = load(broken)
    assert document is None and problem is not None and problem.startswith("it could not be read (JSONDecodeError")
    assert load(listed) == (None, "it is not a results document (no 'benchmarks')")
    comparison = compare(new, None, path="absent.json", problem="no such file")
    assert comparison.regressions == []
    assert "nothing compared: no such file" in comparison.format()
    assert comparison.to_json()["problem"] == "no such file"


def test_the_comparison_is_recorded_as_json() -> None:
    old = _document(_figure("a", 10.0, floor=2.0))
    new = _document(_figure("a", 13.0, floor=2.0))

    recorded = json.loads(json.dumps(compare(new, old, path="benchmarks/results.json").to_json()))

    assert recorded["with"] == "benchmarks/results.json"
    assert recorded["commit"] == "abc1234def" and recorded["date"] == "2026-12-01T00:00:00+00:00"
    assert recorded["sizes"] == "full" and recorded["threshold"] == 0.2 and recorded["figures_compared"] == 1
    flagged = {(r["measure"], r["in_floors"]): r for r in recorded["regressions"]}
    assert set(flagged) == {("a", False), ("a", True)}
    assert flagged[("a", False)]["ratio"] == pytest.approx(1.3) and flagged[("a", False)]["floor_ratio"] == 1.0
    assert [(f["old"], f["new"]) for f in recorded["floors"]] == [(2.0, 2.0)]
