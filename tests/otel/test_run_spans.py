"""A run is one trace: its span, its node calls' spans, and the model and tool calls inside them — nested as they ran,
under the span current where the run was started, whatever threads its steps ran on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import reactivex as rx
from opentelemetry.trace import StatusCode
from otel._recording import Recorded
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import TestScheduler

from rxgraph import END, START, Command, InterruptOutput, KeyStrategy, MemorySaver, RunnableConfig, StateGraph
from rxgraph.agent import ReactAgent, Reject, tool
from rxgraph.agent._model import ChatChunk
from rxgraph.testing import ScriptedChatModel, ScriptedTool, finish, marbles, text, tool_call

CONFIG = RunnableConfig(thread_id="t")


def _weather_model() -> ScriptedChatModel:
    """Calls ``weather`` once, then answers."""
    return ScriptedChatModel(
        [[tool_call("c0", "weather", '{"city": "Paris"}'), finish("tool_calls")], [text("Sunny."), finish("stop")]]
    )


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


def _pool_agent(pool: ThreadPoolScheduler, ran_on: list[str]) -> ReactAgent:
    @tool(scheduler=pool)
    def weather(city: str) -> str:
        """The weather in a city."""
        ran_on.append(threading.current_thread().name)
        return f"{city}: sunny"

    return ReactAgent(_weather_model(), tools=[weather], checkpointer=MemorySaver())


def test_a_completed_react_turn_is_one_trace_of_run_nodes_model_and_tool_calls(otel: Recorded) -> None:
    tool_ = ScriptedTool("weather", marbles("--r|", r="Paris: sunny"))
    agent = ReactAgent(_weather_model(), tools=[tool_], checkpointer=MemorySaver())
    scheduler = TestScheduler()
    agent.stream("Weather in Paris?", CONFIG.model_copy(update={"scheduler": scheduler})).subscribe()
    scheduler.advance_by(100)

    run = otel.one("rxgraph.run")
    assert run.attributes is not None
    assert run.attributes["rxgraph.outcome"] == "completed"
    assert run.attributes["rxgraph.thread_id"] == "t"
    assert run.attributes["rxgraph.run_id"] == agent.get_state(CONFIG).checkpoint.run_id  # type: ignore[union-attr]
    assert run.parent is None
    assert {span.context.trace_id for span in otel.spans()} == {run.context.trace_id}
    nodes = otel.children(run)
    assert [(n.name, n.attributes["rxgraph.node"]) for n in nodes] == [  # type: ignore[index]
        ("rxgraph.node", "model"),
        ("rxgraph.node", "tools"),
        ("rxgraph.node", "model"),
    ]
    history = [c.id for c in MemorySaver.list(agent.graph.checkpointer, "t")]  # type: ignore[arg-type]
    for node in nodes:
        assert node.attributes is not None
        assert node.attributes["rxgraph.checkpoint_id"] in history  # the checkpoint its superstep wrote
    assert [c.name for c in otel.children(nodes[0])] == ["chat ScriptedChatModel"]
    assert [c.name for c in otel.children(nodes[2])] == ["chat ScriptedChatModel"]
    (call,) = otel.children(nodes[1])
    assert call.name == "execute_tool weather"
    assert call.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "weather",
        "gen_ai.tool.call.id": "c0",
        "gen_ai.tool.type": "function",
    }
    chat = otel.children(nodes[0])[0]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "ScriptedChatModel"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert "gen_ai.input.messages" not in chat.attributes  # contents only when the application asks for them
    assert otel.open.names() == []


def test_the_run_span_is_the_callers_child_though_its_tools_run_on_a_pool(
    otel: Recorded, pool: ThreadPoolScheduler
) -> None:
    ran_on: list[str] = []
    agent = _pool_agent(pool, ran_on)
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        agent.invoke("Weather in Paris?", CONFIG)
    assert ran_on and ran_on[0] != threading.current_thread().name  # the tool ran on the pool

    run = otel.one("rxgraph.run")
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id
    assert {span.context.trace_id for span in otel.spans()} == {request.get_span_context().trace_id}
    call = otel.one("execute_tool weather")
    tools_node = otel.parent(call)
    assert tools_node is not None and tools_node.attributes is not None
    assert tools_node.attributes["rxgraph.node"] == "tools"
    assert otel.parent(tools_node) == run
    # the model's second call starts on the pool thread that finished the tool: still inside its node, in the run
    chats = otel.named("chat ScriptedChatModel")
    assert len(chats) == 2
    for chat in chats:
        node = otel.parent(chat)
        assert node is not None and otel.parent(node) == run


def test_a_tool_on_a_pool_sees_its_span_as_the_current_one(otel: Recorded, pool: ThreadPoolScheduler) -> None:
    seen: list[Any] = []
    tracer = otel.tracer_provider.get_tracer("test")

    @tool(scheduler=pool)
    def weather(city: str) -> str:
        """The weather in a city."""
        with tracer.start_as_current_span("inside the tool") as inner:
            seen.append(inner)
        return "sunny"

    ReactAgent(_weather_model(), tools=[weather], checkpointer=MemorySaver()).invoke("Weather?", CONFIG)
    inside = otel.one("inside the tool")
    assert otel.parent(inside) == otel.one("execute_tool weather")


def test_astream_runs_under_the_span_of_the_task_that_iterates_it(otel: Recorded, pool: ThreadPoolScheduler) -> None:
    agent = _pool_agent(pool, [])
    tracer = otel.tracer_provider.get_tracer("test")

    async def turn() -> int:
        with tracer.start_as_current_span("request") as request:
            outputs = [output async for output in agent.astream("Weather in Paris?", CONFIG)]
            assert outputs
            return request.get_span_context().span_id

    request_id = asyncio.run(turn())
    run = otel.one("rxgraph.run")
    assert run.parent is not None and run.parent.span_id == request_id
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "completed"
    assert [otel.parent(otel.parent(s) or s) for s in otel.named("chat ScriptedChatModel")] == [run, run]
    assert otel.parent(otel.parent(otel.one("execute_tool weather")) or run) == run
    assert otel.open.names() == []


def test_ainvoke_runs_under_the_span_of_the_awaiting_task_and_an_async_tool_under_its_call(otel: Recorded) -> None:
    tracer = otel.tracer_provider.get_tracer("test")

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        await asyncio.sleep(0)  # awaited on the run's loop, in a task of its own
        with tracer.start_as_current_span("inside the tool"):
            return "sunny"

    agent = ReactAgent(_weather_model(), tools=[weather], checkpointer=MemorySaver())

    async def turn() -> int:
        with tracer.start_as_current_span("request") as request:
            assert (await agent.ainvoke("Weather in Paris?", CONFIG)).content == "Sunny."
            return request.get_span_context().span_id

    request_id = asyncio.run(turn())
    run = otel.one("rxgraph.run")
    assert run.parent is not None and run.parent.span_id == request_id
    call = otel.one("execute_tool weather")
    assert otel.parent(otel.one("inside the tool")) == call
    tools_node = otel.parent(call)
    assert tools_node is not None and otel.parent(tools_node) == run
    assert [otel.parent(otel.parent(s) or s) for s in otel.named("chat ScriptedChatModel")] == [run, run]
    assert otel.open.names() == []


def test_a_failed_run_has_status_error_and_its_exception(otel: Recorded) -> None:
    def broken(state: Mapping[str, Any]) -> dict[str, Any]:
        raise ValueError("no luck")

    graph = StateGraph().add_node("broken", broken).add_edge(START, "broken").add_edge("broken", END).compile()
    with pytest.raises(ValueError, match="no luck"):
        graph.invoke({})
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "ValueError: no luck"
    assert run.attributes["error.type"] == "ValueError"
    (exception,) = [event for event in run.events if event.name == "exception"]
    assert exception.attributes is not None and exception.attributes["exception.message"] == "no luck"
    node = otel.one("rxgraph.node")
    assert node.status.status_code is StatusCode.ERROR
    assert otel.open.names() == []


def test_a_failed_model_call_fails_its_chat_span_and_the_turn(otel: Recorded) -> None:
    class Broken:
        model = "broken-model"

        def stream(self, messages: Any, tools: Any) -> rx.Observable[ChatChunk]:
            return rx.throw(ConnectionError("the API is down"))

    agent = ReactAgent(Broken(), checkpointer=MemorySaver())
    with pytest.raises(ConnectionError):
        agent.invoke("hi", CONFIG)
    chat = otel.one("chat broken-model")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None and chat.attributes["error.type"] == "ConnectionError"
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert [event.name for event in run.events] == ["rxgraph.rewind", "exception"]  # the agent rewinds a failed turn


def test_a_run_stopped_for_a_tool_approval_says_interrupted_and_the_wait_shows(otel: Recorded) -> None:
    @tool(requires_approval=True)
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    agent = ReactAgent(_weather_model(), tools=[weather], checkpointer=MemorySaver())
    outputs = agent.stream("Weather in Paris?", CONFIG).pipe(rx.operators.to_list()).run()
    stop = outputs[-1]
    assert isinstance(stop, InterruptOutput)
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "interrupted"
    tools_node = otel.named("rxgraph.node")[-1]
    assert tools_node.attributes is not None and tools_node.attributes["rxgraph.node"] == "tools"
    (asked,) = [event for event in tools_node.events if event.name == "rxgraph.approval.requested"]
    assert asked.attributes is not None and asked.attributes["gen_ai.tool.call.id"] == ("c0",)
    assert otel.named("execute_tool weather") == []

    otel.exporter.clear()
    agent.invoke(Command(resume=stop.value.approve_all()), CONFIG)
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "completed"
    tools_node = otel.named("rxgraph.node")[0]
    # The answer, and only it: the node ran again to take it, but nothing was asked in this run.
    assert [event.name for event in tools_node.events] == ["rxgraph.approval.answered"]
    (answered,) = tools_node.events
    assert answered.attributes is not None and answered.attributes["rxgraph.approval"] == ("approve",)
    call = otel.one("execute_tool weather")
    assert call.attributes is not None and call.attributes["rxgraph.tool.approval"] == "approve"


def test_calls_that_are_never_run_have_spans_that_say_why(otel: Recorded) -> None:
    # The model calls a tool that does not exist, a tool with arguments that do not fit it, and one that runs.
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    model = ScriptedChatModel(
        [
            [
                tool_call("c0", "forecast", '{"city": "Paris"}'),
                tool_call("c1", "weather", '{"town": "Paris"}', index=1),
                tool_call("c2", "weather", '{"city": "Paris"}', index=2),
                finish("tool_calls"),
            ],
            [text("Sunny."), finish("stop")],
        ]
    )
    ReactAgent(model, tools=[weather], checkpointer=MemorySaver()).invoke("Weather in Paris?", CONFIG)
    tools_node = [n for n in otel.named("rxgraph.node") if n.attributes and n.attributes["rxgraph.node"] == "tools"]
    (node,) = tools_node
    calls = {span.attributes["gen_ai.tool.call.id"]: span for span in otel.children(node) if span.attributes}
    assert sorted(calls) == ["c0", "c1", "c2"]
    assert calls["c0"].name == "execute_tool forecast"
    for call_id, error_type in (("c0", "unknown_tool"), ("c1", "ToolInputError")):
        span = calls[call_id]
        assert span.status.status_code is StatusCode.ERROR, call_id
        assert span.attributes is not None and span.attributes["error.type"] == error_type
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert calls["c0"].status.description == "unknown tool 'forecast'; the tools are: weather"
    assert calls["c2"].status.status_code is not StatusCode.ERROR
    assert calls["c2"].attributes is not None and "error.type" not in calls["c2"].attributes


def test_a_rejected_call_has_a_span_that_says_so(otel: Recorded) -> None:
    @tool(requires_approval=True)
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    agent = ReactAgent(_weather_model(), tools=[weather], checkpointer=MemorySaver())
    stop = agent.stream("Weather in Paris?", CONFIG).pipe(rx.operators.to_list()).run()[-1]
    assert isinstance(stop, InterruptOutput)
    otel.exporter.clear()
    agent.invoke(Command(resume={"c0": Reject(reason="not now")}), CONFIG)
    call = otel.one("execute_tool weather")
    assert call.attributes is not None and call.attributes["rxgraph.tool.approval"] == "reject"
    assert call.attributes["error.type"] == "rejected"
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "tool 'weather' was not run: not now"
    node = otel.parent(call)
    assert node is not None and node.attributes is not None and node.attributes["rxgraph.node"] == "tools"


def test_a_run_stopped_by_interrupt_before_says_interrupted(otel: Recorded) -> None:
    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(MemorySaver(), interrupt_before=["b"])
    )
    graph.invoke({}, CONFIG)
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "interrupted"
    otel.exporter.clear()
    graph.invoke(None, CONFIG)
    run = otel.one("rxgraph.run")
    assert run.attributes is not None and run.attributes["rxgraph.outcome"] == "completed"


def test_a_parallel_supersteps_nodes_are_siblings_with_the_checkpoint_they_wrote(otel: Recorded) -> None:
    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("a", lambda s: {"log": "a"})
        .add_node("b", lambda s: {"log": "b"})
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .compile(MemorySaver())
    )
    graph.invoke({}, CONFIG)
    run = otel.one("rxgraph.run")
    nodes = otel.children(run)
    assert sorted(n.attributes["rxgraph.node"] for n in nodes) == ["a", "b"]  # type: ignore[index]
    head = graph.get_state(CONFIG).checkpoint
    assert head is not None
    assert {n.attributes["rxgraph.checkpoint_id"] for n in nodes} == {head.id}  # type: ignore[index]
    assert {n.attributes["rxgraph.step"] for n in nodes} == {1}  # type: ignore[index]


def test_a_subgraphs_run_nests_inside_its_node(otel: Recorded) -> None:
    inner = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("i1", lambda s: {"log": "i1"})
        .add_edge(START, "i1")
        .add_edge("i1", END)
        .compile()
    )
    outer = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("sub", inner)
        .add_edge(START, "sub")
        .add_edge("sub", END)
        .compile(MemorySaver())
    )
    assert outer.invoke({}, CONFIG)["log"] == ("i1",)
    runs = otel.named("rxgraph.run")
    assert len(runs) == 2
    outer_run = next(r for r in runs if r.parent is None)
    inner_run = next(r for r in runs if r.parent is not None)
    assert inner_run.attributes is not None and inner_run.attributes["rxgraph.subgraph"] is True
    sub_node = otel.parent(inner_run)
    assert sub_node is not None and sub_node.attributes is not None and sub_node.attributes["rxgraph.node"] == "sub"
    assert otel.parent(sub_node) == outer_run
    (i1,) = otel.children(inner_run)
    assert i1.attributes is not None and i1.attributes["rxgraph.node"] == "i1"
