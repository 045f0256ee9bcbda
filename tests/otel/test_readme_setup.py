"""The README's observability setup is ten lines, and prints what its comments say it prints: a turn's spans, one line
each, with their attributes (``'...'`` in a comment stands for an id, ``...`` for the rest of the attributes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _setup() -> str:
    section = README.read_text(encoding="utf-8").split("\n## Observability\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert found is not None, "the Observability section has no Python example"
    return found[1]


def _shown(comment: str) -> re.Pattern[str]:
    """What a comment line says is printed, as a pattern."""
    pattern = re.escape(comment).replace(re.escape("'...'"), "'[0-9a-f]+'").replace(re.escape(", ...}"), ", .*}")
    return re.compile(pattern)


def test_the_readme_setup_is_ten_lines_and_prints_the_spans_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    code = _setup()
    lines = [line for line in code.splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 10, lines
    shown = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# ")]
    assert shown
    # What the README's first example imported, which the page's later examples use as they are.
    namespace: dict[str, object] = {}
    exec(
        "from rxgraph import MemorySaver, RunnableConfig\n"
        "from rxgraph.agent import ReactAgent\n"
        "from rxgraph.testing import ScriptedChatModel, finish, text\n",
        namespace,
    )
    exec(compile(code, "README.md, Observability", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(shown), printed
    for line, comment in zip(printed, shown, strict=True):
        assert _shown(comment).fullmatch(line), (line, comment)
