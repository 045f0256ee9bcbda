"""Node policies: a node retried with backoff (``RetryPolicy``) and each attempt held to a ``timeout``, every wait in
the run's virtual time; what the subscriber sees of a failed attempt, and what a dispose stops."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
import reactivex as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.testing import ReactiveTest, TestScheduler
from reactivex.testing.subscription import Subscription

from rxgraph import (
    END,
    START,
    InvalidArgumentError,
    InvalidTypeError,
    InvalidUpdateError,
    KeyStrategy,
    MemorySaver,
    ModelAPIError,
    NodeOutput,
    NodeRetry,
    NodeTimeoutError,
    RetryPolicy,
    RunnableConfig,
    RunOutput,
    StateGraph,
    StreamingOutput,
)
from rxgraph.checkpoint import CheckpointSaver
from rxgraph.graph import CompiledGraph
from rxgraph.graph._node import NodeAction, Reducer
from rxgraph.testing import CancellationHarness, dispose_at, marbles

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed


def _graph(
    action: NodeAction,
    *,
    retry: RetryPolicy | list[RetryPolicy] | None = None,
    timeout: float | timedelta | None = None,
    reduce: Reducer | None = None,
    saver: CheckpointSaver | None = None,
) -> CompiledGraph:
    return (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("fetch", action, reduce=reduce, retry=retry, timeout=timeout)
        .add_edge(START, "fetch")
        .add_edge("fetch", END)
        .compile(checkpointer=saver)
    )


class _Flaky:
    """An action that raises the given errors in turn, then returns its update; it notes when each call came."""

    def __init__(self, clock: Callable[[], float], errors: Sequence[Exception], update: dict[str, Any]) -> None:
        self.clock = clock
        self.errors = list(errors)
        self.update = update
        self.calls: list[float] = []

    def __call__(self, state: Any) -> dict[str, Any]:
        self.calls.append(self.clock())
        if len(self.calls) <= len(self.errors):
            raise self.errors[len(self.calls) - 1]
        return self.update


def _run(graph: CompiledGraph, scheduler: TestScheduler, *, disposed: float | None = None, **config: Any) -> Any:
    """Subscribe at 200 on ``scheduler`` and run it to its end (or dispose at ``disposed``)."""
    run_config = RunnableConfig(scheduler=scheduler, **config)
    return scheduler.start(lambda: graph.stream({"log": "in"}, run_config), disposed=disposed or 1_000)


def _chunks(observed: Any) -> list[tuple[float, Any]]:
    return [
        (m.time - 200, m.value.value.chunk)
        for m in observed.messages
        if m.value.kind == "N" and isinstance(m.value.value, StreamingOutput)
    ]


# -- retry with backoff ------------------------------------------------------------------------------------------


def test_a_node_failing_twice_is_called_at_0_1_and_3_with_backoff_1_and_factor_2() -> None:
    flaky = _Flaky(lambda: harness.scheduler.clock, [ConnectionError("reset")] * 2, {"log": "fetched"})
    retry = RetryPolicy(max_attempts=3, backoff=1.0, backoff_factor=2.0)
    harness = CancellationHarness(lambda saver: _graph(flaky, retry=retry, saver=saver))
    record = harness.run_turn({"log": "in"})
    assert record.completed
    assert [t - record.start for t in flaky.calls] == [0.0, 1.0, 3.0]
    # a, b: the NodeRetry chunks, at 0 and 1 as the attempts fail; c: the third attempt's update at 3; S: checkpoints
    assert record.timeline() == "\n".join(
        [
            "fetch  ab-(c|)",
            "saver  S--S---",
            "chunks:",
            "  a = NodeRetry(attempt=1, error=ConnectionError('reset'), delay=1.0)",
            "  b = NodeRetry(attempt=2, error=ConnectionError('reset'), delay=2.0)",
            "  c = {'log': 'fetched'}",
        ]
    )
    assert record.head is not None and list(record.head.values["log"]) == ["in", "fetched"]


def test_the_last_error_fails_the_run_when_the_attempts_run_out() -> None:
    scheduler = TestScheduler()
    errors = [ConnectionError("first"), ConnectionError("second"), ConnectionError("third")]
    flaky = _Flaky(lambda: scheduler.clock, errors, {"log": "never"})
    observed = _run(_graph(flaky, retry=RetryPolicy(max_attempts=3, backoff=1.0)), scheduler)
    assert [t - 200 for t in flaky.calls] == [0.0, 1.0, 3.0]
    assert [(t, c.attempt, c.error) for t, c in _chunks(observed)] == [(0, 1, errors[0]), (1, 2, errors[1])]
    end = observed.messages[-1]
    assert end.value.kind == "E" and end.value.exception is errors[2] and end.time == 203


def test_the_waits_grow_by_the_factor_up_to_max_backoff() -> None:
    scheduler = TestScheduler()
    flaky = _Flaky(lambda: scheduler.clock, [ConnectionError()] * 4, {"log": "ok"})
    _run(_graph(flaky, retry=RetryPolicy(max_attempts=5, backoff=1.0, backoff_factor=3.0, max_backoff=5.0)), scheduler)
    assert [t - 200 for t in flaky.calls] == [0.0, 1.0, 4.0, 9.0, 14.0]  # waits 1, 3, then 9 and 27 capped at 5
    assert RetryPolicy(backoff=0.5, backoff_factor=2.0).delay(1) == 0.5
    assert RetryPolicy(max_attempts=10_000, backoff=1.0, max_backoff=7.0).delay(9_999) == 7.0  # no overflow


def test_retry_on_a_class_a_tuple_or_a_predicate_retries_only_what_it_names() -> None:
    for retry_on in (ConnectionError, (TimeoutError, ConnectionError), lambda e: "transient" in str(e)):
        scheduler = TestScheduler()
        errors = [ConnectionError("transient"), ValueError("bad input")]
        flaky = _Flaky(lambda clock=scheduler: clock.clock, errors, {"log": "never"})
        observed = _run(_graph(flaky, retry=RetryPolicy(backoff=1.0, retry_on=retry_on)), scheduler)
        assert len(flaky.calls) == 2, retry_on  # the ValueError was not retried, though a third attempt was left
        assert isinstance(observed.messages[-1].value.exception, ValueError)


def test_the_default_retries_failures_of_the_moment_but_not_rxgraphs_own_errors() -> None:
    transient = RetryPolicy.transient
    assert transient(ConnectionError()) and transient(ConnectionResetError()) and transient(Exception("flaky"))
    assert not transient(TimeoutError("socket"))  # an OSError that is no ConnectionError: as LangGraph's default
    assert transient(NodeTimeoutError("slow", node="n", timeout=1.0))
    assert transient(ModelAPIError("busy", status_code=503)) and transient(ModelAPIError("rate", status_code=429))
    assert transient(ModelAPIError("no response", status_code=None))
    assert not transient(ModelAPIError("context too long", status_code=400))
    assert not transient(InvalidUpdateError("not an update", node="n"))
    assert RetryPolicy().retry_on is RetryPolicy.transient

    scheduler = TestScheduler()
    calls: list[float] = []

    def odd(state: Any) -> Any:
        calls.append(scheduler.clock)
        return 42  # no update: a program error, the same on every attempt

    observed = _run(_graph(odd, retry=RetryPolicy(backoff=1.0)), scheduler)
    assert len(calls) == 1
    assert isinstance(observed.messages[-1].value.exception, InvalidUpdateError)


def test_a_retry_on_predicate_that_raises_fails_the_run_with_its_error() -> None:
    scheduler = TestScheduler()
    broken = KeyError("predicate bug")

    def retry_on(error: Exception) -> bool:
        raise broken

    flaky = _Flaky(lambda: scheduler.clock, [ConnectionError()], {"log": "never"})
    observed = _run(_graph(flaky, retry=RetryPolicy(retry_on=retry_on)), scheduler)
    assert len(flaky.calls) == 1 and observed.messages[-1].value.exception is broken


# -- timeouts ----------------------------------------------------------------------------------------------------


def test_a_timeout_fails_the_attempt_at_exactly_its_time_and_is_retried() -> None:
    scheduler = TestScheduler()
    slow = scheduler.create_cold_observable(on_next(2, {"log": "slow"}), on_completed(10))
    fast = scheduler.create_cold_observable(on_next(1, {"log": "fast"}), on_completed(2))
    streams = iter([slow, fast])
    observed = _run(_graph(lambda s: next(streams), retry=RetryPolicy(backoff=1.0), timeout=5), scheduler)
    chunks = _chunks(observed)
    assert [(t, c) for t, c in chunks if not isinstance(c, NodeRetry)] == [(2, {"log": "slow"}), (7, {"log": "fast"})]
    retry = next((t, c) for t, c in chunks if isinstance(c, NodeRetry))
    assert retry[0] == 5 and retry[1].attempt == 1 and retry[1].delay == 1.0
    error = retry[1].error
    assert isinstance(error, NodeTimeoutError) and isinstance(error, TimeoutError)
    assert (error.node, error.timeout, error.attempt) == ("fetch", 5.0, 1)
    assert slow.subscriptions == [Subscription(200, 205)]  # the timed-out attempt was disposed at its deadline
    assert fast.subscriptions == [Subscription(206, 208)]
    final = observed.messages[-2].value.value
    assert isinstance(final, NodeOutput) and list(final.state["log"]) == ["in", "fast"]  # not "slow"


def test_a_timeout_alone_fails_the_run_with_node_timeout_error() -> None:
    scheduler = TestScheduler()
    never = scheduler.create_cold_observable(on_next(1, {"log": "partial"}))
    observed = _run(_graph(lambda s: never, timeout=timedelta(seconds=3)), scheduler)
    end = observed.messages[-1]
    assert end.time == 203 and isinstance(end.value.exception, NodeTimeoutError)
    assert "node 'fetch' did not finish within 3 s" in str(end.value.exception)
    assert never.subscriptions == [Subscription(200, 203)]


def test_an_attempt_that_ends_before_its_timeout_is_not_failed_later() -> None:
    scheduler = TestScheduler()
    quick = scheduler.create_cold_observable(on_next(1, {"log": "quick"}), on_completed(2))
    observed = _run(_graph(lambda s: quick, timeout=5.0), scheduler)
    assert [m.value.kind for m in observed.messages] == ["N", "N", "C"]
    assert observed.messages[-1].time == 202


# -- what a streaming node's failed attempt leaves -----------------------------------------------------------------


def test_a_streaming_node_streams_a_node_retry_after_its_partial_chunks_and_reduces_the_good_attempt_only() -> None:
    first = marbles("-a-b#", a="Hel", b="lo wor", error=ConnectionError("dropped"))
    second = marbles("-a-b|", a="Hello", b=" world")
    attempts = iter([first.observable(), second.observable()])
    reduced: list[list[Any]] = []

    def reduce(chunks: Sequence[Any]) -> dict[str, Any]:
        reduced.append(list(chunks))
        return {"log": "".join(chunks)}

    harness = CancellationHarness(
        lambda saver: _graph(lambda s: next(attempts), retry=RetryPolicy(backoff=1.0), reduce=reduce, saver=saver)
    )
    record = harness.run_turn({"log": "in"})
    # The first attempt's chunks (a, b), its failure as a NodeRetry (c) at 4, the wait of 1, the second attempt
    # from 5: its chunks (d, e) and its completion, which alone makes the update.
    assert record.timeline() == "\n".join(
        [
            "fetch  -a-bc-d-e|",
            "saver  S--------S",
            "chunks:",
            "  a = 'Hel'",
            "  b = 'lo wor'",
            "  c = NodeRetry(attempt=1, error=ConnectionError('dropped'), delay=1.0)",
            "  d = 'Hello'",
            "  e = ' world'",
        ]
    )
    assert reduced == [["Hello", " world"]]  # never the first attempt's chunks, never the NodeRetry
    assert record.head is not None and list(record.head.values["log"]) == ["in", "Hello world"]


def test_mapping_chunks_of_a_failed_attempt_are_not_merged() -> None:
    scheduler = TestScheduler()
    attempts = iter([rx.concat(rx.of({"log": "half"}), rx.throw(ConnectionError())), rx.of({"log": "whole"})])
    assert _graph(lambda s: next(attempts), retry=RetryPolicy(backoff=0.0)).invoke(
        {"log": "in"}, RunnableConfig(scheduler=scheduler)
    ) == {"log": ["in", "whole"]}


def test_an_update_returned_by_an_attempt_is_its_one_chunk_and_the_update_as_it_is() -> None:
    scheduler = TestScheduler()
    reduced: list[Any] = []
    graph = _graph(lambda s: {"log": "direct"}, retry=RetryPolicy(), reduce=lambda chunks: reduced.append(chunks))
    observed = _run(graph, scheduler)
    assert _chunks(observed) == [(0, {"log": "direct"})]
    assert reduced == []  # an update is not reduced, as without a policy
    assert list(observed.messages[-2].value.value.state["log"]) == ["in", "direct"]
    no_change = _run(_graph(lambda s: None, timeout=1.0), TestScheduler())
    assert _chunks(no_change) == [(0, {})]
    assert list(no_change.messages[-2].value.value.state["log"]) == ["in"]


# -- cancellation ----------------------------------------------------------------------------------------------


def test_a_dispose_during_the_backoff_starts_no_more_attempts_and_rewinds_the_thread() -> None:
    scheduler, saver = TestScheduler(), MemorySaver()
    flaky = _Flaky(lambda: scheduler.clock, [ConnectionError()] * 5, {"log": "never"})
    graph = _graph(flaky, retry=RetryPolicy(max_attempts=5, backoff=10.0), saver=saver)
    graph.update_state(RunnableConfig(thread_id="t"), {"log": "before"})
    pre_turn = saver.get("t")
    assert pre_turn is not None
    observed = _run(graph, scheduler, disposed=205, thread_id="t")  # the second attempt would start at 210
    scheduler.advance_to(1_000)
    assert [t - 200 for t in flaky.calls] == [0.0]
    assert [type(c).__name__ for _, c in _chunks(observed)] == ["NodeRetry"]
    head = saver.get("t")
    assert head is not None and head.source == "rewind" and head.values == pre_turn.values


def test_a_dispose_while_an_attempt_streams_disposes_it_and_its_timeout() -> None:
    scheduler = TestScheduler()
    calls: list[float] = []
    stream = scheduler.create_cold_observable(on_next(3, {"log": "a"}), on_completed(20))

    def action(state: Any) -> Any:
        calls.append(scheduler.clock)
        return stream

    observed = _run(_graph(action, retry=RetryPolicy(backoff=1.0), timeout=8.0), scheduler, disposed=205)
    scheduler.advance_to(1_000)  # the timeout at 208 must not fire a retry
    assert len(calls) == 1
    assert stream.subscriptions == [Subscription(200, 205)]
    assert [m.value.kind for m in observed.messages] == ["N"]


def test_a_harness_dispose_during_the_backoff_is_rewound_on_the_timeline() -> None:
    calls: list[int] = []

    def flaky(state: Any) -> Any:
        calls.append(1)
        raise ConnectionError("reset")

    harness = CancellationHarness(lambda saver: _graph(flaky, retry=RetryPolicy(backoff=4.0), saver=saver))
    record = harness.run_turn({"log": "in"}, dispose_at(2))
    assert record.cancelled and len(calls) == 1
    assert record.timeline(legend=False) == "\n".join(["fetch  a-X", "saver  S-R"])
    assert record.head is not None and record.head.source == "rewind" and record.head.values == {}


# -- real threads ------------------------------------------------------------------------------------------------


def test_a_node_on_a_thread_pool_is_retried_there_on_the_real_clock() -> None:
    pool = ThreadPoolScheduler(2)
    attempts: list[str] = []
    lock = threading.Lock()

    def fetch(state: Any) -> dict[str, Any]:
        with lock:
            attempts.append(threading.current_thread().name)
            if len(attempts) == 1:
                raise ConnectionError("reset")
        return {"log": "fetched"}

    graph = (
        StateGraph({"log": KeyStrategy.APPEND})
        .add_node("fetch", fetch, scheduler=pool, retry=RetryPolicy(backoff=0.01))
        .add_edge(START, "fetch")
        .add_edge("fetch", END)
        .compile()
    )
    assert graph.invoke({"log": "in"}) == {"log": ["in", "fetched"]}  # invoke blocks until the run ended
    assert len(attempts) == 2
    assert all(name.startswith("ThreadPoolExecutor") for name in attempts)  # both called on the node's pool


def test_an_async_node_is_retried() -> None:
    attempts: list[int] = []
    outputs: list[RunOutput] = []

    async def fetch(state: Any) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("reset")
        return {"log": "awaited"}

    graph = _graph(fetch, retry=RetryPolicy(backoff=0.0))
    done = threading.Event()
    graph.stream({"log": "in"}).subscribe(outputs.append, lambda e: done.set(), done.set)
    assert done.wait(10)
    chunks = [o.chunk for o in outputs if isinstance(o, StreamingOutput)]
    assert len(chunks) == 2 and isinstance(chunks[0], NodeRetry) and chunks[1] == {"log": "awaited"}
    assert list(outputs[-1].state["log"]) == ["in", "awaited"] and len(attempts) == 2


# -- checked arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "argument"),
    [
        ({"max_attempts": 0}, InvalidArgumentError, "max_attempts"),
        ({"max_attempts": 2.0}, InvalidTypeError, "max_attempts"),
        ({"max_attempts": True}, InvalidTypeError, "max_attempts"),
        ({"backoff": -1}, InvalidArgumentError, "backoff"),
        ({"backoff": float("nan")}, InvalidArgumentError, "backoff"),
        ({"backoff": "1s"}, InvalidTypeError, "backoff"),
        ({"backoff_factor": 0.5}, InvalidArgumentError, "backoff_factor"),
        ({"max_backoff": float("inf")}, InvalidArgumentError, "max_backoff"),
        ({"retry_on": ()}, InvalidArgumentError, "retry_on"),
        ({"retry_on": (ValueError, "KeyError")}, InvalidTypeError, "retry_on"),
        ({"retry_on": int}, InvalidTypeError, "retry_on"),
        ({"retry_on": KeyboardInterrupt}, InvalidTypeError, "retry_on"),
        ({"retry_on": "ConnectionError"}, InvalidTypeError, "retry_on"),
    ],
)
def test_a_retry_policy_refuses_what_it_cannot_mean(fields: dict[str, Any], error: type, argument: str) -> None:
    with pytest.raises(error) as raised:
        RetryPolicy(**fields)
    assert raised.value.argument == argument and argument in str(raised.value)


@pytest.mark.parametrize(
    ("options", "error", "argument"),
    [
        ({"timeout": 0}, InvalidArgumentError, "timeout"),
        ({"timeout": -1.0}, InvalidArgumentError, "timeout"),
        ({"timeout": timedelta(0)}, InvalidArgumentError, "timeout"),
        ({"timeout": float("inf")}, InvalidArgumentError, "timeout"),
        ({"timeout": "5"}, InvalidTypeError, "timeout"),
        ({"retry": 3}, InvalidTypeError, "retry"),
    ],
)
def test_add_node_refuses_a_bad_retry_or_timeout(options: dict[str, Any], error: type, argument: str) -> None:
    with pytest.raises(error, match="node 'n'") as raised:
        StateGraph().add_node("n", lambda s: None, **options)
    assert raised.value.argument == argument


def test_a_retry_policy_is_a_frozen_value() -> None:
    policy = RetryPolicy(max_attempts=2, backoff=1)
    assert policy == RetryPolicy(max_attempts=2, backoff=1.0) and isinstance(policy.backoff, float)
    with pytest.raises(AttributeError):
        policy.max_attempts = 5  # type: ignore[misc]


class _HTTPStatusError(Exception):
    """Shaped like httpx's and requests' status errors: the response rides on the error."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.response = type("Response", (), {"status_code": status_code})()


@pytest.mark.parametrize(
    "error",
    [ValueError(), TypeError(), ZeroDivisionError(), ImportError(), KeyError("k"), IndexError(), NameError(),
     SyntaxError(), RuntimeError(), ReferenceError(), StopIteration(), StopAsyncIteration(), FileNotFoundError()],
    ids=lambda error: type(error).__name__,
)  # fmt: skip
def test_the_default_does_not_retry_programming_errors_as_langgraphs_default_retry_on(error: Exception) -> None:
    # Ported from LangGraph's default_retry_on (langgraph/pregel/_retry.py, tests/test_retry.py): the same list.
    assert isinstance(error, RetryPolicy.programming_errors) and not RetryPolicy.transient(error)


def test_the_default_retries_an_http_status_error_only_for_a_server_s_failure() -> None:
    assert RetryPolicy.transient(_HTTPStatusError(503)) and RetryPolicy.transient(_HTTPStatusError(500))
    assert not RetryPolicy.transient(_HTTPStatusError(404)) and not RetryPolicy.transient(_HTTPStatusError(429))


def test_the_first_policy_that_takes_the_error_decides_the_attempts_and_the_waits() -> None:
    # After LangGraph's test_retry_policy_list (a node with several policies): first match wins.
    scheduler = TestScheduler()
    errors = [ConnectionError(), KeyError("k"), KeyError("k"), ValueError("bad")]
    flaky = _Flaky(lambda: scheduler.clock, errors, {"log": "ok"})
    policies = [
        RetryPolicy(retry_on=KeyError, max_attempts=4, backoff=2.0, backoff_factor=1.0),
        RetryPolicy(max_attempts=5, backoff=1.0, backoff_factor=1.0),  # the default retry_on: not a ValueError
    ]
    observed = _run(_graph(flaky, retry=policies), scheduler)
    assert [t - 200 for t in flaky.calls] == [0.0, 1.0, 3.0, 5.0]  # waits 1 (default), 2, 2 (KeyError)
    assert isinstance(observed.messages[-1].value.exception, ValueError)  # no policy takes it: the run fails


@pytest.mark.parametrize(
    ("retry", "error", "match"),
    [([], InvalidArgumentError, "at least one"), ([RetryPolicy(), "again"], InvalidTypeError, "list of them")],
)
def test_a_retry_list_is_checked_when_the_node_is_added(retry: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        StateGraph().add_node("n", lambda s: None, retry=retry)
