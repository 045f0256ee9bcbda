"""The graph the ``relay`` benchmark serves: ``rxgraph serve benchmarks._relay_graph:make --db postgresql://...``.

One node, ``emit``, writes custom events (``RunInfo.write``; the ``custom`` stream mode): first ``{"ready": pid}``,
then, once the file ``context["gate"]`` exists (the benchmark creates it when its followers have the ``ready`` event,
so no event is written before they listen), ``context["events"]`` events ``{"i": i, "t": time.time(), "text": ...}``
— ``t`` taken as the event is written, ``text`` ``context["size"]`` characters long — one every
``context["interval"]`` seconds (0: as fast as the node can write them).
"""

from __future__ import annotations

import os
import time
from typing import Any

from rxgraph import END, START, KeyStrategy, RunInfo, StateGraph

GATE_TIMEOUT = 60.0
"""Seconds the node waits for its gate before it fails the run."""


def emit(state: Any, run: RunInfo) -> dict[str, Any]:
    events = int(run.context["events"])
    interval = float(run.context.get("interval", 0.0))
    text = "x" * int(run.context.get("size", 0))
    gate = str(run.context["gate"])
    run.write({"ready": os.getpid()})
    deadline = time.monotonic() + GATE_TIMEOUT
    while not os.path.exists(gate):
        if run.cancelled.is_set():
            return {"sent": 0}
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {gate} was not opened within {GATE_TIMEOUT:g} s")
        time.sleep(0.001)
    started = time.perf_counter()
    for index in range(events):
        if interval:
            delay = started + index * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        run.write({"i": index, "t": time.time(), "text": text})
    return {"sent": events}


def make(checkpointer: Any) -> Any:
    return (
        StateGraph({"sent": KeyStrategy.REPLACE})
        .add_node("emit", emit)
        .add_edge(START, "emit")
        .add_edge("emit", END)
        .compile(checkpointer=checkpointer)
    )
