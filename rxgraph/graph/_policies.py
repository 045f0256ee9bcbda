"""Node policies: how often a failing node is tried again (``RetryPolicy``) and how long one try may take (a node's
``timeout``), with the operator that runs a node's attempts under them.

A node with a policy is run as one stream made of its attempts. When an attempt fails — it raised, its stream
failed, or it outran the timeout — and the policy retries that error, a ``NodeRetry`` chunk goes out, the backoff
is waited out on the run's scheduler, and the next attempt starts. With ``backoff=1``, ``backoff_factor=2`` and an
action that streams ``a`` and fails a tick later, twice, then completes (a character is a second)::

    attempt 1   a#
    attempt 2     a#
    attempt 3        a|
    the node    arar-a|      r: NodeRetry(attempt=1, delay=1.0), then NodeRetry(attempt=2, delay=2.0)

Every wait is a timer on the run's scheduler — ``RunnableConfig.scheduler``, else reactivex's ``TimeoutScheduler``
— so a ``TestScheduler`` runs retries and timeouts in virtual time. Disposing the node's stream disposes the running
attempt, its timeout and a pending backoff: no attempt starts after it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeAlias

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from .._arguments import check_int
from ..errors import (
    InterruptSwallowedError,
    InvalidArgumentError,
    InvalidTypeError,
    ModelAPIError,
    NodeInterrupt,
    NodeTimeoutError,
    RxGraphError,
)
from ..rx._subscribe import subscribe_source

__all__ = [
    "NodeRetry",
    "RetryOn",
    "RetryPolicy",
    "check_retry",
    "check_timeout",
    "run_attempts",
]

RetryOn: TypeAlias = type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool]
"""Which errors a ``RetryPolicy`` retries: an exception class, a tuple of them, or a predicate."""


# Errors that say the code or its input is wrong: another attempt would raise them again.
_PROGRAMMING_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    ArithmeticError,
    ImportError,
    LookupError,
    NameError,
    SyntaxError,
    RuntimeError,
    ReferenceError,
    StopIteration,
    StopAsyncIteration,
    OSError,
)


def _transient(error: Exception) -> bool:
    if isinstance(error, NodeTimeoutError):
        return True
    if isinstance(error, ModelAPIError):
        status = error.status_code
        return status is None or status in (408, 429) or status >= 500
    if isinstance(error, RxGraphError):
        return False
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return 500 <= status < 600  # an HTTP client's status error (httpx, requests): only a server's failure
    if isinstance(error, ConnectionError):
        return True
    return not isinstance(error, _PROGRAMMING_ERRORS)


def _number(value: object, *, argument: str) -> float:
    """``value`` as a finite float (an int or a float; a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{argument} must be a number, got {type(value).__name__}", argument=argument)
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{argument} must be finite, got {value!r}", argument=argument)
    return float(value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a node that fails is tried again: ``add_node(name, action, retry=RetryPolicy(...))``.

    - ``max_attempts`` (3): how many times the action is called at most, the first call included (1: no retry).
    - ``backoff`` (0.5): seconds to wait before the second attempt.
    - ``backoff_factor`` (2.0): each next wait is the previous one times this (>= 1).
    - ``max_backoff`` (30.0): no wait is longer than this many seconds.
    - ``retry_on``: which errors are retried — an exception class, a tuple of them, or a predicate
      ``retry_on(error) -> bool``. The default, ``RetryPolicy.transient``, retries what another attempt may cure:

      - ``NodeTimeoutError``; a ``ModelAPIError`` without a response or with status 408, 429 or 5xx; no other of
        rxgraph's own errors (they say the graph, an update or a script is wrong, and would say it again);
      - an error that carries an HTTP response (``error.response.status_code``, as httpx's and requests' status
        errors do) only for a 5xx status;
      - ``ConnectionError``;
      - no programming error (``RetryPolicy.programming_errors``): ``ValueError``, ``TypeError``, ``ArithmeticError``,
        ``ImportError``, ``LookupError``, ``NameError``, ``SyntaxError``, ``RuntimeError``, ``ReferenceError``,
        ``StopIteration``, ``StopAsyncIteration`` and ``OSError`` (but ``ConnectionError``), as LangGraph's default
        does;
      - any other exception.

    A node may have several policies, ``retry=[RetryPolicy(retry_on=A, ...), RetryPolicy(...)]``: after a failed
    attempt, the first policy whose ``retry_on`` takes the error decides whether another attempt follows (while the
    node's attempts so far are fewer than its ``max_attempts``) and how long to wait first; an error no policy takes
    fails the run.

    The wait after attempt ``n`` fails is ``min(backoff * backoff_factor ** (n - 1), max_backoff)`` (``delay(n)``),
    with no jitter: the same failures wait the same times, so a test can pin them. An error the policy does not
    retry, or the last attempt's error, fails the run as it is.

    Raises:
        InvalidTypeError: a field of the wrong type (``retry_on`` neither an exception class, a tuple of them, nor
            callable).
        InvalidArgumentError: ``max_attempts`` below 1, a negative or non-finite wait, a ``backoff_factor`` below 1,
            or an empty ``retry_on`` tuple.
    """

    max_attempts: int = 3
    backoff: float = 0.5
    backoff_factor: float = 2.0
    max_backoff: float = 30.0
    retry_on: RetryOn = _transient

    transient = staticmethod(_transient)
    """The default ``retry_on``: True for an error worth another attempt (see the class docstring)."""

    programming_errors = _PROGRAMMING_ERRORS
    """The errors the default ``retry_on`` never retries (``ConnectionError``, an ``OSError``, aside)."""

    def __post_init__(self) -> None:
        check_int(self.max_attempts, argument="max_attempts", least=1, hint="1: call once, no retry")
        for name, least in (("backoff", 0.0), ("backoff_factor", 1.0), ("max_backoff", 0.0)):
            value = _number(getattr(self, name), argument=name)
            if value < least:
                raise InvalidArgumentError(f"{name} must be >= {least:g}, got {value:g}", argument=name)
            object.__setattr__(self, name, value)
        _check_retry_on(self.retry_on)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt ``attempt`` (1 for the first) failed, before the next one."""
        if self.backoff == 0.0:
            return 0.0
        try:
            wait = self.backoff * self.backoff_factor ** (attempt - 1)
        except OverflowError:
            wait = math.inf
        return min(wait, self.max_backoff)

    def retries(self, error: Exception) -> bool:
        """Whether ``retry_on`` says ``error`` is worth another attempt (whether one is left aside). A node's
        ``interrupt()`` never is: it is a stop for a human, not a failure; nor is a caught one
        (``InterruptSwallowedError``), which every attempt would repeat."""
        if isinstance(error, NodeInterrupt | InterruptSwallowedError):
            return False
        retry_on = self.retry_on
        if isinstance(retry_on, type | tuple):
            return isinstance(error, retry_on)
        return bool(retry_on(error))


def _check_retry_on(retry_on: object) -> None:
    def is_error_class(value: object) -> bool:
        return isinstance(value, type) and issubclass(value, Exception)

    if isinstance(retry_on, tuple):
        if not retry_on:
            raise InvalidArgumentError(
                "retry_on must not be an empty tuple: it would retry nothing", argument="retry_on"
            )
        wrong = [c for c in retry_on if not is_error_class(c)]
        if wrong:
            raise InvalidTypeError(
                f"retry_on's tuple must hold exception classes only, got {wrong[0]!r}", argument="retry_on"
            )
    elif isinstance(retry_on, type):
        if not is_error_class(retry_on):
            raise InvalidTypeError(
                f"retry_on must be an Exception subclass, a tuple of them, or a predicate, got the class "
                f"{retry_on.__name__}",
                argument="retry_on",
            )
    elif not callable(retry_on):
        raise InvalidTypeError(
            f"retry_on must be an Exception subclass, a tuple of them, or a predicate, got {type(retry_on).__name__}",
            argument="retry_on",
        )


@dataclass(frozen=True, slots=True)
class NodeRetry:
    """A chunk a node with a ``RetryPolicy`` streams when an attempt failed and another one follows: the subscriber
    sees it as ``StreamingOutput(node, state, chunk=NodeRetry(...))`` and should discard what that node streamed
    so far. The node's update is made of the chunks after its last ``NodeRetry`` only (they never reach
    ``reduce``).

    ``attempt`` is the attempt that failed (1 for the first), ``error`` what it failed with, ``delay`` the seconds
    waited before attempt ``attempt + 1`` starts.
    """

    attempt: int
    error: Exception
    delay: float


def check_retry(value: object, *, node: str) -> tuple[RetryPolicy, ...] | None:
    """A node's retry policies, in the order they are asked (None: no retry).

    Raises:
        InvalidTypeError: neither None, a ``RetryPolicy``, nor a list or tuple of them.
        InvalidArgumentError: an empty list.
    """
    if value is None:
        return None
    if isinstance(value, RetryPolicy):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(policy, RetryPolicy) for policy in value):
        if not value:
            raise InvalidArgumentError(
                f"node {node!r}: retry needs at least one RetryPolicy (None: no retry)", argument="retry"
            )
        return tuple(value)
    raise InvalidTypeError(
        f"node {node!r}: retry must be a RetryPolicy or a list of them, got {type(value).__name__}", argument="retry"
    )


def check_timeout(value: object, *, node: str) -> float | None:
    """A node's ``timeout`` in seconds (None: no limit).

    Raises:
        InvalidTypeError: neither None, a number, nor a ``timedelta``.
        InvalidArgumentError: not a positive, finite time.
    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(
            f"node {node!r}: timeout must be seconds (a number) or a timedelta, got {type(value).__name__}",
            argument="timeout",
        )
    else:
        seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(
            f"node {node!r}: timeout must be a positive, finite time, got {value!r}", argument="timeout"
        )
    return seconds


def run_attempts(
    attempt: Callable[[], abc.ObservableBase[Any]],
    *,
    node: str,
    retry: tuple[RetryPolicy, ...] | None,
    timeout: float | None,
    timers: abc.SchedulerBase,
    caller: abc.SchedulerBase | None = None,
) -> Observable[Any]:
    """A node's chunk stream under its policies: ``attempt()`` (which calls the action) subscribed once per attempt.

    Args:
        attempt: makes one attempt's chunk stream; called when the attempt starts (an exception it raises is the
            attempt's error).
        node: the node's name, for ``NodeTimeoutError``.
        retry: the node's retry policies, asked in order (None: one attempt).
        timeout: the seconds each attempt may take (None: no limit).
        timers: where the timeouts and the backoff waits are scheduled.
        caller: where ``attempt()`` is called (the node's scheduler), or None: where the attempt starts — at
            subscription, then on ``timers`` after each backoff.

    Returns:
        A cold Observable of every attempt's chunks, with a ``NodeRetry`` between a failed attempt's and the next
        one's; it completes with the attempt that completes, and fails with the error that is not retried.
    """

    def _subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        attempts = _Attempts(observer, scheduler, attempt, node, retry, timeout, timers, caller)
        attempts.start()
        return Disposable(attempts.dispose)

    return Observable(_subscribe)


class _Attempts:
    """One subscription of a node's attempts.

    An event goes downstream only if it belongs to the attempt running now: a timed-out attempt that emits later
    is not heard. Chunks are handed over under ``lock``, and the state changes that end an attempt are made under
    it, so a timeout on a timer thread never overlaps a chunk on the attempt's thread; the terminal event goes out
    past the lock (the run's tail and next nodes follow from it), when no chunk can come any more. The lock is never
    held while the action is called or a source subscribed, so a timeout can fire while a blocking call runs; it is
    re-entrant because a synchronous source or scheduler may call back in.
    """

    __slots__ = (
        "attempt",
        "caller",
        "current",
        "deadline",
        "ended",
        "lock",
        "node",
        "number",
        "observer",
        "retry",
        "running",
        "scheduler",
        "timeout",
        "timers",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[Any],
        scheduler: abc.SchedulerBase | None,
        attempt: Callable[[], abc.ObservableBase[Any]],
        node: str,
        retry: tuple[RetryPolicy, ...] | None,
        timeout: float | None,
        timers: abc.SchedulerBase,
        caller: abc.SchedulerBase | None,
    ) -> None:
        self.observer = observer
        self.scheduler = scheduler  # the one the node's stream was subscribed with: each attempt's too
        self.attempt = attempt
        self.node = node
        self.retry = retry
        self.timeout = timeout
        self.timers = timers
        self.caller = caller
        self.lock = threading.RLock()
        self.number = 0  # the attempt running, or the last one that ran
        self.running = False  # attempt `number` runs: neither waiting out a backoff nor ended
        self.ended = False  # a terminal event went downstream, or the subscription was disposed
        self.current = SerialDisposable()  # the running attempt, or the backoff timer
        self.deadline = SerialDisposable()  # the running attempt's timeout

    def start(self) -> None:
        """Start the next attempt (at subscription, and when a backoff is over)."""
        with self.lock:
            if self.ended:
                return
            self.number += 1
            number = self.number
            self.running = True
            held = CompositeDisposable()
            self.current.disposable = held
            if self.timeout is not None:
                # Scheduled before the attempt is subscribed: at the same tick, the timeout comes first.
                self.deadline.disposable = self.timers.schedule_relative(
                    self.timeout, lambda *_: self._timed_out(number)
                )
        if self.caller is None:
            self._subscribe(number, held)
        else:
            held.add(self.caller.schedule(lambda *_: self._subscribe(number, held)))

    def _subscribe(self, number: int, held: CompositeDisposable) -> None:
        if held.is_disposed:
            return  # disposed, or timed out, before it was called
        try:
            source = self.attempt()
        except Exception as error:
            self._on_error(number, error)
            return
        held.add(
            subscribe_source(
                source,
                lambda value: self._on_next(number, value),
                lambda error: self._on_error(number, error),
                lambda: self._on_completed(number),
                self.scheduler,
            )
        )

    def _on_next(self, number: int, value: Any) -> None:
        with self.lock:
            if self.running and number == self.number:
                self.observer.on_next(value)

    def _on_error(self, number: int, error: Exception) -> None:
        with self.lock:
            if not (self.running and number == self.number):
                return
            final = self._failed(error)
        if final is not None:
            self.observer.on_error(final)

    def _on_completed(self, number: int) -> None:
        with self.lock:
            if not (self.running and number == self.number):
                return
            self.running = False
            self.ended = True
            self.deadline.disposable = Disposable()
        # Past the lock: the run goes on from here (its tail, its next nodes), and no event can follow this one.
        self.observer.on_completed()

    def _timed_out(self, number: int) -> None:
        with self.lock:
            if not (self.running and number == self.number):
                return
            timeout = self.timeout
            assert timeout is not None
            final = self._failed(
                NodeTimeoutError(
                    f"node {self.node!r} did not finish within {timeout:g} s (attempt {number}); give it a longer "
                    "timeout (add_node(..., timeout=...)) if it needs one",
                    node=self.node,
                    timeout=timeout,
                    attempt=number,
                )
            )
        if final is not None:
            self.observer.on_error(final)

    def _failed(self, error: Exception) -> Exception | None:
        """Attempt ``number`` failed (called under the lock): stop it, then stream a ``NodeRetry`` and schedule the
        next attempt after the backoff — or return the error the node fails with, to deliver past the lock."""
        self.running = False
        self.deadline.disposable = Disposable()
        self.current.disposable = Disposable()  # stops a timed-out attempt; frees a failed one
        number = self.number
        try:
            # The first policy that takes the error decides (see RetryPolicy).
            policy = next((policy for policy in self.retry or () if policy.retries(error)), None)
        except Exception as predicate_error:  # retry_on itself failed: that is the error to report
            policy, error = None, predicate_error
        if self.ended:
            return None  # disposed meanwhile: nobody to tell
        if policy is None or number >= policy.max_attempts:
            self.ended = True
            return error
        delay = policy.delay(number)
        self.observer.on_next(NodeRetry(attempt=number, error=error, delay=delay))
        if not self.ended:  # the subscriber may have disposed on seeing the retry
            self.current.disposable = self.timers.schedule_relative(delay, lambda *_: self.start())
        return None

    def dispose(self) -> None:
        # Not under the lock: a dispose may come from the subscriber while an event is being handed over.
        self.ended = True
        self.running = False
        self.current.dispose()
        self.deadline.dispose()
