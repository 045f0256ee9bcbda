"""One run per thread at a time: a run holds its thread's slot until it has fully ended (rewound, if cut), so the
next turn never reads a cut turn's head; ``multitask`` decides what a run does when the thread is busy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.abc import DisposableBase
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxgraph import (
    END,
    START,
    Checkpoint,
    CheckpointSaver,
    CompiledGraph,
    KeyStrategy,
    NodeOutput,
    RunInterruptedError,
    RunnableConfig,
    StateGraph,
    ThreadBusyError,
)
from rxgraph.graph._slots import slots_for
from rxgraph.rx import SignalType, do_finally
from rxgraph.testing import DelegatingSaver


def _chat(saver: CheckpointSaver, answer: Callable[[Any], Any] | None = None, **compile_kwargs: Any) -> CompiledGraph:
    """user message in -> "think" -> "answer" (both append to the log)."""

    def think(state: Any) -> Any:
        return {"log": f"thinking about {state['log'][-1]}"}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("think", think)
        .add_node("answer", answer or (lambda s: {"log": f"answer to {s['log'][-2]}"}))
        .add_edge(START, "think")
        .add_edge("think", "answer")
        .add_edge("answer", END)
        .compile(checkpointer=saver, **compile_kwargs)
    )


def _cut_after_think(stopper: str) -> tuple[Callable[[rx.Observable[NodeOutput]], rx.Observable[NodeOutput]], Any]:
    """An operator that cuts the turn right after "think", and a hook the subscriber calls on each output."""
    if stopper == "take(1)":
        return (lambda o: o.pipe(ops.take(1))), None
    if stopper == "first()":
        return (lambda o: o.pipe(ops.first())), None
    trigger: Subject[None] = Subject()
    return (lambda o: o.pipe(ops.take_until(trigger))), lambda output: trigger.on_next(None)


@pytest.mark.parametrize("stopper", ["take(1)", "first()", "take_until"])
def test_a_next_turn_started_from_the_terminal_callback_of_a_cut_turn_never_sees_it(
    stopper: str, saver_factory: Callable[[], CheckpointSaver]
) -> None:
    # take, first and take_until call on_completed downstream *before* they dispose the run: a next turn started
    # there finds the cut run still live, waits for it to end (rewound), and only then reads its base.
    app = _chat(saver_factory())
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "question A"}, config)
    operator, hook = _cut_after_think(stopper)
    finished: list[SignalType] = []

    def next_turn() -> None:
        app.stream({"log": "question C"}, config).pipe(do_finally(finished.append)).subscribe()

    operator(app.stream({"log": "question B"}, config)).subscribe(
        on_next=hook or (lambda _: None), on_completed=next_turn
    )
    assert finished == [SignalType.ON_COMPLETE]
    assert list(app.get_state(config).values["log"]) == [
        "question A",
        "thinking about question A",
        "answer to question A",
        "question C",
        "thinking about question C",
        "answer to question C",
    ]


def test_a_real_time_timeout_then_a_next_turn_from_on_error_never_sees_the_cut_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # A real-time timeout fails the subscriber on its timer thread and disposes the run; the next turn, started
    # from that on_error, waits for the rewind. Events only: the model never answers B, the timeout cuts it (on a
    # loaded machine, maybe before B's answer node was even called: which node answers goes by the question).
    app = _chat(
        saver_factory(),
        answer=lambda s: rx.never() if s["log"][-2] == "question B" else {"log": f"answer to {s['log'][-2]}"},
    )
    config = RunnableConfig(thread_id="t")
    done = threading.Event()
    outcome: list[Any] = []

    def next_turn(error: Exception) -> None:
        outcome.append(str(error))  # reactivex's timeout fails with Exception("Timeout")
        app.stream({"log": "question C"}, config).subscribe(on_completed=done.set, on_error=outcome.append)

    app.stream({"log": "question B"}, config).pipe(ops.timeout(0.05)).subscribe(on_error=next_turn)
    assert done.wait(10)
    assert outcome == ["Timeout"]
    assert list(app.get_state(config).values["log"]) == [
        "question C",
        "thinking about question C",
        "answer to question C",
    ]


A_THEN_C = [
    "question A",
    "thinking about question A",
    "to question A",
    "question C",
    "thinking about question C",
    "to question C",
]
"""The history after turn A, a turn B that was cut, and turn C: nothing of B."""


class _GatedSaver(DelegatingSaver):
    """A real saver whose rewind writes wait at a gate the test opens (to hold a rewind in flight)."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.rewinding = threading.Event()
        self.gate = threading.Event()

    def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
        if checkpoint.source == "rewind":
            self.rewinding.set()
            assert self.gate.wait(10)
        return self.inner.put(checkpoint, expected_head=expected_head)


def test_with_two_disposers_a_next_turn_waits_for_the_rewind_still_running_on_the_other_thread(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # take_until fires on an I/O thread and disposes the run there (its rewind is held at the gate); the request
    # handler's own dispose returns at once (reactivex subscriptions are once-only), and it starts the next turn.
    saver = _GatedSaver(saver_factory())
    app = _chat(saver, answer=lambda s: rx.never() if s["log"][-2] == "question B" else {"log": f"to {s['log'][-2]}"})
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "question A"}, config)
    trigger: Subject[None] = Subject()
    subscription = app.stream({"log": "question B"}, config).pipe(ops.take_until(trigger)).subscribe()
    io_thread = threading.Thread(target=lambda: trigger.on_next(None))
    io_thread.start()
    assert saver.rewinding.wait(10)
    subscription.dispose()  # the second disposer
    done = threading.Event()
    app.stream({"log": "question C"}, config).subscribe(on_completed=done.set)
    saver.gate.set()
    io_thread.join()
    assert done.wait(10)
    assert list(app.get_state(config).values["log"]) == A_THEN_C


def test_get_state_waits_while_a_cut_run_is_rewinding(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = _GatedSaver(saver_factory())
    app = _chat(saver, answer=lambda s: rx.never())
    config = RunnableConfig(thread_id="t")
    subscription = app.stream({"log": "question B"}, config).subscribe()
    disposer = threading.Thread(target=subscription.dispose)
    disposer.start()
    assert saver.rewinding.wait(10)
    read: list[Any] = []
    reader = threading.Thread(target=lambda: read.append(dict(app.get_state(config).values)))
    reader.start()
    # The one bounded wait of this file: it expects *nothing* to happen (the reader must not get past the rewind).
    reader.join(timeout=0.2)
    assert read == []
    saver.gate.set()
    reader.join()
    disposer.join()
    assert read == [{}]


def test_after_a_second_dispose_reads_and_runs_wait_while_the_first_is_still_tearing_the_run_down(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # The first dispose is still disposing the run's stream (its teardown blocks) when a second dispose of the same
    # subscription returns at once: a read or a run that follows must not see the cut turn's head.
    tearing, gate = threading.Event(), threading.Event()

    def hanging_answer(state: Any) -> rx.Observable[Any]:
        def subscribe(observer: Any, scheduler: Any = None) -> Callable[[], None]:
            def teardown() -> None:
                tearing.set()
                assert gate.wait(10), "the test never opened the gate"

            return teardown

        return rx.create(subscribe)

    saver = saver_factory()
    app = _chat(saver, answer=lambda s: hanging_answer(s) if s["log"][-2] == "question B" else {"log": "fine"})
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "question A"}, config)
    before = dict(app.get_state(config).values)
    subscription = app.stream({"log": "question B"}, config).subscribe()
    assert list(app.get_state(config).values["log"])[-1] == "thinking about question B"  # mid-turn, live
    disposer = threading.Thread(target=subscription.dispose)
    disposer.start()
    assert tearing.wait(10)
    subscription.dispose()  # the second disposer: returns at once
    reading = threading.Event()
    opener = threading.Thread(target=lambda: reading.wait(10) and gate.set())
    opener.start()
    reading.set()
    seen = dict(app.get_state(config).values)  # waits until the first dispose has rewound the thread
    opener.join()
    disposer.join()
    assert seen == before
    assert dict(app.get_state(config).values) == before


def test_reject_refuses_a_run_while_another_is_live_and_names_it(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler = TestScheduler()
    app = _chat(saver_factory(), answer=lambda s: rx.timer(5.0).pipe(ops.map(lambda _: {"log": "late answer"})))
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    app.stream({"log": "one"}, config).subscribe()
    scheduler.advance_by(1.0)
    errors: list[Exception] = []
    app.stream({"log": "two"}, config.model_copy(update={"multitask": "reject"})).subscribe(on_error=errors.append)
    scheduler.advance_by(1.0)
    assert len(errors) == 1 and isinstance(errors[0], ThreadBusyError)
    busy = errors[0]
    assert busy.thread_id == "t"
    run_id = app.get_state(config).checkpoint.run_id  # type: ignore[union-attr]
    assert busy.run_id == run_id and run_id in str(busy)
    scheduler.advance_by(10.0)  # the first run completes; the thread is free again
    completed: list[bool] = []
    app.stream({"log": "three"}, config.model_copy(update={"multitask": "reject"})).subscribe(
        on_completed=lambda: completed.append(True)
    )
    scheduler.advance_by(10.0)
    assert completed == [True]


def test_interrupt_cancels_the_live_run_rewinds_it_and_starts_after_the_rewind(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    app = _chat(saver_factory(), answer=lambda s: rx.timer(5.0).pipe(ops.map(lambda _: {"log": "answer"})))
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    app.invoke({"log": "question A"}, config)
    before = list(app.get_state(config).values["log"])
    first_errors: list[Exception] = []
    app.stream({"log": "question B"}, config).subscribe(on_error=first_errors.append)
    scheduler.advance_by(1.0)  # B is waiting for its answer
    second: list[NodeOutput] = []
    app.stream({"log": "question C"}, config.model_copy(update={"multitask": "interrupt"})).subscribe(second.append)
    assert len(first_errors) == 1 and isinstance(first_errors[0], RunInterruptedError)
    interrupted = first_errors[0]
    assert interrupted.thread_id == "t" and interrupted.by_run_id != interrupted.run_id
    scheduler.advance_by(10.0)
    history = app.get_state_history(config)
    sources = [s.checkpoint.source for s in reversed(history) if s.checkpoint is not None]
    assert "rewind" in sources  # B was rewound ...
    rewind_at = sources.index("rewind")
    assert sources[rewind_at + 1] == "input"  # ... before C wrote anything
    assert list(app.get_state(config).values["log"]) == [*before, "question C", "thinking about question C", "answer"]
    assert [o.node for o in second if type(o) is NodeOutput] == ["think", "answer"]


def test_enqueued_runs_start_in_order_each_after_the_previous_ended(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    app = _chat(saver_factory(), answer=lambda s: rx.timer(3.0).pipe(ops.map(lambda _: {"log": "answer"})))
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    ended: list[tuple[str, float]] = []
    for name in ("one", "two", "three"):
        app.stream({"log": name}, config).subscribe(
            on_completed=lambda name=name: ended.append((name, scheduler.clock))
        )
    scheduler.start()
    assert ended == [("one", 3.0), ("two", 6.0), ("three", 9.0)]


def test_a_queued_run_disposed_before_its_turn_never_starts(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler = TestScheduler()
    app = _chat(saver_factory(), answer=lambda s: rx.timer(3.0).pipe(ops.map(lambda _: {"log": "answer"})))
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    app.stream({"log": "one"}, config).subscribe()
    queued = app.stream({"log": "two"}, config).subscribe()
    ended: list[str] = []
    app.stream({"log": "three"}, config).subscribe(on_completed=lambda: ended.append("three"))
    queued.dispose()
    scheduler.start()
    assert ended == ["three"]
    assert "two" not in app.get_state(config).values["log"]
    assert all(c.source != "rewind" for c in app.checkpointer.list("t"))  # type: ignore[union-attr]


def test_graphs_sharing_a_saver_share_the_slots_and_other_threads_run_freely(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    scheduler = TestScheduler()
    saver = saver_factory()
    slow = rx.timer(4.0).pipe(ops.map(lambda _: {"log": "answer"}))
    one, other = _chat(saver, answer=lambda s: slow), _chat(saver, answer=lambda s: slow)
    ended: list[tuple[str, float]] = []
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    one.stream({"log": "a"}, config).subscribe(on_completed=lambda: ended.append(("t via one", scheduler.clock)))
    other.stream({"log": "b"}, config).subscribe(on_completed=lambda: ended.append(("t via other", scheduler.clock)))
    other.stream({"log": "c"}, config.model_copy(update={"thread_id": "u"})).subscribe(
        on_completed=lambda: ended.append(("u", scheduler.clock))
    )
    scheduler.start()
    assert sorted(ended) == [("t via one", 4.0), ("t via other", 8.0), ("u", 4.0)]


def test_update_state_refuses_a_live_run_and_waits_for_a_rewinding_one(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = _GatedSaver(saver_factory())
    app = _chat(saver, answer=lambda s: rx.never())
    config = RunnableConfig(thread_id="t")
    subscription = app.stream({"log": "question"}, config).subscribe()
    with pytest.raises(ThreadBusyError, match="'t' is busy"):
        app.update_state(config, {"log": "note"})
    disposer = threading.Thread(target=subscription.dispose)
    disposer.start()
    assert saver.rewinding.wait(10)
    updated: list[Any] = []
    writer = threading.Thread(target=lambda: updated.append(app.update_state(config, {"log": "note"})))
    writer.start()
    saver.gate.set()
    writer.join()
    disposer.join()
    assert list(app.get_state(config).values["log"]) == ["note"]  # written on top of the rewound, empty state


def test_a_run_queued_behind_a_cancelled_run_starts_on_the_thread_that_rewound_it() -> None:
    from rxgraph import MemorySaver

    saver = MemorySaver()
    app = _chat(saver, answer=lambda s: rx.never() if s["log"][-2] == "one" else {"log": "answer"})
    config = RunnableConfig(thread_id="t")
    first: DisposableBase = app.stream({"log": "one"}, config).subscribe()
    started_on: list[int] = []
    app.stream({"log": "two"}, config).subscribe(on_completed=lambda: started_on.append(threading.get_ident()))
    assert started_on == []  # queued: the first run holds the thread
    disposer = threading.Thread(target=first.dispose)
    disposer.start()
    disposer.join()
    assert started_on == [disposer.ident]
    assert slots_for(saver).holder("t") is None


def test_an_interrupt_never_overlaps_an_output_being_delivered_on_another_thread(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # Run A streams from a producer thread; its subscriber is inside on_next when run B interrupts A from this
    # thread. A's RunInterruptedError must wait until that on_next has returned, then arrive, and nothing after it.
    saver = saver_factory()
    chunks: Subject[dict[str, Any]] = Subject()
    app = _chat(saver, answer=lambda s: chunks if s["log"][-2] == "A" else {"log": "answer to B"})
    config = RunnableConfig(thread_id="t")
    inside, release = threading.Event(), threading.Event()
    events: list[str] = []

    def on_next(output: NodeOutput) -> None:
        if output.node == "answer":
            events.append("on_next begins")
            inside.set()
            assert release.wait(10)
            events.append("on_next ends")

    app.stream({"log": "A"}, config).subscribe(on_next, lambda e: events.append(type(e).__name__))
    producer = threading.Thread(target=lambda: chunks.on_next({"log": "partial answer"}))
    producer.start()
    assert inside.wait(10)
    done = threading.Event()
    app.stream({"log": "B"}, config.model_copy(update={"multitask": "interrupt"})).subscribe(on_completed=done.set)
    assert events == ["on_next begins"]  # A is cut and rewound, but its error waits for the output in flight
    release.set()
    producer.join()
    assert events == ["on_next begins", "on_next ends", "RunInterruptedError"]
    chunks.on_next({"log": "too late"})  # A's stream was disposed: nothing more reaches its subscriber
    assert events[-1] == "RunInterruptedError"
    assert done.wait(10)
    assert list(app.get_state(config).values["log"]) == ["B", "thinking about B", "answer to B"]


def test_a_run_subscribed_on_a_thread_pool_and_disposed_is_rewound_before_the_next_turn_reads(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # subscribe_on(ThreadPoolScheduler) disposes on the pool, later: dispose() returns before the run is even cut.
    # The next turn, started right away, still waits for that run to end and be rewound.
    from reactivex.scheduler import ThreadPoolScheduler

    pool = ThreadPoolScheduler(2)
    started = threading.Event()

    def answer(state: Any) -> Any:
        if state["log"][-2] == "question B":
            started.set()
            return rx.never()
        return {"log": f"to {state['log'][-2]}"}

    app = _chat(saver_factory(), answer=answer)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "question A"}, config)
    subscription = app.stream({"log": "question B"}, config).pipe(ops.subscribe_on(pool)).subscribe()
    assert started.wait(10)
    subscription.dispose()  # returns at once: the dispose itself is scheduled on the pool
    done = threading.Event()
    app.stream({"log": "question C"}, config).subscribe(on_completed=done.set)
    assert done.wait(10)
    assert list(app.get_state(config).values["log"]) == A_THEN_C
    pool.executor.shutdown(wait=True)
