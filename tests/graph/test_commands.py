"""A node returns ``Command(update=..., goto=...)``: it updates the state and says where the run goes, in one step —
as LangGraph's nodes do for handoffs (after LangGraph's tests of ``Command`` in ``test_pregel.py``: goto a node, a
list, a ``Send``, ``END``, with the node's edges still followed; destinations from the return annotation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
import reactivex as rx
from reactivex import operators as ops

from rxgraph import (
    END,
    START,
    CheckpointSaver,
    Command,
    GraphValidationError,
    InvalidArgumentError,
    InvalidUpdateError,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    RetryPolicy,
    RouteError,
    RunnableConfig,
    Send,
    StateGraph,
    ThreadNotFoundError,
)
from rxgraph.testing import assert_cancellation_safe

CONFIG = RunnableConfig(thread_id="t")


def _log(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda state: {"log": name}


def _handoff(saver: CheckpointSaver | None = None) -> Any:
    """triage hands off to billing or support by the question, with its own update; both end the turn."""

    def triage(state: Any) -> Command[Literal["billing", "support"]]:
        target = "billing" if "invoice" in state["question"] else "support"
        return Command(update={"log": f"triage -> {target}"}, goto=target)

    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("triage", triage)
        .add_node("billing", _log("billing"))
        .add_node("support", _log("support"))
        .add_edge(START, "triage").add_edge("billing", END).add_edge("support", END)
        .compile(saver)
    )  # fmt: skip


def test_a_node_updates_and_hands_off_in_one_step_with_destinations_from_its_annotation() -> None:
    app = _handoff(MemorySaver())
    assert app.invoke({"question": "my invoice"}, CONFIG)["log"] == ["triage -> billing", "billing"]
    assert app.invoke({"question": "it broke"}, RunnableConfig(thread_id="u"))["log"] == [
        "triage -> support",
        "support",
    ]
    assert '-.->|"goto"|' in app.draw_mermaid()  # both destinations drawn


def test_goto_takes_a_list_a_send_and_end_and_the_node_s_edges_are_still_followed() -> None:
    seen: list[Any] = []

    def fan(state: Any) -> Command[Any]:
        return Command(update={"log": "fan"}, goto=["a", "b", "a", Send("c", {"item": 1}), END])

    def c(payload: Any) -> dict[str, Any]:
        seen.append(dict(payload))
        return {"log": "c"}

    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("fan", fan, destinations=["a", "b", "c"])
        .add_node("a", _log("a")).add_node("b", _log("b")).add_node("c", c).add_node("edge", _log("edge"))
        .add_edge(START, "fan").add_edge("fan", "edge")
        .add_edge("a", END).add_edge("b", END).add_edge("c", END).add_edge("edge", END)
        .compile()
    )  # fmt: skip
    outputs: list[str] = []
    app.stream({}).subscribe(lambda o: isinstance(o, NodeOutput) and outputs.append(o.node))
    assert outputs == ["fan", "edge", "a", "b", "c"]  # the edge's task first, then goto's, a once, one Send
    assert seen == [{"item": 1}]


def test_the_next_superstep_of_a_command_is_checkpointed_and_a_resume_takes_it_up() -> None:
    saver = MemorySaver()
    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("route", lambda s: Command(update={"log": "route"}, goto=Send("work", {"n": 2})),
                  destinations=["work"])
        .add_node("work", lambda payload: {"log": f"work {payload['n']}"})
        .add_edge(START, "route").add_edge("work", END)
        .compile(saver, interrupt_after=["route"])
    )  # fmt: skip
    app.invoke({}, CONFIG)
    head = saver.get("t")
    assert head is not None and head.next == ("work",) and head.pending is not None
    assert head.pending["send"] == [[0, {"n": 2}]]
    assert app.invoke(None, CONFIG)["log"] == ["route", "work 2"]


def test_commands_from_async_and_retried_nodes_route_the_same_way() -> None:
    attempts: list[int] = []

    async def choose(state: Any) -> Command[Literal["done"]]:
        return Command(update={"log": "async"}, goto="done")

    def flaky(state: Any) -> Command[Literal["done"]]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("reset")
        return Command(update={"log": "retried"}, goto="done")

    for node, retry in ((choose, None), (flaky, RetryPolicy(backoff=0))):
        app = (
            StateGraph({"log": KeyStrategy.APPEND})
            .add_node("choose", node, retry=retry)
            .add_node("done", _log("done"))
            .add_edge(START, "choose").add_edge("done", END)
            .compile()
        )  # fmt: skip
        assert app.invoke({})["log"][-1] == "done"
    assert len(attempts) == 2


def test_bad_commands_and_graphs_are_refused_clearly() -> None:
    def graph(action: Any, **node: Any) -> Any:
        return (
            StateGraph()
            .add_node("n", action, **node).add_node("m", lambda s: None)
            .add_edge(START, "n").add_edge("m", END)
        )  # fmt: skip

    with pytest.raises(GraphValidationError, match=r"'n'.*no outgoing edge.*destinations"):
        graph(lambda s: Command(goto="m")).compile()
    with pytest.raises(GraphValidationError, match="unknown node 'x'"):
        graph(lambda s: Command(goto="m"), destinations=["m", "x"]).compile()
    with pytest.raises(RouteError, match=r"Command\(goto='nowhere'\)"):
        graph(lambda s: Command(goto="nowhere"), destinations=["m"]).compile().invoke({})
    with pytest.raises(InvalidUpdateError, match="resume="):
        graph(lambda s: Command(resume="yes", goto="m"), destinations=["m"]).compile().invoke({})
    app = graph(lambda s: Command(goto="m"), destinations=["m"]).compile(MemorySaver())
    app.invoke({}, CONFIG)
    with pytest.raises(RouteError, match=r"input Command\(goto='x'\)"):
        app.invoke(Command(goto="x"), CONFIG)


def test_a_command_as_input_updates_the_thread_and_goes_where_it_says() -> None:
    log = KeyStrategy.APPEND
    app = (
        StateGraph({"log": log})
        .add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
        .add_node("c", lambda s: {"log": ["c"]})
        .add_edge(START, "a").add_edge("a", "b").add_edge("b", END).add_edge("c", END)
        .compile(MemorySaver(), interrupt_before=["b"])
    )  # fmt: skip
    assert app.invoke({"log": []}, CONFIG)["log"] == ["a"]  # stopped before b
    # Without goto: the update is merged, then the pending superstep (b, stopped before) runs.
    assert app.invoke(Command(update={"log": ["note"]}), CONFIG) == {"log": ["a", "note", "b"]}
    # With goto: the update is merged and the named node runs next, whatever the edges say.
    assert app.invoke(Command(update={"log": ["jump"]}, goto="c"), CONFIG) == {"log": ["a", "note", "b", "jump", "c"]}
    head = app.get_state(CONFIG).checkpoint
    inputs = [s.checkpoint for s in app.get_state_history(CONFIG) if s.checkpoint and s.checkpoint.source == "input"]
    assert head is not None and len(inputs) == 3 and inputs[0].next == ("c",)
    # A goto on a thread that has none starts it there.
    fresh = RunnableConfig(thread_id="fresh")
    assert app.invoke(Command(update={"log": ["x"]}, goto="c"), fresh) == {"log": ["x", "c"]}
    with pytest.raises(ThreadNotFoundError):
        app.invoke(Command(update={"log": ["x"]}), RunnableConfig(thread_id="none"))


def test_a_handoff_cut_at_any_point_is_rewound(saver_factory: Callable[[], CheckpointSaver]) -> None:
    def make(saver: CheckpointSaver) -> Any:
        def triage(state: Any) -> rx.Observable[Any]:
            target = "billing" if "invoice" in state["log"][-1] else "support"
            return rx.timer(1.0).pipe(ops.map(lambda _: Command(update={"log": f"-> {target}"}, goto=target)))

        def slow(name: str) -> Callable[[Any], rx.Observable[dict[str, Any]]]:
            return lambda state: rx.timer(2.0).pipe(ops.map(lambda _: {"log": name}))

        return (
            StateGraph({"log": KeyStrategy.APPEND})
            .add_node("triage", triage, reduce=lambda chunks: chunks[-1], destinations=["billing", "support"])
            .add_node("billing", slow("billing")).add_node("support", slow("support"))
            .add_edge(START, "triage").add_edge("billing", END).add_edge("support", END)
            .compile(saver, messages_key=None)
        )  # fmt: skip

    report = assert_cancellation_safe(
        make,
        [{"log": "my invoice"}, {"log": "it broke"}],
        modes=("dispose", "timeout", "take_until"),
        saver_factory=saver_factory,
    )
    assert len(report.points) > 20


# -- Command.PARENT --------------------------------------------------------------------------------------------------


def _parent_goto(saver: CheckpointSaver | None, *, slow: bool = False) -> Any:
    """After LangGraph's ``test_parent_command_goto``: the subgraph's second node sends the run to a node of its
    parent, with an update the parent merges with its own reducer."""

    def child_b(state: Any) -> Any:
        command = Command(graph=Command.PARENT, goto="parent_b", update={"dialog": ["b_child"]})
        return rx.timer(1.0).pipe(ops.map(lambda _: command)) if slow else command

    def child_a(state: Any) -> Any:
        update = {"dialog": ["a_child"]}
        return rx.timer(1.0).pipe(ops.map(lambda _: update)) if slow else update

    reduce_last = {"reduce": lambda chunks: chunks[-1]} if slow else {}
    inner = (
        StateGraph({"dialog": KeyStrategy.APPEND})
        .add_node("child_a", child_a, **reduce_last)
        .add_node("child_b", child_b, **reduce_last, destinations=[END])
        .add_edge(START, "child_a").add_edge("child_a", "child_b")
        .compile()
    )  # fmt: skip
    return (
        StateGraph({"dialog": KeyStrategy.APPEND})
        .add_node("parent_b", lambda state: {"dialog": ["parent_b"]})
        .add_node("sub", inner, destinations=["parent_b"])
        .add_edge(START, "sub").add_edge("parent_b", END)
        .compile(saver, messages_key=None)
    )  # fmt: skip


def test_a_subgraph_node_routes_its_parent_with_command_parent() -> None:
    """Ported from LangGraph's ``test_parent_command_goto``: the parent gets the subgraph's result (``a_child``),
    then the command's update, and runs the node it names; the subgraph stops at the command."""
    app = _parent_goto(MemorySaver())
    assert app.invoke({"dialog": ["init"]}, CONFIG) == {"dialog": ["init", "a_child", "b_child", "parent_b"]}
    assert app.get_state(CONFIG).next == ()
    assert "sub" in app.draw_mermaid() and "parent_b" in app.draw_mermaid()


def test_command_parent_from_a_graph_that_is_not_a_subgraph_fails_clearly() -> None:
    app = (
        StateGraph()
        .add_node("a", lambda state: Command(graph=Command.PARENT, goto="b"), destinations=[END])
        .add_edge(START, "a")
        .compile()
    )
    with pytest.raises(InvalidUpdateError, match="not running as a subgraph") as caught:
        app.invoke({})
    assert caught.value.node == "a"
    with pytest.raises(InvalidArgumentError, match=r"Command\.PARENT"):
        Command(graph="elsewhere", goto="b")
    stopped = (
        StateGraph()
        .add_node("a", lambda state: {}).add_edge(START, "a").add_edge("a", END)
        .compile(MemorySaver(), interrupt_after=["a"])
    )  # fmt: skip
    stopped.invoke({}, CONFIG)
    with pytest.raises(InvalidArgumentError, match="resume="):
        stopped.invoke(Command(graph=Command.PARENT), CONFIG)


# The savers' side of a cut turn does not depend on the graph's features; PostgreSQL is explored in tests/testing.
@pytest.mark.parametrize("saver_factory", ["memory", "sqlite"], indirect=True)
def test_a_command_parent_turn_cut_at_any_point_is_rewound(saver_factory: Callable[[], CheckpointSaver]) -> None:
    report = assert_cancellation_safe(
        lambda saver: _parent_goto(saver, slow=True),
        [{"dialog": ["one"]}, {"dialog": ["two"]}],
        modes=("dispose", "take_until"),
        saver_factory=saver_factory,
    )
    assert len(report.points) > 10
