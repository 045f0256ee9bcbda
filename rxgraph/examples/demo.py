"""The ``rxgraph demo`` scenario: a scripted ReAct conversation on SQLite, with one turn cancelled mid-stream.

Turn 1 is a greeting. Turn 2 asks for the weather: the model calls a tool, the tool answers after 3 ticks, and the
model starts streaming its answer — then the client goes away (at ``cancel_at``). The cancelled turn is rewound.
Turn 3 asks again and completes; the request the model receives passes the strict sequence check.
Everything runs in virtual time, so the output is the same on every machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from reactivex import Observable

from ..agent._model import ChatChunk, ToolSpec
from ..agent._react import ReactAgent
from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..checkpoint._sqlite import SqliteSaver
from ..messages._rules import check_request
from ..messages._types import AssistantMessage, Message, ToolMessage, UserMessage
from ..testing import CancellationHarness, ScriptedTool, dispose_at, finish, marbles, text, tool_call

__all__ = ["DemoModel", "run_demo"]

TURNS = (
    "Hi! I'm planning a trip.",
    "What's the weather in Paris?",
    "Sorry, I lost the connection. What's the weather in Paris?",
)


class DemoModel:
    """A scripted chat model that answers from the conversation's last message, so the story holds whatever the
    cancel point: greet, call the weather tool for a weather question, then summarise the tool's answer."""

    def __init__(self) -> None:
        self.requests: list[tuple[Message, ...]] = []
        self._calls = 0

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        self.requests.append(tuple(messages))
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage):
            script = marbles("--a-b-c|", a=text("In Paris: "), b=text(last.text), c=text(" right now."))
        elif isinstance(last, UserMessage) and "weather" in last.text.lower() and tools:
            self._calls += 1
            call = tool_call(f"call-{self._calls}", "get_weather", '{"city": "Paris"}')
            script = marbles("-a-b|", a=call, b=finish("tool_calls"))
        else:
            script = marbles("-a-b|", a=text("Hello! "), b=text("Where are you going?"))
        return script.observable()


def _agent(saver: CheckpointSaver) -> ReactAgent:
    weather = ScriptedTool(
        "get_weather",
        marbles("---r|", r="Sunny, 21 C"),
        description="Current weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    return ReactAgent(DemoModel(), tools=[weather], checkpointer=saver, system_prompt="You are a travel assistant.")


def _free_thread(saver: CheckpointSaver) -> str:
    taken = set(saver.threads())
    number = 1
    while f"demo-{number}" in taken:
        number += 1
    return f"demo-{number}"


def _roles(checkpoint: Checkpoint | None) -> str:
    messages = checkpoint.values.get("messages", ()) if checkpoint is not None else ()
    return ", ".join(m.role for m in messages) or "(empty)"


def run_demo(db: str | os.PathLike[str], *, cancel_at: float = 10.0, out: TextIO) -> str:
    """Run the demo on the SQLite file ``db``, writing the story to ``out``; return the thread id used."""
    saver = SqliteSaver(db)
    try:
        thread_id = _free_thread(saver)
        harness = CancellationHarness(_agent, thread_id=thread_id, saver_factory=lambda: saver)
        model = harness.target.model  # type: ignore[attr-defined]
        assert isinstance(model, DemoModel)
        print(f"rxgraph demo: a scripted ReAct conversation in {os.fspath(db)!r}, thread {thread_id!r}", file=out)
        print("(virtual time: one tick is one frame of the scripted model and tool)\n", file=out)
        for number, question in enumerate(TURNS, start=1):
            cancel = dispose_at(cancel_at) if number == 2 else None
            print(f"turn {number}  user: {question}", file=out)
            if cancel is not None:
                print(f"        the client disconnects at t={cancel_at:g}", file=out)
            first_request = len(model.requests)
            record = harness.run_turn(question, cancel)
            print(_indent(record.timeline(legend=False)), file=out)
            if record.cancelled:
                head = record.head
                assert head is not None
                print(
                    f"        cancelled at t={(record.cancelled_at or 0) - record.start:g}; the thread was rewound: "
                    f"head seq {head.seq} ({head.source}) holds the state before the turn [{_roles(head)}]",
                    file=out,
                )
            else:
                for request in model.requests[first_request:]:
                    check_request(request)  # what a strict chat API would do with it
                answer = record.head.values["messages"][-1] if record.head is not None else None
                if number == 3:
                    roles = _roles_of(model.requests[first_request])
                    print(f"        the model's first request passes check_request: [{roles}]", file=out)
                if isinstance(answer, AssistantMessage):
                    print(f"        assistant: {answer.text}", file=out)
            print(file=out)
        print(f"history of thread {thread_id!r}, newest first:", file=out)
        for checkpoint in saver.list(thread_id):
            safe = "safe" if checkpoint.safe else "UNSAFE"
            print(
                f"  seq {checkpoint.seq:<3} {checkpoint.source:<6} node={checkpoint.node!s:<10} "
                f"run={checkpoint.run_id[:8]}  {safe:<6} [{_roles(checkpoint)}]",
                file=out,
            )
        print(f"\nlook closer with: rxgraph inspect --db {os.fspath(db)} --thread {thread_id}", file=out)
        return thread_id
    finally:
        saver.close()


def _roles_of(messages: Sequence[Message]) -> str:
    return ", ".join(m.role for m in messages)


def _indent(text: str) -> str:
    return "\n".join("        " + line for line in text.splitlines())
