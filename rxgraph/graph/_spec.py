"""``GraphSpec``: a compiled graph as a run needs it — the nodes, the ways out of them, the state's strategies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..checkpoint._base import CheckpointSaver
from ._config import TurnPolicy
from ._edges import Branch, Join, JoinProgress, Task
from ._node import NodeSpec
from ._state import StateSchema

__all__ = ["GraphSpec"]

_NO_PROGRESS: JoinProgress = MappingProxyType({})
_NO_NEXT: Mapping[str, tuple[Task, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """What ``StateGraph.compile`` checked and froze. Read-only; shared by the graph and every run of it."""

    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    branches: Mapping[str, tuple[Branch, ...]]
    checkpointer: CheckpointSaver | None
    policy: TurnPolicy
    messages_key: str | None
    joins: tuple[Join, ...] = ()
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    max_concurrency: int | None = None
    _joined: frozenset[str] = field(init=False, repr=False, default=frozenset())
    # The next superstep's tasks after a node whose only way out is an edge (in a graph without joins): the same
    # tasks ``advance((node,), ...)`` gives for any state, computed once. A plain dict, never changed once made: it is
    # read on every step, and a mappingproxy's ``get`` costs twice a dict's.
    static_next: Mapping[str, tuple[Task, ...]] = field(init=False, repr=False, default_factory=lambda: _NO_NEXT)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_joined", frozenset(s for join in self.joins for s in join.sources))
        if not self.joins:
            fixed = {
                name: ways[0].next_tasks({}, self.nodes)  # an edge reads no state
                for name, ways in self.branches.items()
                if len(ways) == 1 and ways[0].target is not None
            }
            object.__setattr__(self, "static_next", fixed)

    def advance(
        self, finished: Sequence[str], state: Mapping[str, Any], progress: JoinProgress = _NO_PROGRESS
    ) -> tuple[tuple[Task, ...], JoinProgress]:
        """The tasks of the superstep after ``finished`` (the nodes of the one that just ended, or ``START``) given
        the state it produced, and the joins' progress after it. No task: the run is over.

        Tasks come in order: each finished node's ways out in the order they were added, then the joins that fire.
        A node named by several ways out runs once; every ``Send`` is a task of its own.

        Raises:
            RouteError: a route returned something that is not one of its labels.
        """
        nodes = self.nodes
        view = MappingProxyType(state) if not isinstance(state, MappingProxyType) else state
        if len(finished) == 1 and not self._joined:
            ways = self.branches.get(finished[0], ())
            if len(ways) == 1 and ways[0].target is not None:  # the common case: one edge out of one node
                return ways[0].next_tasks(view, nodes), progress
        tasks: list[Task] = []
        seen: set[str] = set()
        for name in finished:
            for branch in self.branches.get(name, ()):
                for task in branch.next_tasks(view, nodes):
                    if type(task) is str:
                        if task in seen:
                            continue
                        seen.add(task)
                    tasks.append(task)
        if not self.joins:
            return tuple(tasks), progress
        waiting = dict(progress)
        done = set(finished)
        for index, join in enumerate(self.joins):
            arrived = done.intersection(join.sources)
            if not arrived:
                continue
            have = waiting.get(index, frozenset()) | arrived
            if len(have) == len(join.sources):
                waiting.pop(index, None)
                if join.target not in seen and join.target != "__end__":
                    seen.add(join.target)
                    tasks.append(join.target)
            else:
                waiting[index] = frozenset(have)
        return tuple(tasks), MappingProxyType(waiting)
