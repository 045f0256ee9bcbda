"""Compile-time validation, and the one routing error that can only be found at run time."""

from __future__ import annotations

from typing import Any

import pytest

from rxgraph import END, START, GraphValidationError, InvalidArgumentError, KeyStrategy, StateGraph


def _noop(state: Any) -> None:
    return None


def test_unknown_node_in_an_edge() -> None:
    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", "b")
    with pytest.raises(GraphValidationError, match=r"edge 'a' -> 'b': unknown node 'b'"):
        graph.compile()


def test_unknown_source_of_an_edge() -> None:
    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", END).add_edge("ghost", "a")
    with pytest.raises(GraphValidationError, match=r"edge from 'ghost': unknown node 'ghost'"):
        graph.compile()


def test_unknown_target_in_a_path_map() -> None:
    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_conditional_edges("a", _noop, {"x": "nowhere"})
    with pytest.raises(GraphValidationError, match=r"unknown node 'nowhere'"):
        graph.compile()


def test_no_edge_from_start() -> None:
    graph = StateGraph().add_node("a", _noop).add_edge("a", END)
    with pytest.raises(GraphValidationError, match="no edge from START"):
        graph.compile()


def test_a_node_with_no_outgoing_edge() -> None:
    graph = StateGraph().add_node("a", _noop).add_node("b", _noop).add_edge(START, "a").add_edge("a", "b")
    with pytest.raises(GraphValidationError, match=r"\['b'\] have no outgoing edge"):
        graph.compile()


def test_duplicate_node_names() -> None:
    graph = StateGraph().add_node("a", _noop)
    with pytest.raises(GraphValidationError, match="'a' already exists"):
        graph.add_node("a", _noop)


@pytest.mark.parametrize("name", [START, END])
def test_reserved_names(name: str) -> None:
    with pytest.raises(GraphValidationError, match="reserved"):
        StateGraph().add_node(name, _noop)


def test_empty_name_and_empty_graph() -> None:
    with pytest.raises(GraphValidationError, match="non-empty string"):
        StateGraph().add_node("", _noop)
    with pytest.raises(GraphValidationError, match="no nodes"):
        StateGraph().compile()


def test_two_ways_out_of_one_node_run_both_and_end_adds_nothing() -> None:
    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("a", END)
    )
    graph.add_edge("b", END)
    assert graph.compile().invoke({})["log"] == ["a", "b"]


def test_joins_and_interrupts_name_nodes_that_exist() -> None:
    def base() -> StateGraph:
        return StateGraph().add_node("a", _noop).add_node("b", _noop).add_edge(START, "a").add_edge("a", "b")

    with pytest.raises(GraphValidationError, match="join \\['a', 'x'\\] -> 'b': 'x' is not a node"):
        base().add_edge(["a", "x"], "b").compile()
    with pytest.raises(GraphValidationError, match="unknown node 'y'"):
        base().add_edge(["a", "b"], "y").compile()
    with pytest.raises(GraphValidationError, match="distinct source nodes"):
        base().add_edge(["a", "a"], "b")
    with pytest.raises(GraphValidationError, match="distinct source nodes"):
        base().add_edge([], "b")
    with pytest.raises(GraphValidationError, match=r"interrupt_before names unknown node\(s\) \['z'\]"):
        base().add_edge("b", END).compile(interrupt_before=["z"])
    with pytest.raises(GraphValidationError, match="not a string"):
        base().add_edge("b", END).compile(interrupt_after="b")
    with pytest.raises(InvalidArgumentError, match="max_concurrency must be an int >= 1"):
        base().add_edge("b", END).compile(max_concurrency=0)
    # a join source needs no edge of its own: the join is its way out
    assert base().add_edge(["a", "b"], END).compile().invoke({}) == {}


def test_edges_from_end_and_into_start() -> None:
    base = StateGraph().add_node("a", _noop).add_edge(START, "a")
    with pytest.raises(GraphValidationError, match="END has no outgoing edges"):
        base.add_edge("a", END).add_edge(END, "a").compile()
    with pytest.raises(GraphValidationError, match="START cannot be a target"):
        StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", START).compile()


def test_an_action_that_takes_no_argument_is_rejected() -> None:
    with pytest.raises(TypeError, match="accept the state"):
        StateGraph().add_node("a", lambda: None)


def test_route_returning_an_unknown_label_is_a_run_time_error_to_the_subscriber() -> None:
    app = (
        StateGraph()
        .add_node("a", _noop)
        .add_edge(START, "a")
        .add_conditional_edges("a", lambda s: "maybe", {"yes": END, "no": "a"})
        .compile()
    )
    errors: list[Exception] = []
    app.stream({}).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], GraphValidationError)
    assert "the route of 'a' returned 'maybe'" in str(errors[0])


def test_route_without_a_map_returning_an_unknown_node_names_the_nodes() -> None:
    app = StateGraph().add_node("a", _noop).add_edge(START, "a").add_conditional_edges("a", lambda s: "zz").compile()
    with pytest.raises(GraphValidationError, match=r"returned 'zz', which is neither a node of the graph nor END"):
        app.invoke({})


def test_route_with_a_list_of_names() -> None:
    app = (
        StateGraph()
        .add_node("a", lambda s: {"n": s.get("n", 0) + 1})
        .add_node("b", _noop)
        .add_edge(START, "a")
        .add_conditional_edges("a", lambda s: "b" if s["n"] > 2 else "a", ["a", "b"])
        .add_edge("b", END)
        .compile()
    )
    assert app.invoke({}) == {"n": 3}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("on_cancel", "undo", "on_cancel must be 'rewind' or 'keep', got 'undo'"),
        ("on_unsafe_head", "skip", "on_unsafe_head must be 'rollback', 'error' or 'ignore', got 'skip'"),
        ("multitask", "queue", "multitask must be 'enqueue', 'reject' or 'interrupt', got 'queue'"),
    ],
)
def test_an_unknown_turn_policy_is_refused_at_compile_time(option: str, value: str, message: str) -> None:
    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", END)
    with pytest.raises(ValueError, match=message):
        graph.compile(**{option: value})  # type: ignore[arg-type]


def test_an_unknown_multitask_policy_in_a_run_config_is_refused() -> None:
    from rxgraph import InvalidConfigError, RunnableConfig

    with pytest.raises(InvalidConfigError, match="multitask"):
        RunnableConfig(multitask="queue")  # type: ignore[arg-type]


def test_a_turn_policy_groups_the_policies_and_keywords_override_single_fields() -> None:
    from rxgraph import TurnPolicy

    graph = StateGraph().add_node("a", _noop).add_edge(START, "a").add_edge("a", END)
    assert graph.compile().policy == TurnPolicy(on_unsafe_head="rollback", on_cancel="rewind", multitask="enqueue")
    chosen = TurnPolicy(on_cancel="keep", multitask="reject")
    assert graph.compile(policy=chosen).policy == chosen
    assert graph.compile(policy=chosen, multitask="interrupt").policy == TurnPolicy(
        on_cancel="keep", multitask="interrupt"
    )
    with pytest.raises(InvalidArgumentError) as raised:
        TurnPolicy(on_cancel="undo")  # type: ignore[arg-type]
    assert raised.value.argument == "on_cancel"
