"""Worker process for test_run_exclusivity: agent turns on threads shared with other processes through PostgreSQL.

Usage: ``python _runs_worker.py CONNINFO SCHEMA MODE ...`` (``CONNINFO`` may also be ``sqlite:PATH``, for the modes
that do not need other processes to see the thread's slot: ``hold`` and ``turn``)

- ``turns NAME TURNS THREADS SEED``: ``TURNS`` turns with ``multitask="enqueue"``, each on a thread drawn from
  ``t0 .. t{THREADS-1}``, a third of them cancelled after a random number of outputs. Prints one JSON line:
  ``{"completed": [[thread, text], ...], "cancelled": [...], "errors": [...]}`` (texts are unique).
- ``hold NAME THREAD POLICY``: one turn whose tool waits for a line on stdin; prints ``started`` when the tool runs,
  and at the end ``{"outcome": "completed" | "<ErrorType>", "message": ...}``.
- ``turn NAME THREAD POLICY``: one turn; prints ``started`` when the tool runs and the same outcome line.
- ``ask NAME THREAD``: one turn whose weather tool needs approval; prints ``{"asked": [call ids]}`` once it stopped.
- ``answer THREAD DECISION``: answers that thread's approval (``approve`` or ``reject``) in this process; prints
  ``{"outcome": ..., "ran": true | false, "answer": the model's last text}``.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from collections.abc import Sequence
from typing import Any

import reactivex as rx
from reactivex import operators as ops
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import Command, RunnableConfig
from rxgraph.agent import Approve, ChatChunk, ReactAgent, Reject, ToolCallDelta, ToolSpec, tool
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.messages import Message, ToolMessage, request_violations

OUTPUTS_PER_TURN = 9
"""What a turn emits: 2 tool-call chunks, the model node, the tool message, the tools node, 3 answer chunks, the
model node."""


class WeatherModel:
    """Asks for the weather once per user message, then answers; refuses (raises) a request a strict API would."""

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> rx.Observable[ChatChunk]:
        problems = request_violations(list(messages))
        if problems:
            return rx.throw(AssertionError(f"a strict API would refuse this request: {problems}"))
        if isinstance(messages[-1], ToolMessage):
            return rx.from_iterable([ChatChunk(content="Sunny "), ChatChunk(content="all "), ChatChunk(content="day.")])
        return rx.from_iterable(
            [
                ChatChunk(tool_calls=(ToolCallDelta(index=0, id=f"c{len(messages)}", name="weather", arguments="{"),)),
                ChatChunk(tool_calls=(ToolCallDelta(index=0, arguments="}"),), finish_reason="tool_calls"),
            ]
        )


def _run(agent: ReactAgent, text: str, config: RunnableConfig, take: int | None) -> str | None:
    """One turn, to its end (or cut after ``take`` outputs), waited for until its subscription is torn down; the
    error's text if it failed.

    Not only until ``on_completed``: ``take`` calls it before it disposes the run, and the cut turn's rewind runs in
    that dispose. Returning at ``on_completed``, a process's last turn could see its saver closed under its rewind,
    which then failed and left the cut turn on the thread."""
    done = threading.Event()
    failure: list[str] = []
    source = agent.stream(text, config)
    if take is not None:
        source = source.pipe(ops.take(take))
    source.pipe(ops.finally_action(done.set)).subscribe(on_error=lambda e: failure.append(f"{type(e).__name__}: {e}"))
    if not done.wait(60):
        return "timeout: the turn did not end within 60 s"
    return failure[0] if failure else None


def turns(conninfo: str, schema: str, name: str, count: str, threads: str, seed: str) -> dict[str, Any]:
    rng = random.Random(f"{name}-{seed}")

    @tool
    def weather() -> str:
        """The weather."""
        return "sunny"

    completed: list[list[str]] = []
    cancelled: list[list[str]] = []
    errors: list[str] = []
    with PostgresSaver(conninfo, schema=schema) as saver:
        agent = ReactAgent(WeatherModel(), tools=[weather], checkpointer=saver, multitask="enqueue")
        for index in range(int(count)):
            thread = f"t{rng.randrange(int(threads))}"
            text = f"{name}-{index}"
            cut = rng.randrange(1, OUTPUTS_PER_TURN) if rng.random() < 1 / 3 else None
            error = _run(agent, text, RunnableConfig(thread_id=thread), cut)
            if error is not None:
                errors.append(f"{text}: {error}")
            (completed if cut is None and error is None else cancelled).append([thread, text])
    return {"completed": completed, "cancelled": cancelled, "errors": errors}


def one(conninfo: str, schema: str, name: str, thread: str, policy: str, *, hold: bool) -> dict[str, Any]:
    # On a pool, as a blocking tool should be: an interrupt then reaches this process's caller while the tool still
    # waits (a tool on the caller's own thread would keep it until the tool returned).
    @tool(scheduler=ThreadPoolScheduler(2))
    def weather() -> str:
        """The weather."""
        print("started", flush=True)
        if hold:
            sys.stdin.readline()
        return "sunny"

    with _saver(conninfo, schema) as saver:
        agent = ReactAgent(WeatherModel(), tools=[weather], checkpointer=saver, multitask=policy)  # type: ignore[arg-type]
        error = _run(agent, name, RunnableConfig(thread_id=thread), None)
    if error is None:
        return {"outcome": "completed", "message": ""}
    kind, _, message = error.partition(": ")
    return {"outcome": kind, "message": message}


def _saver(conninfo: str, schema: str) -> PostgresSaver | SqliteSaver:
    if conninfo.startswith("sqlite:"):
        return SqliteSaver(conninfo.removeprefix("sqlite:"))
    return PostgresSaver(conninfo, schema=schema)


def approval(conninfo: str, schema: str, mode: str, *rest: str) -> dict[str, Any]:
    ran: list[bool] = []

    @tool(requires_approval=True)
    def weather() -> str:
        """The weather."""
        ran.append(True)
        return "sunny"

    with PostgresSaver(conninfo, schema=schema) as saver:
        agent = ReactAgent(WeatherModel(), tools=[weather], checkpointer=saver)
        if mode == "ask":
            name, thread = rest
            agent.invoke(name, RunnableConfig(thread_id=thread))
            pending = agent.get_state(RunnableConfig(thread_id=thread)).interrupt
            assert pending is not None
            return {"asked": [call.id for call in pending.value.calls]}
        thread, decision = rest
        config = RunnableConfig(thread_id=thread)
        pending = agent.get_state(config).interrupt
        assert pending is not None, "no approval is pending on the thread"
        answer = Approve() if decision == "approve" else Reject(reason="no")
        final = agent.invoke(Command(resume={call.id: answer for call in pending.value.calls}), config)
        return {"outcome": "completed", "ran": bool(ran), "answer": final.content}


def main(argv: list[str]) -> int:
    conninfo, schema, mode, *rest = argv
    if mode in ("ask", "answer"):
        result = approval(conninfo, schema, mode, *rest)
    elif mode == "turns":
        result = turns(conninfo, schema, *rest)
    else:
        result = one(conninfo, schema, *rest, hold=mode == "hold")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
