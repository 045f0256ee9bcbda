"""``ScriptedChatGraph``: a real two-node chat graph on a saver, for the checks of the saver contract (and tests of
the engine); and the conversation the contract runs on it."""

from __future__ import annotations

from typing import Any

from ...checkpoint import CheckpointSaver
from ...messages import AssistantMessage, ToolCall, ToolMessage, UserMessage

__all__ = ["ScriptedChatGraph", "history", "run_conversation", "tool_call_reply"]


class ScriptedChatGraph:
    """A two-node chat graph (model, tools) on ``saver``, whose model answers from a script and records every
    request; for tests of savers and of the engine.

    Each script item is an ``AssistantMessage`` (the model's reply), an exception (the model call fails), or a
    callable ``(scheduler) -> Observable`` for replies that take virtual time. ``compile_options`` go to
    ``compile``. The thread of ``config`` is ``"chat"``.
    """

    def __init__(self, script: list[Any], saver: CheckpointSaver, **compile_options: Any) -> None:
        from ...graph import END, START, KeyStrategy, RunnableConfig, StateGraph

        self.script = list(script)
        self.requests: list[list[Any]] = []
        self.saver = saver
        self.config = RunnableConfig(thread_id="chat")

        def model(state: Any, config: Any) -> Any:
            self.requests.append(list(state["messages"]))
            reply = self.script.pop(0)
            if isinstance(reply, Exception):
                raise reply
            if callable(reply):
                return reply(config.scheduler)
            return {"messages": reply}

        def tools(state: Any) -> dict[str, Any]:
            last = state["messages"][-1]
            assert isinstance(last, AssistantMessage)
            return {
                "messages": [
                    ToolMessage(tool_call_id=call.id, content=f"{call.name} says ok") for call in last.tool_calls
                ]
            }

        def route(state: Any) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AssistantMessage) and last.tool_calls else END

        self.graph = (
            StateGraph({"messages": KeyStrategy.APPEND})
            .add_node("model", model)
            .add_node("tools", tools)
            .add_edge(START, "model")
            .add_conditional_edges("model", route)
            .add_edge("tools", "model")
            .compile(checkpointer=saver, **compile_options)
        )


def tool_call_reply(call_id: str, name: str = "lookup") -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(id=call_id, name=name, arguments="{}"),))


def run_conversation(saver: CheckpointSaver) -> ScriptedChatGraph:
    """Four turns on thread ``chat``: one with a tool call, a plain one, one whose model fails after a tool call
    (leaving an unsafe head), and one that starts again from the newest safe checkpoint."""
    import pytest

    chat = ScriptedChatGraph(
        [
            tool_call_reply("c1"),
            AssistantMessage(content="sunny"),
            AssistantMessage(content="you are welcome"),
            tool_call_reply("c2", "search"),
            RuntimeError("model is down"),
            AssistantMessage(content="back again"),
        ],
        saver,
    )
    chat.graph.invoke({"messages": UserMessage(content="weather?")}, chat.config)
    chat.graph.invoke({"messages": UserMessage(content="thanks")}, chat.config)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke({"messages": UserMessage(content="search something")}, chat.config)
    chat.graph.invoke({"messages": UserMessage(content="hello?")}, chat.config)
    return chat


def history(saver: CheckpointSaver, thread_id: str) -> list[tuple[Any, ...]]:
    """A thread's checkpoints with ids replaced by seqs (ids are random per run)."""
    chain = list(reversed(saver.list(thread_id)))
    seq_of = {c.id: c.seq for c in chain}
    return [
        (
            c.seq,
            seq_of.get(c.parent_id) if c.parent_id else None,
            c.node,
            c.next,
            c.source,
            c.safe,
            c.unsafe_reason,
            seq_of.get(c.rolled_back_from) if c.rolled_back_from else None,
            dict(c.values),
        )
        for c in chain
    ]
