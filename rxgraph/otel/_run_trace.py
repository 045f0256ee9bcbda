"""``RunTrace``: one run's span, the spans of its node calls, its rewind, and its place in the run metrics.

::

    rxgraph.run                      subscribed -> ended (completed, cancelled, failed, interrupted)
      ├── rxgraph.node  model        called -> its superstep landed (the checkpoint it wrote) or the run ended
      │     └── chat gpt-4o          the model's stream: subscribed -> completed, failed or disposed
      ├── rxgraph.node  tools
      │     ├── execute_tool search  one tool call, on whatever thread runs it
      │     └── execute_tool fetch
      └── event rxgraph.rewind       the checkpoint the thread went back to, and how long that took

A run is traced from its subscription: its span's parent is the span current where it was subscribed (the caller of
``stream``/``invoke``, the task iterating ``astream``, the node running a subgraph), wherever its steps run later.
Nodes are told their context explicitly (``enter``/``leave`` around their call and the subscription of their
stream), so threads and trampolines do not matter. Every way a run ends ends all its spans (``ended``).

Under a tracer that makes no spans (the API's own, when the application configured no SDK) a run is only measured:
its node calls are not traced (``spans`` is False), so its steps cost what they cost uninstrumented.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Counter, Histogram, UpDownCounter
from opentelemetry.trace import Span, Status, StatusCode, Tracer

__all__ = ["Outcome", "RunInstruments", "RunTrace"]

Outcome = Literal["completed", "cancelled", "failed", "interrupted"]
"""How a run ended, as ``rxgraph.outcome`` says it."""

_NONE, _WAITING, _HOLDING, _RELEASED = 0, 1, 2, 3


class RunInstruments(NamedTuple):
    """Where runs report: the tracer and the run metrics."""

    tracer: Tracer
    runs: Counter
    run_duration: Histogram
    rewind_duration: Histogram
    active: UpDownCounter  # runs holding their thread's slot
    waiting: UpDownCounter  # runs waiting in line for it


class RunTrace:
    """One run's spans and measurements (made by ``Telemetry.start_run``, called from the run's engine)."""

    __slots__ = ("_ended", "_lock", "_nodes", "_slot", "_started", "context", "inner", "span", "spans", "to")

    def __init__(self, to: RunInstruments, *, run_id: str, thread_id: str | None, inner: bool) -> None:
        self.to = to
        self.inner = inner  # a subgraph's run: traced, but not counted (its parent's run is)
        parent = otel_context.get_current()
        attributes: dict[str, Any] = {"rxgraph.run_id": run_id}
        if thread_id is not None:
            attributes["rxgraph.thread_id"] = thread_id
        if inner:
            attributes["rxgraph.subgraph"] = True
        self.span = to.tracer.start_span("rxgraph.run", context=parent, attributes=attributes)
        # Whether the tracer makes spans at all (a sampled-out run's span does: its context still goes to its calls).
        # When it does not, the engine calls the run's nodes as it does uninstrumented, and nothing here traces them.
        self.spans = self.span.get_span_context().is_valid
        self.context = trace.set_span_in_context(self.span, parent)
        self._lock = threading.Lock()
        self._nodes: dict[int, tuple[Span, otel_context.Context]] = {}  # open node calls, by task index
        self._ended = False
        self._slot = _NONE
        self._started = time.perf_counter()

    # -- node calls ----------------------------------------------------------------------------------------------

    def node_started(self, node: str, index: int, step: int) -> None:
        """Task ``index`` of superstep ``step`` calls ``node`` now."""
        if not self.spans:
            return
        span = self.to.tracer.start_span(
            "rxgraph.node", context=self.context, attributes={"rxgraph.node": node, "rxgraph.step": step}
        )
        with self._lock:
            if self._ended:  # a branch started while the run was ending: nothing of it stays open
                span.end()
                return
            self._nodes[index] = (span, trace.set_span_in_context(span, self.context))

    def enter(self, index: int) -> object:
        """Make task ``index``'s node span current on this thread (for its call, or its stream's subscription);
        hand the result to ``leave``."""
        if not self.spans:
            return None
        node = self._nodes.get(index)
        return otel_context.attach(node[1] if node is not None else self.context)

    def leave(self, token: object) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def landed(self, checkpoint_id: str | None) -> None:
        """The superstep landed (``checkpoint_id``: what it wrote, if the run has a thread): its node spans end."""
        if not self.spans:
            return
        with self._lock:
            nodes = list(self._nodes.values())
            self._nodes.clear()
        for span, _ in nodes:
            if checkpoint_id is not None:
                span.set_attribute("rxgraph.checkpoint_id", checkpoint_id)
            span.end()

    def node_failed(self, index: int, error: BaseException) -> None:
        """Task ``index``'s node raised ``error`` (or its stream failed with it)."""
        node = self._nodes.get(index)
        if node is not None:
            _record(node[0], error)

    # -- the thread's slot ---------------------------------------------------------------------------------------

    def slot_waiting(self) -> None:
        """The run lines up for its thread's slot (unless it was granted meanwhile)."""
        with self._lock:
            if self._slot != _NONE:
                return
            self._slot = _WAITING
        self.to.waiting.add(1)

    def slot_granted(self) -> None:
        """The run holds its thread's slot now."""
        with self._lock:
            slot, self._slot = self._slot, _HOLDING if self._slot in (_NONE, _WAITING) else self._slot
        if slot == _WAITING:
            self.to.waiting.add(-1)
        if slot in (_NONE, _WAITING):
            self.to.active.add(1)

    def slot_released(self) -> None:
        """The run left its thread's slot, or its line."""
        with self._lock:
            slot, self._slot = self._slot, _RELEASED
        if slot == _WAITING:
            self.to.waiting.add(-1)
        elif slot == _HOLDING:
            self.to.active.add(-1)

    # -- the end -------------------------------------------------------------------------------------------------

    def rewound(self, *, to: str | None, left: str | None, head: str | None, seconds: float) -> None:
        """The run's rewind put the thread back to checkpoint ``to`` (None: the empty state of a first turn),
        leaving the head ``left``, by writing the new head ``head``; it took ``seconds``."""
        attributes: dict[str, Any] = {"rxgraph.rewind.duration": seconds}
        if to is not None:
            attributes["rxgraph.checkpoint_id"] = to
        if left is not None:
            attributes["rxgraph.rewind.left_checkpoint_id"] = left
        if head is not None:
            attributes["rxgraph.rewind.head_id"] = head
        self.span.add_event("rxgraph.rewind", attributes)
        if not self.inner:
            self.to.rewind_duration.record(seconds)

    def ended(self, outcome: Outcome, error: BaseException | None = None, **attributes: str) -> None:
        """The run ended ``outcome`` (once; later calls do nothing): the node spans still open end with it, then the
        run's span, and the run is counted."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            nodes = list(self._nodes.values())
            self._nodes.clear()
        if outcome == "failed" and error is not None and len(nodes) == 1:
            _record(nodes[0][0], error)  # the one node running failed (its tail, say)
        for span, _ in nodes:
            span.set_attribute("rxgraph.outcome", outcome)
            span.end()
        span = self.span
        span.set_attribute("rxgraph.outcome", outcome)
        for key, value in attributes.items():
            span.set_attribute(key, value)
        if error is not None:
            _record(span, error)
        span.end()
        if not self.inner:
            labels = {"rxgraph.outcome": outcome}
            self.to.runs.add(1, labels)
            self.to.run_duration.record(time.perf_counter() - self._started, labels)


def _record(span: Span, error: BaseException) -> None:
    """``error`` on ``span``: its exception event, ``error.type`` and status ERROR."""
    span.record_exception(error)
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
