"""``GraphSpec``: a compiled graph as a run needs it — the nodes, the ways out of them, the state's strategies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..checkpoint._base import CheckpointSaver
from ._config import TurnPolicy
from ._constants import END
from ._edges import Branch
from ._node import NodeSpec
from ._state import StateSchema

__all__ = ["GraphSpec"]


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """What ``StateGraph.compile`` checked and froze. Read-only; shared by the graph and every run of it."""

    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    branches: Mapping[str, Branch]
    checkpointer: CheckpointSaver | None
    policy: TurnPolicy
    messages_key: str | None

    def route(self, source: str, state: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
        """The node that runs after ``source`` (a node or ``START``) given the state it produced, and the
        checkpoint's ``next`` for it: ``(END, ())`` when the run is over."""
        following = self.branches[source].next_node(MappingProxyType(state), self.nodes)
        return following, (following,) if following != END else ()
