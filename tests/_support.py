"""Small building blocks shared by the tests (real savers and graphs; nothing here fakes the thing under test)."""

from __future__ import annotations

import builtins
import threading
from typing import Any

from rxgraph import Checkpoint, CheckpointSaver
from rxgraph.testing import DelegatingSaver

__all__ = ["DelegatingSaver", "ReadCountingSaver", "ScriptedChat", "final_reply", "nodes_written", "tool_call_reply"]


class ReadCountingSaver(DelegatingSaver):
    """Counts each read call made on it, over any saver (``get``, ``list``, ``latest_safe``; a
    ``latest_safe`` counts as one read, however the inner saver answers it)."""

    def __init__(self, inner: CheckpointSaver) -> None:
        super().__init__(inner)
        self.reads = 0
        self._count_lock = threading.Lock()

    def _count(self) -> None:
        with self._count_lock:
            self.reads += 1

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        self._count()
        return super().get(thread_id, checkpoint_id)

    def list(
        self, thread_id: str, *, limit: int | None = None, before_seq: int | None = None
    ) -> builtins.list[Checkpoint]:
        self._count()
        return super().list(thread_id, limit=limit, before_seq=before_seq)

    def latest_safe(self, thread_id: str, *, before_seq: int | None = None) -> Checkpoint | None:
        self._count()
        return super().latest_safe(thread_id, before_seq=before_seq)


def nodes_written(saver: CheckpointSaver, thread_id: str) -> list[Any]:
    """The node of every checkpoint of the thread, oldest first."""
    return [c.node for c in reversed(saver.list(thread_id))]


class ScriptedChat:
    """A two-node chat graph (model, tools) whose model answers from a script and records every request.

    Each script item is an ``AssistantMessage`` (the model's reply), an exception (the model call fails), or a
    callable ``(scheduler) -> Observable`` for replies that take virtual time.
    """

    def __init__(self, script: list[Any], saver: CheckpointSaver, **compile_kwargs: Any) -> None:
        from rxgraph import END, START, KeyStrategy, StateGraph
        from rxgraph.messages import AssistantMessage, ToolMessage

        self.script = list(script)
        self.requests: list[list[Any]] = []
        self.saver = saver

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
            .compile(checkpointer=saver, **compile_kwargs)
        )


def tool_call_reply(call_id: str = "c1", name: str = "lookup") -> Any:
    from rxgraph.messages import AssistantMessage, ToolCall

    return AssistantMessage(tool_calls=[ToolCall(id=call_id, name=name, arguments="{}")])


def final_reply(text: str = "done") -> Any:
    from rxgraph.messages import AssistantMessage

    return AssistantMessage(content=text)
