"""``RunOutputs``: a run's async iterator, pumped by a task of its own, so that whoever stops reading can close the
run and wait for its teardown (and rewind) — even from a task that is being cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio

from ..graph._outputs import RunOutput

__all__ = ["Item", "RunOutputs"]

Item = RunOutput | Exception | None
"""One thing a run says: an output, the error it failed with, or ``None``: it completed."""


class RunOutputs:
    """Reads ``outputs`` (``CompiledGraph.astream``'s iterator) in a task of its own and queues what it says.

    Why a task: closing an ``astream`` iterator waits, shielded, for the run's dispose, but a task inside an anyio
    cancel scope (sse-starlette cancels its response's task group when the client disconnects) is cancelled again
    at every await, which would cut that wait short. The pump task is in no such scope: ``close`` cancels it once
    and waits for it under an anyio shield, so it returns only once the run has been torn down and rewound.
    """

    def __init__(self, outputs: AsyncIterator[RunOutput]) -> None:
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._task = asyncio.create_task(self._pump(outputs))

    async def _pump(self, outputs: AsyncIterator[RunOutput]) -> None:
        try:
            async for output in outputs:
                self._queue.put_nowait(output)
        except Exception as error:
            self._queue.put_nowait(error)
        else:
            self._queue.put_nowait(None)

    async def next(self) -> Item:
        """The run's next output, the error it failed with, or ``None`` when it completed; nothing comes after an
        error or the end."""
        return await self._queue.get()

    def waiting(self) -> bool:
        """Whether something the run said waits to be read."""
        return not self._queue.empty()

    async def close(self) -> None:
        """Stop the run if it is still going (it is cancelled, and rewound), and wait until it has been torn down."""
        with anyio.CancelScope(shield=True):
            self._task.cancel()
            await asyncio.wait([self._task])
