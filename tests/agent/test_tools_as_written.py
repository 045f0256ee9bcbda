"""Tools as users write them: blocking functions on a scheduler, ``async def``, and the run's ``RunInfo`` (its
``context`` and its ``cancelled`` Event) — never shown to the model, never stored."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from reactivex import Observable
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOThreadSafeScheduler

from rxgraph import CheckpointSaver, MemorySaver, NodeOutput, RunInfo, RunnableConfig, RunOutput
from rxgraph.agent import ReactAgent, Tool, tool
from rxgraph.errors import InvalidTypeError, ToolInputError
from rxgraph.messages import ToolMessage, check_ready_for_user_input
from rxgraph.rx import SignalType, do_finally
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call


def _model(name: str, arguments: str = "{}") -> ScriptedChatModel:
    """One call of tool ``name``, then an answer."""
    return ScriptedChatModel([[tool_call("c1", name, arguments), finish("tool_calls")], [text("done")]])


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    scheduler = ThreadPoolScheduler(2)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


# -- the tool on its own ----------------------------------------------------------------------------------------


def test_the_run_info_parameter_is_left_out_of_the_schema_and_the_model_cannot_pass_it() -> None:
    @tool
    def orders(status: str, run: RunInfo, limit: int = 10) -> str:
        """The user's orders."""
        return status

    assert orders.run_info == "run"
    assert set(orders.spec.parameters["properties"]) == {"status", "limit"}
    assert orders.spec.parameters["required"] == ["status"]
    assert "RunInfo" not in json.dumps(orders.spec.to_openai())
    assert orders.parse_arguments('{"status": "open"}') == {"status": "open", "limit": 10}
    with pytest.raises(ToolInputError, match="run: Extra inputs are not permitted"):
        orders.parse_arguments('{"status": "open", "run": {}}')


def test_a_tool_scheduler_must_be_a_reactivex_scheduler() -> None:
    def lookup(q: str) -> str:
        return q

    with pytest.raises(InvalidTypeError, match=r"must be a reactivex scheduler \(.*\), got str") as caught:
        tool(scheduler="pool")(lookup)  # type: ignore[arg-type]
    assert caught.value.argument == "scheduler"
    assert Tool(lookup).scheduler is None


def test_disposing_before_the_scheduler_gets_to_the_call_never_calls_the_function() -> None:
    single = ThreadPoolScheduler(1)
    busy, release, drained = threading.Event(), threading.Event(), threading.Event()
    called: list[int] = []

    @tool(scheduler=single)
    def square(x: int) -> int:
        """Squares."""
        called.append(x)
        return x * x

    def occupy(*_: Any) -> None:
        busy.set()
        release.wait(10)

    single.schedule(occupy)  # the one worker is busy: the call waits in line behind it
    assert busy.wait(10)
    subscription = square.run(None, None, x=3).subscribe()
    subscription.dispose()
    release.set()
    single.schedule(lambda *_: drained.set())  # queued after the call: once it ran, the call had its turn
    assert drained.wait(10)
    single.executor.shutdown(wait=True)
    assert called == []


def test_a_tool_run_outside_an_agent_gets_a_run_info_of_its_own_cancelled_on_dispose(
    pool: ThreadPoolScheduler,
) -> None:
    entered, ended = threading.Event(), threading.Event()
    seen: list[Any] = []

    @tool(scheduler=pool)
    def block(run: RunInfo) -> str:
        """Blocks until cancelled."""
        seen.append((run.thread_id, dict(run.context)))
        entered.set()
        seen.append(run.cancelled.wait(10))
        ended.set()
        return "too late"

    subscription = block.invoke("{}").subscribe()
    assert entered.wait(10)
    subscription.dispose()
    assert ended.wait(10)
    assert seen == [(None, {}), True]


def test_an_async_tool_run_outside_an_agent_is_awaited_on_the_background_loop() -> None:
    @tool
    async def forecast(city: str) -> str:
        """The forecast."""
        await asyncio.sleep(0)
        return f"Rain in {city}"

    results: list[Any] = []
    done = threading.Event()
    forecast.invoke('{"city": "Oslo"}').subscribe(results.append, results.append, done.set)
    assert done.wait(10)
    assert results == ["Rain in Oslo"]


# -- blocking tools off the run's thread -------------------------------------------------------------------------


def test_a_blocking_tool_on_a_thread_pool_never_runs_on_the_subscribing_thread_and_sees_the_cancel(
    saver_factory: Callable[[], CheckpointSaver], pool: ThreadPoolScheduler
) -> None:
    entered, ended = threading.Event(), threading.Event()
    ran_on: list[int] = []
    saw_cancel: list[bool] = []

    @tool(scheduler=pool)
    def lookup(city: str, run: RunInfo) -> str:
        """Looks a city up in a slow registry."""
        ran_on.append(threading.get_ident())
        entered.set()
        saw_cancel.append(run.cancelled.wait(10))  # a blocking call that stops when the turn is cancelled
        return "too late"

    model = _model("lookup", '{"city": "Oslo"}')
    agent = ReactAgent(model, tools=[lookup], checkpointer=saver_factory())
    config = RunnableConfig(thread_id="t")
    signals: list[SignalType] = []
    subscription = (
        agent.stream("Oslo?", config).pipe(do_finally(lambda s: (signals.append(s), ended.set()))).subscribe()
    )
    assert entered.wait(10)
    subscription.dispose()
    assert ended.wait(10)
    pool.executor.shutdown(wait=True)
    assert ran_on and ran_on[0] != threading.get_ident()
    assert saw_cancel == [True]
    assert signals == [SignalType.CANCEL] and model.calls == 1
    head = agent.get_state(config).checkpoint
    assert head is not None and head.source == "rewind"  # what the tool returned after the cancel never landed


def test_the_agents_tool_scheduler_is_for_tools_without_their_own() -> None:
    own, shared = ThreadPoolScheduler(1), ThreadPoolScheduler(1)
    own_thread = own.executor.submit(threading.get_ident).result()
    shared_thread = shared.executor.submit(threading.get_ident).result()
    threads: dict[str, int] = {}

    @tool(scheduler=own)
    def pinned() -> str:
        """Runs on its own pool."""
        threads["pinned"] = threading.get_ident()
        return "pinned"

    @tool
    def pooled(run: RunInfo) -> str:
        """Runs on the agent's pool."""
        threads["pooled"] = threading.get_ident()
        return "cancelled" if run.cancelled.is_set() else "pooled"

    calls = [tool_call("a", "pinned", index=0), tool_call("b", "pooled", index=1)]
    model = ScriptedChatModel([[*calls, finish("tool_calls")], [text("done")]])
    agent = ReactAgent(model, tools=[pinned, pooled], checkpointer=MemorySaver(), tool_scheduler=shared)
    assert agent.tool_scheduler is shared
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("go", config).content == "done"
    own.executor.shutdown(wait=True)
    shared.executor.shutdown(wait=True)
    assert threads == {"pinned": own_thread, "pooled": shared_thread}
    history = agent.get_state(config).values["messages"]
    assert [m.content for m in history if isinstance(m, ToolMessage)] == ["pinned", "pooled"]
    check_ready_for_user_input(history)


@pytest.mark.parametrize("parallel", [2, 1])
def test_blocking_tools_of_one_message_run_side_by_side_on_a_pool(parallel: int) -> None:
    pool = ThreadPoolScheduler(2)
    started = {"a": threading.Event(), "b": threading.Event()}

    @tool
    def meet(name: str, other: str) -> str:
        """Waits until the other call has started too."""
        started[name].set()
        if parallel == 1:  # one after the other: the second call has not started while the first runs
            return "met" if started[other].is_set() else "alone"
        return "met" if started[other].wait(10) else "alone"

    calls = [tool_call("c0", "meet", '{"name": "a", "other": "b"}', index=0)]
    calls.append(tool_call("c1", "meet", '{"name": "b", "other": "a"}', index=1))
    model = ScriptedChatModel([[*calls, finish("tool_calls")], [text("done")]])
    agent = ReactAgent(model, tools=[meet], tool_scheduler=pool, max_parallel_tools=parallel)
    agent.invoke("go")
    pool.executor.shutdown(wait=True)
    answers = [m.content for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert answers == (["met", "met"] if parallel > 1 else ["alone", "met"])


def test_a_blocking_tool_that_raises_on_a_pool_becomes_an_error_tool_message(pool: ThreadPoolScheduler) -> None:
    @tool(scheduler=pool)
    def explode(reason: str) -> str:
        """Always fails."""
        raise ConnectionError(reason)

    model = _model("explode", '{"reason": "registry down"}')
    ReactAgent(model, tools=[explode]).invoke("go")
    answer = model.requests[1].messages[-1]
    assert isinstance(answer, ToolMessage) and answer.is_error
    assert answer.content == "tool 'explode' failed: ConnectionError: registry down"


# -- async def tools, on each of the run's possible loops ----------------------------------------------------------

LOOP_SOURCES = ["background-loop", "subscribed-from-a-coroutine", "asyncio-scheduler"]


def _off_loop(loop: asyncio.AbstractEventLoop, event: threading.Event) -> asyncio.Future[bool]:
    """Wait for a threading.Event from a coroutine without blocking its loop."""
    return loop.run_in_executor(None, event.wait, 10)


def _run_turn(
    where: str,
    stream: Callable[[RunnableConfig], Observable[RunOutput]],
    *,
    dispose_on: threading.Event | None = None,
    then: threading.Event | None = None,
) -> tuple[list[Any], asyncio.AbstractEventLoop | None]:
    """Subscribe ``stream(config)`` where ``where`` says and wait for its end — or wait for ``dispose_on``, dispose,
    and wait for ``then`` while the loop still runs (a loop of the test is closed afterwards, and ``asyncio.run``
    cancels what is left: that must not pass for the cancel under test). Returns what the subscriber got and the
    loop the test expects the run to use (None: rxgraph's background loop)."""
    received: list[Any] = []
    ended = threading.Event()
    after_dispose = then or ended

    def _ended(signal: SignalType) -> None:
        received.append(signal)
        ended.set()

    if where == "subscribed-from-a-coroutine":

        async def main() -> tuple[bool, asyncio.AbstractEventLoop]:
            loop, done = asyncio.get_running_loop(), asyncio.Event()
            subscription = (
                stream(RunnableConfig())
                .pipe(do_finally(_ended))
                .subscribe(received.append, lambda e: (received.append(e), done.set()), done.set)
            )
            if dispose_on is None:
                await asyncio.wait_for(done.wait(), 10)
                return True, loop
            assert await _off_loop(loop, dispose_on)
            subscription.dispose()
            return await _off_loop(loop, after_dispose), loop

        finished, loop = asyncio.run(main())
        assert finished
        return received, loop
    config, loop, thread = RunnableConfig(), None, None
    if where == "asyncio-scheduler":
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        config = RunnableConfig(scheduler=AsyncIOThreadSafeScheduler(loop))
    try:
        subscription = stream(config).pipe(do_finally(_ended)).subscribe(received.append, received.append)
        if dispose_on is not None:
            assert dispose_on.wait(10)
            subscription.dispose()
        assert after_dispose.wait(10)
        assert ended.wait(10)
    finally:
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
    return received, loop


@pytest.mark.parametrize("where", LOOP_SOURCES)
def test_an_async_tool_returns_its_awaited_result_to_the_model(where: str) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    @tool
    async def forecast(city: str, run: RunInfo) -> str:
        """The forecast for a city."""
        await asyncio.sleep(0)
        loops.append(asyncio.get_running_loop())
        assert run.loop is asyncio.get_running_loop()
        return f"Rain in {city}"

    model = _model("forecast", '{"city": "Oslo"}')
    agent = ReactAgent(model, tools=[forecast])
    received, expected_loop = _run_turn(where, lambda config: agent.stream("Oslo?", config))
    assert received[-1] is SignalType.ON_COMPLETE, received
    assert model.requests[1].messages[-1] == ToolMessage(tool_call_id="c1", name="forecast", content="Rain in Oslo")
    assert len(loops) == 1
    if expected_loop is not None:
        assert loops[0] is expected_loop
    tools_outputs = [o for o in received if isinstance(o, NodeOutput) and o.node == "tools"]
    assert tools_outputs[0].state["messages"][-1].content == "Rain in Oslo"


@pytest.mark.parametrize("where", LOOP_SOURCES)
def test_disposing_the_turn_cancels_the_awaited_tool(where: str) -> None:
    started, cancelled = threading.Event(), threading.Event()
    outcomes: list[str] = []

    @tool
    async def slow(city: str) -> str:
        """Never answers by itself."""
        started.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            outcomes.append("cancelled")
            cancelled.set()
            raise
        return "never"

    model = _model("slow", '{"city": "Oslo"}')
    agent = ReactAgent(model, tools=[slow], checkpointer=MemorySaver())
    received, _ = _run_turn(
        where,
        lambda config: agent.stream("Oslo?", config.model_copy(update={"thread_id": "t"})),
        dispose_on=started,
        then=cancelled,  # the coroutine saw the cancel while its loop still ran
    )
    assert outcomes == ["cancelled"]
    assert received[-1] is SignalType.CANCEL
    assert model.calls == 1


def test_an_async_tool_that_raises_becomes_an_error_tool_message() -> None:
    @tool
    async def broken(city: str) -> str:
        """Fails."""
        await asyncio.sleep(0)
        raise ConnectionError("upstream closed")

    model = _model("broken", '{"city": "Oslo"}')
    ReactAgent(model, tools=[broken]).invoke("go")
    answer = model.requests[1].messages[-1]
    assert isinstance(answer, ToolMessage) and answer.is_error
    assert answer.content == "tool 'broken' failed: ConnectionError: upstream closed"


# -- context ---------------------------------------------------------------------------------------------------


def test_the_context_reaches_a_tool_through_run_info_and_is_never_shown_or_stored(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    seen: list[Any] = []

    @tool
    def orders(status: str, run: RunInfo) -> str:
        """The user's orders with a status."""
        seen.append((run.context["user_id"], run.thread_id))
        return f"2 {status} orders"

    saver = saver_factory()
    model = _model("orders", '{"status": "open"}')
    agent = ReactAgent(model, tools=[orders], checkpointer=saver)
    config = RunnableConfig(thread_id="t", context={"user_id": "u1"})
    assert agent.invoke("My orders?", config).content == "done"
    assert seen == [("u1", "t")]
    assert "run" not in orders.spec.parameters["properties"]
    assert "u1" not in json.dumps([spec.to_openai() for spec in model.requests[0].tools])
    checkpoints = saver.list("t")
    assert len(checkpoints) >= 4  # the input, the model, the tools, the answer
    for checkpoint in checkpoints:
        assert "u1" not in repr(dict(checkpoint.values)), checkpoint.id
    assert "u1" not in repr(model.requests)
