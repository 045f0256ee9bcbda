"""Edges: where a run goes after a node (a fixed target, or a route function choosing one)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..errors import RouteError
from ._constants import END

__all__ = ["Branch", "Route"]

Route: TypeAlias = Callable[[Mapping[str, Any]], Hashable]
"""``route(state) -> label``: a key of the edge's path map, or, without a map, a node name or ``END``."""


@dataclass(frozen=True, slots=True)
class Branch:
    """The way out of one node (or of ``START``)."""

    source: str
    target: str | None = None
    route: Route | None = None
    path_map: Mapping[Hashable, str] | None = None

    def targets(self) -> tuple[str, ...] | None:
        """Every node this branch can lead to, or None when only the route function knows (no path map)."""
        if self.target is not None:
            return (self.target,)
        if self.path_map is not None:
            return tuple(dict.fromkeys(self.path_map.values()))
        return None

    def next_node(self, state: Mapping[str, Any], nodes: Collection[str]) -> str:
        """The node to run after ``source`` given the state it produced (``END`` to stop)."""
        if self.target is not None:
            return self.target
        assert self.route is not None
        label = self.route(state)
        if self.path_map is not None:
            try:
                return self.path_map[label]
            except (KeyError, TypeError):
                raise RouteError(
                    f"the route of {self.source!r} returned {label!r}, which is not a label of its path map "
                    f"{sorted(map(str, self.path_map))}",
                    node=self.source,
                    label=label,
                ) from None
        if isinstance(label, str) and (label in nodes or label == END):
            return label
        raise RouteError(
            f"the route of {self.source!r} returned {label!r}, which is neither a node of the graph nor END; "
            f"nodes: {sorted(nodes)}",
            node=self.source,
            label=label,
        )
