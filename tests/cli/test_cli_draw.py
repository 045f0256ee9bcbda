"""``rxgraph draw MODULE:ATTR``: a graph, a StateGraph, an agent or a function making one, printed as Mermaid."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import run_rxgraph

import rxgraph
from rxgraph.cli import main
from rxgraph.examples.chat import make

_TARGETS = """
from rxgraph import END, START, StateGraph
from rxgraph.agent import ReactAgent
from rxgraph.testing import ScriptedChatModel


def builder():
    return StateGraph().add_node("only", lambda state: None).add_edge(START, "only").add_edge("only", END)


graph = builder().compile()
agent = ReactAgent(ScriptedChatModel([]))
not_compiled = builder()
broken = StateGraph().add_node("lost", lambda state: None)
number = 42


def make_graph():
    return graph


def make_with(checkpointer):
    return ReactAgent(ScriptedChatModel([]), checkpointer=checkpointer)


def needs_two(a, b):
    return graph


def makes_a_number():
    return 42
"""

_ONLY = (
    "flowchart TD\n"
    "    __start__([START])\n"
    '    n0["only"]\n'
    "    __end__([END])\n"
    "    __start__ --> n0\n"
    "    n0 --> __end__\n"
)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module ``drawn_here`` in the current directory, which the command imports from there."""
    (tmp_path / "drawn_here.py").write_text(_TARGETS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    try:
        yield tmp_path
    finally:
        sys.modules.pop("drawn_here", None)


def test_rxgraph_draw_prints_the_demo_agents_graph(tmp_path: Path) -> None:
    result = run_rxgraph("draw", "rxgraph.examples.chat:make", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == make().graph.draw_mermaid() + "\n"
    assert '    n0["model"]' in result.stdout and '    n0 -.->|"end"| __end__' in result.stdout


@pytest.mark.parametrize("attribute", ["graph", "not_compiled", "make_graph", "builder"])
def test_rxgraph_draw_takes_a_graph_a_state_graph_or_a_function_of_none(
    here: Path, attribute: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["draw", f"drawn_here:{attribute}"]) == 0
    said = capsys.readouterr()
    assert said.out == _ONLY and said.err == ""


@pytest.mark.parametrize("attribute", ["agent", "make_with"])
def test_rxgraph_draw_takes_an_agent_or_what_serve_takes(
    here: Path, attribute: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["draw", f"drawn_here:{attribute}"]) == 0
    out = capsys.readouterr().out
    assert out == make().graph.draw_mermaid() + "\n"  # every ReactAgent has the same graph


def test_rxgraph_draw_says_what_it_cannot_draw_with_exit_status_2(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "expected a CompiledGraph, a StateGraph, a ReactAgent or a function that returns one"
    cases = {
        "drawn_here:number": f"drawn_here:number is a int: {expected}",
        "drawn_here:makes_a_number": f"drawn_here:makes_a_number() returned a int: {expected}",
        "drawn_here:needs_two": "drawn_here:needs_two needs arguments",
        "drawn_here:broken": "drawn_here:broken gives a StateGraph that does not compile: no edge from START",
        "drawn_here:nothing": "'drawn_here' has no attribute 'nothing'",
        "no_such_module:graph": "cannot import 'no_such_module'",
        "drawn_here": "expected MODULE:ATTR",
    }
    for target, message in cases.items():
        assert main(["draw", target]) == 2, target
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith("rxgraph draw: error: ") and message in said.err, (target, said)


def test_rxgraph_draw_prints_the_same_text_whatever_the_hash_seed(here: Path) -> None:
    # Interrupts are sets: their order must not leak into the text, which is the same in every process.
    (here / "seeded.py").write_text(
        "from rxgraph import END, START, StateGraph\n"
        "names = [f'node {i}' for i in range(8)]\n"
        "builder = StateGraph()\n"
        "for name in names:\n"
        "    builder.add_node(name, lambda state: None).add_edge(START, name).add_edge(name, END)\n"
        "graph = builder.compile(interrupt_before=names[::2], interrupt_after=names[1::3])\n",
        encoding="utf-8",
    )
    package = str(Path(rxgraph.__file__).parent.parent)
    runs = [
        subprocess.run(
            [sys.executable, "-m", "rxgraph", "draw", "seeded:graph"],
            capture_output=True,
            text=True,
            cwd=here,
            env={**os.environ, "PYTHONPATH": package, "PYTHONHASHSEED": seed},
            timeout=120,
            check=True,
        )
        for seed in ("1", "2", "3")
    ]
    texts = {run.stdout for run in runs}
    assert len(texts) == 1
    (text,) = texts
    assert "class n0,n1,n2,n4,n6,n7 interrupt" in text
