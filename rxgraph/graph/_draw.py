"""Drawing a compiled graph as a Mermaid flowchart: ``CompiledGraph.draw_mermaid()``.

How the drawing reads:

- ``START`` and ``END`` are rounded (``__start__([START])``, ``__end__([END])``); each node is a box labelled with
  its name. Node ids are ``n0``, ``n1``... in the order the nodes were added, so any name — spaces, quotes, unicode,
  a Mermaid keyword such as ``end`` — is safe: it only appears, escaped, in its label.
- A fixed edge is ``-->``. A route's edges are dotted, ``-.->``, labelled with the path map's labels (no label when
  the only label is the target's own name, as with a list of names).
- A route without a path map: only the function knows where it leads (a node, ``END``, several nodes, ``Send``
  items), so it is drawn as a dotted edge to a hexagon note naming the route, ``route0{{"decide: any node or
  END"}}``, rather than as guessed edges.
- Where a node's ``Command(goto=...)`` may go (its ``destinations``): dotted edges labelled ``goto``.
- Several ways out of one node (fan-out) are several edges; a ``%%`` comment above them says that what they lead to
  runs in parallel, in one superstep.
- A join (``add_edge([a, b], target)``): each source goes into a small circle ``join0(("all"))``, which goes to the
  target: the target waits for all of them.
- A subgraph node is a ``subgraph`` block holding the inner graph's own drawing (its ids prefixed with the node's
  id); the parent's edges go into and out of the block.
- A node in ``interrupt_before`` / ``interrupt_after`` says so on a second line of its label (``⏸ before``,
  ``⏸ after``) and has the class ``interrupt``; a node with a retry policy or a timeout says it there too.

The same graph always gives the same text: nodes in the order they were added, each node's ways out in the order
they were added, joins in order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._constants import END, START
from ._edges import Branch
from ._node import NodeSpec
from ._spec import GraphSpec

__all__ = ["draw_mermaid", "graph_json"]

_CLASS_STYLES = {
    "interrupt": "stroke:#d97706,stroke-width:3px",
    "route": "stroke-dasharray:4 3",
    "join": "fill:#e5e7eb,stroke:#6b7280",
}
"""The ``classDef`` of each class a drawing may use, in the order they are written."""

_ESCAPES = {
    '"': "#quot;",
    "#": "#35;",  # Mermaid reads '#...;' as an entity: a literal '#' is one too
    "<": "#lt;",  # labels are HTML: no tag may come from a name
    ">": "#gt;",
    "&": "#amp;",
    "`": "#96;",  # a backtick makes a markdown label
    "|": "#124;",  # ends an edge's label
}


def draw_mermaid(spec: GraphSpec) -> str:
    """The graph as a Mermaid ``flowchart TD`` (see the module's docstring for how it reads).

    Args:
        spec: the compiled graph's spec.

    Returns:
        The Mermaid text, one statement a line, without a final newline.
    """
    drawn = _draw_spec(spec, prefix="")
    lines = ["flowchart TD"]
    if spec.max_concurrency is not None:
        lines.append(f"    %% at most {spec.max_concurrency} tasks of a superstep run at the same time")
    lines.extend(f"    {line}" for line in drawn.lines)
    for name, style in _CLASS_STYLES.items():
        if drawn.classes.get(name):
            lines.append(f"    classDef {name} {style}")
    for name in _CLASS_STYLES:
        if drawn.classes.get(name):
            lines.append(f"    class {','.join(drawn.classes[name])} {name}")
    return "\n".join(lines)


@dataclass
class _Drawn:
    """The statements that draw one graph, and the ids each class applies to (the caller writes the classes)."""

    lines: list[str] = field(default_factory=list)
    classes: dict[str, list[str]] = field(default_factory=dict)

    def mark(self, class_name: str, mermaid_id: str) -> None:
        self.classes.setdefault(class_name, []).append(mermaid_id)


def _draw_spec(spec: GraphSpec, *, prefix: str) -> _Drawn:
    """The statements drawing ``spec``, every id starting with ``prefix``.

    This draws one graph's body, so that a graph used as a node is drawn inside its parent: its statements (ids
    prefixed with the node's id, so they cannot clash with the parent's) wrapped in a Mermaid
    ``subgraph <id> ["<name>"]`` ... ``end`` block, its classes merged into the parent's.
    """
    ids: dict[str, str] = {START: f"{prefix}__start__", END: f"{prefix}__end__"}
    ids.update({name: f"{prefix}n{index}" for index, name in enumerate(spec.nodes)})
    drawn = _Drawn()
    lines = drawn.lines
    lines.append(f"{ids[START]}([START])")
    for name, node in spec.nodes.items():
        notes = _notes(name, node, spec)
        label = _text(name) + ("<br>" + " · ".join(notes) if notes else "")
        inner = getattr(node.action, "spec", None) if node.subgraph else None
        if isinstance(inner, GraphSpec):
            # A subgraph: its own drawing in a block that edges of this graph go into and out of.
            body = _draw_spec(inner, prefix=f"{ids[name]}_")
            lines.append(f'subgraph {ids[name]} ["{label}"]')
            lines.extend(f"    {line}" for line in body.lines)
            lines.append("end")
            for class_name, members in body.classes.items():
                for member in members:
                    drawn.mark(class_name, member)
        else:
            lines.append(f'{ids[name]}["{label}"]')
        if name in spec.interrupt_before or name in spec.interrupt_after:
            drawn.mark("interrupt", ids[name])
    lines.append(f"{ids[END]}([END])")

    routes = 0
    for source in (START, *spec.nodes):
        ways = spec.branches.get(source, ())
        if len(ways) > 1:
            lines.append(
                f"%% fan-out: the {len(ways)} ways out of {_named(source)} are all taken; what they lead to runs "
                "in parallel, in one superstep"
            )
        for branch in ways:
            if branch.target is not None:
                lines.append(f"{ids[source]} --> {ids[branch.target]}")
            elif branch.path_map is not None:
                for target, labels in _labels_by_target(branch.path_map).items():
                    if labels == [target]:
                        lines.append(f"{ids[source]} -.-> {ids[target]}")
                    else:
                        text = ", ".join(_text(label) for label in labels)
                        lines.append(f'{ids[source]} -.->|"{text}"| {ids[target]}')
            else:
                note = f"{prefix}route{routes}"
                routes += 1
                lines.append(f'{note}{{{{"{_text(_route_name(branch))}: any node or END"}}}}')
                lines.append(f"{ids[source]} -.-> {note}")
                drawn.mark("route", note)
        commanding = spec.nodes.get(source)
        for target in commanding.destinations if commanding is not None else ():
            lines.append(f'{ids[source]} -.->|"goto"| {ids[target]}')

    for index, join in enumerate(spec.joins):
        point = f"{prefix}join{index}"
        waits_for = ", ".join(_named(source) for source in join.sources)
        lines.append(f"%% {point}: {_named(join.target)} runs once all of {waits_for} have finished")
        lines.append(f'{point}(("all"))')
        lines.extend(f"{ids[source]} --> {point}" for source in join.sources)
        lines.append(f"{point} --> {ids[join.target]}")
        drawn.mark("join", point)
    return drawn


def _notes(name: str, node: NodeSpec, spec: GraphSpec) -> list[str]:
    """What the second line of a node's label says: its interrupts and policies."""
    notes: list[str] = []
    before, after = name in spec.interrupt_before, name in spec.interrupt_after
    if before or after:
        notes.append("⏸ before and after" if before and after else "⏸ before" if before else "⏸ after")
    # Policies are read softly: a NodeSpec without them draws without them.
    policies: Any = getattr(node, "retry", None) or ()
    attempts = max((getattr(policy, "max_attempts", 1) for policy in policies), default=1)
    if isinstance(attempts, int) and attempts > 1:
        notes.append(f"up to {attempts} attempts")
    timeout = getattr(node, "timeout", None)
    if isinstance(timeout, int | float):
        notes.append(f"timeout {timeout:g}s")
    return notes


def _labels_by_target(path_map: Mapping[Hashable, str]) -> dict[str, list[str]]:
    """The path map's labels grouped by the node they lead to, both in the map's order."""
    grouped: dict[str, list[str]] = {}
    for label, target in path_map.items():
        grouped.setdefault(target, []).append(str(label))
    return grouped


def _route_name(branch: Branch) -> str:
    name = getattr(branch.route, "__name__", None)
    return name if isinstance(name, str) else type(branch.route).__name__


def _named(name: str) -> str:
    """A node (or START, END) as a comment names it: escaped like a label, so that it stays on its line."""
    return "START" if name == START else "END" if name == END else _text(name)


def _text(raw: str) -> str:
    """``raw`` made safe inside a quoted Mermaid label: quotes, markup and control characters as entity codes."""
    return "".join(
        _ESCAPES.get(character) or (character if character.isprintable() else f"#{ord(character)};")
        for character in raw
    )


def graph_json(spec: GraphSpec) -> dict[str, Any]:
    """The graph as LangGraph's server describes one (``GET /assistants/{id}/graph``): ``nodes`` (``START``, each
    node in the order it was added, ``END``) and ``edges`` (``source``, ``target``, and ``conditional`` for a route's
    or a ``Command``'s ways). A route without a path map leads to every node and ``END``: only its function knows
    where it goes."""
    names = [START, *spec.nodes, END]
    nodes = [{"id": name, "type": "runnable", "data": {"id": ["rxgraph", name], "name": name}} for name in names]
    edges: list[dict[str, Any]] = []
    seen: set[tuple[str, str, bool]] = set()

    def edge(source: str, target: str, conditional: bool) -> None:
        if (source, target, conditional) not in seen:
            seen.add((source, target, conditional))
            edges.append({"source": source, "target": target, "conditional": conditional})

    for source, branches in spec.branches.items():
        for branch in branches:
            if branch.target is not None:
                edge(source, branch.target, False)
            elif branch.path_map is not None:
                for target in branch.path_map.values():
                    edge(source, target, True)
            else:
                for target in names[1:]:
                    edge(source, target, True)
    for node in spec.nodes.values():
        for target in node.destinations:
            edge(node.name, target, True)
    for join in spec.joins:
        for source in join.sources:
            edge(source, join.target, False)
    return {"nodes": nodes, "edges": edges}
