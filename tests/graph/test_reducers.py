"""Key strategies and reducer functions: what APPEND, MERGE and a reducer make of each kind of update, as documented on
``KeyStrategy`` and in the workflows guide's "Reducers" (docs/guides/workflows.md)."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rxgraph
import rxgraph.graph
from rxgraph import (
    END,
    START,
    CheckpointSaver,
    FrozenDict,
    FrozenList,
    InvalidTypeError,
    InvalidUpdateError,
    KeyStrategy,
    MemorySaver,
    RunnableConfig,
    SqliteSaver,
    StateGraph,
)
from rxgraph.graph._state import StateSchema


def merged(schema: StateSchema, *updates: dict[str, Any], state: dict[str, Any] | None = None) -> dict[str, Any]:
    result = state if state is not None else {}
    for update in updates:
        result = schema.merge(result, update, origin="node 'n'", node="n")
    return result


def total(current: Any, update: Any) -> Any:
    """A reducer: adds the update to what is there; an absent key counts as 0."""
    return (current or 0) + update


def sorted_tags(current: Any, update: Any) -> tuple[str, ...]:
    """A reducer: the union of the tags so far and the update's, as a sorted tuple."""
    return tuple(sorted({*(current or ()), *update}))


# -- APPEND ---------------------------------------------------------------------------------------------------------

APPEND = StateSchema({"log": KeyStrategy.APPEND})


def test_append_on_an_absent_key_starts_from_an_empty_list() -> None:
    assert merged(APPEND, {"log": "a"})["log"] == ["a"]
    created = merged(APPEND, {"log": []})
    assert created == {"log": []} and isinstance(created["log"], FrozenList)


def test_append_adds_a_scalar_a_string_and_a_mapping_as_one_item_each() -> None:
    state = merged(APPEND, {"log": 1}, {"log": "bc"}, {"log": {"k": [1]}})
    assert state["log"] == [1, "bc", {"k": [1]}]
    assert isinstance(state["log"][2], FrozenDict) and isinstance(state["log"][2]["k"], FrozenList)


def test_append_adds_each_item_of_a_list_a_tuple_or_a_frozen_list() -> None:
    state = merged(APPEND, {"log": ["a", ["nested"]]}, {"log": ("b", "c")}, {"log": FrozenList(["d"])}, {"log": []})
    assert state["log"] == ["a", ["nested"], "b", "c", "d"]
    assert isinstance(state["log"], FrozenList) and isinstance(state["log"][1], FrozenList)


def test_append_of_none_appends_one_none_item() -> None:
    assert merged(APPEND, {"log": None})["log"] == [None]
    assert merged(APPEND, {"log": "a"}, {"log": None}, {"log": [None, None]})["log"] == ["a", None, None, None]


def test_append_keeps_a_value_already_there_that_is_not_a_list() -> None:
    assert merged(APPEND, {"log": "b"}, state={"log": ("x", "y")})["log"] == ["x", "y", "b"]
    assert merged(APPEND, {"log": "b"}, state={"log": "a"})["log"] == ["a", "b"]
    assert merged(APPEND, {"log": "b"}, state={"log": None})["log"] == [None, "b"]


# -- MERGE ----------------------------------------------------------------------------------------------------------

MERGE = StateSchema({"meta": KeyStrategy.MERGE})


def test_merge_on_an_absent_key_starts_from_an_empty_mapping() -> None:
    state = merged(MERGE, {"meta": {"a": [1]}})
    assert state == {"meta": {"a": [1]}}
    assert isinstance(state["meta"], FrozenDict) and isinstance(state["meta"]["a"], FrozenList)
    assert merged(MERGE, {"meta": {}}) == {"meta": {}}


def test_merge_is_shallow_a_nested_mapping_is_replaced_whole() -> None:
    state = merged(MERGE, {"meta": {"a": 1, "opts": {"x": 1, "y": 1}}}, {"meta": {"opts": {"y": 2}, "b": 2}})
    assert state["meta"] == {"a": 1, "b": 2, "opts": {"y": 2}}


def test_merge_keeps_a_key_set_to_none_and_an_empty_mapping_changes_nothing() -> None:
    state = merged(MERGE, {"meta": {"a": 1, "b": 2}}, {"meta": {"a": None}}, {"meta": {}})
    assert state["meta"] == {"a": None, "b": 2}


def test_merge_replaces_a_value_already_there_that_is_not_a_mapping() -> None:
    assert merged(MERGE, {"meta": {"a": 1}}, state={"meta": [1, 2]})["meta"] == {"a": 1}
    assert merged(MERGE, {"meta": {"a": 1}}, state={"meta": None})["meta"] == {"a": 1}


@pytest.mark.parametrize("value", [3, None, [("a", 1)], "ab"])
def test_merge_of_anything_but_a_mapping_fails_naming_the_key_and_the_node(value: Any) -> None:
    with pytest.raises(
        InvalidUpdateError, match=r"^node 'n': key 'meta' uses KeyStrategy\.MERGE and needs a mapping"
    ) as caught:
        merged(MERGE, {"meta": value})
    assert caught.value.node == "n"


# -- REPLACE --------------------------------------------------------------------------------------------------------


def test_replace_stores_none_and_a_whole_new_value() -> None:
    schema = StateSchema({"box": KeyStrategy.REPLACE})
    assert merged(schema, {"box": {"a": 1}}, {"box": None}, {"other": [1]}) == {"box": None, "other": [1]}


# -- reducer functions ----------------------------------------------------------------------------------------------


def test_a_reducer_gets_none_for_an_absent_key_then_the_value_there() -> None:
    calls: list[tuple[Any, Any]] = []

    def record(current: Any, update: Any) -> Any:
        calls.append((current, update))
        return [*(current or ()), update]

    schema = StateSchema({"seen": record})
    state = merged(schema, {"seen": "a"}, {"seen": None})
    assert calls == [(None, "a"), (["a"], None)]
    assert isinstance(calls[1][0], FrozenList)  # what it is given is the stored, frozen value
    assert state["seen"] == ["a", None]


def test_a_reducer_gets_the_update_as_it_was_given() -> None:
    given: list[Any] = []
    update = ["x"]
    schema = StateSchema({"k": lambda current, value: given.append(value)})
    merged(schema, {"k": update})
    assert given[0] is update


def test_a_reducers_result_is_frozen() -> None:
    schema = StateSchema({"k": lambda current, update: {"items": [update], "seen": {update}}})
    state = merged(schema, {"k": "a"})
    assert state["k"] == {"items": ["a"], "seen": {"a"}}
    assert isinstance(state["k"], FrozenDict) and isinstance(state["k"]["items"], FrozenList)
    assert isinstance(state["k"]["seen"], frozenset)


def test_a_reducer_that_raises_fails_the_merge_naming_key_and_origin() -> None:
    def broken(current: Any, update: Any) -> Any:
        raise ValueError("no negative totals")

    schema = StateSchema({"total": broken})
    before = {"total": 1}
    with pytest.raises(
        InvalidUpdateError, match=r"^node 'n': the reducer of state key 'total' raised ValueError: no negative totals$"
    ) as caught:
        merged(schema, {"total": -5}, state=before)
    assert caught.value.node == "n"
    assert isinstance(caught.value.__cause__, ValueError)
    assert before == {"total": 1}
    with pytest.raises(InvalidUpdateError, match=r"^input: the reducer of state key 'total'") as from_input:
        schema.merge({}, {"total": 1}, origin="input")
    assert from_input.value.node is None


def test_strategy_strategies_and_has_reducer() -> None:
    schema = StateSchema({"log": KeyStrategy.APPEND, "meta": KeyStrategy.MERGE, "n": total, "r": KeyStrategy.REPLACE})
    assert schema.strategy("n") is total and schema.strategy("log") is KeyStrategy.APPEND
    assert schema.strategy("undeclared") is KeyStrategy.REPLACE
    assert schema.strategies == {
        "log": KeyStrategy.APPEND,
        "meta": KeyStrategy.MERGE,
        "n": total,
        "r": KeyStrategy.REPLACE,
    }
    assert [schema.has_reducer(k) for k in ("log", "meta", "n", "r", "undeclared")] == [True, True, True, False, False]


# -- checked when the graph is built --------------------------------------------------------------------------------


def test_a_strategy_that_is_neither_a_key_strategy_nor_callable_is_refused_by_state_graph() -> None:
    with pytest.raises(InvalidTypeError) as caught:
        StateGraph({"x": 3})  # type: ignore[dict-item]
    assert str(caught.value) == (
        "state key 'x': expected a KeyStrategy or a reducer function (current, update) -> new, got 3"
    )
    assert caught.value.argument == "schema"
    with pytest.raises(InvalidTypeError, match=r"got 'append' \(did you mean KeyStrategy\.APPEND\?\)$"):
        StateGraph({"x": "append"})  # type: ignore[dict-item]
    with pytest.raises(InvalidTypeError, match="the KeyStrategy class itself"):
        StateGraph({"x": KeyStrategy})  # type: ignore[dict-item]


def test_a_reducer_that_cannot_take_current_and_update_is_refused_by_state_graph() -> None:
    with pytest.raises(InvalidTypeError, match=r"^state key 'x': a reducer is called as reducer\(current, update\)"):
        StateGraph({"x": lambda only: only})

    async def later(current: Any, update: Any) -> Any:
        return update

    with pytest.raises(InvalidTypeError, match="is an async def function"):
        StateGraph({"x": later})


class _Keep:
    def __call__(self, current: Any, update: Any, *rest: Any) -> Any:
        return current


def test_builtins_callable_objects_and_defaults_are_accepted_as_reducers() -> None:
    schema = StateSchema(
        {"a": operator.add, "b": max, "c": _Keep(), "d": lambda current, update, scale=2: update * scale}
    )
    state = merged(schema, {"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 10, "b": 1, "c": 5, "d": 5}, state={"a": 0, "b": 0})
    assert state == {"a": 11, "b": 2, "c": None, "d": 10}


def test_key_reducer_is_exported() -> None:
    assert rxgraph.KeyReducer is rxgraph.graph.KeyReducer
    assert "KeyReducer" in rxgraph.__all__ and "KeyReducer" in rxgraph.graph.__all__


# -- in a run -------------------------------------------------------------------------------------------------------


def scoring_graph(checkpointer: CheckpointSaver | None = None) -> Any:
    return (
        StateGraph({"total": total, "tags": sorted_tags, "log": KeyStrategy.APPEND})
        .add_node("first", lambda s: {"total": 2, "tags": ["b", "a"], "log": "first"})
        .add_node("second", lambda s: {"total": 3, "tags": ("c", "a"), "log": ["second"]})
        .add_edge(START, "first")
        .add_edge("first", "second")
        .add_edge("second", END)
        .compile(checkpointer=checkpointer)
    )


def test_a_run_reduces_its_input_and_every_node_update() -> None:
    state = scoring_graph().invoke({"total": 10, "tags": ["z"]})
    assert state == {"total": 15, "tags": ("a", "b", "c", "z"), "log": ["first", "second"]}
    assert type(state["tags"]) is tuple


def test_a_reducer_that_raises_in_a_node_update_fails_the_run_with_the_node() -> None:
    app = (
        StateGraph({"total": total})
        .add_node("bad", lambda s: {"total": "not a number"})
        .add_edge(START, "bad")
        .add_edge("bad", END)
        .compile()
    )
    with pytest.raises(
        InvalidUpdateError, match=r"^node 'bad': the reducer of state key 'total' raised TypeError"
    ) as caught:
        app.invoke({"total": 1})
    assert caught.value.node == "bad" and isinstance(caught.value.__cause__, TypeError)


@pytest.fixture(params=["memory", "sqlite"])
def saver_and_reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CheckpointSaver, Any]]:
    """A saver, and a function that gives a saver on the same store (a fresh one on the same file for SQLite)."""
    opened: list[SqliteSaver] = []
    if request.param == "memory":
        memory = MemorySaver()
        yield memory, lambda: memory
        return

    def open_file() -> SqliteSaver:
        opened.append(SqliteSaver(tmp_path / "reducers.db"))
        return opened[-1]

    yield open_file(), open_file
    for saver in opened:
        saver.close()


def test_a_reduced_value_persists_and_the_next_turn_reduces_onto_it(
    saver_and_reopen: tuple[CheckpointSaver, Any],
) -> None:
    saver, reopen = saver_and_reopen
    config = RunnableConfig(thread_id="t")
    first = scoring_graph(saver).invoke({"tags": ["m"]}, config)
    assert first == {"total": 5, "tags": ("a", "b", "c", "m"), "log": ["first", "second"]}

    again = scoring_graph(reopen())
    stored = again.get_state(config).values
    assert stored == first and type(stored["tags"]) is tuple and type(stored["total"]) is int
    second = again.invoke({"total": 100, "tags": ["d"]}, config)
    assert second == {"total": 110, "tags": ("a", "b", "c", "d", "m"), "log": ["first", "second"] * 2}

    stored = scoring_graph(reopen()).get_state(config).values
    assert stored == second and type(stored["tags"]) is tuple and type(stored["total"]) is int


def test_update_state_goes_through_the_reducer(saver_and_reopen: tuple[CheckpointSaver, Any]) -> None:
    saver, reopen = saver_and_reopen
    config = RunnableConfig(thread_id="t")
    app = scoring_graph(saver)
    app.invoke({}, config)
    app.update_state(config, {"total": 1, "tags": ["a", "q"]})
    values = scoring_graph(reopen()).get_state(config).values
    assert values["total"] == 6 and values["tags"] == ("a", "b", "c", "q")
