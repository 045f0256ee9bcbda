"""``RunInfo``: what a node or a tool may know about the run it works for, how it learns it was cancelled, and how it
writes custom events to the run's stream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["RunInfo", "for_call"]

_MAKING = threading.Lock()  # makes a run's cancelled event once


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
      checks it (or waits on it) to stop early; nothing it does afterwards is written. One per run, shared by its
      node calls (``set_cancelled()`` sets it; it does not stop the run).
    - ``loop``: the asyncio event loop the run awaits ``async def`` nodes and tools on.
    - ``write(value)``: a custom event for the run's subscriber (a ``CustomOutput``; ``custom`` stream mode).
    """

    __slots__ = ("_cancelled", "_loop", "_loop_of", "_run", "_sink", "_was_cancelled", "context", "run_id", "thread_id")

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
        # The event is made when first asked for (most runs never are): an Event costs more to make than the rest
        # of a run's RunInfo. ``_run`` is the RunInfo that holds it: this one, or the run's for a node call's.
        self._run = self
        self._cancelled: threading.Event | None = None
        self._was_cancelled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_of = loop_of
        self._sink: Callable[[Any], None] | None = None  # where write() goes: set for one node call (for_call)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the run is cancelled or fails (shared by every node call of the run)."""
        run = self._run
        event = run._cancelled
        if event is None:
            with _MAKING:
                event = run._cancelled
                if event is None:
                    event = run._cancelled = threading.Event()
                    if run._was_cancelled:
                        event.set()
        return event

    def set_cancelled(self) -> None:
        """Set ``cancelled`` (the run's, for a node call's ``RunInfo``): what the run does when it is cancelled or
        fails. It tells the run's work to stop; it does not stop the run."""
        run = self._run
        with _MAKING:
            run._was_cancelled = True
            event = run._cancelled
        if event is not None:
            event.set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The run's event loop: the loop it was subscribed from, or its ``AsyncIOScheduler``'s, or one rxgraph keeps
        on a background thread (started when first needed)."""
        if self._loop is None:
            self._loop = self._loop_of()
        return self._loop

    def write(self, value: Any) -> None:
        """Write ``value`` to the run's stream: the subscriber gets ``CustomOutput(node, state, value)`` at once, in
        order with the node's chunks (``custom`` stream mode gives the bare ``value``). From any thread, while the
        node's call runs: until it returned its update, or its stream (or coroutine) ended. A write is never part of
        the node's update and never checkpointed; once the run was cancelled (or failed), a write is dropped. (So
        that they take turns, the chunks of a node that declares ``RunInfo`` are handed over under a lock.)

        Args:
            value: anything; it is handed to the subscriber as it is (not copied, not frozen).

        Raises:
            ConfigurationError: the node's call has ended (the run goes on without it), or this ``RunInfo`` is not a
                node call's (a tool run outside any graph).
        """
        sink = self._sink
        if sink is None:
            raise ConfigurationError(
                "RunInfo.write: this RunInfo is not one of a node's call (a tool run outside a graph?), so there is no "
                "stream to write to"
            )
        sink(value)

    def __repr__(self) -> str:
        return f"RunInfo(thread_id={self.thread_id!r}, run_id={self.run_id!r}, cancelled={self.cancelled.is_set()})"


def for_call(info: RunInfo, sink: Callable[[Any], None]) -> RunInfo:
    """``info`` as one node call receives it: the same run (its ``cancelled`` event and loop shared), whose ``write``
    goes to ``sink``."""
    call = RunInfo(thread_id=info.thread_id, run_id=info.run_id, context=info.context, loop_of=lambda: info.loop)
    call._run = info._run
    call._sink = sink
    return call
