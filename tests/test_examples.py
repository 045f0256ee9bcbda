"""The README's first command runs this example: it must keep working and keep telling the truth."""

from __future__ import annotations

import subprocess
import sys


def test_hello_example_runs_and_shows_the_cancelled_turn_rewound() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rxgraph.examples.hello"], capture_output=True, text=True, check=True, timeout=60
    )
    lines = result.stdout.splitlines()
    assert any("chunk ', '" in line and "t=  120" in line for line in lines)
    assert not any("t=  130" in line for line in lines)  # nothing after the dispose at t=125
    history = [line for line in lines if line.strip().startswith("seq ")]
    assert [h.split()[2] for h in history] == ["rewind", "input", "loop", "loop", "input"]
    assert history[0].split(None, 4)[4] == history[2].split(None, 4)[4]  # rewound head == state after turn 1
