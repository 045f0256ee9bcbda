"""agent: a ReAct turn (tool call, tool, answer) on SQLite as history grows, and what a cancelled turn costs.

rxgraph: ``ReactAgent`` with a ``ScriptedChatModel`` playing plain chunk lists (no marbles, no scheduler: a turn
runs synchronously) and one ``@tool``, on a ``SqliteSaver``. LangGraph: a comparable two-node graph, a fake model
node (no LLM: it returns an ``AIMessage`` with a tool call, then, after the tool's answer, a final ``AIMessage``)
and a ``ToolNode``, routed by ``tools_condition``, on LangGraph's ``SqliteSaver``. Each turn appends four messages
(user, assistant tool call, tool, assistant). The two take turns, turn by turn, for ``agent_turns`` (500) turns;
the figure at turn N is the median of the turns within ``window`` of N.

After turn N for every mark N, rxgraph alone is probed ``agent_probes`` times with:

1. a cancelled turn right after a completed one: subscribe to ``agent.stream(...)`` and dispose as soon as the
   model node's ``NodeOutput`` arrived (``ops.take_while(..., inclusive=True)``); the run stops there, and the
   dispose rewinds the thread to its pre-turn state. Timed from subscribe until the dispose returned; the part
   after the ``NodeOutput`` (upstream teardown and the rewind) is reported on its own;
2. a second cancelled turn right after the first (a user who gives up twice);
3. the completed turn that follows the cancels.

LangGraph has no rewind, so it reports no cancel figures. The probes' completed turns add one turn per probe to
rxgraph's thread, so at a mark its history is slightly longer than LangGraph's.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from reactivex import operators as ops

from rxgraph import NodeOutput, RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.checkpoint._sqlite import SqliteSaver
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

from ._common import (
    NOT_INSTALLED,
    BenchResult,
    Figure,
    Sizes,
    Target,
    gc_paused,
    median,
    median_window,
    ms,
    timed,
)

NAME = "agent"
QUESTION = "What's the weather in Paris?"
ARGUMENTS = '{"city": "Paris"}'


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


def model_calls(events: list[str]) -> list[str]:
    """The model calls a sequence of turns makes: a completed turn calls the model twice (the tool call, then the
    answer); a turn cancelled after the model node once (the tool call)."""
    calls: list[str] = []
    for event in events:
        calls.extend(("tool_call", "answer") if event == "turn" else ("tool_call",))
    return calls


@dataclass
class CancelTiming:
    """One cancelled turn: from subscribe until the dispose returned, and the part after the model's output."""

    total: float
    teardown: float


class RxgraphAgent:
    """An rxgraph ``ReactAgent`` on one SQLite thread, driven through a known sequence of turns and cancels.

    ``events`` lists what will be asked of it, in order ("turn" or "cancel"), so that its scripted model has an
    answer for every call.
    """

    def __init__(self, events: list[str], path: str, stack: ExitStack) -> None:
        scripts: list[list[Any]] = []
        for number, call in enumerate(model_calls(events)):
            if call == "tool_call":
                scripts.append([tool_call(f"call_{number}", "get_weather", ARGUMENTS), finish("tool_calls")])
            else:
                scripts.append([text("Sunny "), text("today."), finish()])
        saver = SqliteSaver(path)
        stack.callback(saver.close)
        self.agent = ReactAgent(ScriptedChatModel(scripts), tools=[tool(get_weather)], checkpointer=saver)
        self.config = RunnableConfig(thread_id="agent")
        self._turns = itertools.count(1)

    def turn(self) -> float:
        """A completed turn; its seconds."""
        question = f"{QUESTION} ({next(self._turns)})"
        return timed(lambda: self.agent.invoke(question, self.config))

    def cancel(self) -> CancelTiming:
        """A turn cancelled right after the model node's output (the tool call), rewound by the dispose."""
        seen: list[float] = []
        stream = self.agent.stream(QUESTION, self.config).pipe(ops.take_while(_before_model_output, inclusive=True))
        with gc_paused():
            start = time.perf_counter()
            # take_while completes the subscriber, then disposes the run, whose do_finally rewinds the thread.
            stream.subscribe(on_completed=lambda: seen.append(time.perf_counter()))
            end = time.perf_counter()
        head = self.agent.get_state(self.config).checkpoint
        if not seen or head is None or head.source != "rewind":
            raise RuntimeError(f"the cancelled turn was not rewound (head: {head!r})")
        return CancelTiming(end - start, end - seen[0])

    def history_length(self) -> int:
        return len(self.agent.get_state(self.config).values["messages"])


def _before_model_output(output: Any) -> bool:
    return not (type(output) is NodeOutput and output.node == "model")


def langgraph_agent(path: str, stack: ExitStack) -> Callable[[], float]:
    """The LangGraph counterpart: a fake model node and a ``ToolNode`` on SQLite; one timed turn per call."""
    import sqlite3
    from typing import Annotated, TypedDict

    import langgraph.graph as lg
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool as langchain_tool
    from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode, tools_condition

    # The functional form on purpose: in a class body, `from __future__ import annotations` would leave strings
    # that LangGraph resolves against this module's globals, where the imports of this function are not.
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    calls = itertools.count()

    def model(state: Any) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="Sunny today.")]}
        call = {"id": f"call_{next(calls)}", "name": "get_weather", "args": {"city": "Paris"}}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    connection = sqlite3.connect(path, check_same_thread=False)
    stack.callback(connection.close)
    builder = lg.StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([langchain_tool(get_weather)]))
    builder.add_edge(lg.START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=LangGraphSqliteSaver(connection))
    config: Any = {"configurable": {"thread_id": "agent"}}
    turns = itertools.count(1)

    def trial() -> float:
        update = {"messages": [HumanMessage(content=f"{QUESTION} ({next(turns)})")]}
        return timed(lambda: graph.invoke(update, config))

    return trial


_PROBE = ("cancel", "cancel", "turn")


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    turns, probes = sizes.agent_turns, sizes.agent_probes
    marks = [m for m in sizes.agent_marks if m <= turns]
    result = BenchResult(NAME, f"ReAct turns on SQLite over {turns} turns, and cancelled turns (rxgraph only)")
    events: list[str] = []
    for number in range(1, turns + 1):
        events.append("turn")
        if number in marks:
            events.extend(_PROBE * probes)

    with ExitStack() as stack:  # warm-up on throwaway files
        warm_events = ["turn", *(_PROBE * sizes.warmup)]
        warm_rx = RxgraphAgent(warm_events, os.path.join(workdir, "warmup-rxgraph-agent.sqlite"), stack)
        warm_rx.turn()
        for _ in range(sizes.warmup):
            warm_rx.cancel()
            warm_rx.cancel()
            warm_rx.turn()
        if langgraph:
            warm_lg = langgraph_agent(os.path.join(workdir, "warmup-langgraph-agent.sqlite"), stack)
            for _ in range(sizes.warmup + 1):
                warm_lg()

    series: dict[str, list[float]] = {"rxgraph": [], "langgraph": []}
    first_cancel: dict[int, list[CancelTiming]] = {}
    second_cancel: dict[int, list[CancelTiming]] = {}
    after_cancel: dict[int, list[float]] = {}
    length: dict[int, int] = {}
    with ExitStack() as stack:
        rx = RxgraphAgent(events, os.path.join(workdir, "agent-rxgraph.sqlite"), stack)
        trials: dict[str, Callable[[], float]] = {"rxgraph": rx.turn}
        if langgraph:
            trials["langgraph"] = langgraph_agent(os.path.join(workdir, "agent-langgraph.sqlite"), stack)
        names = list(trials)
        for number in range(1, turns + 1):
            if number % 10 == 1:
                sizes.collect()
            for name in names if number % 2 else reversed(names):
                series[name].append(trials[name]())
            if number in marks:
                length[number] = rx.history_length()
                for _ in range(probes):
                    sizes.collect()
                    first_cancel.setdefault(number, []).append(rx.cancel())
                    second_cancel.setdefault(number, []).append(rx.cancel())
                    after_cancel.setdefault(number, []).append(rx.turn())
    sizes.collect()

    result.samples = {
        "turns": {name: values for name, values in series.items() if values},
        "cancel_after_turn": {str(m): [[t.total, t.teardown] for t in ts] for m, ts in first_cancel.items()},
        "cancel_after_cancel": {str(m): [[t.total, t.teardown] for t in ts] for m, ts in second_cancel.items()},
        "turn_after_cancel": {str(m): values for m, values in after_cancel.items()},
    }
    lg_missing = "" if langgraph else NOT_INSTALLED
    turn_at = {name: {m: median_window(series[name], m, sizes.window) for m in marks} for name in names}
    for m in marks:
        result.figures.append(
            Figure(
                f"turn {m} ({length[m]} msgs), SQLite",
                "ms",
                ms(turn_at["rxgraph"][m]),
                ms(turn_at["langgraph"][m]) if langgraph else None,
                langgraph_note=lg_missing,
            )
        )
    cancel_total = {m: median(t.total for t in first_cancel[m]) for m in marks}
    for m in marks:
        result.figures.append(
            Figure(f"cancelled turn incl. rewind, turn {m}", "ms", ms(cancel_total[m]), langgraph_note="no rewind")
        )
    for m in marks:
        teardown = median(t.teardown for t in first_cancel[m])
        result.figures.append(
            Figure(f"  of which dispose + rewind, turn {m}", "ms", ms(teardown), langgraph_note="no rewind")
        )
    second_total = {m: median(t.total for t in second_cancel[m]) for m in marks}
    for m in marks:
        result.figures.append(
            Figure(f"cancel right after a cancel, turn {m}", "ms", ms(second_total[m]), langgraph_note="no rewind")
        )
    for m in marks:
        result.figures.append(
            Figure(
                f"completed turn after cancels, turn {m}",
                "ms",
                ms(median(after_cancel[m])),
                langgraph_note="no rewind",
            )
        )
    small, large = marks[0], marks[-1]
    for label, costs in (("after a completed turn", cancel_total), ("right after another cancel", second_total)):
        growth = costs[large] / costs[small]
        result.targets.append(
            Target(
                f"cancelled turn + rewind is O(1) in history ({label}): turn {large} <= 1.5x turn {small}",
                f"{ms(costs[small]):.3f} ms -> {ms(costs[large]):.3f} ms: {growth:.2f}x",
                growth <= 1.5,
            )
        )
    result.notes.append(
        "Cancel figures are rxgraph only: LangGraph has no rewind (a cancelled LangGraph run keeps what it wrote)."
    )
    return result
