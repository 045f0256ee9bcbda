"""Worker process for tests/graph/test_subgraphs.py: a graph with a subgraph node on an SQLite file, killed inside
the subgraph.

Usage: ``python _subgraph_worker.py DB_PATH LOG_PATH``. Each node appends its name to ``LOG_PATH`` when it runs; the
inner node ``i2`` prints ``inside`` and blocks on stdin, so the test can SIGKILL the process right there. The test
imports :func:`build` to go on with the same graph on the same file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rxgraph import END, START, CheckpointSaver, CompiledGraph, KeyStrategy, RunnableConfig, StateGraph

CONFIG = RunnableConfig(thread_id="job")


def build(saver: CheckpointSaver, log: Path, *, block: bool) -> CompiledGraph:
    def step(name: str) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            with log.open("a") as out:
                out.write(name + "\n")
            if block and name == "i2":
                print("inside", flush=True)
                sys.stdin.readline()  # killed here
            return {"log": name}

        return action

    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("i1", step("i1")).add_node("i2", step("i2"))
    inner_graph = inner.add_edge(START, "i1").add_edge("i1", "i2").add_edge("i2", END).compile()
    outer = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", step("a")).add_node("sub", inner_graph)
    outer.add_node("b", step("b")).add_edge(START, "a").add_edge("a", "sub").add_edge("sub", "b").add_edge("b", END)
    return outer.compile(saver)


if __name__ == "__main__":
    from rxgraph import SqliteSaver

    with SqliteSaver(sys.argv[1]) as saver:
        build(saver, Path(sys.argv[2]), block=True).invoke({"log": "in"}, CONFIG)
