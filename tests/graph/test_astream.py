"""``astream`` / ``ainvoke``: runs for asyncio code, off the event loop; leaving, closing or cancelling rewinds."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from _support import RewindSignal

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    CompiledGraph,
    KeyStrategy,
    NodeOutput,
    RunnableConfig,
    StateGraph,
    StreamingOutput,
)


def _three_steps(
    saver: CheckpointSaver, hold: threading.Event | None = None, entered: threading.Event | None = None
) -> CompiledGraph:
    """prepare -> stream (three chunks) -> finish; ``hold`` keeps "finish" waiting (blocking, off the loop), and
    ``entered`` says when it began to."""

    def finish(state: Any) -> dict[str, Any]:
        if entered is not None:
            entered.set()
        if hold is not None:
            assert hold.wait(10)
        return {"log": "finished"}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("prepare", lambda s: {"log": "prepared"})
        .add_node("stream", lambda s: rx.of({"log": "a"}, {"log": "b"}, {"log": "c"}))
        .add_node("finish", finish)
        .add_edge(START, "prepare")
        .add_edge("prepare", "stream")
        .add_edge("stream", "finish")
        .add_edge("finish", END)
        .compile(checkpointer=saver)
    )


def _kinds(outputs: list[Any]) -> list[tuple[str, str]]:
    return [(type(o).__name__, o.node) for o in outputs]


def test_astream_yields_what_stream_emits(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    app = _three_steps(saver)
    expected: list[Any] = []
    app.stream({"log": "sync"}, RunnableConfig(thread_id="s")).subscribe(expected.append)

    async def main() -> list[Any]:
        return [output async for output in app.astream({"log": "async"}, RunnableConfig(thread_id="a"))]

    outputs = asyncio.run(main())
    assert _kinds(outputs) == _kinds(expected)
    assert list(outputs[-1].state["log"]) == ["async", "prepared", "a", "b", "c", "finished"]


def _gated(saver: CheckpointSaver, gates: dict[str, threading.Event]) -> CompiledGraph:
    """prepare -> stream (chunk "a", then "b") -> finish, where the run waits (on a worker thread) at the start of
    "stream", between its two chunks, and in "finish", until the test opens those gates."""

    def stream(state: Any) -> rx.Observable[dict[str, Any]]:
        assert gates["start of stream"].wait(10)
        second = rx.defer(lambda _: rx.from_callable(lambda: (gates["mid stream"].wait(10), {"log": "b"})[1]))
        return rx.concat(rx.of({"log": "a"}), second)

    def finish(state: Any) -> dict[str, Any]:
        assert gates["finish"].wait(10)
        return {"log": "finished"}

    return (
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


# Where the consumer leaves, and which gates are open by then (the run waits at the first closed one, so it is
# still running when the consumer leaves).
PHASES = {
    "after prepare, before stream starts": (("prepare", NodeOutput), ()),
    "while stream streams": (("stream", StreamingOutput), ("start of stream",)),
    "while finish works": (("stream", NodeOutput), ("start of stream", "mid stream")),
}


@pytest.mark.parametrize("phase", sorted(PHASES))
@pytest.mark.parametrize("how", ["break", "aclose", "cancel while waiting", "cancel while busy"])
def test_leaving_closing_or_cancelling_rewinds_the_run(
    how: str, phase: str, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    saver = RewindSignal(saver_factory())
    gates = {name: threading.Event() for name in ("start of stream", "mid stream", "finish")}
    app = _gated(saver, gates)
    config = RunnableConfig(thread_id="t")
    (node, kind), opened = PHASES[phase]

    def at_phase(output: Any) -> bool:
        return output.node == node and type(output) is kind

    async def main() -> None:
        rewound = saver.watch()
        if how == "break":
            async for output in app.astream({"log": "turn 2"}, config):
                if at_phase(output):
                    break  # the iterator is dropped here, which closes it
            await asyncio.wait_for(rewound.wait(), 10)
        elif how == "aclose":
            outputs = app.astream({"log": "turn 2"}, config)
            async for output in outputs:
                if at_phase(output):
                    break
            await outputs.aclose()  # type: ignore[attr-defined]
            assert saver.get("t").source == "rewind"  # type: ignore[union-attr]  # closing waited for the rewind
        else:
            reached = asyncio.Event()
            busy = how == "cancel while busy"

            async def consume() -> None:
                async for output in app.astream({"log": "turn 2"}, config):
                    if at_phase(output):
                        reached.set()
                        if busy:
                            await asyncio.Event().wait()  # cancelled in its own work: the iterator is dropped

            task = asyncio.create_task(consume())
            await reached.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if busy:
                await asyncio.wait_for(rewound.wait(), 10)  # closed once dropped, right after the task ended
            else:
                # Cancelled while waiting for the next output, inside the iterator: the task ends after the rewind.
                assert saver.get("t").source == "rewind"  # type: ignore[union-attr]

    for name in opened:
        gates[name].set()
    try:
        asyncio.run(main())
    finally:
        for gate in gates.values():
            gate.set()  # let the worker threads the cut run left waiting go
    head = app.get_state(config)
    assert head.checkpoint is not None and head.checkpoint.source == "rewind" and dict(head.values) == {}
    for gate in gates.values():
        gate.set()
    assert list(app.invoke({"log": "turn 3"}, config)["log"]) == ["turn 3", "prepared", "a", "b", "finished"]


def test_the_run_works_off_the_loop_so_the_loop_stays_free() -> None:
    # "finish" blocks until a coroutine on the same loop releases it: were it run on the loop, nothing would.
    hold = threading.Event()
    from rxgraph import MemorySaver

    app = _three_steps(MemorySaver(), hold)

    async def main() -> list[str]:
        async def release_soon() -> None:
            await asyncio.sleep(0)
            hold.set()

        releaser = asyncio.create_task(release_soon())
        state = await asyncio.wait_for(app.ainvoke({"log": "go"}, RunnableConfig(thread_id="t")), 10)
        await releaser
        return list(state["log"])

    assert asyncio.run(main()) == ["go", "prepared", "a", "b", "c", "finished"]


def test_a_slow_consumer_loses_nothing() -> None:
    app = (
        StateGraph()
        .add_node("many", lambda s: rx.from_iterable(range(2000)), reduce=lambda chunks: {"n": len(chunks)})
        .add_edge(START, "many")
        .add_edge("many", END)
        .compile()
    )

    async def main() -> list[Any]:
        seen: list[Any] = []
        async for output in app.astream({"n": 0}):
            await asyncio.sleep(0)  # slower than the producer on its worker thread
            seen.append(output.chunk if isinstance(output, StreamingOutput) else output.state["n"])
        return seen

    assert asyncio.run(main()) == [*range(2000), 2000]


def test_an_error_comes_out_of_the_async_for_and_ainvoke() -> None:
    def broken(state: Any) -> dict[str, Any]:
        raise LookupError("no such order")

    app = StateGraph().add_node("b", broken).add_edge(START, "b").add_edge("b", END).compile()

    async def main() -> None:
        with pytest.raises(LookupError, match="no such order"):
            async for _ in app.astream({}):
                pass
        with pytest.raises(LookupError, match="no such order"):
            await app.ainvoke({})

    asyncio.run(main())


def test_async_nodes_of_an_astream_run_are_awaited_on_the_callers_loop() -> None:
    async def node(state: Any) -> dict[str, Any]:
        return {"loop": id(asyncio.get_running_loop())}

    app = StateGraph().add_node("a", node).add_edge(START, "a").add_edge("a", END).compile()

    async def main() -> tuple[int, int]:
        state = await app.ainvoke({"loop": 0})
        return state["loop"], id(asyncio.get_running_loop())

    seen, mine = asyncio.run(main())
    assert seen == mine


def test_cancelling_ainvoke_rewinds_the_run(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = RewindSignal(saver_factory())
    hold, entered = threading.Event(), threading.Event()
    app = _three_steps(saver, hold, entered)
    config = RunnableConfig(thread_id="t")

    async def main() -> None:
        rewound = saver.watch()
        task = asyncio.create_task(app.ainvoke({"log": "go"}, config))
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)  # it blocks in "finish"
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert rewound.is_set()  # the cancelled task ended once the run had been rewound
        hold.set()  # "finish" returns now, too late: nothing of it lands

    asyncio.run(main())
    head = saver.get("t")
    assert head is not None and head.source == "rewind" and dict(head.values) == {}
    assert "finish" not in [c.node for c in saver.list("t")]
