"""``invoke`` and ``ainvoke`` run quietly (no ``NodeOutput`` is made or handed over: they return the final state),
and land exactly what ``stream`` lands: the same final values, the same checkpoints, the same stops and errors, and
a preempted ``invoke`` still fails with ``RunInterruptedError`` after its rewind."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Callable
from typing import Annotated, Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from typing_extensions import TypedDict

from rxgraph import (
    END,
    START,
    Command,
    CompiledGraph,
    KeyStrategy,
    MemorySaver,
    RunInterruptedError,
    RunnableConfig,
    Send,
    StateGraph,
)


class _Typed(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    seen: str


def _chain() -> StateGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", lambda s: None)
        .add_node("c", lambda s, config: {"log": f"c, up to {config.recursion_limit} steps"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END)
    )


def _routes_and_commands() -> StateGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: Command(update={"log": "a"}, goto="c"), destinations=("c",))
        .add_node("c", lambda s: {"log": "c"})
        .add_node("d", lambda s: {"log": "d"})
        .add_edge(START, "a")
        .add_conditional_edges("c", lambda s: "d" if len(s["log"]) < 4 else END, ["d", END])
        .add_edge("d", "c")
    )


def _fan_out() -> StateGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("split", lambda s: None)
        .add_node("work", lambda s: {"log": f"work {s['i']}"})
        .add_node("x", lambda s: {"log": "x"})
        .add_node("join", lambda s: {"log": "join"})
        .add_edge(START, "split")
        .add_conditional_edges("split", lambda s: [Send("work", {"i": i}) for i in range(3)])
        .add_edge("split", "x")
        .add_edge(["work", "x"], "join")
        .add_edge("join", END)
    )


def _streaming_and_typed() -> StateGraph:
    return (
        StateGraph(_Typed, output_schema=TypedDict("Out", {"log": list[str]}))  # type: ignore[operator]
        .add_node("talk", lambda s: rx.of({"log": ["t1"]}, {"log": ["t2"]}))
        .add_node("seen", lambda s: {"seen": "yes", "log": ["seen"]})
        .add_edge(START, "talk")
        .add_edge("talk", "seen")
        .add_edge("seen", END)
    )


def _failing() -> StateGraph:
    def boom(state: Any) -> Any:
        raise ValueError("boom")

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("boom", boom)
        .add_edge(START, "a")
        .add_edge("a", "boom")
        .add_edge("boom", END)
    )


GRAPHS: dict[str, tuple[Callable[[], StateGraph], dict[str, Any]]] = {
    "chain": (_chain, {}),
    "routes and commands": (_routes_and_commands, {}),
    "fan-out with a join": (_fan_out, {}),
    "streaming, typed, output schema": (_streaming_and_typed, {}),
    "a stop before a node": (_chain, {"interrupt_before": ["c"]}),
    "a failing node": (_failing, {}),
}


def _landed(graph: CompiledGraph, thread: str) -> list[tuple[Any, ...]]:
    history = graph.get_state_history(RunnableConfig(thread_id=thread))
    return [
        (s.checkpoint.seq, s.checkpoint.source, s.checkpoint.node, s.checkpoint.next, dict(s.checkpoint.values))
        for s in reversed(history)
        if s.checkpoint is not None
    ]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as error:
        return type(error), str(error)


@pytest.mark.parametrize("name", list(GRAPHS))
def test_invoke_and_ainvoke_land_what_stream_lands(name: str) -> None:
    build, options = GRAPHS[name]
    graph = build().compile(checkpointer=MemorySaver(), **options)
    inputs = {"log": ["in"]} if name == "streaming, typed, output schema" else {"log": "in"}

    def streamed() -> Any:  # the state the last output shows (a NodeOutput's, or the stop's)
        outputs = graph.stream(inputs, RunnableConfig(thread_id="streamed")).pipe(ops.to_list()).run()
        return dict(outputs[-1].state)

    invoked = _outcome(lambda: graph.invoke(inputs, RunnableConfig(thread_id="invoked")))
    awaited = _outcome(lambda: asyncio.run(graph.ainvoke(inputs, RunnableConfig(thread_id="awaited"))))
    expected = _outcome(streamed)

    if isinstance(expected, tuple):  # the run failed: the same error, everywhere
        assert invoked == awaited == expected
    else:
        stops = invoked.pop("__interrupt__", None)
        assert (stops is not None) == ("interrupt_before" in options)
        assert invoked == expected
        assert awaited == expected
    assert _landed(graph, "invoked") == _landed(graph, "streamed") == _landed(graph, "awaited")


def test_a_quiet_invoke_preempted_by_a_newer_run_is_rewound_and_raises() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(state: Any) -> Any:
        if state["log"][-1] == "question B":
            entered.set()
            assert release.wait(30)
        return {"log": f"answer to {state['log'][-1]}"}

    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("answer", slow)
        .add_edge(START, "answer")
        .add_edge("answer", END)
        .compile(checkpointer=MemorySaver())
    )
    config = RunnableConfig(thread_id="t")
    graph.invoke({"log": "question A"}, config)
    before = list(graph.get_state(config).values["log"])
    failed: list[BaseException] = []

    def first() -> None:
        try:
            graph.invoke({"log": "question B"}, config)
        except BaseException as error:
            failed.append(error)

    invoking = threading.Thread(target=first)
    invoking.start()
    assert entered.wait(30)
    second_done = threading.Event()
    graph.stream({"log": "question C"}, config.model_copy(update={"multitask": "interrupt"})).subscribe(
        on_completed=second_done.set
    )
    release.set()
    invoking.join(30)
    assert second_done.wait(30)

    assert len(failed) == 1 and isinstance(failed[0], RunInterruptedError)
    assert list(graph.get_state(config).values["log"]) == [*before, "question C", "answer to question C"]
    sources = [s.checkpoint.source for s in reversed(graph.get_state_history(config)) if s.checkpoint is not None]
    assert "rewind" in sources
