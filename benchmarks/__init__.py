"""Side-by-side benchmarks of rxgraph and LangGraph.

Run them all with ``python -m benchmarks`` (``--quick`` for a short run, ``--only NAME`` for one of them). Each
benchmark is a module with a docstring saying what it measures and how, and a ``run(sizes, langgraph=..., workdir=...)``
that returns its figures. Its rxgraph and LangGraph halves are separate functions; LangGraph is imported only inside
the LangGraph halves, so everything here runs without it (install it with the ``bench`` extra).
"""

from __future__ import annotations

from types import ModuleType

from . import agent, fanout, history, instructions, postgres, relay, safe_head, serve, step, streaming

__all__ = ["BENCHMARKS"]

BENCHMARKS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (step, instructions, fanout, history, streaming, agent, safe_head, serve, postgres, relay)
}
"""Every benchmark by name, in the order a full run takes them."""
