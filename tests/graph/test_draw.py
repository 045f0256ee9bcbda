"""``CompiledGraph.draw_mermaid()``: the graph as a Mermaid flowchart, checked line by line (no Mermaid renderer here:
every line must be one of the statements the drawing writes, every id declared before use and safe)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from rxgraph import END, START, CompiledGraph, StateGraph
from rxgraph.agent import ReactAgent
from rxgraph.graph import Send
from rxgraph.testing import ScriptedChatModel


def _noop(state: Any) -> None:
    return None


_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_LABEL = r'[^"]*'  # a quoted label: no raw quote inside
_STATEMENTS = {
    "terminal": re.compile(rf"(?P<id>{_ID})\(\[(?P<label>START|END)\]\)"),
    "node": re.compile(rf'(?P<id>{_ID})\["(?P<label>{_LABEL})"\]'),
    "note": re.compile(rf'(?P<id>{_ID})\{{\{{"(?P<label>{_LABEL})"\}}\}}'),
    "point": re.compile(rf'(?P<id>{_ID})\(\("(?P<label>{_LABEL})"\)\)'),
    "edge": re.compile(rf'(?P<source>{_ID}) (?P<arrow>-->|-\.->)(?:\|"(?P<label>{_LABEL})"\|)? (?P<target>{_ID})'),
    "subgraph": re.compile(rf'subgraph (?P<id>{_ID}) \["(?P<label>{_LABEL})"\]'),
    "end": re.compile(r"end"),
    "comment": re.compile(r"%% .*"),
    "classDef": re.compile(rf"classDef (?P<name>{_ID}) \S.*"),
    "class": re.compile(rf"class (?P<ids>{_ID}(?:,{_ID})*) (?P<name>{_ID})"),
}
_MERMAID_WORDS = {"end", "graph", "flowchart", "subgraph", "style", "class", "classDef", "click", "linkStyle"}


@dataclass
class Chart:
    """A drawing read back: what each id is (shape and label), the edges in order, the classes, the comments."""

    shapes: dict[str, tuple[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    classes: dict[str, list[str]] = field(default_factory=dict)
    class_defs: set[str] = field(default_factory=set)
    comments: list[str] = field(default_factory=list)

    def id_of(self, label: str) -> str:
        """The id of the one node whose label's first line is ``label``."""
        found = [i for i, (shape, text) in self.shapes.items() if shape == "node" and text.split("<br>")[0] == label]
        assert len(found) == 1, (label, self.shapes)
        return found[0]

    def label_of(self, mermaid_id: str) -> str:
        return self.shapes[mermaid_id][1]


def read_chart(text: str) -> Chart:
    """Check ``text`` statement by statement and read it back."""
    lines = text.split("\n")
    assert lines[0] == "flowchart TD"
    chart = Chart()
    depth = 1  # subgraph blocks indent their statements by four more spaces
    for line in lines[1:]:
        statement = line.lstrip(" ")
        if statement == "end":
            depth -= 1
        assert line == " " * 4 * depth + statement and statement == statement.rstrip() and statement, repr(line)
        kind, match = next(
            ((kind, m) for kind, pattern in _STATEMENTS.items() if (m := pattern.fullmatch(statement))),
            (None, None),
        )
        assert match is not None, f"not a statement the drawing writes: {statement!r}"
        if kind == "subgraph":
            depth += 1
        if kind in ("terminal", "node", "note", "point", "subgraph"):
            assert match["id"] not in chart.shapes, f"{match['id']} declared twice"
            assert match["id"] not in _MERMAID_WORDS
            chart.shapes[match["id"]] = (kind, match["label"])
        elif kind == "edge":
            for end in (match["source"], match["target"]):
                assert end in chart.shapes, f"{end} used before it is declared: {statement!r}"
            chart.edges.append((match["source"], match["arrow"], match["label"], match["target"]))
        elif kind == "comment":
            chart.comments.append(statement)
        elif kind == "classDef":
            chart.class_defs.add(match["name"])
        elif kind == "class":
            assert match["name"] in chart.class_defs, f"class {match['name']} used before its classDef"
            ids = match["ids"].split(",")
            assert all(i in chart.shapes for i in ids)
            chart.classes[match["name"]] = ids
    assert depth == 1, "a subgraph block is not closed"
    return chart


def test_a_linear_graph_draws_as_exactly_this_text() -> None:
    graph = (
        StateGraph()
        .add_node("model", _noop)
        .add_node("count", _noop)
        .add_edge(START, "model")
        .add_edge("model", "count")
        .add_edge("count", END)
        .compile()
    )
    assert graph.draw_mermaid() == (
        "flowchart TD\n"
        "    __start__([START])\n"
        '    n0["model"]\n'
        '    n1["count"]\n'
        "    __end__([END])\n"
        "    __start__ --> n0\n"
        "    n0 --> n1\n"
        "    n1 --> __end__"
    )
    read_chart(graph.draw_mermaid())


def decide(state: Mapping[str, Any]) -> str:
    return "ok"


def send_each(state: Mapping[str, Any]) -> list[Send]:
    return [Send("publish", item) for item in state.get("items", ())]


def _workflow() -> CompiledGraph:
    return (
        StateGraph()
        .add_node("plan", _noop)
        .add_node("search", _noop)
        .add_node("write", _noop)
        .add_node("review", _noop)
        .add_node("publish", _noop)
        .add_edge(START, "plan")
        .add_edge("plan", "search")
        .add_edge("plan", "write")
        .add_edge(["search", "write"], "review")
        .add_conditional_edges("review", decide, {"again": "plan", "ok": "publish", "fine": "publish"})
        .add_conditional_edges("publish", send_each)
        .compile(interrupt_before=["review"], interrupt_after=["publish", "review"])
    )


def test_fan_out_join_routes_and_interrupts_are_drawn() -> None:
    chart = read_chart(_workflow().draw_mermaid())
    plan, search, write, review, publish = map(chart.id_of, ["plan", "search", "write", "review", "publish"])
    assert [plan, search, write, review, publish] == ["n0", "n1", "n2", "n3", "n4"]  # in the order added
    assert chart.shapes["__start__"] == ("terminal", "START") and chart.shapes["__end__"] == ("terminal", "END")
    assert ("__start__", "-->", None, plan) in chart.edges

    # Fan-out: two fixed edges out of plan, and a comment saying their targets run together.
    assert (plan, "-->", None, search) in chart.edges and (plan, "-->", None, write) in chart.edges
    fan_outs = [c for c in chart.comments if c.startswith("%% fan-out")]
    assert fan_outs == [
        "%% fan-out: the 2 ways out of plan are all taken; what they lead to runs in parallel, in one superstep"
    ]  # review has one route: not a fan-out

    # The join: both sources into one point, the point to the target, and no direct edge around it.
    (point,) = [i for i, (shape, _) in chart.shapes.items() if shape == "point"]
    assert {(s, t) for s, _, _, t in chart.edges if t == point} == {(search, point), (write, point)}
    assert [(s, t) for s, _, _, t in chart.edges if s == point] == [(point, review)]
    assert not any(t == review and s in (search, write) for s, _, _, t in chart.edges)
    assert chart.classes["join"] == [point]
    assert f"%% {point}: review runs once all of search, write have finished" in chart.comments

    # The route with a path map: dotted, labelled; two labels to one node make one edge.
    assert (review, "-.->", "again", plan) in chart.edges
    assert (review, "-.->", "ok, fine", publish) in chart.edges
    assert sum(1 for s, _, _, t in chart.edges if (s, t) == (review, publish)) == 1

    # The route without one: a dotted edge to a note naming it, and no guessed edges.
    (note,) = [i for i, (shape, _) in chart.shapes.items() if shape == "note"]
    assert chart.label_of(note) == "send_each: any node or END"
    assert [(s, a, t) for s, a, _, t in chart.edges if s == publish] == [(publish, "-.->", note)]
    assert chart.classes["route"] == [note]

    # Interrupts: on the label's second line, and the class.
    assert chart.label_of(review) == "review<br>⏸ before and after"
    assert chart.label_of(publish) == "publish<br>⏸ after"
    assert chart.label_of(plan) == "plan"
    assert chart.classes["interrupt"] == [review, publish]


def test_the_same_graph_always_draws_the_same_text() -> None:
    assert _workflow().draw_mermaid() == _workflow().draw_mermaid()
    reordered = (
        StateGraph()
        .add_node("b", _noop)
        .add_node("a", _noop)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    chart = read_chart(reordered.draw_mermaid())
    assert chart.id_of("b") == "n0" and chart.id_of("a") == "n1"  # the order nodes were added, not their names
    # Edges by source: START, then the nodes in that same order.
    assert chart.edges == [
        ("__start__", "-->", None, "n1"),
        ("n0", "-->", None, "__end__"),
        ("n1", "-->", None, "n0"),
    ]


def test_nasty_names_get_safe_ids_and_escaped_labels() -> None:
    names = ["end", 'a "b"', "x y", "ü", "graph", "<b>#1|2</b>", "tab\there", "two\nlines"]
    builder = StateGraph()
    for name in names:
        builder.add_node(name, _noop)
    builder.add_edge(START, names[0])
    for source, target in pairwise(names):
        builder.add_edge(source, target)
    builder.add_conditional_edges(names[-1], decide, {'say "ok"': END, "end": "end"})
    builder.add_edge(names[-1], END)  # two ways out: a comment names the node, on one line
    text = builder.compile().draw_mermaid()
    chart = read_chart(text)
    assert [chart.shapes[f"n{i}"] for i in range(len(names))] == [
        ("node", "end"),
        ("node", "a #quot;b#quot;"),
        ("node", "x y"),
        ("node", "ü"),
        ("node", "graph"),
        ("node", "#lt;b#gt;#35;1#124;2#lt;/b#gt;"),
        ("node", "tab#9;here"),
        ("node", "two#10;lines"),
    ]
    assert ("n7", "-.->", "say #quot;ok#quot;", "__end__") in chart.edges
    assert ("n7", "-.->", None, "n0") in chart.edges  # the label is the node's name: not repeated
    assert chart.comments[0].startswith("%% fan-out: the 2 ways out of two#10;lines are all taken")
    assert text == builder.compile().draw_mermaid()


def test_max_concurrency_is_noted() -> None:
    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", END).compile(max_concurrency=2)
    assert read_chart(graph.draw_mermaid()).comments == ["%% at most 2 tasks of a superstep run at the same time"]


def test_a_route_with_a_list_of_names_draws_unlabelled_dotted_edges() -> None:
    graph = (
        StateGraph()
        .add_node("a", _noop)
        .add_node("b", _noop)
        .add_edge(START, "a")
        .add_conditional_edges("a", decide, ["b", END])
        .add_edge("b", END)
        .compile()
    )
    chart = read_chart(graph.draw_mermaid())
    assert [e for e in chart.edges if e[0] == "n0"] == [("n0", "-.->", None, "n1"), ("n0", "-.->", None, "__end__")]


@pytest.mark.skipif(
    "retry" not in inspect.signature(StateGraph.add_node).parameters, reason="nodes have no retry policy here"
)
def test_node_policies_are_on_the_label() -> None:
    from rxgraph.graph import RetryPolicy

    graph = (
        StateGraph()
        .add_node("fetch", _noop, retry=RetryPolicy(max_attempts=3), timeout=2.5)
        .add_node("once", _noop, retry=RetryPolicy(max_attempts=1))
        .add_edge(START, "fetch")
        .add_edge("fetch", "once")
        .add_edge("once", END)
        .compile(interrupt_before=["fetch"])
    )
    chart = read_chart(graph.draw_mermaid())
    assert chart.label_of("n0") == "fetch<br>⏸ before · up to 3 attempts · timeout 2.5s"
    assert chart.label_of("n1") == "once"  # one attempt: nothing to say


def test_the_react_agent_graph_draws() -> None:
    agent = ReactAgent(ScriptedChatModel([]), tools=[])
    chart = read_chart(agent.graph.draw_mermaid())
    model, tools = chart.id_of("model"), chart.id_of("tools")
    assert chart.edges == [
        ("__start__", "-->", None, model),
        (model, "-.->", None, tools),
        (model, "-.->", "end", "__end__"),
        (tools, "-->", None, model),
    ]


def test_the_workflows_guide_shows_what_its_drawing_example_prints(capsys: pytest.CaptureFixture[str]) -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "workflows.md").read_text(encoding="utf-8")
    section = guide[guide.index("## Drawing a graph") :]
    example = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"```mermaid\n(.*?)```", section, re.S)
    assert example is not None and shown is not None
    exec(compile(example[1], "docs/guides/workflows.md, Drawing a graph", "exec"), {"__name__": "guide_drawing"})
    assert capsys.readouterr().out == shown[1]
    read_chart(shown[1].rstrip("\n"))


def test_a_subgraph_is_a_block_holding_its_own_drawing() -> None:
    inner = (
        StateGraph()
        .add_node("end", _noop)  # a Mermaid keyword, inside a block that ends with `end`
        .add_edge(START, "end")
        .add_edge("end", END)
        .compile(interrupt_before=["end"])
    )
    graph = StateGraph().add_node("a", _noop).add_node("sub", inner).add_edge(START, "a").add_edge("a", "sub")
    chart = read_chart(graph.add_edge("sub", END).compile().draw_mermaid())
    assert chart.shapes["n1"] == ("subgraph", "sub")
    assert chart.shapes["n1_n0"] == ("node", "end<br>⏸ before") and chart.classes["interrupt"] == ["n1_n0"]
    assert ("n0", "-->", None, "n1") in chart.edges and ("n1", "-->", None, "__end__") in chart.edges
    assert ("n1___start__", "-->", None, "n1_n0") in chart.edges
