"""Where ``interrupt()`` works: in a node's call, and in what goes on of it after the call (a stream, a context copied
during it), but not between two steps, in the run's subscriber, or in a context copied during a call that was over
— on the direct step (one context var set for a stretch of steps) as on the general path (one per call)."""

from __future__ import annotations

import contextvars
import itertools
import threading
from typing import Any

import pytest
import reactivex as rx
from _support import StepPath

from rxgraph import (
    END,
    START,
    Command,
    InterruptOutput,
    InvalidArgumentError,
    MemorySaver,
    NodeInterrupt,
    NodeOutput,
    RunnableConfig,
    StateGraph,
    interrupt,
)
from rxgraph.graph._interrupt import in_node_call


def _chain(*actions: Any) -> StateGraph:
    graph = StateGraph()
    names = [f"n{index}" for index in range(len(actions))]
    for name, action in zip(names, actions, strict=True):
        graph.add_node(name, action)
    graph.add_edge(START, names[0])
    for source, target in itertools.pairwise(names):
        graph.add_edge(source, target)
    return graph.add_edge(names[-1], END)


def _refused(call: Any) -> bool:
    try:
        call()
    except InvalidArgumentError:
        return True
    return False


def test_each_node_call_is_a_node_call_and_the_subscriber_between_them_is_not(step_path: StepPath) -> None:
    seen: list[Any] = []

    def node(state: Any) -> dict[str, Any]:
        seen.append(("node", in_node_call()))
        return {"x": state.get("x", 0) + 1}

    def on_next(output: Any) -> None:
        if isinstance(output, NodeOutput):
            seen.append(("subscriber", in_node_call(), _refused(lambda: interrupt("from the subscriber"))))

    _chain(node, node, node).compile().stream({}).subscribe(on_next)

    assert seen == [("node", True), ("subscriber", False, True)] * 3
    step_path.check()
    assert not in_node_call()  # and nothing is left behind in the caller's context


def test_a_context_copied_during_a_call_that_returned_its_update_is_no_node_call_after_it(
    step_path: StepPath,
) -> None:
    copied: list[contextvars.Context] = []

    def node(state: Any) -> dict[str, Any]:
        copied.append(contextvars.copy_context())
        assert copied[-1].run(in_node_call)  # during the call, the copy is inside it
        return {"x": 1}

    _chain(node, lambda s: {"y": 2}).compile().invoke({})

    assert not copied[0].run(in_node_call)
    assert copied[0].run(_refused, lambda: interrupt("too late"))
    step_path.check()


def test_a_stream_that_goes_on_in_a_context_copied_during_the_call_may_still_interrupt(step_path: StepPath) -> None:
    """The node returns a stream and calls ``interrupt()`` when it is subscribed, after the call, in the context it
    copied during it: the run stops for the question; resumed, the same code gets the answer."""

    def ask(state: Any) -> Any:
        context = contextvars.copy_context()
        return rx.defer(lambda _: rx.of({"answer": context.run(interrupt, "go on?")}))

    app = _chain(lambda s: {"x": 1}, ask, lambda s: {"done": s["answer"]}).compile(MemorySaver())
    config = RunnableConfig(thread_id="t")
    outputs: list[Any] = []
    app.stream({}, config).subscribe(outputs.append)

    assert isinstance(outputs[-1], InterruptOutput) and outputs[-1].interrupt.value == "go on?"
    assert app.invoke(Command(resume="yes"), config) == {"x": 1, "answer": "yes", "done": "yes"}
    step_path.check(lands=True)


def test_an_interrupt_in_a_later_direct_step_is_not_mistaken_for_an_earlier_one(step_path: StepPath) -> None:
    """One scope serves a stretch of direct steps: the answers of one call, and a caught question, never reach the
    next."""
    asked: list[str] = []

    def first(state: Any) -> dict[str, Any]:
        try:
            interrupt("first?")
        except NodeInterrupt:
            asked.append("first")
            raise
        return {"a": 1}

    app = _chain(lambda s: {"x": 1}, lambda s: {"y": 2}, first).compile(MemorySaver())
    config = RunnableConfig(thread_id="t")
    assert app.invoke({}, config)["__interrupt__"][0].value == "first?"
    assert app.invoke(Command(resume="ok"), config) == {"x": 1, "y": 2, "a": 1}
    assert asked == ["first"]
    step_path.check()


@pytest.mark.parametrize("returns", ["a stream", "an error"])
def test_a_stretch_goes_on_after_a_call_that_kept_its_scope(step_path: StepPath, returns: str) -> None:
    """After a call that returned a stream, the next direct steps are still node calls, each its own; after one that
    raised, nothing of the scope is left in the caller's context."""
    seen: list[bool] = []

    def streams(state: Any) -> Any:
        seen.append(in_node_call())
        if returns == "an error" and not state.get("retried"):
            raise ValueError("once")
        return rx.of({"s": 1})

    def plain(state: Any) -> dict[str, Any]:
        seen.append(in_node_call())
        return {"p": len(seen)}

    app = _chain(plain, streams, plain, plain).compile()
    if returns == "an error":
        with pytest.raises(ValueError, match="once"):
            app.invoke({})
        assert seen == [True, True] and not in_node_call()
        return
    assert app.invoke({}) == {"p": 4, "s": 1}
    assert seen == [True, True, True, True] and not in_node_call()
    step_path.check()


def test_runs_on_many_threads_at_once_each_answer_their_own_nodes(step_path: StepPath) -> None:
    """Each drive stretch sets the scope in its own thread's context: eight runs stepping at once, on eight real
    threads, each stop for their own question and get their own answer back, in the node that asked."""
    gate = threading.Barrier(8)

    def ask(state: Any) -> dict[str, Any]:
        return {"answer": interrupt(f"question of {state['who']}")}

    def noted(state: Any) -> dict[str, Any]:
        assert in_node_call()
        return {"steps": state.get("steps", 0) + 1}

    app = _chain(noted, noted, ask, noted, noted).compile(MemorySaver())
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def turn(who: str) -> None:
        try:
            config = RunnableConfig(thread_id=who)
            gate.wait()
            asked = app.invoke({"who": who}, config)["__interrupt__"][0].value
            gate.wait()
            results[who] = (asked, app.invoke(Command(resume=f"answer for {who}"), config))
        except BaseException as error:  # reported below, on the test's thread
            errors.append(error)
            gate.abort()  # the others stop waiting for this one

    threads = [threading.Thread(target=turn, args=(f"t{index}",)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not errors
    for who, (asked, final) in results.items():
        assert asked == f"question of {who}"
        assert final == {"who": who, "steps": 4, "answer": f"answer for {who}"}
    assert len(results) == 8
    step_path.check()
