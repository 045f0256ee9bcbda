"""``to_async_iterator`` (and ``astream``, built on it) read the ways asyncio code reads an async iterator: only closing
it, cancelling a wait for an item, dropping it, or the end by cancellation or error of the task that owns it cancels
the run (and rewinds the turn); a task that reads one item and ends normally does not.

Each test runs a real compiled graph on a real SQLite file, its nodes gated by events so the run is mid-turn whenever
the consumer does something. Before the consumer opens the next gate it passes a barrier: the loop's default
executor has one worker, and every dispose the iterator starts runs on it, so a dispose started by an item's delivery
(a finished task's done callback) has returned before the run may go on — a run cut by mistake is cut
deterministically, and the test then fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import reactivex as rx
from _support import RewindSignal
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import (
    END,
    START,
    CompiledGraph,
    KeyStrategy,
    NodeOutput,
    RunnableConfig,
    RunOutput,
    SqliteSaver,
    StateGraph,
    StreamingOutput,
)
from rxgraph.rx import to_async_iterator

_T = TypeVar("_T")

WAIT = 10
"""Seconds a test waits for something that must happen before it calls it a failure (a hang guard, no timing)."""

POOL = ThreadPoolScheduler()
"""The worker threads of the runs the tests hand to ``to_async_iterator`` themselves (``astream`` has its own)."""

TURN_1 = ["turn 1", "prepared", "a", "b", "finished"]
TURN_2 = [*TURN_1, "turn 2", "prepared", "a", "b", "finished"]


class _Gated:
    """prepare -> stream (chunk "a", then chunk "b") -> finish, on one thread of a SQLite saver. The run waits (on a
    worker thread) at the start of "stream", between its chunks and in "finish", until the consumer opens the gate
    it waits at: ``go_on(output)`` opens the one the run meets after ``output``. Turn 1 has run to its end."""

    def __init__(self, saver: RewindSignal, thread: str) -> None:
        self.saver = saver
        self.config = RunnableConfig(thread_id=thread)
        self.gates = {name: threading.Event() for name in ("start of stream", "mid stream", "finish")}

        def stream(state: Any) -> rx.Observable[dict[str, Any]]:
            assert self.gates["start of stream"].wait(WAIT)
            second = rx.from_callable(lambda: (self.gates["mid stream"].wait(WAIT), {"log": "b"})[1])
            return rx.concat(rx.of({"log": "a"}), rx.defer(lambda _: second))

        def finish(state: Any) -> dict[str, Any]:
            assert self.gates["finish"].wait(WAIT)
            return {"log": "finished"}

        self.app: CompiledGraph = (
            StateGraph({"log": KeyStrategy.APPEND})
            .add_node("prepare", lambda s: {"log": "prepared"})
            .add_node("stream", stream)
            .add_node("finish", finish)
            .add_edge(START, "prepare")
            .add_edge("prepare", "stream")
            .add_edge("stream", "finish")
            .add_edge("finish", END)
            .compile(checkpointer=saver)
        )
        self.open_all()
        assert list(self.app.invoke({"log": "turn 1"}, self.config)["log"]) == TURN_1
        for gate in self.gates.values():
            gate.clear()

    def turn_2(self, made_by: str) -> AsyncIterator[RunOutput]:
        """Turn 2's outputs, from ``astream`` or from ``to_async_iterator`` over ``stream`` (on worker threads)."""
        if made_by == "astream":
            return self.app.astream({"log": "turn 2"}, self.config)
        return to_async_iterator(self.app.stream({"log": "turn 2"}, self.config.model_copy(update={"scheduler": POOL})))

    async def go_on(self, output: RunOutput) -> None:
        """Let the run go past the gate it meets after ``output`` — once every dispose started so far has returned."""
        await _disposes_started_so_far_returned()
        if isinstance(output, NodeOutput) and output.node == "prepare":
            self.gates["start of stream"].set()
        elif isinstance(output, StreamingOutput) and output.chunk == {"log": "a"}:
            self.gates["mid stream"].set()
        elif isinstance(output, NodeOutput) and output.node == "stream":
            self.gates["finish"].set()

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.set()

    def assert_completed(self, outputs: list[RunOutput]) -> None:
        """Turn 2 came out whole and is the thread's head; nothing was rewound."""
        assert [(type(o).__name__, o.node) for o in outputs] == [
            ("NodeOutput", "prepare"),
            ("StreamingOutput", "stream"),
            ("StreamingOutput", "stream"),
            ("NodeOutput", "stream"),
            ("NodeOutput", "finish"),
        ]
        head = self.app.get_state(self.config)
        assert list(head.values["log"]) == TURN_2
        assert [c.source for c in self.saver.list(str(self.config.thread_id)) if c.source == "rewind"] == []

    def assert_rewound(self) -> None:
        """Turn 2 was cut and rewound: the head is a rewind to turn 1's state."""
        head = self.app.get_state(self.config)
        assert head.checkpoint is not None and head.checkpoint.source == "rewind"
        assert list(head.values["log"]) == TURN_1

    def source_of_head(self) -> str | None:
        head = self.saver.get(str(self.config.thread_id))
        return None if head is None else head.source


async def _disposes_started_so_far_returned() -> None:
    """A barrier: every dispose the iterator started by now, or that callbacks already due start, has returned."""
    # Twice through the loop's executor (one worker, jobs in order): the first round trip lets the loop run the
    # callbacks already due (a finished task's done callbacks, which may start a dispose); the second queues behind
    # any dispose they started.
    for _ in range(2):
        await asyncio.get_running_loop().run_in_executor(None, lambda: None)


def _at_a(output: RunOutput) -> bool:
    """The phase the leaving tests leave at: chunk "a" came, the run waits in the middle of "stream"."""
    return isinstance(output, StreamingOutput) and output.chunk == {"log": "a"}


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[RewindSignal]:
    inner = SqliteSaver(tmp_path / "checkpoints.db")
    try:
        yield RewindSignal(inner)
    finally:
        inner.close()


def _run(graphs: list[_Gated], main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """``main()`` on a fresh loop whose default executor has one worker (the barrier of ``_Gated.go_on``); the
    gates of ``graphs`` are opened afterwards, whatever happened, so no worker thread is left waiting."""

    async def with_one_worker() -> _T:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        return await main()

    try:
        return asyncio.run(with_one_worker())
    finally:
        for graph in graphs:
            graph.open_all()


MADE_BY = ["astream", "to_async_iterator"]

# -- reading from other tasks: the run goes on ----------------------------------------------------------------------


@pytest.mark.parametrize("made_by", MADE_BY)
def test_a_per_item_wait_for_reads_the_whole_turn_and_the_turn_completes(made_by: str, saver: RewindSignal) -> None:
    graph = _Gated(saver, "t")

    async def main() -> list[RunOutput]:
        outputs = graph.turn_2(made_by)
        seen: list[RunOutput] = []
        while True:
            try:
                # Python 3.11 runs the __anext__ in a task of its own, which ends once it has the item.
                output = await asyncio.wait_for(outputs.__anext__(), WAIT)
            except StopAsyncIteration:
                return seen
            seen.append(output)
            await graph.go_on(output)

    graph.assert_completed(_run([graph], main))


def _create_task(outputs: AsyncIterator[RunOutput]) -> asyncio.Future[RunOutput]:
    return asyncio.create_task(outputs.__anext__())  # type: ignore[arg-type]  # __anext__ is a coroutine here


def _ensure_future(outputs: AsyncIterator[RunOutput]) -> asyncio.Future[RunOutput]:
    return asyncio.ensure_future(anext(outputs))


SPAWN: dict[str, Callable[[AsyncIterator[RunOutput]], asyncio.Future[RunOutput]]] = {
    "create_task(it.__anext__())": _create_task,
    "ensure_future(anext(it))": _ensure_future,
}


@pytest.mark.parametrize("spawn", sorted(SPAWN))
@pytest.mark.parametrize("made_by", MADE_BY)
def test_a_task_per_item_awaited_by_the_consumer_reads_the_whole_turn(
    made_by: str, spawn: str, saver: RewindSignal
) -> None:
    graph = _Gated(saver, "t")

    async def main() -> list[RunOutput]:
        outputs = graph.turn_2(made_by)
        seen: list[RunOutput] = []
        while True:
            try:
                output = await asyncio.wait_for(SPAWN[spawn](outputs), WAIT)
            except StopAsyncIteration:
                return seen
            seen.append(output)
            await graph.go_on(output)

    graph.assert_completed(_run([graph], main))


@pytest.mark.parametrize("made_by", MADE_BY)
def test_two_runs_merged_with_asyncio_wait_over_anext_tasks_both_complete(made_by: str, saver: RewindSignal) -> None:
    graphs = {"a": _Gated(saver, "a"), "b": _Gated(saver, "b")}

    async def main() -> dict[str, list[RunOutput]]:
        seen: dict[str, list[RunOutput]] = {name: [] for name in graphs}
        iterators = {name: graph.turn_2(made_by) for name, graph in graphs.items()}
        pending: dict[asyncio.Future[RunOutput], str] = {_create_task(it): name for name, it in iterators.items()}
        while pending:
            done, _ = await asyncio.wait(pending, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
            assert done, f"no run said anything for {WAIT} s; still waiting for {sorted(pending.values())}"
            for task in done:
                name = pending.pop(task)
                try:
                    output = task.result()
                except StopAsyncIteration:
                    continue  # this run is over; the other may go on
                seen[name].append(output)
                await graphs[name].go_on(output)
                pending[_create_task(iterators[name])] = name
        return seen

    seen = _run(list(graphs.values()), main)
    for name, graph in graphs.items():
        graph.assert_completed(seen[name])


@pytest.mark.parametrize("made_by", MADE_BY)
def test_waiting_with_a_heartbeat_by_asyncio_wait_keeps_the_run(made_by: str, saver: RewindSignal) -> None:
    # The documented way to time out a wait for an item without giving the run up: asyncio.wait does not cancel.
    graph = _Gated(saver, "t")

    async def main() -> tuple[list[RunOutput], int]:
        outputs = graph.turn_2(made_by)
        seen: list[RunOutput] = []
        heartbeats = 0
        while True:
            pending = _ensure_future(outputs)
            if seen and _at_a(seen[-1]):
                # The run waits at the gate after chunk "a", closed until this consumer opens it: nothing can come.
                done, _ = await asyncio.wait({pending}, timeout=0.01)
                assert not done
                heartbeats += 1
                await graph.go_on(seen[-1])
            done, _ = await asyncio.wait({pending}, timeout=WAIT)
            assert done, f"no output for {WAIT} s"
            try:
                output = pending.result()
            except StopAsyncIteration:
                return seen, heartbeats
            seen.append(output)
            if not _at_a(output):
                await graph.go_on(output)

    seen, heartbeats = _run([graph], main)
    assert heartbeats == 1
    graph.assert_completed(seen)


# -- what cancels the run ---------------------------------------------------------------------------------------------


async def _read_to_a(graph: _Gated, outputs: AsyncIterator[RunOutput]) -> None:
    """Read ``outputs`` the way an SSE server with heartbeats does (a ``wait_for`` per item) until chunk "a"."""
    while not _at_a(output := await asyncio.wait_for(outputs.__anext__(), WAIT)):
        await graph.go_on(output)


@pytest.mark.parametrize("reading", ["async for", "wait_for per item"])
@pytest.mark.parametrize("made_by", MADE_BY)
def test_leaving_an_aclosing_block_cancels_and_rewinds_the_run(made_by: str, reading: str, saver: RewindSignal) -> None:
    graph = _Gated(saver, "t")

    async def main() -> None:
        async with contextlib.aclosing(graph.turn_2(made_by)) as outputs:  # type: ignore[type-var]
            if reading == "async for":
                async for output in outputs:
                    if _at_a(output):
                        break
                    await graph.go_on(output)
            else:
                await _read_to_a(graph, outputs)
        assert graph.source_of_head() == "rewind"  # closing waited for the run's rewind

    _run([graph], main)
    graph.assert_rewound()


@pytest.mark.parametrize("made_by", MADE_BY)
def test_break_out_of_async_for_cancels_and_rewinds_the_run(made_by: str, saver: RewindSignal) -> None:
    graph = _Gated(saver, "t")

    async def main() -> None:
        rewound = saver.watch()
        async for output in graph.turn_2(made_by):
            if _at_a(output):
                break  # the iterator is dropped here, and the loop closes it
            await graph.go_on(output)
        await asyncio.wait_for(rewound.wait(), WAIT)

    _run([graph], main)
    graph.assert_rewound()


async def _wait_for(outputs: AsyncIterator[RunOutput]) -> RunOutput:
    return await asyncio.wait_for(outputs.__anext__(), WAIT)


async def _await_a_task(outputs: AsyncIterator[RunOutput]) -> RunOutput:
    return await _create_task(outputs)


async def _directly(outputs: AsyncIterator[RunOutput]) -> RunOutput:
    return await outputs.__anext__()


ASK: dict[str, Callable[[AsyncIterator[RunOutput]], Awaitable[RunOutput]]] = {
    "__anext__": _directly,
    "wait_for(__anext__)": _wait_for,
    "await create_task(__anext__)": _await_a_task,
}


@pytest.mark.parametrize("ask", sorted(ASK))
@pytest.mark.parametrize("made_by", MADE_BY)
def test_cancelling_the_consumer_while_it_waits_for_an_item_cancels_and_rewinds_the_run(
    made_by: str, ask: str, saver: RewindSignal
) -> None:
    graph = _Gated(saver, "t")

    async def main() -> None:
        waiting = asyncio.Event()

        async def consume() -> None:
            outputs = graph.turn_2(made_by)
            while not _at_a(output := await ASK[ask](outputs)):
                await graph.go_on(output)
            waiting.set()
            await ASK[ask](outputs)  # the run waits at a closed gate: this waits until it is cancelled

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(waiting.wait(), WAIT)
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        assert graph.source_of_head() == "rewind"  # the cancelled wait ended once the run was rewound

    _run([graph], main)
    graph.assert_rewound()


@pytest.mark.parametrize("made_by", MADE_BY)
def test_a_per_item_timeout_that_fires_cancels_and_rewinds_the_run_and_finishes_the_iterator(
    made_by: str, saver: RewindSignal
) -> None:
    # wait_for cancels the __anext__ it gives up on, and an async generator whose __anext__ was cancelled is
    # finished: the run is cancelled with it, as the docstring of to_async_iterator says.
    graph = _Gated(saver, "t")

    async def main() -> None:
        outputs = graph.turn_2(made_by)
        await _read_to_a(graph, outputs)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(outputs.__anext__(), 0.01)  # the gate is closed: the timeout fires
        assert graph.source_of_head() == "rewind"  # the timed-out wait ended once the run was rewound
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(outputs.__anext__(), WAIT)

    _run([graph], main)
    graph.assert_rewound()


@pytest.mark.parametrize("made_by", MADE_BY)
def test_dropping_the_iterator_cancels_and_rewinds_the_run(made_by: str, saver: RewindSignal) -> None:
    graph = _Gated(saver, "t")

    async def main() -> None:
        rewound = saver.watch()
        outputs = graph.turn_2(made_by)
        await _read_to_a(graph, outputs)
        del outputs
        gc.collect()
        await asyncio.wait_for(rewound.wait(), WAIT)

    _run([graph], main)
    graph.assert_rewound()


@pytest.mark.parametrize("made_by", MADE_BY)
def test_a_consumer_reading_with_wait_for_and_cancelled_in_its_own_work_cancels_and_rewinds_the_run(
    made_by: str, saver: RewindSignal
) -> None:
    # The consumer made the iterator and owns it, though the items came through wait_for's tasks. The iterator is
    # held elsewhere too, so only the consumer's end can close it (not the garbage collector).
    graph = _Gated(saver, "t")

    async def main() -> None:
        rewound = saver.watch()
        held: list[AsyncIterator[RunOutput]] = []
        busy = asyncio.Event()

        async def consume() -> None:
            outputs = graph.turn_2(made_by)
            held.append(outputs)
            await _read_to_a(graph, outputs)
            busy.set()
            await asyncio.Event().wait()  # its own work, where it is cancelled

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(busy.wait(), WAIT)
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        await asyncio.wait_for(rewound.wait(), WAIT)
        with pytest.raises(StopAsyncIteration):  # finished, as if closed
            await asyncio.wait_for(held[0].__anext__(), WAIT)

    _run([graph], main)
    graph.assert_rewound()


@pytest.mark.parametrize("made_by", MADE_BY)
def test_a_task_that_took_the_iteration_over_keeps_the_run_when_its_creator_is_cancelled(
    made_by: str, saver: RewindSignal
) -> None:
    # The creator hands the iterator to a task that runs an `async for` over it, and is then cancelled: the run is
    # the other task's now, and goes on.
    graph = _Gated(saver, "t")

    async def main() -> list[RunOutput]:
        handed: asyncio.Future[AsyncIterator[RunOutput]] = asyncio.get_running_loop().create_future()
        taken_over = asyncio.Event()
        creator_gone = asyncio.Event()
        seen: list[RunOutput] = []

        async def create() -> None:
            handed.set_result(graph.turn_2(made_by))
            await asyncio.Event().wait()  # where it is cancelled

        async def consume() -> None:
            async for output in await handed:
                seen.append(output)
                if _at_a(output):  # asked twice by now: the iteration is this task's
                    taken_over.set()
                    await creator_gone.wait()
                await graph.go_on(output)

        creator, consumer = asyncio.create_task(create()), asyncio.create_task(consume())
        await asyncio.wait_for(taken_over.wait(), WAIT)
        creator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await creator
        await _disposes_started_so_far_returned()
        creator_gone.set()
        await asyncio.wait_for(consumer, WAIT)
        return seen

    graph.assert_completed(_run([graph], main))
