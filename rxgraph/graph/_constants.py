"""The two virtual nodes every graph has."""

from __future__ import annotations

from typing import Final

__all__ = ["END", "RESERVED_NAMES", "START"]

START: Final = "__start__"
"""Where a run enters the graph: ``add_edge(START, "first")``. Not a node; it cannot be added or run."""
END: Final = "__end__"
"""Where a run leaves the graph: ``add_edge("last", END)``, or a route returning ``END``."""
RESERVED_NAMES: Final = frozenset({START, END})
