"""The benchmarks keep working: every benchmark's rxgraph half runs end to end with tiny sizes.

Nothing here asserts a timing. LangGraph is never imported: the benchmarks import it only inside their LangGraph
halves, which these tests leave out, so they pass with and without the ``bench`` extra installed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # `pytest` (unlike `python -m pytest`) does not put the working directory on the path
    sys.path.insert(0, str(_ROOT))

_LANGGRAPH_ALREADY_LOADED = "langgraph" in sys.modules

from benchmarks import BENCHMARKS  # noqa: E402
from benchmarks.__main__ import run_benchmarks  # noqa: E402
from benchmarks._common import TINY, BenchResult  # noqa: E402


def _langgraph_was_not_imported() -> bool:
    return _LANGGRAPH_ALREADY_LOADED or "langgraph" not in sys.modules


FLOORS = {
    "step": {"per step, no checkpointer"},
    "streaming": {"per chunk", "chunks per second"},
    "serve": {
        "turns per second",
        "time to first model chunk, median",
        "time to first model chunk, 95th percentile",
        "app server CPU per turn",
        "event loop's longest stall",
    },
    "postgres": {f"turn {mark}" for mark in TINY.history_marks},
}
"""The figures of each benchmark that have a floor measured in the same run (in TINY's sizes)."""


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_the_rxgraph_half_of_each_benchmark_runs_and_reports_its_figures(name: str, tmp_path: Path) -> None:
    result = BENCHMARKS[name].run(TINY, langgraph=False, workdir=str(tmp_path))

    assert isinstance(result, BenchResult) and result.name == name
    if name == "instructions":
        # Counting under valgrind takes tens of seconds: at these sizes its worker runs the chains uncounted.
        assert result.figures == [] and result.notes == [
            "not counted at the tiny sizes: the worker ran without valgrind"
        ]
        return
    assert result.figures, f"{name} reported no figures"
    for figure in result.figures:
        assert figure.rxgraph is not None and math.isfinite(figure.rxgraph) and figure.rxgraph > 0, figure
        assert figure.langgraph is None and figure.langgraph_note, figure
    for target in result.targets:
        assert target.verdict in ("met", "NOT MET", "n/a")
    with_floor = [figure for figure in result.figures if figure.floor is not None]
    assert {figure.measure for figure in with_floor} == FLOORS.get(name, set())
    assert bool(result.floor) == (name in FLOORS), result.floor
    for figure in with_floor:
        assert figure.floor is not None and math.isfinite(figure.floor) and figure.floor > 0, figure
        assert figure.floor_ratio == figure.rxgraph / figure.floor
    if name == "serve":
        _check_the_bare_endpoint_was_served(result)
    json.dumps(result.to_json())
    assert _langgraph_was_not_imported()


def _check_the_bare_endpoint_was_served(result: BenchResult) -> None:
    """The serve benchmark's floor: the bare endpoint played its rounds, and each of its turns got the answer."""
    bare = result.samples["bare"]
    assert len(bare) == TINY.serve_rounds and all(round_["cpu_seconds"] > 0 for round_ in bare)
    assert [round_["failures"] for round_ in bare] == [0] * TINY.serve_rounds, bare
    goals = {target.goal: target for target in result.targets}
    assert goals["serve: served turn CPU <= 1.3x the bare endpoint's"].verdict in ("met", "NOT MET")
    assert "bare: 0 failed" in goals["serve: every turn completes (its answer streamed, no error)"].measured


def test_the_runner_prints_a_table_and_writes_the_results_without_langgraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "results.json"
    previous = tmp_path / "previous.json"
    # Far slower than this run, but far less in floors: the comparison flags rxgraph's per-chunk cost in floors only.
    figure = {"measure": "per chunk", "unit": "ns", "rxgraph": 1e9, "lower_is_better": True, "floor": 1e12}
    machine = {"rxgraph_commit": "0123456789abcdef"}
    previous.write_text(json.dumps({"machine": machine, "benchmarks": {"streaming": {"figures": [figure]}}}))

    run_benchmarks(["streaming", "safe_head"], TINY, langgraph=False, output=output, compare_with=previous)

    printed = capsys.readouterr().out
    assert "== streaming" in printed and "== safe_head" in printed and "== targets" in printed
    assert "not installed" in printed
    assert "floor: the same chunks through a bare reactivex pipeline" in printed
    assert f"== compared with {previous} (rxgraph 0123456789ab" in printed
    assert "streaming, per chunk, in floors: 0.001 -> " in printed
    assert "not in that file: streaming, chunks per second; safe_head (the whole benchmark)" in printed
    document = json.loads(output.read_text(encoding="utf-8"))
    assert set(document["benchmarks"]) == {"streaming", "safe_head"}
    assert document["langgraph"] == "not installed" and document["sizes"]["label"] == TINY.label
    machine = document["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["versions"]["reactivex"]
    streaming = document["benchmarks"]["streaming"]
    assert streaming["figures"][0]["langgraph"] is None
    assert len(streaming["samples"]["rxgraph"]) == TINY.stream_repeats
    assert not output.with_name("results.json.tmp").exists()
    comparison = document["comparison"]
    assert comparison["with"] == str(previous) and comparison["commit"] == "0123456789abcdef"
    assert [(r["measure"], r["in_floors"]) for r in comparison["regressions"]] == [("per chunk", True)]
    assert _langgraph_was_not_imported()


def test_the_serve_rounds_rotate_so_that_each_side_leads_in_turn() -> None:
    from benchmarks.serve import rotation

    sides: list[Any] = ["rxgraph", "bare", "langgraph"]

    orders = [rotation(sides, index) for index in range(4)]

    assert orders == [
        ["rxgraph", "bare", "langgraph"],
        ["bare", "langgraph", "rxgraph"],
        ["langgraph", "rxgraph", "bare"],
        ["rxgraph", "bare", "langgraph"],
    ]


def test_the_fanout_benchmark_measures_both_shapes_with_and_without_a_checkpointer(tmp_path: Path) -> None:
    from benchmarks import fanout

    result = fanout.run(TINY, langgraph=False, workdir=str(tmp_path))

    assert [figure.measure for figure in result.figures] == [
        "per branch, static edges + join, no checkpointer",
        "per branch, static edges + join, in-memory saver",
        "per branch, Send to one node, no checkpointer",
        "per branch, Send to one node, in-memory saver",
    ]
    branches = TINY.fanout_branches
    for samples in result.samples.values():
        assert set(samples) == {f"rxgraph x{branches}", "rxgraph x1"}
        assert all(len(values) == TINY.fanout_repeats for values in samples.values())
    assert [target.verdict for target in result.targets] == ["n/a"] * 4
    assert _langgraph_was_not_imported()


def test_the_fanout_benchmark_fails_when_a_run_did_not_collect_every_branch() -> None:
    from benchmarks.fanout import check_collected

    check_collected({"out": [0, 1, 2]}, 3, "rxgraph")
    with pytest.raises(RuntimeError, match=r"rxgraph: a run with 3 branches collected \[0, 2\], expected \[0, 1, 2\]"):
        check_collected({"out": [0, 2]}, 3, "rxgraph")


def test_a_served_turn_completes_only_with_its_answer_and_a_failed_one_says_why() -> None:
    from benchmarks._serve_app import ANSWER
    from benchmarks.serve import Turn, _answered

    human = {"type": "human", "content": "What's the weather?"}
    answered = {"messages": [human, {"type": "ai", "content": "".join(ANSWER), "tool_calls": []}]}
    cut = {"messages": [human, {"type": "ai", "content": "", "tool_calls": [{"name": "weather", "args": {}}]}]}

    assert _answered(json.dumps(answered)) is None
    assert _answered(None) == "no values event"
    missing = _answered(json.dumps(cut))
    assert missing is not None and "tool_calls" in missing
    turn = Turn("t-1", status=200, missing=missing, server="run r-1 error: ModelAPIError")
    assert not turn.ok
    assert turn.reason().startswith("the stream closed without the answer (its last values event ends with")
    assert turn.describe().endswith("; the server: run r-1 error: ModelAPIError")
    assert Turn("t-2", status=200, completed=True).ok
    assert not Turn("t-3", status=200, completed=True, error='{"error":"ModelAPIError"}').ok


def test_the_relay_benchmark_finds_lost_repeated_and_reordered_events() -> None:
    from benchmarks.relay import _Follower

    def follower(numbers: list[int]) -> _Follower:
        seen = _Follower("B")
        seen.received = [(i, 0.0, 1.0) for i in numbers]
        return seen

    assert follower([0, 1, 2]).check(3) is None
    assert follower([0, 2]).check(3) == "2 of 3 events: 1 lost, 0 repeated, 0 out of order"
    assert follower([0, 1, 1, 2]).check(3) == "4 of 3 events: 0 lost, 1 repeated, 0 out of order"
    assert follower([0, 2, 1]).check(3) == "3 of 3 events: 0 lost, 0 repeated, 1 out of order"
    failed = follower([0, 1, 2])
    failed.problem = "HTTP 404: run not found"
    assert failed.check(3) == "HTTP 404: run not found"


def test_the_loop_monitor_reports_its_sampler_threads_cpu_time_which_the_served_cpu_leaves_out() -> None:
    import asyncio
    import time

    from benchmarks._serve_app import StallMonitor

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("only /_stall is asked for")

    monitor = StallMonitor(app)
    answers: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        answers.append(message)

    async def main() -> dict[str, Any]:
        await monitor({"type": "http", "path": "/_stall", "query_string": b"start=1"}, None, send)
        await asyncio.sleep(0)  # the timer task starts the sampler thread
        deadline = time.monotonic() + 30
        # The loop is kept busy (it is late) until the sampler has sampled it and counted its own CPU time.
        while not (monitor.samples and monitor._sampler_cpu[0] > 0):
            assert time.monotonic() < deadline, "the sampler never sampled a late loop"
        await monitor({"type": "http", "path": "/_stall", "query_string": b""}, None, send)
        return json.loads(answers[-1]["body"])  # type: ignore[no-any-return]

    report = asyncio.run(main())
    assert report["monitor_cpu_s"] > 0
