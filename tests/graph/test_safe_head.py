"""Safe-head selection for a new user turn (seed 000): start from the newest checkpoint that can take input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import reactivex as rx
from _support import ReadCountingSaver, ScriptedChat, final_reply, tool_call_reply
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import END, START, CheckpointSaver, KeyStrategy, RunnableConfig, StateGraph, UnsafeHistoryError
from rxgraph.messages import AssistantMessage, ToolMessage, UserMessage, check_request

CONFIG = RunnableConfig(thread_id="t1")


def _user(text: str) -> dict[str, Any]:
    return {"messages": UserMessage(content=text)}


def _half_turn(chat: ScriptedChat) -> None:
    """Turn 1 completes; turn 2 fails inside the model node after the tools node wrote its checkpoint."""
    chat.graph.invoke(_user("hello"), CONFIG)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke(_user("weather?"), CONFIG)


def test_latest_checkpoint_ending_with_a_tool_message_rolls_back_to_the_previous_safe_checkpoint(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    chat = ScriptedChat([final_reply("hi"), tool_call_reply(), RuntimeError("model is down"), final_reply()], saver)
    _half_turn(chat)
    head = saver.get("t1")
    assert head is not None and not head.safe and isinstance(head.values["messages"][-1], ToolMessage)
    newest_safe = next(c for c in saver.list("t1") if c.safe)
    assert newest_safe.node == "__start__" and newest_safe.values["messages"][-1] == UserMessage(content="weather?")

    chat.graph.invoke(_user("again"), CONFIG)
    turn3 = [c for c in saver.list("t1") if c.seq > head.seq]
    first = turn3[-1]
    assert first.parent_id == newest_safe.id
    assert first.rolled_back_from == head.id


def test_an_error_in_the_model_after_the_tool_checkpoint_then_the_next_request_is_valid(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    saver = saver_factory()
    chat = ScriptedChat([final_reply("hi"), tool_call_reply(), RuntimeError("model is down"), final_reply()], saver)
    _half_turn(chat)
    chat.graph.invoke(_user("again"), CONFIG)
    next_request = chat.requests[-1]
    check_request(next_request)
    assert [m.role for m in next_request] == ["user", "assistant", "user", "user"]
    assert chat.graph.get_state(CONFIG).values["messages"][-1] == final_reply()


def test_cancel_right_after_the_tool_checkpoint_then_the_next_request_is_valid(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    # The model's second answer takes 10 ticks; the subscriber leaves at tick 5 of it, after the tools node wrote.
    # on_cancel="keep" switches the rewind off: the selection alone must keep the next request valid.
    scheduler = TestScheduler()
    saver = saver_factory()

    def slow_final(sched: Any) -> rx.Observable[dict[str, Any]]:
        return rx.timer(10.0, scheduler=sched).pipe(ops.map(lambda _: {"messages": final_reply("late")}))

    chat = ScriptedChat([tool_call_reply(), slow_final, final_reply("ok")], saver, on_cancel="keep")
    config = CONFIG.model_copy(update={"scheduler": scheduler})
    subscription = chat.graph.stream(_user("weather?"), config).subscribe()
    scheduler.advance_by(5.0)
    subscription.dispose()
    head = saver.get("t1")
    assert head is not None and head.node == "tools" and not head.safe

    chat.graph.invoke(_user("still there?"), config)
    check_request(chat.requests[-1])
    assert [m.role for m in chat.requests[-1]] == ["user", "user"]


def test_unsafe_checkpoints_stay_in_the_history(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([final_reply("hi"), tool_call_reply(), RuntimeError("model is down"), final_reply()], saver)
    _half_turn(chat)
    before = [s.checkpoint_id for s in chat.graph.get_state_history(CONFIG)]
    chat.graph.invoke(_user("again"), CONFIG)
    after = chat.graph.get_state_history(CONFIG)
    assert [s.checkpoint_id for s in after][-len(before) :] == before
    unsafe = [s.checkpoint for s in after if s.checkpoint is not None and not s.checkpoint.safe]
    # newest first: the failure's record (the same unsafe state, with the error), then the tools and model steps
    assert [(c.node, c.source) for c in unsafe] == [(None, "error"), ("tools", "loop"), ("model", "loop")]
    assert unsafe[0].error == "RuntimeError: model is down"
    unsafe = unsafe[1:]
    assert "call ids ['c1']" in (unsafe[1].unsafe_reason or "")
    assert "ends with a tool message" in (unsafe[0].unsafe_reason or "")


def test_safety_is_recorded_when_each_checkpoint_is_written(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([tool_call_reply(), final_reply()], saver)
    chat.graph.invoke(_user("weather?"), CONFIG)
    flags = [(c.node, c.safe) for c in reversed(saver.list("t1"))]
    assert flags == [("__start__", True), ("model", False), ("tools", False), ("model", True)]


def test_resume_by_checkpoint_id_is_not_affected_by_the_selection(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([tool_call_reply(), RuntimeError("model is down"), final_reply("resumed")], saver)
    with pytest.raises(RuntimeError):
        chat.graph.invoke(_user("weather?"), CONFIG)
    unsafe_head = saver.get("t1")
    assert unsafe_head is not None and not unsafe_head.safe
    resumed = chat.graph.invoke(None, CONFIG.model_copy(update={"checkpoint_id": unsafe_head.id}))
    assert [m.role for m in resumed["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert chat.requests[-1] == list(unsafe_head.values["messages"])
    newest = saver.get("t1")
    assert newest is not None and newest.safe and newest.rolled_back_from is None


def test_resume_without_input_continues_the_unsafe_head(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([tool_call_reply(), RuntimeError("model is down"), final_reply("resumed")], saver)
    with pytest.raises(RuntimeError):
        chat.graph.invoke(_user("weather?"), CONFIG)
    assert chat.graph.invoke(None, CONFIG)["messages"][-1] == final_reply("resumed")


def test_on_unsafe_head_error_raises_with_the_reason(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat(
        [final_reply("hi"), tool_call_reply(), RuntimeError("model is down")], saver, on_unsafe_head="error"
    )
    _half_turn(chat)
    with pytest.raises(UnsafeHistoryError, match=r"thread 't1': the head checkpoint .* ends with a tool message"):
        chat.graph.invoke(_user("again"), CONFIG)


def test_on_unsafe_head_ignore_starts_from_the_head(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat(
        [final_reply("hi"), tool_call_reply(), RuntimeError("model is down"), final_reply()],
        saver,
        on_unsafe_head="ignore",
    )
    _half_turn(chat)
    chat.graph.invoke(_user("again"), CONFIG)
    with pytest.raises(UnsafeHistoryError, match="rule 3"):
        check_request(chat.requests[-1])


def test_a_safe_head_is_chosen_with_one_read_and_no_history_walk(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = ReadCountingSaver(saver_factory())
    chat = ScriptedChat([final_reply("a"), final_reply("b")], saver)
    chat.graph.invoke(_user("one"), CONFIG)
    saver.reads = 0
    chat.graph.stream(_user("two"), CONFIG).subscribe()
    assert saver.reads == 1  # the head, and nothing else


def test_no_safe_checkpoint_at_all_is_a_clear_error(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    chat = ScriptedChat([final_reply()], saver)
    dangling = AssistantMessage(tool_calls=tool_call_reply().tool_calls)
    # Resume into the tools node is not what we want: seed a thread whose only checkpoint is unsafe.
    app = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("noop", lambda s: None)
        .add_edge(START, "noop")
        .add_edge("noop", END)
        .compile(checkpointer=saver)
    )
    app.invoke({"messages": [UserMessage(content="x"), dangling]}, CONFIG)
    assert all(not c.safe for c in saver.list("t1"))
    with pytest.raises(UnsafeHistoryError, match="no checkpoint has a history that can take new input"):
        chat.graph.invoke(_user("next"), CONFIG)


def test_a_graph_without_a_messages_key_is_unaffected(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    app = (
        StateGraph()
        .add_node("n", lambda s: {"n": s.get("n", 0) + 1, "note": "tool"})
        .add_edge(START, "n")
        .add_edge("n", END)
        .compile(checkpointer=saver)
    )
    app.invoke({}, CONFIG)
    app.invoke({}, CONFIG)
    assert app.get_state(CONFIG).values["n"] == 2
    assert all(c.safe and c.rolled_back_from is None for c in saver.list("t1"))


def test_messages_key_can_be_renamed_or_switched_off(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    dangling = tool_call_reply()
    for key, expected in (("history", False), (None, True)):
        app = (
            StateGraph({"history": KeyStrategy.APPEND})
            .add_node("n", lambda s: None)
            .add_edge(START, "n")
            .add_edge("n", END)
            .compile(checkpointer=saver, messages_key=key)
        )
        thread = RunnableConfig(thread_id=f"k-{key}")
        app.invoke({"history": [UserMessage(content="q"), dangling]}, thread)
        head = saver.get(thread.thread_id or "")
        assert head is not None and head.safe is expected


def test_latest_safe_walks_back_over_many_unsafe_checkpoints(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    app = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("n", lambda s: None)
        .add_edge(START, "n")
        .add_edge("n", END)
        .compile(checkpointer=saver, on_unsafe_head="ignore")
    )
    app.invoke({"messages": UserMessage(content="safe")}, CONFIG)
    safe_head = saver.get("t1")
    for i in range(50):
        app.invoke({"messages": ToolMessage(tool_call_id=f"x{i}", content="orphan")}, CONFIG)
    assert safe_head is not None
    found = saver.latest_safe("t1")
    assert found is not None and found.id == safe_head.id
