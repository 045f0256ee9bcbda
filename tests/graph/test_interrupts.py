"""Interrupts: a run stops for a human (before a node, after one, or inside one that calls ``interrupt``), the
thread says so, and ``Command(resume=...)`` goes on — deterministically, and atomically under cancellation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    Command,
    CompiledGraph,
    InterruptOutput,
    InterruptSwallowedError,
    InvalidArgumentError,
    KeyStrategy,
    NodeInterrupt,
    NodeOutput,
    PendingInterrupt,
    RetryPolicy,
    RunnableConfig,
    SqliteSaver,
    StateGraph,
    interrupt,
)

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _approval_graph(saver: CheckpointSaver, calls: list[str]) -> CompiledGraph:
    """draft -> approve (asks a human) -> publish."""

    def approve(state: Any) -> dict[str, Any]:
        calls.append("approve")
        answer = interrupt({"draft": state["draft"], "question": "publish?"})
        return {"approved": answer}

    graph = StateGraph({"log": KeyStrategy.APPEND})
    graph.add_node("draft", lambda s: {"draft": f"post about {s['topic']}", "log": "draft"})
    graph.add_node("approve", approve)
    graph.add_node("publish", lambda s: {"log": "published" if s["approved"] == "yes" else "dropped"})
    graph.add_edge(START, "draft").add_edge("draft", "approve").add_edge("approve", "publish")
    return graph.add_edge("publish", END).compile(saver)


def _outputs(app: CompiledGraph, input: Any, config: RunnableConfig) -> list[Any]:
    outputs: list[Any] = []
    app.stream(input, config).subscribe(outputs.append)
    return outputs


def test_a_node_interrupts_the_thread_says_so_and_a_command_resumes_it(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    calls: list[str] = []
    saver = saver_factory()
    app = _approval_graph(saver, calls)
    config = RunnableConfig(thread_id="t")
    first = _outputs(app, {"topic": "rx"}, config)
    assert [type(o).__name__ for o in first] == ["NodeOutput", "InterruptOutput"]
    stop = first[-1]
    assert isinstance(stop, InterruptOutput) and stop.node == "approve"
    assert stop.value == {"draft": "post about rx", "question": "publish?"}
    snapshot = app.get_state(config)
    assert snapshot.next == ("approve",)
    assert snapshot.interrupt == PendingInterrupt("approve", "inside", stop.value)
    assert snapshot.checkpoint is not None and snapshot.checkpoint.source == "interrupt"
    assert "approved" not in snapshot.values  # the state before the interrupted node

    final = app.invoke(Command(resume="yes"), config)
    assert final["log"] == ["draft", "published"] and final["approved"] == "yes"
    assert calls == ["approve", "approve"]  # the node ran again, from its start, with the answer
    assert app.get_state(config).interrupt is None


def test_a_node_that_asks_twice_gets_its_answers_back_in_order(saver_factory: Callable[[], CheckpointSaver]) -> None:
    asked: list[Any] = []

    def form(state: Any) -> dict[str, Any]:
        name = interrupt("name?")
        asked.append(name)
        age = interrupt("age?")
        return {"name": name, "age": age}

    app = StateGraph().add_node("form", form).add_edge(START, "form").add_edge("form", END).compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    assert _outputs(app, {}, config)[-1].value == "name?"
    assert _outputs(app, Command(resume="Ada"), config)[-1].value == "age?"
    pending = app.get_state(config).interrupt
    assert pending is not None and pending.resumes == ("Ada",)
    assert app.invoke(Command(resume=36), config) == {"name": "Ada", "age": 36}
    assert asked == ["Ada", "Ada"]


def test_interrupt_before_and_after_stop_around_a_node_and_resume_goes_on(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    graph = StateGraph({"log": KeyStrategy.APPEND})
    for name in ("a", "b", "c"):
        graph.add_node(name, lambda s, *, _n=name: {"log": _n})  # keyword-only: the action takes the state only
    graph.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    app = graph.compile(saver_factory(), interrupt_before=["b"], interrupt_after=["b"])
    config = RunnableConfig(thread_id="t")
    first = _outputs(app, {}, config)
    assert [(type(o).__name__, o.node) for o in first] == [("NodeOutput", "a"), ("InterruptOutput", "b")]
    assert app.get_state(config).interrupt == PendingInterrupt("b", "before")
    second = _outputs(app, None, config)  # stream(None) goes on like Command() does
    assert [(type(o).__name__, o.node) for o in second] == [("NodeOutput", "b"), ("InterruptOutput", "b")]
    assert app.get_state(config).interrupt == PendingInterrupt("b", "after")
    assert app.get_state(config).next == ("c",)
    assert app.invoke(Command(resume="ignored"), config)["log"] == ["a", "b", "c"]


def test_new_input_while_an_interrupt_is_pending_starts_a_new_turn(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    calls: list[str] = []
    app = _approval_graph(saver_factory(), calls)
    config = RunnableConfig(thread_id="t")
    _outputs(app, {"topic": "rx"}, config)
    again = _outputs(app, {"topic": "graphs"}, config)
    assert again[-1].value["draft"] == "post about graphs"  # the pending question was left unanswered
    assert app.invoke(Command(resume="no"), config)["log"] == ["draft", "draft", "dropped"]


def test_a_command_needs_a_pending_interrupt_and_interrupt_needs_a_node(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    app = StateGraph().add_node("a", lambda s: {"x": 1}).add_edge(START, "a").add_edge("a", END)
    compiled = app.compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    compiled.invoke({}, config)
    with pytest.raises(InvalidArgumentError, match="has no pending interrupt"):
        compiled.invoke(Command(resume=1), config)
    with pytest.raises(InvalidArgumentError, match="interrupt\\(\\) is called from a node's action"):
        interrupt("outside")


def test_an_async_node_interrupts_by_returning_node_interrupt(saver_factory: Callable[[], CheckpointSaver]) -> None:
    async def ask(state: Any) -> Any:
        if "answer" not in state:
            return NodeInterrupt("what now?")
        return {"done": state["answer"]}

    app = StateGraph().add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END).compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    assert app.invoke({}, config) == {"__interrupt__": (PendingInterrupt("ask", "inside", "what now?"),)}
    assert app.get_state(config).interrupt == PendingInterrupt("ask", "inside", "what now?")
    app.update_state(config, {"answer": "this"})  # edit the state; the interrupt stays pending
    assert app.get_state(config).interrupt is not None
    assert app.invoke(Command(resume=None), config) == {"answer": "this", "done": "this"}


def test_an_interrupt_in_a_parallel_superstep_keeps_the_finished_branches_and_only_it_gets_the_answer(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    runs: list[str] = []

    def plain(name: str) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            runs.append(name)
            return {"log": name}

        return action

    def asks(state: Any) -> dict[str, Any]:
        runs.append("asks")
        return {"log": f"asks:{interrupt('ok?')}"}

    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", plain("a"))
    graph.add_node("x", plain("x")).add_node("asks", asks).add_node("z", plain("z"))
    for name in ("x", "asks", "z"):
        graph.add_edge("a", name)
    app = graph.add_edge(START, "a").add_edge(["x", "asks", "z"], END).compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    stop = _outputs(app, {}, config)[-1]
    assert isinstance(stop, InterruptOutput) and stop.interrupt.task == 1
    assert app.get_state(config).next == ("x", "asks", "z")
    done = app.get_state(config).checkpoint.pending["done"]  # type: ignore[union-attr]
    assert done == {"0": [["update", {"log": "x"}]], "2": [["update", {"log": "z"}]]}  # x and z finished: kept
    assert app.invoke(Command(resume="fine"), config)["log"] == ["a", "x", "asks:fine", "z"]
    # The superstep went on after the question (its other branches ran), and x and z do not run again (after
    # LangGraph's pending writes): only the node that asked runs again.
    assert runs == ["a", "x", "asks", "z", "asks"]


def test_an_interrupt_survives_the_process_on_a_sqlite_file(tmp_path: Path) -> None:
    config = RunnableConfig(thread_id="t")
    with SqliteSaver(tmp_path / "hitl.db") as saver:
        _outputs(_approval_graph(saver, []), {"topic": "rx"}, config)
    with SqliteSaver(tmp_path / "hitl.db") as reopened:
        app = _approval_graph(reopened, [])
        pending = app.get_state(config).interrupt
        assert pending is not None and pending.value["question"] == "publish?"
        assert app.invoke(Command(resume="yes"), config)["log"] == ["draft", "published"]


# -- virtual time ----------------------------------------------------------------------------------------------------


def _slow_approval(scheduler: TestScheduler, saver: CheckpointSaver) -> CompiledGraph:
    def approve(state: Any) -> Any:
        answer = interrupt("publish?")
        return rx.timer(10, scheduler=scheduler).pipe(ops.map(lambda _: {"approved": answer}))

    graph = StateGraph().add_node("draft", lambda s: {"draft": "d"}).add_node("approve", approve)
    graph.add_node("publish", lambda s: scheduler.create_cold_observable(on_next(20, {"done": 1}), on_completed(20)))
    graph.add_edge(START, "draft").add_edge("draft", "approve").add_edge("approve", "publish")
    return graph.add_edge("publish", END).compile(saver)


def test_a_resumed_run_cut_midway_puts_the_interrupt_back(saver_factory: Callable[[], CheckpointSaver]) -> None:
    scheduler = TestScheduler()
    saver = saver_factory()
    app = _slow_approval(scheduler, saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(lambda: app.stream({}, config))
    assert [type(m.value.value).__name__ for m in observed.messages[:-1]] == ["NodeOutput", "InterruptOutput"]
    interrupted = saver.get("t")
    cut = scheduler.start(
        lambda: app.stream(Command(resume="yes"), config), created=1000, subscribed=1000, disposed=1015
    )
    cut_nodes = [m.value.value.node for m in cut.messages if isinstance(m.value.value, NodeOutput)]
    assert cut_nodes == ["approve"]  # approve finished at 1010; publish was cut
    head = saver.get("t")
    assert interrupted is not None and head is not None and head.source == "rewind"
    assert head.values == interrupted.values and head.parent_id == interrupted.id
    # The rewind puts back the state the resume started from; the interrupt itself is answered again.
    again = scheduler.start(lambda: app.stream(Command(resume="yes"), config), created=2000, subscribed=2000)
    nodes = [
        m.value.value.node for m in again.messages if m.value.kind == "N" and isinstance(m.value.value, NodeOutput)
    ]
    assert nodes == ["approve", "publish"]


def test_a_node_with_a_retry_policy_interrupts_and_is_never_retried_for_it(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    attempts: list[Any] = []

    def ask(state: Any) -> dict[str, Any]:
        attempts.append("call")
        if len(attempts) == 1:
            raise ConnectionError("flaky")  # retried
        return {"answer": interrupt("sure?")}

    policy = RetryPolicy(max_attempts=5, backoff=0.0, retry_on=Exception)  # would retry anything else
    graph = StateGraph().add_node("ask", ask, retry=policy).add_edge(START, "ask").add_edge("ask", END)
    app = graph.compile(saver_factory())
    scheduler = TestScheduler()
    config = RunnableConfig(thread_id="t", scheduler=scheduler)  # the backoff waits on it
    observed = scheduler.start(lambda: app.stream({}, config))
    assert isinstance(observed.messages[-2].value.value, InterruptOutput)
    assert observed.messages[-1].value.kind == "C"
    assert attempts == ["call", "call"]
    assert app.invoke(Command(resume="yes"), config) == {"answer": "yes"}
    assert attempts == ["call", "call", "call"]


@pytest.mark.parametrize("policy", [None, RetryPolicy(max_attempts=2, backoff=0.0)], ids=["plain", "retried"])
def test_an_async_node_asks_with_interrupt_and_gets_its_answers_in_order(
    saver_factory: Callable[[], CheckpointSaver], policy: RetryPolicy | None
) -> None:
    async def form(state: Any) -> dict[str, Any]:
        name = interrupt("name?")
        age = interrupt("age?")  # the body runs on the run's loop, in a scope of its own
        return {"name": name, "age": age}

    graph = StateGraph().add_node("form", form, retry=policy)
    app = graph.add_edge(START, "form").add_edge("form", END).compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    assert app.invoke({}, config) == {"__interrupt__": (PendingInterrupt("form", "inside", "name?"),)}
    assert app.get_state(config).interrupt == PendingInterrupt("form", "inside", "name?")
    app.invoke(Command(resume="Ada"), config)
    assert app.get_state(config).interrupt == PendingInterrupt("form", "inside", "age?", resumes=("Ada",))
    assert app.invoke(Command(resume=36), config) == {"name": "Ada", "age": 36}


def test_a_stop_after_the_last_node_is_answered_and_the_thread_no_longer_waits(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    graph = StateGraph().add_node("last", lambda s: {"done": True}).add_edge(START, "last").add_edge("last", END)
    app = graph.compile(saver_factory(), interrupt_after=["last"])
    config = RunnableConfig(thread_id="t")
    assert isinstance(_outputs(app, {}, config)[-1], InterruptOutput)
    assert app.get_state(config).interrupt == PendingInterrupt("last", "after")
    assert app.invoke(Command(resume="seen"), config) == {"done": True}
    assert app.get_state(config).interrupt is None and app.get_state(config).next == ()
    with pytest.raises(InvalidArgumentError, match="has no pending interrupt"):
        app.invoke(Command(resume="again"), config)


def _catching_graph(saver: CheckpointSaver, *, retry: RetryPolicy | None = None, is_async: bool = False) -> Any:
    """ask (catches its interrupt with `except Exception` and returns anyway) -> done."""

    def ask(state: Any) -> dict[str, Any]:
        try:
            answer = interrupt("ok?")
        except Exception:
            answer = "nobody said so"
        return {"answer": answer}

    async def ask_async(state: Any) -> dict[str, Any]:
        return ask(state)

    graph = StateGraph()
    graph.add_node("ask", ask_async if is_async else ask, retry=retry)
    graph.add_node("done", lambda s: {"done": True})
    graph.add_edge(START, "ask").add_edge("ask", "done").add_edge("done", END)
    return graph.compile(saver)


@pytest.mark.parametrize(
    ("retry", "is_async"),
    [(None, False), (None, True), (RetryPolicy(max_attempts=3, retry_on=Exception), False)],
    ids=["plain", "async", "retried"],
)
def test_a_node_that_swallows_its_interrupt_fails_the_run_naming_the_node(
    saver_factory: Callable[[], CheckpointSaver], retry: RetryPolicy | None, is_async: bool
) -> None:
    saver = saver_factory()
    app = _catching_graph(saver, retry=retry, is_async=is_async)
    config = RunnableConfig(thread_id="t")
    with pytest.raises(InterruptSwallowedError) as caught:
        app.invoke({"q": 1}, config)

    assert caught.value.node == "ask" and "'ask'" in str(caught.value)
    state = app.get_state(config)  # the node's update never landed, and "done" never ran
    assert "answer" not in state.values and "done" not in state.values and state.interrupt is None
    assert state.checkpoint is not None and state.checkpoint.error is not None
    assert "InterruptSwallowedError" in state.checkpoint.error


def test_a_node_may_catch_other_errors_around_interrupt_and_re_raise_node_interrupt(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    def ask(state: Any) -> dict[str, Any]:
        try:
            answer = interrupt("ok?")
        except NodeInterrupt:
            raise
        except Exception:  # pragma: no cover - nothing else is raised here
            answer = None
        return {"answer": answer}

    graph = StateGraph()
    graph.add_node("ask", ask)
    app = graph.add_edge(START, "ask").add_edge("ask", END).compile(saver_factory())
    config = RunnableConfig(thread_id="t")
    assert isinstance(_outputs(app, {"q": 1}, config)[-1], InterruptOutput)
    _outputs(app, Command(resume="yes"), config)
    assert app.get_state(config).values["answer"] == "yes"


def _two_askers(saver: CheckpointSaver, runs: list[str]) -> CompiledGraph:
    """a -> (ask_x, ask_y, plain) in parallel -> END; both askers call interrupt()."""

    def asker(name: str) -> Callable[[Any], dict[str, Any]]:
        def action(state: Any) -> dict[str, Any]:
            runs.append(name)
            return {"log": f"{name}:{interrupt(f'{name}?')}"}

        return action

    def plain(state: Any) -> dict[str, Any]:
        runs.append("plain")
        return {"log": "plain"}

    graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("a", lambda s: {"log": "a"})
    graph.add_node("ask_x", asker("ask_x")).add_node("ask_y", asker("ask_y")).add_node("plain", plain)
    for name in ("ask_x", "ask_y", "plain"):
        graph.add_edge("a", name).add_edge(name, END)
    return graph.add_edge(START, "a").compile(saver)


def test_two_parallel_interrupts_are_both_pending_with_ids_and_a_map_answers_both(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # After LangGraph's test_parallel_interrupts / test_multiple_interrupts_resume_map: every question of the
    # superstep is pending at once, each with its own id, and Command(resume={id: answer}) answers several.
    runs: list[str] = []
    app = _two_askers(saver_factory(), runs)
    config = RunnableConfig(thread_id="t")
    outputs = _outputs(app, {"log": "in"}, config)
    asked = [o.interrupt for o in outputs if isinstance(o, InterruptOutput)]
    assert [(i.node, i.value, i.id) for i in asked] == [
        ("ask_x", "ask_x?", "0:ask_x:0"),
        ("ask_y", "ask_y?", "1:ask_y:0"),
    ]
    state = app.get_state(config)
    assert state.interrupts == tuple(asked) and state.interrupt == asked[0]
    with pytest.raises(InvalidArgumentError, match=r"waits on 2 interrupts"):
        app.invoke(Command(resume="one answer for two"), config)
    result = app.invoke(Command(resume={asked[0].id: "yes", asked[1].id: "no"}), config)
    assert result["log"] == ["in", "a", "ask_x:yes", "ask_y:no", "plain"]
    assert runs == ["ask_x", "ask_y", "plain", "ask_x", "ask_y"]  # plain finished the first time: kept, not rerun
    assert app.get_state(config).interrupts == ()


def test_answering_one_of_two_parallel_interrupts_asks_the_other_again(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    runs: list[str] = []
    app = _two_askers(saver_factory(), runs)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": "in"}, config)
    first, second = app.get_state(config).interrupts
    stopped = app.invoke(Command(resume={first.id: "yes"}), config)
    assert [i.id for i in stopped["__interrupt__"]] == [second.id]  # ask_x answered and kept; ask_y asks again
    assert app.get_state(config).checkpoint.pending["done"]["0"] == [["update", {"log": "ask_x:yes"}]]  # type: ignore[union-attr]
    assert app.invoke(Command(resume="no"), config)["log"] == ["in", "a", "ask_x:yes", "ask_y:no", "plain"]
    assert runs == ["ask_x", "ask_y", "plain", "ask_x", "ask_y", "ask_y"]
