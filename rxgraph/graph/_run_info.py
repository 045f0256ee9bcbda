"""``RunInfo``: what a node or a tool may know about the run it works for — and how it learns it was cancelled."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RunInfo"]


class RunInfo:
    """The run a node or tool works for. Declare a parameter annotated ``RunInfo`` to receive it::

        def search(state, run: RunInfo):            # a node
            return {"hits": index.query(state["q"], user=run.context["user_id"], stop=run.cancelled)}

        @tool
        def lookup(city: str, run: RunInfo) -> str:   # a tool: the parameter is not part of the JSON schema
            ...

    - ``thread_id``, ``run_id``: the run's thread (None without one) and its id (as on its checkpoints).
    - ``context``: ``RunnableConfig(context=...)``, read-only; never stored.
    - ``cancelled``: a ``threading.Event`` set when the run is cancelled or fails — blocking work on another thread
      checks it (or waits on it) to stop early; nothing it does afterwards is written.
    - ``loop``: the asyncio event loop the run awaits ``async def`` nodes and tools on.
    """

    __slots__ = ("_loop", "_loop_of", "cancelled", "context", "run_id", "thread_id")

    def __init__(
        self,
        *,
        thread_id: str | None,
        run_id: str,
        context: Mapping[str, Any],
        loop_of: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.context = context
        self.cancelled = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_of = loop_of

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The run's event loop: the loop it was subscribed from, or its ``AsyncIOScheduler``'s, or one rxgraph keeps
        on a background thread (started when first needed)."""
        if self._loop is None:
            self._loop = self._loop_of()
        return self._loop

    def __repr__(self) -> str:
        return f"RunInfo(thread_id={self.thread_id!r}, run_id={self.run_id!r}, cancelled={self.cancelled.is_set()})"
