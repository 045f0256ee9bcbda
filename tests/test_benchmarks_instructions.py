"""The instruction counts of the ``instructions`` benchmark: callgrind's dumps at the marker, read back in order.

The counting runs a real valgrind on a small Python command (a few seconds); the benchmark's own worker, which
runs the step chains, is run without valgrind by the smoke test.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks._count_worker import count  # noqa: E402
from benchmarks.instructions import CountError, callgrind_phases  # noqa: E402

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")

_PHASES = """
import math
math.gcd(0, 0)
total = sum(range(20_000))
math.gcd(0, 0)
total = sum(range(200_000))
math.gcd(0, 0)
total = sum(range(2_000_000))
"""


@needs_valgrind
def test_each_stretch_that_ends_at_a_marker_call_is_counted_apart(tmp_path: Path) -> None:
    startup, small, large = callgrind_phases([sys.executable, "-c", _PHASES], cwd=tmp_path, outdir=tmp_path)

    # Ten times the loop, about ten times the instructions; what ran after the last marker is not a stretch.
    assert 8 < large / small < 12, (small, large)
    assert startup > small
    assert list(tmp_path.iterdir()) == []  # the dumps went with their temporary directory


@needs_valgrind
def test_a_count_of_the_same_work_is_the_same_to_a_fraction_of_a_percent(tmp_path: Path) -> None:
    first = callgrind_phases([sys.executable, "-c", _PHASES], cwd=tmp_path, outdir=tmp_path)
    second = callgrind_phases([sys.executable, "-c", _PHASES], cwd=tmp_path, outdir=tmp_path)

    assert abs(second[2] / first[2] - 1) < 0.005, (first, second)


@needs_valgrind
def test_a_command_that_fails_is_an_error_with_its_exit_status_and_last_words(tmp_path: Path) -> None:
    script = "import sys; print('the chain broke', file=sys.stderr); sys.exit(3)"

    with pytest.raises(CountError, match=r"exited with 3: .*the chain broke"):
        callgrind_phases([sys.executable, "-c", script], cwd=tmp_path, outdir=tmp_path)


def test_without_valgrind_nothing_is_counted_and_the_error_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(CountError, match="valgrind is not installed"):
        callgrind_phases([sys.executable, "-c", "pass"], cwd=tmp_path, outdir=tmp_path)


def test_the_worker_calls_two_markers_a_side_and_refuses_what_it_cannot_count(tmp_path: Path) -> None:
    assert count(["rxgraph:none", "bare:none"], 3, 1, str(tmp_path)) == 4

    with pytest.raises(ValueError, match="sides must be among"):
        count(["rxgraph:postgres"], 3, 1, str(tmp_path))
    with pytest.raises(ValueError, match="at least 1"):
        count(["rxgraph:none"], 3, 0, str(tmp_path))
