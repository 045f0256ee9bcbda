"""Small building blocks shared by the tests (real savers and graphs; nothing here fakes the thing under test)."""

from __future__ import annotations

import asyncio
import builtins
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rxgraph
from rxgraph import Checkpoint, CheckpointSaver
from rxgraph.testing import DelegatingSaver
from rxgraph.testing._saver_contract import ScriptedChatGraph

__all__ = [
    "DelegatingSaver",
    "ReadCountingSaver",
    "RewindSignal",
    "ScriptedChat",
    "StepPath",
    "final_reply",
    "nodes_written",
    "run_rxgraph",
    "tool_call_reply",
    "write_half_and_fine",
]

# The package under test, importable from any working directory (installed or not).
_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(Path(rxgraph.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
}


def run_rxgraph(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The ``rxgraph`` command run in a subprocess, as a user runs it; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "rxgraph", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_ENV,
        timeout=120,
        check=False,
    )


@dataclass
class StepPath:
    """Which way a test's runs step (see the ``step_path`` fixture), and how many of their steps called their node
    directly (``called``) and landed directly (``landed``: the node returned a plain update)."""

    direct: bool
    called: int = 0
    landed: int = 0

    def check(self, *, lands: bool = True) -> None:
        """Fail unless the runs took the path meant: direct calls (and, with ``lands``, direct landings) on the
        direct path, none on the general one."""
        if not self.direct:
            assert self.called == self.landed == 0, f"{self} with the direct step turned off"
            return
        assert self.called > 0, "no step called its node directly"
        assert self.landed > 0 or not lands, "no step landed directly"


class ReadCountingSaver(DelegatingSaver):
    """Counts each read call made on it, over any saver (``get``, ``list``, ``latest_safe``; a
    ``latest_safe`` counts as one read, however the inner saver answers it)."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.reads = 0
        self._count_lock = threading.Lock()

    def _count(self) -> None:
        with self._count_lock:
            self.reads += 1

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        self._count()
        return super().get(thread_id, checkpoint_id)

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        self._count()
        return super().list(thread_id, limit=limit, before_seq=before_seq)

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        self._count()
        return super().latest_safe(thread_id, before_seq=before_seq)


def nodes_written(saver: CheckpointSaver, thread_id: str) -> list[Any]:
    """The node of every checkpoint of the thread, oldest first."""
    return [c.node for c in reversed(saver.list(thread_id))]


ScriptedChat = ScriptedChatGraph
"""A two-node chat graph whose model answers from a script (rxgraph.testing's, shared with the saver contract)."""


def tool_call_reply(call_id: str = "c1", name: str = "lookup") -> Any:
    from rxgraph.messages import AssistantMessage, ToolCall

    return AssistantMessage(tool_calls=[ToolCall(id=call_id, name=name, arguments="{}")])


def final_reply(text: str = "done") -> Any:
    from rxgraph.messages import AssistantMessage

    return AssistantMessage(content=text)


def write_half_and_fine(saver: CheckpointSaver) -> None:
    """Two threads through a one-node graph: ``half`` ends with a tool call (id ``c9``) nobody answered, ``fine``
    with a user message."""
    from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
    from rxgraph.messages import AssistantMessage, ToolCall, UserMessage

    app = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("n", lambda s: None)
        .add_edge(START, "n")
        .add_edge("n", END)
        .compile(checkpointer=saver)
    )
    dangling = AssistantMessage(tool_calls=[ToolCall(id="c9", name="f", arguments="{}")])
    app.invoke({"messages": [UserMessage(content="q"), dangling]}, RunnableConfig(thread_id="half"))
    app.invoke({"messages": [UserMessage(content="q")]}, RunnableConfig(thread_id="fine"))


class RewindSignal(DelegatingSaver):
    """A real saver that tells an asyncio loop when a rewind was written, so a test can wait for it."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rewound: asyncio.Event | None = None

    def watch(self) -> asyncio.Event:
        """An event of the running loop, set once a rewind is written from now on."""
        self._loop, self._rewound = asyncio.get_running_loop(), asyncio.Event()
        return self._rewound

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        stored = self.inner.put(checkpoint, expected_head=expected_head)
        if stored.source == "rewind" and self._loop is not None and self._rewound is not None:
            self._loop.call_soon_threadsafe(self._rewound.set)
        return stored
