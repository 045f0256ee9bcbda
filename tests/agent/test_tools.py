"""@tool: schema from a typed function, validated arguments, and every bad input turned into an error message."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import reactivex as rx
from pydantic import BaseModel
from reactivex.testing import TestScheduler

from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent, tool
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, ToolInputError
from rxgraph.messages import ToolMessage, check_ready_for_user_input
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call


@tool
def get_weather(city: str, unit: str = "C") -> str:
    """Current weather for a city."""
    return f"Sunny, 21 {unit} in {city}"


def test_tool_spec_from_the_function() -> None:
    spec = get_weather.spec
    assert spec.name == "get_weather" and spec.description == "Current weather for a city."
    assert spec.parameters["required"] == ["city"]
    assert spec.parameters["properties"]["unit"]["default"] == "C"
    assert spec.to_openai()["function"]["name"] == "get_weather"
    assert get_weather("Oslo") == "Sunny, 21 C in Oslo"


def test_named_tool_and_rejected_signatures() -> None:
    @tool(name="lookup", description="Find things.")
    def find(query: str) -> str:
        return query

    assert find.name == "lookup" and find.description == "Find things."

    def variadic(*args: Any) -> None:
        return None

    with pytest.raises(InvalidTypeError, match=r"\*args") as bad_signature:
        tool(variadic)
    assert bad_signature.value.argument == "fn" and isinstance(bad_signature.value, TypeError)
    with pytest.raises(InvalidArgumentError, match="only letters") as bad_name:
        tool(name="no spaces")(lambda q: q)
    assert bad_name.value.argument == "name" and isinstance(bad_name.value, ValueError)
    with pytest.raises(InvalidTypeError, match="wraps a function, got int"):
        tool(3)  # type: ignore[call-overload]


def test_positional_only_parameters_and_unresolvable_hints_are_rejected() -> None:
    def positional(q: str, /) -> str:
        return q

    def unresolvable(q: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return q

    with pytest.raises(InvalidTypeError, match="positional-only") as positional_only:
        tool(positional)
    assert positional_only.value.argument == "fn"
    with pytest.raises(InvalidTypeError, match="cannot resolve the type hints") as hints:
        tool(unresolvable)
    assert isinstance(hints.value.__cause__, NameError)


def test_parse_arguments_errors() -> None:
    with pytest.raises(ToolInputError, match="not valid JSON"):
        get_weather.parse_arguments('{"city": ')
    with pytest.raises(ToolInputError, match="must be a JSON object, got list"):
        get_weather.parse_arguments("[1]")
    with pytest.raises(ToolInputError, match="city: Field required"):
        get_weather.parse_arguments("{}")
    with pytest.raises(ToolInputError, match="nope: Extra inputs are not permitted"):
        get_weather.parse_arguments('{"city": "x", "nope": 1}')
    assert get_weather.parse_arguments('{"city": "Rome"}') == {"city": "Rome", "unit": "C"}


@pytest.mark.parametrize("arguments", ['{"city": ', "[1]", "{}", '{"city": "x", "nope": 1}'])
def test_tool_input_error_names_the_tool(arguments: str) -> None:
    with pytest.raises(ToolInputError) as caught:
        get_weather.parse_arguments(arguments)
    assert caught.value.tool == "get_weather"
    assert isinstance(caught.value, ValueError)


def test_invoke_reports_bad_arguments_as_on_error_naming_the_tool() -> None:
    errors: list[Exception] = []
    get_weather.invoke("[1]").subscribe(on_error=errors.append)
    assert len(errors) == 1 and isinstance(errors[0], ToolInputError) and errors[0].tool == "get_weather"


def _turn(calls: list[Any], tools: list[Any]) -> tuple[list[ToolMessage], ReactAgent]:
    chunks = [tool_call(f"c{i}", name, args, index=i) for i, (name, args) in enumerate(calls)]
    model = ScriptedChatModel([[*chunks, finish("tool_calls")], [text("done")]])
    agent = ReactAgent(model, tools=tools, checkpointer=MemorySaver())
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("go", config).content == "done"
    history = agent.get_state(config).values["messages"]
    check_ready_for_user_input(history)
    return [m for m in history if isinstance(m, ToolMessage)], agent


def test_each_bad_tool_input_yields_an_error_tool_message_and_the_turn_completes() -> None:
    @tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(reason)

    @tool
    def later(n: int) -> rx.Observable[int]:
        """Fails asynchronously."""
        return rx.throw(ValueError(f"no {n}"))

    @tool
    def silent() -> rx.Observable[str]:
        """Never answers."""
        return rx.empty()

    answers, _ = _turn(
        [
            ("get_weather", '{"city": '),
            ("teleport", "{}"),
            ("get_weather", '{"town": "Paris"}'),
            ("explode", '{"reason": "kaput"}'),
            ("later", '{"n": 3}'),
            ("silent", ""),
            ("get_weather", '{"city": "Paris"}'),
        ],
        [get_weather, explode, later, silent],
    )
    assert [m.tool_call_id for m in answers] == [f"c{i}" for i in range(7)]  # one each, in call order
    assert [m.is_error for m in answers] == [True] * 6 + [False]
    reasons = [m.content for m in answers]
    assert "not valid JSON" in reasons[0]
    assert "unknown tool 'teleport'" in reasons[1] and "explode" in reasons[1]
    assert "city: Field required" in reasons[2]
    assert "RuntimeError: kaput" in reasons[3]
    assert "ValueError: no 3" in reasons[4]
    assert "without a result" in reasons[5]
    assert reasons[6] == "Sunny, 21 C in Paris"


def test_tool_results_become_text() -> None:
    class Forecast(BaseModel):
        temp: int

    @tool
    def structured(kind: str) -> Any:
        """Returns non-text values."""
        return {"model": Forecast(temp=3), "dict": {"a": [1, 2]}, "none": None}[kind]

    answers, _ = _turn(
        [("structured", '{"kind": "model"}'), ("structured", '{"kind": "dict"}'), ("structured", '{"kind": "none"}')],
        [structured],
    )
    assert [m.content for m in answers] == ['{"temp":3}', '{"a": [1, 2]}', ""]


def test_a_tool_on_a_thread_pool() -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    threads: list[int] = []

    @tool
    def slow_square(x: int) -> rx.Observable[int]:
        """Squares on a worker thread."""

        def job() -> int:
            threads.append(threading.get_ident())
            return x * x

        return rx.from_future(pool.submit(job))

    answers, _ = _turn([("slow_square", '{"x": 7}')], [slow_square])
    assert answers[0].content == "49"
    assert threads and threads[0] != threading.get_ident()
    pool.shutdown()


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="two tools are named 'get_weather'") as caught:
        ReactAgent(ScriptedChatModel([]), tools=[get_weather, get_weather])
    assert caught.value.argument == "tools"


def test_a_plain_tool_answers_where_it_is_called_not_on_the_subscribers_scheduler() -> None:
    # A run passes its scheduler down to the tools it subscribes (a worker pool under astream, a TestScheduler in
    # marble tests). A function's value is already there: it must not be handed to that scheduler (a hop to
    # another thread, or a later tick) before the tools node sees it.
    @tool
    def answer() -> dict[str, str]:
        """Answers."""
        return {"text": "sunny"}

    scheduler = TestScheduler()
    seen: list[Any] = []
    completed = threading.Event()
    answer.run().subscribe(seen.append, on_completed=completed.set, scheduler=scheduler)
    assert seen == [{"text": "sunny"}]
    assert completed.is_set()
    assert scheduler.clock == 0
