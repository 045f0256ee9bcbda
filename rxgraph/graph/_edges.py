"""Edges: where a run goes after a node — fixed targets, route functions choosing some, joins waiting for several
nodes, and ``Send`` tasks running one node over a payload of its own."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..errors import InvalidArgumentError, RouteError
from ._constants import END

__all__ = ["Branch", "Join", "JoinProgress", "Route", "Send", "Task", "task_node"]


@dataclass(frozen=True, slots=True)
class Send:
    """A task for the next superstep: run ``node`` with ``arg`` in place of the state (map-reduce).

    A route returns ``Send`` items (alone, in a list, or mixed with node names) to run one node over many inputs:
    every ``Send`` is a task of its own in the next superstep, in the order returned, even for the same node. The
    node receives ``arg`` as its state argument; its update is merged into the graph's state like any node's.
    ``arg`` is stored with the checkpoint while the task is pending, so it must be a value the saver can store.
    """

    node: str
    arg: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.node, str) or not self.node:
            raise InvalidArgumentError(f"Send needs a node name, got {self.node!r}", argument="node")


Task: TypeAlias = str | Send
"""One task of a superstep: a node run on the graph's state, or a ``Send``."""


def task_node(task: Task) -> str:
    """The node a task runs."""
    return task if type(task) is str else task.node  # type: ignore[union-attr]


Route: TypeAlias = Callable[[Mapping[str, Any]], Hashable | Sequence[Hashable | Send] | Send]
"""``route(state) -> label``: a key of the edge's path map, or, without a map, a node name or ``END`` — or several
of those (a list, run in parallel), or ``Send`` items."""


JoinProgress: TypeAlias = Mapping[int, frozenset[str]]
"""For each join (by its index in ``GraphSpec.joins``) that is waiting, the sources that have finished so far."""


@dataclass(frozen=True, slots=True)
class Join:
    """``add_edge([a, b], target)``: ``target`` runs once every one of ``sources`` has finished (in this superstep or
    in earlier ones since the join last fired), in the superstep after the last of them."""

    sources: tuple[str, ...]
    target: str


@dataclass(frozen=True, slots=True)
class Branch:
    """One way out of a node (or of ``START``): a fixed target, or a route function with its path map."""

    source: str
    target: str | None = None
    route: Route | None = None
    path_map: Mapping[Hashable, str] | None = None
    reads: Callable[[Mapping[str, Any]], Any] | None = None  # what the route receives of the state, if not all of it

    def targets(self) -> tuple[str, ...] | None:
        """Every node this branch can lead to, or None when only the route function knows (no path map)."""
        if self.target is not None:
            return (self.target,)
        if self.path_map is not None:
            return tuple(dict.fromkeys(self.path_map.values()))
        return None

    def next_tasks(self, state: Mapping[str, Any], nodes: Collection[str]) -> tuple[Task, ...]:
        """The tasks this branch adds to the next superstep given the state (``END`` adds none).

        Raises:
            RouteError: the route returned a label that is not one (see ``add_conditional_edges``).
        """
        if self.target is not None:
            return (self.target,) if self.target != END else ()
        assert self.route is not None
        label = self.route(self.reads(state) if self.reads is not None else state)
        labels = label if isinstance(label, list | tuple) else (label,)
        tasks: list[Task] = []
        for one in labels:
            if isinstance(one, Send):
                if one.node not in nodes:
                    raise RouteError(
                        f"the route of {self.source!r} sent to {one.node!r}, which is not a node of the graph; "
                        f"nodes: {sorted(nodes)}",
                        node=self.source,
                        label=one,
                    )
                tasks.append(one)
                continue
            target = self._target_of(one, nodes)
            if target != END:
                tasks.append(target)
        return tuple(tasks)

    def _target_of(self, label: Any, nodes: Collection[str]) -> str:
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
