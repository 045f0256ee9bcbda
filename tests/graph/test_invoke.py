"""``invoke`` as users call it: a run that stopped for a human says so in its result, a refused resume leaves the
thread untouched, and a node may invoke another graph — on the run's own thread or a pool's, from a plain or an
``async def`` node — with the inner graph's questions going up to the outer run and its answers coming back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    Command,
    CompiledGraph,
    InvalidArgumentError,
    InvalidConfigError,
    KeyStrategy,
    MemorySaver,
    PendingInterrupt,
    RunInfo,
    RunnableConfig,
    RxGraphError,
    StateGraph,
    ThreadNotFoundError,
    interrupt,
)

POOL = ThreadPoolScheduler(2)


def _asking(saver: CheckpointSaver | None = None, **policy: Any) -> CompiledGraph:
    """draft -> approve (asks a human) -> done."""

    def approve(state: Any) -> dict[str, Any]:
        return {"log": [f"approved: {interrupt('publish?')}"]}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("draft", lambda s: {"log": ["draft"]})
        .add_node("approve", approve)
        .add_edge(START, "draft")
        .add_edge("draft", "approve")
        .add_edge("approve", END)
        .compile(checkpointer=saver, **policy)
    )


def test_invoke_of_a_run_that_stopped_for_a_human_says_so(saver_factory: Callable[[], CheckpointSaver]) -> None:
    app = _asking(saver_factory())
    config = RunnableConfig(thread_id="t")

    stopped = app.invoke({"log": ["go"]}, config)

    assert stopped["__interrupt__"] == (PendingInterrupt("approve", "inside", "publish?"),)
    assert list(stopped["log"]) == ["go", "draft"]
    final = app.invoke(Command(resume="yes"), config)
    assert "__interrupt__" not in final and list(final["log"]) == ["go", "draft", "approved: yes"]


@pytest.mark.parametrize("on_error", ["keep", "rewind"])
def test_a_resume_refused_writes_nothing_to_the_thread(
    saver_factory: Callable[[], CheckpointSaver], on_error: str
) -> None:
    saver = saver_factory()
    app = _asking(saver, on_error=on_error)
    config = RunnableConfig(thread_id="t")
    app.invoke({"log": ["go"]}, config)
    app.invoke(Command(resume="yes"), config)
    head = saver.get("t")

    with pytest.raises(InvalidArgumentError, match="has no pending interrupt"):
        app.invoke(Command(resume="yes again"), config)  # answered twice

    assert saver.get("t") == head
    assert not [c for c in saver.list("t") if c.source == "error" or c.error is not None]


@pytest.mark.parametrize("on_error", ["keep", "rewind"])
def test_a_resume_of_a_thread_that_does_not_exist_creates_nothing(
    saver_factory: Callable[[], CheckpointSaver], on_error: str
) -> None:
    saver = saver_factory()
    app = _asking(saver, on_error=on_error)

    for resume in (None, Command(resume="yes")):
        with pytest.raises(ThreadNotFoundError):
            app.invoke(resume, RunnableConfig(thread_id="nobody"))

    assert saver.get("nobody") is None


def _inner(saver: CheckpointSaver | None = None, *, asks: bool = False) -> CompiledGraph:
    def work(state: Any, run: RunInfo) -> dict[str, Any]:
        answer = interrupt(f"inner asks about {state['log'][-1]}") if asks else "no question"
        return {"log": [f"inner on {threading.current_thread().name}: {answer}"]}

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("work", work)
        .add_edge(START, "work")
        .add_edge("work", END)
        .compile(checkpointer=saver)
    )


def _outer(
    call_inner: Callable[[Any], Any], saver: CheckpointSaver | None = None, **node_options: Any
) -> CompiledGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("outer", call_inner, **node_options)
        .add_edge(START, "outer")
        .add_edge("outer", END)
        .compile(checkpointer=saver)
    )


@pytest.mark.parametrize("where", ["the run's thread", "a pool"])
def test_a_node_invokes_another_graph_and_gets_its_result(where: str) -> None:
    inner = _inner()

    def call_inner(state: Any) -> dict[str, Any]:
        result = inner.invoke({"log": ["from outer"]})
        return {"log": [result["log"][-1]]}

    outer = _outer(call_inner, scheduler=POOL if where == "a pool" else None)
    done: list[Any] = []
    # On a thread of its own, so that a hang fails the test instead of stopping the suite.
    runner = threading.Thread(target=lambda: done.append(outer.invoke({"log": ["start"]})))
    runner.start()
    runner.join(30)

    assert done, "the nested invoke() never returned"
    assert done[0]["log"][0] == "start" and done[0]["log"][1].endswith(": no question")


def test_an_async_node_invokes_another_graph_on_the_loop_of_ainvoke() -> None:
    inner = _inner()

    async def call_inner(state: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        result = inner.invoke({"log": ["from outer"]})
        return {"log": [result["log"][-1]]}

    outer = _outer(call_inner)

    async def main() -> dict[str, Any]:
        return await asyncio.wait_for(outer.ainvoke({"log": ["start"]}), 30)

    final = asyncio.run(main())
    assert final["log"][1].endswith(": no question")


@pytest.mark.parametrize("where", ["the run's thread", "a pool"])
def test_an_inner_graphs_question_goes_up_to_the_outer_run_and_its_answer_comes_back(
    saver_factory: Callable[[], CheckpointSaver], where: str
) -> None:
    inner_saver, outer_saver = saver_factory(), saver_factory()
    inner = _inner(inner_saver, asks=True)
    inner_config = RunnableConfig(thread_id="inner-1")

    def call_inner(state: Any) -> dict[str, Any]:
        result = inner.invoke({"log": [state["log"][-1]]}, inner_config)
        return {"log": [result["log"][-1]]}

    outer = _outer(call_inner, outer_saver, scheduler=POOL if where == "a pool" else None)
    config = RunnableConfig(thread_id="outer-1")

    stopped = outer.invoke({"log": ["report"]}, config)

    assert stopped["__interrupt__"] == (PendingInterrupt("outer", "inside", "inner asks about report"),)
    assert outer.get_state(config).interrupt is not None  # the outer thread waits on the inner question
    assert inner.get_state(inner_config).interrupt is not None  # and so does the inner one, for its answer

    final = outer.invoke(Command(resume="yes"), config)

    assert final["log"][0] == "report" and final["log"][-1].endswith(": yes")
    assert inner.get_state(inner_config).interrupt is None
    # The inner thread took its answer as a resume: one turn, one question, one answer.
    assert [m.split(": ")[-1] for m in inner.get_state(inner_config).values["log"][1:]] == ["yes"]


def test_a_subgraphs_nodes_are_told_their_parents_thread() -> None:
    seen: list[str | None] = []

    def work(state: Any, run: RunInfo) -> dict[str, Any]:
        seen.append(run.thread_id)
        return {"log": ["inner"]}

    inner = StateGraph({"log": KeyStrategy.APPEND}).add_node("work", work).add_edge(START, "work")
    inner_graph = inner.add_edge("work", END).compile()
    with_thread = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("sub", inner_graph)
        .add_edge(START, "sub")
        .add_edge("sub", END)
        .compile(checkpointer=MemorySaver())
    )
    without_thread = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("sub", inner_graph)
        .add_edge(START, "sub")
        .add_edge("sub", END)
        .compile()
    )

    with_thread.invoke({"log": ["go"]}, RunnableConfig(thread_id="user-42"))
    without_thread.invoke({"log": ["go"]})

    assert seen == ["user-42", None]


def test_an_invalid_config_is_an_rxgraph_error_with_pydantic_s_details() -> None:
    with pytest.raises(InvalidConfigError) as caught:
        RunnableConfig(thread_id=" ", recursion_limit=0, nope=1)  # type: ignore[call-arg]
    error = caught.value
    assert isinstance(error, RxGraphError) and isinstance(error, ValueError)
    assert [e["loc"] for e in error.errors] == [("thread_id",), ("recursion_limit",), ("nope",)]
    assert error.argument == "thread_id" and "recursion_limit" in str(error)
    assert isinstance(error.__cause__, pydantic.ValidationError)
    with pytest.raises(InvalidConfigError, match="thread_id"):
        RunnableConfig.model_validate({"thread_id": 3})
    assert RunnableConfig.model_validate({"thread_id": "t"}) == RunnableConfig(thread_id="t")


def test_an_inner_graphs_two_parallel_questions_go_up_as_one_and_a_map_answers_them() -> None:
    inner_graph = StateGraph({"log": KeyStrategy.APPEND}).add_node("split", lambda s: None)

    def asker(name: str) -> Callable[[Any], dict[str, Any]]:
        return lambda state: {"log": [f"{name}: {interrupt(f'{name}?')}"]}

    for name in ("x", "y"):
        inner_graph.add_node(name, asker(name)).add_edge("split", name).add_edge(name, END)
    inner = inner_graph.add_edge(START, "split").compile(MemorySaver())
    inner_config = RunnableConfig(thread_id="inner-1")

    def call_inner(state: Any) -> dict[str, Any]:
        return {"log": inner.invoke({"log": ["go"]}, inner_config)["log"][1:]}

    outer = _outer(call_inner, MemorySaver())
    config = RunnableConfig(thread_id="outer-1")
    (question,) = outer.invoke({"log": ["start"]}, config)["__interrupt__"]
    assert question.value == {"0:x:0": "x?", "1:y:0": "y?"}  # the inner questions, by id, as one
    final = outer.invoke(Command(resume={"0:x:0": "yes", "1:y:0": "no"}), config)
    assert final["log"][-2:] == ["x: yes", "y: no"]
    assert inner.get_state(inner_config).interrupts == ()
