"""LangChain tools in a ``ReactAgent``, next to rxgraph tools: what the model is shown, sync and async tools, their
errors as error tool messages, and a turn cancelled while an async LangChain tool runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages.tool import ToolOutputMixin
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.tools import tool as langchain_tool
from pydantic import BaseModel, Field
from reactivex.scheduler import ThreadPoolScheduler

from rxgraph import Command, MemorySaver, RunnableConfig, StreamingOutput
from rxgraph.agent import ApprovalRequest, Approve, ReactAgent, ToolSpec, tool
from rxgraph.errors import InvalidArgumentError, InvalidTypeError
from rxgraph.messages import ToolMessage, check_ready_for_user_input
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call
from rxgraph.tools.langchain import from_langchain_tool

WAIT = 10.0


def _calls(*calls: tuple[str, str]) -> ScriptedChatModel:
    """One message with the calls (name, arguments), then an answer."""
    chunks = [tool_call(f"c{i}", name, arguments, index=i) for i, (name, arguments) in enumerate(calls)]
    return ScriptedChatModel([[*chunks, finish("tool_calls")], [text("done")]])


def _answers(model: ScriptedChatModel) -> list[ToolMessage]:
    """The tool messages the model was sent after its calls."""
    return [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


class City(BaseModel):
    city: str = Field(description="The city's name")
    days: int = Field(default=1, description="How many days ahead")


@langchain_tool(args_schema=City)
def forecast(city: str, days: int = 1) -> str:
    """The weather forecast for a city."""
    return f"{days} days of sun in {city}"


@langchain_tool
async def population(city: str) -> int:
    """How many people live in a city."""
    await asyncio.sleep(0)
    return {"Oslo": 709_000}.get(city, 0)


@tool
def local_time(city: str) -> str:
    """The time in a city (an rxgraph tool)."""
    return f"12:00 in {city}"


# -- what the model sees ---------------------------------------------------------------------------------------------


def test_a_langchain_tools_name_description_and_schema_reach_the_model_next_to_rxgraph_tools() -> None:
    model = ScriptedChatModel([[text("hi")]])
    agent = ReactAgent(model, tools=[forecast, population, local_time])
    agent.invoke("hi")
    assert model.requests[0].tools == (
        ToolSpec(
            name="forecast",
            description="The weather forecast for a city.",
            parameters={
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city's name"},
                    "days": {"type": "integer", "description": "How many days ahead", "default": 1},
                },
                "required": ["city"],
            },
        ),
        ToolSpec(
            name="population",
            description="How many people live in a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        ),
        local_time.spec,
    )
    assert list(agent.tools) == ["forecast", "population", "local_time"]


def test_a_json_schema_given_as_args_schema_is_shown_as_it_is() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}, "required": ["q"]}
    search = StructuredTool(name="search", description="Search the web.", args_schema=schema, func=lambda q: q)
    assert from_langchain_tool(search).spec == ToolSpec(name="search", description="Search the web.", parameters=schema)


# -- running them ------------------------------------------------------------------------------------------------------


def test_sync_and_async_langchain_tools_answer_the_model_as_rxgraph_tools_do() -> None:
    model = _calls(
        ("forecast", '{"city": "Oslo", "days": 3}'),
        ("population", '{"city": "Oslo"}'),
        ("local_time", '{"city": "Oslo"}'),
    )
    ReactAgent(model, tools=[forecast, population, local_time]).invoke("Oslo?")
    assert _answers(model) == [
        ToolMessage(tool_call_id="c0", name="forecast", content="3 days of sun in Oslo"),
        ToolMessage(tool_call_id="c1", name="population", content="709000"),
        ToolMessage(tool_call_id="c2", name="local_time", content="12:00 in Oslo"),
    ]


def test_a_sync_tool_runs_on_the_agents_tool_scheduler_and_an_async_one_on_the_runs_loop(
    pool: ThreadPoolScheduler,
) -> None:
    threads: dict[str, str] = {}

    @langchain_tool
    def blocking(x: int) -> int:
        """Blocks."""
        threads["blocking"] = threading.current_thread().name
        return x

    async def awaited(x: int) -> int:
        threads["awaited"] = threading.current_thread().name
        return x

    coroutine = StructuredTool.from_function(coroutine=awaited, name="awaited", description="Awaits.")
    model = _calls(("blocking", '{"x": 1}'), ("awaited", '{"x": 2}'))
    ReactAgent(model, tools=[blocking, coroutine], tool_scheduler=pool).invoke("go")
    assert [m.content for m in _answers(model)] == ["1", "2"]
    assert threads["blocking"].startswith("ThreadPoolExecutor") and threads["awaited"] == "rxgraph-asyncio"


def test_a_base_tool_subclass_runs_its_own_async_code_when_it_has_some() -> None:
    class Sync(BaseTool):
        name: str = "sync_kind"
        description: str = "Sync only."

        def _run(self, word: str) -> str:
            return f"sync {word}"

    class Async(Sync):
        name: str = "async_kind"
        description: str = "Async too."

        async def _arun(self, word: str) -> str:
            return f"async {word} on {threading.current_thread().name}"

    model = _calls(("sync_kind", '{"word": "a"}'), ("async_kind", '{"word": "b"}'))
    ReactAgent(model, tools=[Sync(), Async()]).invoke("go")
    assert [m.content for m in _answers(model)] == ["sync a", "async b on rxgraph-asyncio"]


def test_only_a_tools_content_is_its_answer_never_its_artifact() -> None:
    @langchain_tool(response_format="content_and_artifact")
    def chart(city: str) -> tuple[str, dict[str, Any]]:
        """A chart of the weather."""
        return f"a chart of {city}", {"png": "..."}

    model = _calls(("chart", '{"city": "Oslo"}'))
    ReactAgent(model, tools=[chart]).invoke("go")
    assert [m.content for m in _answers(model)] == ["a chart of Oslo"]


# -- errors ------------------------------------------------------------------------------------------------------------


@langchain_tool
def flaky(city: str) -> str:
    """Fails."""
    raise ToolException(f"no station in {city}")


def test_a_tool_exception_becomes_an_error_tool_message_and_the_turn_goes_on() -> None:
    model = _calls(("flaky", '{"city": "Oslo"}'))
    agent = ReactAgent(model, tools=[flaky], checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("go", config).content == "done"
    assert _answers(model) == [
        ToolMessage(
            tool_call_id="c0",
            name="flaky",
            content="tool 'flaky' failed: ToolException: no station in Oslo",
            is_error=True,
        )
    ]
    check_ready_for_user_input(agent.get_state(config).values["messages"])


@pytest.mark.parametrize(
    ("handling", "content"),
    [
        (True, "no station in Oslo"),
        ("The weather service is down.", "The weather service is down."),
        (lambda error: f"handled: {error}", "handled: no station in Oslo"),
    ],
)
def test_a_handled_tool_exception_is_an_error_tool_message_with_langchains_text(handling: Any, content: str) -> None:
    handled = flaky.model_copy(update={"handle_tool_error": handling})
    model = _calls(("flaky", '{"city": "Oslo"}'))
    ReactAgent(model, tools=[handled]).invoke("go")
    assert _answers(model) == [ToolMessage(tool_call_id="c0", name="flaky", content=content, is_error=True)]


def test_an_async_tools_exception_becomes_an_error_tool_message() -> None:
    async def broken(city: str) -> str:
        await asyncio.sleep(0)
        raise ToolException("upstream closed")

    failing = StructuredTool.from_function(coroutine=broken, name="broken", description="Fails.")
    model = _calls(("broken", '{"city": "Oslo"}'))
    ReactAgent(model, tools=[failing]).invoke("go")
    (answer,) = _answers(model)
    assert answer.is_error and answer.content == "tool 'broken' failed: ToolException: upstream closed"


def test_arguments_that_fail_the_tools_schema_are_an_error_tool_message() -> None:
    lenient = forecast.model_copy(update={"name": "lenient", "handle_validation_error": "Give a city."})
    model = _calls(("forecast", '{"days": "many"}'), ("lenient", "{}"), ("forecast", "not json"))
    ReactAgent(model, tools=[forecast, lenient]).invoke("go")
    first, second, third = _answers(model)
    assert first.is_error and first.content.startswith("tool 'forecast' failed: ValidationError: 2 validation errors")
    assert second == ToolMessage(tool_call_id="c1", name="lenient", content="Give a city.", is_error=True)
    assert third.is_error and third.content.startswith("tool 'forecast' was not run: the arguments are not valid JSON")


def test_a_result_that_is_no_tool_content_becomes_an_error_tool_message() -> None:
    class Handover(ToolOutputMixin):  # what LangGraph's Command is: a result LangChain hands on as it is
        pass

    class Handing(BaseTool):
        name: str = "handing"
        description: str = "Hands over."

        def _run(self) -> Any:
            return Handover()

    model = _calls(("handing", "{}"))
    ReactAgent(model, tools=[Handing()]).invoke("go")
    (answer,) = _answers(model)
    assert answer.is_error and "returned a Handover" in answer.content


# -- cancellation ------------------------------------------------------------------------------------------------------


def test_a_turn_disposed_while_an_async_langchain_tool_runs_cancels_it_and_is_rewound() -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def wait_for_rain(city: str) -> str:
        started.set()
        try:
            await asyncio.get_running_loop().create_future()  # never answers by itself
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "rain"

    slow = StructuredTool.from_function(coroutine=wait_for_rain, name="wait_for_rain", description="Waits.")
    model = ScriptedChatModel(
        [[tool_call("c1", "wait_for_rain", '{"city": "Oslo"}'), finish("tool_calls")], [text("Hello!")]]
    )
    agent = ReactAgent(model, tools=[slow], checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t")
    outputs: list[Any] = []
    turn = agent.stream("Rain in Oslo?", config).subscribe(outputs.append)
    assert started.wait(WAIT)
    turn.dispose()
    assert cancelled.wait(WAIT)  # the tool saw the cancel
    state = agent.get_state(config)
    assert state.checkpoint.source == "rewind" and state.values.get("messages", ()) == ()
    assert not any(isinstance(o, StreamingOutput) and o.node == "tools" for o in outputs)
    assert agent.invoke("Hi", config).content == "Hello!"
    assert [m.role for m in model.requests[1].messages] == ["user"]  # nothing of the cut turn


# -- converting ----------------------------------------------------------------------------------------------------


def test_from_langchain_tool_takes_a_scheduler_and_approval(pool: ThreadPoolScheduler) -> None:
    converted = from_langchain_tool(forecast, scheduler=pool, requires_approval=True)
    assert converted.scheduler is pool and converted.requires_approval and "forecast" in repr(converted)
    model = _calls(("forecast", '{"city": "Oslo"}'))
    agent = ReactAgent(model, tools=[converted], checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t")
    agent.invoke("Oslo?", config)
    request = agent.get_state(config).interrupt
    assert request is not None and isinstance(request.value, ApprovalRequest)
    assert agent.invoke(Command(resume={"c0": Approve()}), config).content == "done"
    assert _answers(model)[0].content == "1 days of sun in Oslo"


def test_a_tool_called_alone_answers_with_its_tool_message() -> None:
    answer = from_langchain_tool(forecast).invoke('{"city": "Rome"}').run()
    assert isinstance(answer, ToolMessage) and (answer.content, answer.is_error) == ("1 days of sun in Rome", False)


def test_what_cannot_be_a_tool_is_refused() -> None:
    with pytest.raises(InvalidTypeError) as not_a_tool:
        from_langchain_tool(lambda: None)  # type: ignore[arg-type]
    assert not_a_tool.value.argument == "tool"
    spaced = StructuredTool(name="web search", description="d", args_schema={"type": "object"}, func=lambda: "")
    with pytest.raises(InvalidArgumentError, match="web search"):
        ReactAgent(ScriptedChatModel([]), tools=[spaced])
    with pytest.raises(InvalidTypeError):
        from_langchain_tool(forecast, requires_approval="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="two tools are named 'forecast'"):
        ReactAgent(ScriptedChatModel([]), tools=[forecast, forecast])
