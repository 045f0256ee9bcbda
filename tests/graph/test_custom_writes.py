"""``RunInfo.write``: a node (or a tool it runs) writes custom events to the run's stream, as ``CustomOutput``s that
are never part of its update and never checkpointed; a cancelled run drops them, and a write after the call ended is
refused."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import (
    END,
    START,
    ConfigurationError,
    CustomOutput,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    NodeRetry,
    RetryPolicy,
    RunInfo,
    RunnableConfig,
    RunOutput,
    StateGraph,
    StreamingOutput,
    SubgraphEvent,
)
from rxgraph.agent import ReactAgent, tool
from rxgraph.testing import ScriptedChatModel, finish, marbles, text, tool_call

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _nexts(observed: Any) -> list[tuple[float, Any]]:
    """The values an observer of a ``TestScheduler`` got, with their ticks."""
    return [(m.time, m.value.value) for m in observed.messages if m.value.kind == "N"]


def _one_node(action: Any, **compile: Any) -> Any:
    return StateGraph().add_node("node", action).add_edge(START, "node").add_edge("node", END).compile(**compile)


def test_a_write_reaches_the_stream_before_the_nodes_output_and_is_not_its_update() -> None:
    def node(state: Any, run: RunInfo) -> dict[str, Any]:
        run.write({"progress": 0.5})
        return {"done": True}

    outputs: list[RunOutput] = []
    _one_node(node).stream({}).subscribe(outputs.append)
    assert outputs[0] == CustomOutput("node", {}, {"progress": 0.5})
    assert type(outputs[1]) is NodeOutput and outputs[1].update == {"done": True}
    assert dict(outputs[1].state) == {"done": True}
    assert len(outputs) == 2


def test_writes_arrive_when_they_are_made_not_when_the_node_ends() -> None:
    """Ported from LangGraph's ``test_stream_buffering_single_node`` (wall-clock sleeps there, virtual time here):
    a write before the node waits arrives at once, one after it when it is made."""
    scheduler = TestScheduler()

    def node(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        run.write("Before sleep")
        return rx.timer(20.0).pipe(
            ops.do_action(lambda _: run.write("After sleep")), ops.map(lambda _: {"my_key": "got here"})
        )

    app = _one_node(node, checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="2", scheduler=scheduler)
    observed = scheduler.start(lambda: app.stream({"my_key": ""}, config))
    written = [(tick, output.value) for tick, output in _nexts(observed) if isinstance(output, CustomOutput)]
    assert written == [(200, "Before sleep"), (220, "After sleep")]
    kinds = [type(output).__name__ for _, output in _nexts(observed)]
    assert kinds == ["CustomOutput", "CustomOutput", "StreamingOutput", "NodeOutput"]
    assert app.get_state(config).values == {"my_key": "got here"}


def test_writes_never_become_part_of_a_streaming_nodes_update() -> None:
    """A node without ``reduce`` whose chunks are its updates: what it writes (not mappings) is not a chunk."""

    def node(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        return rx.of({"log": "a"}, {"log": "b"}).pipe(ops.do_action(lambda chunk: run.write(f"saw {chunk['log']}")))

    saver = MemorySaver()
    app = StateGraph({"log": KeyStrategy.APPEND}).add_node("node", node).add_edge(START, "node")
    app = app.add_edge("node", END).compile(checkpointer=saver)
    config = RunnableConfig(thread_id="t")
    outputs: list[RunOutput] = []
    app.stream({}, config).subscribe(outputs.append)
    assert [type(o).__name__ for o in outputs] == [
        "CustomOutput",
        "StreamingOutput",
        "CustomOutput",
        "StreamingOutput",
        "NodeOutput",
    ]
    assert outputs[-1].update == ({"log": "a"}, {"log": "b"})  # type: ignore[attr-defined]
    assert app.get_state(config).values == {"log": ["a", "b"]}
    stored = [checkpoint.values for checkpoint in saver.list("t")]
    assert not any("saw" in repr(values) for values in stored)


def test_a_node_on_a_worker_thread_and_an_async_node_write_too() -> None:
    pool = ThreadPoolScheduler(2)

    def blocking(state: Any, run: RunInfo) -> dict[str, Any]:
        run.write(("blocking on", threading.current_thread() is not threading.main_thread()))
        return {"a": 1}

    async def awaiting(state: Any, run: RunInfo) -> dict[str, Any]:
        await asyncio.sleep(0)
        run.write("awaited")
        return {"b": 2}

    app = (
        StateGraph()
        .add_node("blocking", blocking, scheduler=pool)
        .add_node("awaiting", awaiting)
        .add_edge(START, "blocking")
        .add_edge("blocking", "awaiting")
        .add_edge("awaiting", END)
        .compile()
    )
    written = app.stream({}, RunnableConfig(scheduler=pool)).pipe(
        ops.filter(lambda o: isinstance(o, CustomOutput)), ops.map(lambda o: (o.node, o.value)), ops.to_list()
    )
    assert written.run() == [("blocking", ("blocking on", True)), ("awaiting", "awaited")]


def test_a_write_after_the_call_ended_is_refused_with_a_clear_error() -> None:
    calls: list[RunInfo] = []

    def node(state: Any, run: RunInfo) -> None:
        calls.append(run)

    assert _one_node(node).invoke({"x": 1}) == {"x": 1}
    with pytest.raises(ConfigurationError, match=r"node 'node' wrote 'late' after its call had ended"):
        calls[0].write("late")


def test_a_run_info_that_is_no_node_calls_refuses_writes() -> None:
    """A tool run outside any graph has a RunInfo of its own, which has no stream to write to."""
    seen: list[RunInfo] = []

    @tool
    def lookup(city: str, run: RunInfo) -> str:
        """Look a city up."""
        seen.append(run)
        return city

    assert lookup.run(None, None, city="Paris").run() == "Paris"
    with pytest.raises(ConfigurationError, match="not one of a node's call"):
        seen[0].write("progress")


class _HoldingObserver:
    """A subscriber that holds on to the first output ``first`` picks out for as long as it takes another thread to
    come in with a second output (at most ``patience`` seconds: with the Rx grammar kept, it never does), recording
    every output that came while it was inside."""

    def __init__(self, first: Any, patience: float = 0.3) -> None:
        self.first = first
        self.patience = patience
        self.holding = threading.Event()  # the first output is being held: the other thread may try now
        self.second_in = threading.Event()
        self.inside = False
        self.overlaps: list[RunOutput] = []
        self.outputs: list[RunOutput] = []
        self.done = threading.Event()

    def on_next(self, output: RunOutput) -> None:
        if self.inside:
            self.overlaps.append(output)
            self.second_in.set()
        self.inside = True
        self.outputs.append(output)
        if self.first(output) and not self.holding.is_set():
            self.holding.set()
            self.second_in.wait(self.patience)
        self.inside = False


def test_parallel_branches_writing_from_worker_threads_never_call_the_subscriber_at_once() -> None:
    """The Rx grammar: while the subscriber holds one branch's write, the other branch's write (on another pool
    thread) waits for it."""
    pool = ThreadPoolScheduler(4)
    observer = _HoldingObserver(lambda output: isinstance(output, CustomOutput) and output.value == "left")

    def left(state: Any, run: RunInfo) -> dict[str, Any]:
        run.write("left")
        return {"left": True}

    def right(state: Any, run: RunInfo) -> dict[str, Any]:
        assert observer.holding.wait(5)
        run.write("right")
        return {"right": True}

    app = (
        StateGraph()
        .add_node("left", left, scheduler=pool)
        .add_node("right", right, scheduler=pool)
        .add_edge(START, "left")
        .add_edge(START, "right")
        .add_edge("left", END)
        .add_edge("right", END)
        .compile()
    )
    app.stream({}, RunnableConfig(scheduler=pool)).subscribe(observer.on_next, on_completed=observer.done.set)
    assert observer.done.wait(10)
    assert observer.overlaps == []
    assert [o.value for o in observer.outputs if isinstance(o, CustomOutput)] == ["left", "right"]


def test_a_streaming_nodes_chunks_and_its_writes_from_other_threads_take_turns() -> None:
    """One step: while the subscriber holds a write made on one pool thread, the node's chunk on another pool
    thread waits for it — and the write is not a chunk of its update."""
    pool = ThreadPoolScheduler(4)
    observer = _HoldingObserver(lambda output: isinstance(output, CustomOutput))

    def node(state: Any, run: RunInfo) -> rx.Observable[str]:
        def write() -> str:
            run.write("progress")
            return "written"

        def chunk() -> str:
            assert observer.holding.wait(5)
            return "chunk"

        return rx.merge(rx.start(write, scheduler=pool), rx.start(chunk, scheduler=pool))

    app = StateGraph().add_node("node", node, reduce=lambda chunks: {"chunks": sorted(chunks)})
    app = app.add_edge(START, "node").add_edge("node", END).compile()
    app.stream({}, RunnableConfig(scheduler=pool)).subscribe(observer.on_next, on_completed=observer.done.set)
    assert observer.done.wait(10)
    assert observer.overlaps == []
    assert observer.outputs[-1].state == {"chunks": ["chunk", "written"]}


def test_a_subgraphs_inner_writes_surface_in_the_parents_stream_with_their_path() -> None:
    def inner(state: Any, run: RunInfo) -> dict[str, Any]:
        run.write("from inside")
        return {"x": 1}

    sub = StateGraph().add_node("inner", inner).add_edge(START, "inner").add_edge("inner", END).compile()
    app = StateGraph().add_node("sub", sub).add_edge(START, "sub").add_edge("sub", END).compile()
    outputs: list[RunOutput] = []
    app.stream({}).subscribe(outputs.append)
    events = [o.chunk for o in outputs if isinstance(o, StreamingOutput) and isinstance(o.chunk, SubgraphEvent)]
    written = [event for event in events if isinstance(event.innermost, CustomOutput)]
    assert len(written) == 1
    assert written[0].path == ("sub", "inner")
    assert written[0].innermost == CustomOutput("inner", {}, "from inside")
    assert written[0].updates == ()
    assert app.invoke({}) == {"x": 1}


def test_a_retried_nodes_writes_of_every_attempt_reach_the_stream_its_update_is_the_last_attempts() -> None:
    attempts: list[int] = []

    def flaky(state: Any, run: RunInfo) -> dict[str, Any]:
        attempts.append(1)
        run.write(f"attempt {len(attempts)}")
        if len(attempts) == 1:
            raise ConnectionError("try again")
        return {"ok": len(attempts)}

    app = StateGraph().add_node("node", flaky, retry=RetryPolicy(max_attempts=2, backoff=0.0))
    app = app.add_edge(START, "node").add_edge("node", END).compile()
    scheduler = TestScheduler()
    outputs: list[RunOutput] = []
    app.stream({}, RunnableConfig(scheduler=scheduler)).subscribe(outputs.append)
    scheduler.advance_by(1.0)
    assert [o.value for o in outputs if isinstance(o, CustomOutput)] == ["attempt 1", "attempt 2"]
    assert any(isinstance(o, StreamingOutput) and isinstance(o.chunk, NodeRetry) for o in outputs)
    assert outputs[-1].update == {"ok": 2}  # type: ignore[attr-defined]


def test_an_agents_tool_writes_progress_as_the_tools_node() -> None:
    @tool
    def lookup(city: str, run: RunInfo) -> str:
        """Look a city up."""
        run.write({"looking up": city})
        return f"{city}: found"

    model = ScriptedChatModel(
        [marbles("a|", a=tool_call("call-1", "lookup", '{"city": "Paris"}')), [text("done"), finish("stop")]]
    )
    agent = ReactAgent(model, tools=[lookup], checkpointer=MemorySaver())
    scheduler = TestScheduler()
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    outputs: list[RunOutput] = []
    agent.stream("Where?", config).subscribe(outputs.append)
    scheduler.advance_by(10.0)
    written = [(o.node, o.value) for o in outputs if isinstance(o, CustomOutput)]
    assert written == [("tools", {"looking up": "Paris"})]
    history = agent.get_state(config).values["messages"]
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


# -- cancellation ---------------------------------------------------------------------------------------------------


def _ticking_writer(ticks: int) -> Any:
    """A node that writes at ticks 10, 20, ... of its step, then streams its update."""

    def node(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        return rx.interval(10.0).pipe(
            ops.take(ticks),
            ops.do_action(lambda index: run.write({"secret": index})),
            ops.last(),
            ops.map(lambda index: {"count": index + 1}),
        )

    return node


def test_disposing_mid_stream_rewinds_the_thread_and_no_write_lands_in_a_checkpoint() -> None:
    scheduler, saver = TestScheduler(), MemorySaver()
    app = _one_node(_ticking_writer(5), checkpointer=saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    app.invoke({"count": 0}, RunnableConfig(thread_id="t", scheduler=TestScheduler()))  # a first turn, kept
    before = app.get_state(config)
    assert before.values == {"count": 5}
    observed = scheduler.start(lambda: app.stream({"count": 0}, config), disposed=225)
    written = [(tick, output.value) for tick, output in _nexts(observed)]
    assert written == [(210, {"secret": 0}), (220, {"secret": 1})]  # nothing after the dispose
    after = app.get_state(config)
    assert after.values == before.values
    assert after.checkpoint is not None and after.checkpoint.source == "rewind"
    assert not any("secret" in repr(checkpoint.values) for checkpoint in saver.list("t"))


def test_a_write_after_the_run_was_cancelled_is_dropped_without_an_error() -> None:
    calls: list[RunInfo] = []
    scheduler = TestScheduler()

    def node(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        calls.append(run)
        return rx.never()

    app = _one_node(node, checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(lambda: app.stream({}, config), disposed=250)
    assert observed.messages == []
    calls[0].write("too late")  # neither refused nor delivered: the run is gone
    assert calls[0].cancelled.is_set()
    assert app.get_state(config).values == {}


def test_a_subscriber_that_fails_on_a_write_cancels_and_rewinds_the_run() -> None:
    scheduler, saver = TestScheduler(), MemorySaver()
    app = _one_node(_ticking_writer(3), checkpointer=saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    errors: list[Exception] = []

    def refuse(output: RunOutput) -> None:
        raise ValueError(f"cannot take {output!r}")

    app.stream({"count": 0}, config).subscribe(refuse, errors.append)
    scheduler.advance_by(100.0)
    assert len(errors) == 1 and "secret" in str(errors[0])
    assert app.get_state(config).values == {}
    assert not any("secret" in repr(checkpoint.values) for checkpoint in saver.list("t"))
