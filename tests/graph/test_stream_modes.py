"""Stream modes: ``stream(..., mode=...)`` and the ``stream_modes`` operator give ``values``, ``updates``, ``messages``
and ``custom`` payloads, bare for one mode and as ``(mode, payload)`` for a list, as LangGraph's ``stream_mode``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

from rxgraph import (
    END,
    START,
    Command,
    InterruptOutput,
    InvalidArgumentError,
    InvalidTypeError,
    KeyStrategy,
    MemorySaver,
    NodeOutput,
    PendingInterrupt,
    RunInfo,
    RunnableConfig,
    StateGraph,
    StreamingOutput,
    interrupt,
    stream_modes,
)
from rxgraph.agent import ChatChunk, ReactAgent, tool
from rxgraph.messages import AssistantMessage, ToolMessage, UserMessage
from rxgraph.testing import ScriptedChatModel, marbles, text, tool_call

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _collect(source: rx.Observable[Any]) -> list[Any]:
    return list(source.pipe(ops.to_list()).run())


def _nexts(observed: Any) -> list[tuple[float, Any]]:
    return [(m.time, m.value.value) for m in observed.messages if m.value.kind == "N"]


def _writer_graph() -> Any:
    def my_node(state: Any, run: RunInfo) -> dict[str, Any]:
        run.write("custom!")
        return dict(state)

    return StateGraph().add_node("my_node", my_node).add_edge(START, "my_node").add_edge("my_node", END).compile()


def test_custom_values_and_two_modes_at_once() -> None:
    """Ported from LangGraph's ``test_get_stream_writer``. One difference: rxgraph's ``values`` has no payload for
    the input (a run emits nothing for it), so it starts with the state after the first superstep."""
    graph = _writer_graph()
    assert _collect(graph.stream({"foo": "bar"}, mode="custom")) == ["custom!"]
    assert _collect(graph.stream({"foo": "bar"}, mode="values")) == [{"foo": "bar"}]
    assert _collect(graph.stream({"foo": "bar"}, mode=["custom", "updates"])) == [
        ("custom", "custom!"),
        ("updates", {"my_node": {"foo": "bar"}}),
    ]


def test_a_stop_for_a_human_ends_updates_and_values_with_the_interrupt() -> None:
    """Ported from LangGraph's ``test_interrupt_stream_mode_values``: the stop comes as ``{"__interrupt__": ...}`` in
    ``updates``, and as the kept state plus ``"__interrupt__"`` in ``values``; the resume goes on. (LangGraph also
    emits the state a resumed run starts from first; rxgraph's values start after its first superstep.)"""

    def robot_input_node(state: Any) -> dict[str, Any]:
        return {"robot_input": "beep boop i am a robot"}

    def human_input_node(state: Any) -> Command[Any]:
        return Command(update={"human_input": interrupt("interrupt")})

    app = (
        StateGraph()
        .add_node("robot_input_node", robot_input_node)
        .add_node("human_input_node", human_input_node)
        .add_edge(START, "robot_input_node")
        .add_edge("robot_input_node", "human_input_node")
        .add_edge("human_input_node", END)
        .compile(checkpointer=MemorySaver())
    )
    config = RunnableConfig(thread_id="t")
    result = _collect(app.stream({}, config, mode=["updates", "values"]))
    stop = result[2][1]["__interrupt__"]
    assert len(stop) == 1 and isinstance(stop[0], PendingInterrupt) and stop[0].value == "interrupt"
    assert result == [
        ("updates", {"robot_input_node": {"robot_input": "beep boop i am a robot"}}),
        ("values", {"robot_input": "beep boop i am a robot"}),
        ("updates", {"__interrupt__": stop}),
        ("values", {"robot_input": "beep boop i am a robot", "__interrupt__": stop}),
    ]
    assert app.invoke({}, RunnableConfig(thread_id="other"))["__interrupt__"] == stop  # as invoke says it
    resumed = _collect(app.stream(Command(resume="i am a human"), config, mode=["updates", "values"]))
    assert resumed == [
        ("updates", {"human_input_node": {"human_input": "i am a human"}}),
        ("values", {"robot_input": "beep boop i am a robot", "human_input": "i am a human"}),
    ]


def test_messages_in_nodes_updates_come_with_their_node() -> None:
    """Ported from LangGraph's ``test_stream_mode_messages_command``: a message a node returns, one in a
    ``Command``'s update, and (rxgraph's way to make several updates) ones a node streams as its updates."""

    def my_node(state: Any) -> dict[str, Any]:
        return {"messages": UserMessage(content="foo")}

    def my_other_node(state: Any) -> Command[Any]:
        return Command(update={"messages": UserMessage(content="bar")})

    def my_last_node(state: Any) -> rx.Observable[dict[str, Any]]:
        return rx.of({"messages": [UserMessage(content="baz")]}, {"other": 1})

    graph = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("my_node", my_node)
        .add_node("my_other_node", my_other_node)
        .add_node("my_last_node", my_last_node)
        .add_edge(START, "my_node")
        .add_edge("my_node", "my_other_node")
        .add_edge("my_other_node", "my_last_node")
        .add_edge("my_last_node", END)
        .compile()
    )
    assert _collect(graph.stream({"messages": []}, mode="messages")) == [
        (UserMessage(content="foo"), {"node": "my_node", "path": ("my_node",), "langgraph_node": "my_node"}),
        (
            UserMessage(content="bar"),
            {"node": "my_other_node", "path": ("my_other_node",), "langgraph_node": "my_other_node"},
        ),
        (
            UserMessage(content="baz"),
            {"node": "my_last_node", "path": ("my_last_node",), "langgraph_node": "my_last_node"},
        ),
    ]
    updates = _collect(graph.stream({"messages": []}, mode="updates"))
    assert updates[1] == {"my_other_node": {"messages": UserMessage(content="bar")}}  # a Command's update
    assert updates[2] == {"my_last_node": ({"messages": [UserMessage(content="baz")]}, {"other": 1})}  # several


def test_a_subgraphs_inner_message_comes_once_with_the_inner_node_and_its_path() -> None:
    """Ported from LangGraph's ``test_stream_messages_dedupe_inputs``: the message an inner node returns is told
    once, by the inner node — not again when the subgraph node's update (which holds it too) lands."""

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": AssistantMessage(content="hi")}

    subgraph = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("call_model", call_model)
        .add_edge(START, "call_model")
        .add_edge("call_model", END)
        .compile()
    )
    graph = (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("node_1", subgraph)
        .add_node("node_2", lambda state: None)
        .add_edge(START, "node_1")
        .add_edge("node_1", "node_2")
        .add_edge("node_2", END)
        .compile()
    )
    chunks = _collect(graph.stream({"messages": [UserMessage(content="hi")]}, mode="messages"))
    assert chunks == [
        (
            AssistantMessage(content="hi"),
            {"node": "call_model", "path": ("node_1", "call_model"), "langgraph_node": "call_model"},
        )
    ]


def test_an_agents_tokens_and_tool_messages_each_come_once() -> None:
    """``messages`` on a ``ReactAgent``'s turn (the operator composes with any run's outputs): the model's
    ``ChatChunk``s and the tools' ``ToolMessage``s as they stream, and not the messages again from the updates."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    model = ScriptedChatModel(
        [
            marbles("a|", a=tool_call("call-1", "lookup", '{"city": "Paris"}')),
            marbles("-x-y|", x=text("Sun"), y=text("ny")),
        ]
    )
    agent = ReactAgent(model, tools=[lookup], checkpointer=MemorySaver())
    scheduler = TestScheduler()
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(lambda: agent.stream("Weather?", config).pipe(stream_modes("messages")))
    got = [(tick, type(message).__name__, metadata["node"]) for tick, (message, metadata) in _nexts(observed)]
    assert [(kind, node) for _, kind, node in got] == [
        ("ChatChunk", "model"),
        ("ToolMessage", "tools"),
        ("ChatChunk", "model"),
        ("ChatChunk", "model"),
    ]
    assert [tick for tick, _, _ in got][-2:] == [got[1][0] + 1, got[1][0] + 3]  # the tokens when they streamed
    tokens = [message for _, (message, _) in _nexts(observed) if isinstance(message, ChatChunk)]
    assert [token.content for token in tokens[1:]] == ["Sun", "ny"]
    assert isinstance(_nexts(observed)[1][1][0], ToolMessage)


def test_values_come_once_per_superstep_after_its_updates() -> None:
    """Two nodes of one parallel superstep land together: one ``values``, after both ``updates``."""
    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda state: {"log": "a"})
        .add_node("b", lambda state: {"log": "b"})
        .add_node("c", lambda state: {"log": "c"})
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge(["a", "b"], "c")
        .add_edge("c", END)
        .compile()
    )
    assert _collect(graph.stream({}, mode=["values", "updates"])) == [
        ("updates", {"a": {"log": "a"}}),
        ("updates", {"b": {"log": "b"}}),
        ("values", {"log": ["a", "b"]}),
        ("updates", {"c": {"log": "c"}}),
        ("values", {"log": ["a", "b", "c"]}),
    ]


def test_the_operator_in_virtual_time_keeps_the_runs_timing() -> None:
    """A marble test of ``stream_modes`` on the default stream: each payload at the tick of the output it comes
    from; ``values`` at its superstep's last output."""
    scheduler = TestScheduler()

    def speak(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        run.write("started")
        return scheduler.create_cold_observable(
            on_next(10, {"text": "Hel"}), on_next(20, {"text": "lo"}), on_completed(30)
        )

    app = StateGraph().add_node("speak", speak).add_edge(START, "speak").add_edge("speak", END).compile()
    observed = scheduler.start(
        lambda: app.stream({}, RunnableConfig(scheduler=scheduler)).pipe(stream_modes(["custom", "updates", "values"]))
    )
    assert observed.messages == [
        on_next(200, ("custom", "started")),
        on_next(230, ("updates", {"speak": ({"text": "Hel"}, {"text": "lo"})})),
        on_next(230, ("values", {"text": "lo"})),
        on_completed(230),
    ]


def test_the_operator_composes_with_any_stream_of_outputs() -> None:
    state = {"x": 1}
    outputs = rx.of(
        StreamingOutput("a", {}, AssistantMessage(content="hello")),
        NodeOutput("a", state, update={"x": 1}),
        InterruptOutput("b", state, PendingInterrupt("b", "before", None)),
    )
    assert _collect(outputs.pipe(stream_modes(["messages", "updates", "values"]))) == [
        ("messages", (AssistantMessage(content="hello"), {"node": "a", "path": ("a",), "langgraph_node": "a"})),
        ("updates", {"a": {"x": 1}}),
        ("values", {"x": 1}),
        ("updates", {"__interrupt__": (PendingInterrupt("b", "before", None),)}),
        ("values", {"x": 1, "__interrupt__": (PendingInterrupt("b", "before", None),)}),
    ]


def test_astream_takes_a_mode_too() -> None:
    graph = _writer_graph()

    async def main() -> list[Any]:
        return [item async for item in graph.astream({"foo": "bar"}, mode=["updates", "custom"])]

    assert asyncio.run(main()) == [("custom", "custom!"), ("updates", {"my_node": {"foo": "bar"}})]


def test_without_a_mode_the_stream_is_the_runs_outputs() -> None:
    outputs = _collect(_writer_graph().stream({"foo": "bar"}))
    assert [type(output).__name__ for output in outputs] == ["CustomOutput", "NodeOutput"]


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        (
            "debug",
            InvalidArgumentError,
            r"unknown stream mode 'debug'; the modes are 'values', 'updates', 'messages', 'custom'",
        ),
        ([], InvalidArgumentError, "mode is an empty list"),
        (3, InvalidTypeError, "mode must be a stream mode's name or a list of them .* got int"),
        (["values", None], InvalidTypeError, "got a NoneType in the list"),
    ],
)
def test_a_mode_that_is_not_one_is_refused_when_the_stream_is_made(
    mode: Any, error: type[Exception], message: str
) -> None:
    graph = _writer_graph()
    with pytest.raises(error, match=message) as raised:
        graph.stream({}, mode=mode)
    assert raised.value.argument == "mode"  # type: ignore[attr-defined]
    with pytest.raises(error, match=message):
        stream_modes(mode)


def test_a_list_with_a_mode_twice_gives_it_once() -> None:
    assert _collect(_writer_graph().stream({}, mode=["custom", "custom"])) == [("custom", "custom!")]


# -- cancellation ---------------------------------------------------------------------------------------------------


def test_disposing_a_mode_stream_mid_run_rewinds_the_thread() -> None:
    """Disposing the payloads' subscription is disposing the run's: it is cancelled and rewound, and nothing it
    wrote is in a checkpoint."""
    scheduler, saver = TestScheduler(), MemorySaver()

    def counting(state: Any, run: RunInfo) -> rx.Observable[dict[str, Any]]:
        return rx.interval(10.0).pipe(
            ops.take(5), ops.do_action(lambda index: run.write({"secret": index})), ops.map(lambda i: {"count": i + 1})
        )

    app = StateGraph().add_node("first", lambda state: {"count": 0}).add_node("count", counting)
    app = app.add_edge(START, "first").add_edge("first", "count").add_edge("count", END).compile(checkpointer=saver)
    config = RunnableConfig(thread_id="t", scheduler=scheduler)
    observed = scheduler.start(lambda: app.stream({"count": -1}, config, mode=["updates", "custom"]), disposed=225)
    assert _nexts(observed) == [
        (200, ("updates", {"first": {"count": 0}})),
        (210, ("custom", {"secret": 0})),
        (220, ("custom", {"secret": 1})),
    ]
    head = app.get_state(config)
    assert head.values == {} and head.checkpoint is not None and head.checkpoint.source == "rewind"
    assert not any("secret" in repr(checkpoint.values) for checkpoint in saver.list("t"))


def test_a_take_on_a_mode_stream_stops_the_run_at_the_next_step() -> None:
    saver = MemorySaver()
    graph = (
        StateGraph()
        .add_node("a", lambda state: {"a": 1})
        .add_node("b", lambda state: {"b": 1})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )
    config = RunnableConfig(thread_id="t")
    assert _collect(graph.stream({}, config, mode="updates").pipe(ops.take(1))) == [{"a": {"a": 1}}]
    assert graph.get_state(config).values == {}  # the turn was rewound
