"""update_state: writing into a thread from outside a run (source "update")."""

from __future__ import annotations

from typing import Any

import pytest

from rxgraph import (
    END,
    START,
    CheckpointNotFoundError,
    GraphValidationError,
    KeyStrategy,
    MemorySaver,
    RunnableConfig,
    StateGraph,
)
from rxgraph.messages import AssistantMessage, ToolCall, UserMessage

CONFIG = RunnableConfig(thread_id="t")


def _graph(saver: MemorySaver) -> Any:
    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"messages": AssistantMessage(content="from a")})
        .add_node("b", lambda s: {"messages": AssistantMessage(content="from b")})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )


def test_an_update_merges_with_the_key_strategies_as_a_new_head() -> None:
    saver = MemorySaver()
    app = _graph(saver)
    app.invoke({"messages": UserMessage(content="hi")}, CONFIG)
    before = saver.get("t")
    snapshot = app.update_state(CONFIG, {"messages": UserMessage(content="note"), "flag": True})
    head = saver.get("t")
    assert head is not None and before is not None
    assert snapshot.checkpoint == head and head.source == "update" and head.parent_id == before.id
    assert [m.content for m in head.values["messages"]] == ["hi", "from a", "from b", "note"]
    assert head.values["flag"] is True and head.next == () and head.node is None


def test_as_node_routes_next_and_a_resume_continues_from_there() -> None:
    saver = MemorySaver()
    app = _graph(saver)
    app.invoke({"messages": UserMessage(content="hi")}, CONFIG)
    snapshot = app.update_state(CONFIG, {"messages": AssistantMessage(content="edited a")}, as_node="a")
    assert snapshot.next == ("b",)
    assert app.invoke(None, CONFIG)["messages"][-1] == AssistantMessage(content="from b")


def test_an_update_records_whether_the_history_is_safe() -> None:
    saver = MemorySaver()
    app = _graph(saver)
    dangling = AssistantMessage(tool_calls=[ToolCall(id="c1", name="f", arguments="{}")])
    snapshot = app.update_state(CONFIG, {"messages": [UserMessage(content="q"), dangling]})
    assert snapshot.checkpoint is not None and not snapshot.checkpoint.safe
    assert "call ids ['c1']" in (snapshot.checkpoint.unsafe_reason or "")


def test_an_update_can_fork_from_an_older_checkpoint_and_bad_arguments_are_clear() -> None:
    saver = MemorySaver()
    app = _graph(saver)
    app.invoke({"messages": UserMessage(content="hi")}, CONFIG)
    first = app.get_state_history(CONFIG)[-1]
    fork = app.update_state(CONFIG.model_copy(update={"checkpoint_id": first.checkpoint_id}), {"messages": []})
    assert fork.parent_id == first.checkpoint_id and [m.content for m in fork.values["messages"]] == ["hi"]
    with pytest.raises(GraphValidationError, match="as_node='nope' is neither a node"):
        app.update_state(CONFIG, {}, as_node="nope")
    with pytest.raises(CheckpointNotFoundError):
        app.update_state(CONFIG.model_copy(update={"checkpoint_id": "missing"}), {})


def test_an_update_as_end_drops_a_pending_interrupt_and_ends_the_run() -> None:
    # After LangGraph's update_state(config, values, as_node=END), which ends a thread waiting on an interrupt.
    from rxgraph import Command, interrupt

    saver = MemorySaver()
    app = (
        StateGraph()
        .add_node("ask", lambda s: {"answer": interrupt("ok?")})
        .add_node("after", lambda s: {"after": True})
        .add_edge(START, "ask").add_edge("ask", "after").add_edge("after", END)
        .compile(checkpointer=saver)
    )  # fmt: skip
    app.invoke({"q": 1}, CONFIG)
    assert app.get_state(CONFIG).interrupt is not None
    snapshot = app.update_state(CONFIG, {"answer": "decided elsewhere"}, as_node=END)
    assert snapshot.next == () and snapshot.interrupt is None and snapshot.checkpoint is not None
    assert snapshot.checkpoint.node == END and snapshot.checkpoint.pending is None
    assert app.invoke(None, CONFIG) == {"q": 1, "answer": "decided elsewhere"}  # nothing left to run
    with pytest.raises(ValueError, match="no pending interrupt"):
        app.invoke(Command(resume="late"), CONFIG)
