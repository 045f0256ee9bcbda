"""Key strategies and read-only state."""

from __future__ import annotations

from typing import Any

import pytest

from rxgraph import (
    END,
    START,
    FrozenDict,
    FrozenList,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    RunnableConfig,
    RunOutput,
    StateGraph,
)
from rxgraph.graph._state import StateSchema


def test_replace_append_and_merge() -> None:
    schema = StateSchema({"log": KeyStrategy.APPEND, "meta": KeyStrategy.MERGE})
    state = schema.merge({}, {"log": "a", "meta": {"x": 1}, "count": 1}, origin="test")
    state = schema.merge(state, {"log": ["b", "c"], "meta": {"y": 2}, "count": 2}, origin="test")
    state = schema.merge(state, {"log": ("d",), "meta": {"x": 3}}, origin="test")
    assert state == {"log": ["a", "b", "c", "d"], "meta": {"x": 3, "y": 2}, "count": 2}
    assert isinstance(state["log"], FrozenList) and isinstance(state["meta"], FrozenDict)


def test_merge_never_changes_the_old_state() -> None:
    schema = StateSchema({"log": KeyStrategy.APPEND})
    first = schema.merge({}, {"log": ["a"]}, origin="test")
    second = schema.merge(first, {"log": ["b"]}, origin="test")
    forked = schema.merge(first, {"log": ["z"]}, origin="test")
    assert first["log"] == ["a"] and second["log"] == ["a", "b"] and forked["log"] == ["a", "z"]


def test_merge_rejects_bad_updates() -> None:
    schema = StateSchema({"meta": KeyStrategy.MERGE})
    with pytest.raises(TypeError, match="node 'n': an update must be a mapping"):
        schema.merge({}, ["not", "a", "mapping"], origin="node 'n'")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'meta' uses KeyStrategy\.MERGE"):
        schema.merge({}, {"meta": 3}, origin="node 'n'")
    with pytest.raises(TypeError, match="expected a KeyStrategy"):
        StateSchema({"x": "append"})  # type: ignore[dict-item]


def test_state_in_outputs_is_read_only_and_mutation_cannot_reach_a_checkpoint() -> None:
    saver = MemorySaver()
    app = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": {"nested": [1, 2]}, "box": {"k": [1]}})
        .add_edge(START, "a")
        .add_edge("a", END)
        .compile(checkpointer=saver)
    )
    outputs: list[NodeOutput] = []
    config = RunnableConfig(thread_id="t")
    app.stream({}, config).subscribe(outputs.append)
    state = outputs[-1].state
    with pytest.raises(TypeError):
        state["box"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        state["box"]["k"] = 2
    with pytest.raises(AttributeError):
        state["box"]["k"].append(2)
    with pytest.raises(AttributeError):
        state["log"].append("x")
    final = app.invoke(None, config)
    final["box"] = "changed"
    assert app.get_state(config).values == {"log": [{"nested": [1, 2]}], "box": {"k": [1]}}


def test_node_state_is_read_only() -> None:
    def sneaky(state: Any) -> None:
        state["x"] = 1

    app = StateGraph().add_node("a", sneaky).add_edge(START, "a").add_edge("a", END).compile()
    with pytest.raises(TypeError):
        app.invoke({})


def test_frozen_list_behaves_like_an_immutable_sequence() -> None:
    base = FrozenList([1, 2])
    longer = base.extended([3])
    fork = base.extended([9])
    assert list(base) == [1, 2] and list(longer) == [1, 2, 3] and list(fork) == [1, 2, 9]
    assert longer[-1] == 3 and longer[1:] == [2, 3] and isinstance(longer[1:], FrozenList)
    assert longer == (1, 2, 3) and [1, 2, 3] == longer and longer != [1, 2]  # noqa: SIM300 (reflected ==)
    assert hash(longer) == hash(FrozenList([1, 2, 3]))
    assert list(reversed(longer)) == [3, 2, 1]
    with pytest.raises(IndexError):
        _ = base[2]
    assert repr(base) == "FrozenList([1, 2])"


def test_outputs_are_immutable_and_compare_by_value() -> None:
    from types import MappingProxyType

    from rxgraph import StreamingOutput

    state = MappingProxyType({"a": 1})
    output = NodeOutput("n", state, checkpoint_id="c1")
    with pytest.raises(AttributeError):
        output.node = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        output.extra = 1  # type: ignore[attr-defined]
    assert output == NodeOutput("n", state, checkpoint_id="c1") and output != NodeOutput("n", state)
    chunk = StreamingOutput("n", state, "tok")
    # Siblings under RunOutput: a chunk is not a NodeOutput, so `isinstance(o, NodeOutput)` picks node outputs only.
    assert isinstance(chunk, RunOutput) and not isinstance(chunk, NodeOutput)
    assert chunk.chunk == "tok" and chunk != output
    match chunk:
        case StreamingOutput(node, _, text):
            assert (node, text) == ("n", "tok")


def test_a_fork_still_knows_its_prefix_is_the_same_items() -> None:
    import gc

    base = FrozenList(["u1", "a1"])
    cancelled = base.extended(["u2", "a2-partial"])  # a run that was rewound extended the shared storage
    fork = base.extended(["u3"])  # the next turn starts from the shorter view: its storage is a copy
    assert fork == ["u1", "a1", "u3"] and cancelled == ["u1", "a1", "u2", "a2-partial"]
    assert fork.shares_prefix_with(base)
    assert not fork.shares_prefix_with(cancelled)  # cancelled's 3rd item is not fork's
    assert fork.extended(["a3"]).extended(["u4"]).shares_prefix_with(base)  # through later in-place appends
    assert not base.shares_prefix_with(fork)  # the shorter one does not start with the longer one
    assert not FrozenList(["u1", "a1", "u3"]).shares_prefix_with(base)  # equal items, unrelated storage

    orphan = FrozenList(["x"]).extended(["y"])[:1].extended(["z"])  # its origin storage is gone
    gc.collect()
    assert not orphan.shares_prefix_with(FrozenList(["x"]))
