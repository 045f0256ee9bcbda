"""``Telemetry``: the tracer, the instruments and the content switch that ``instrument`` chose, in one object the
runs, the agent and the model adapters report to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode

from ._genai import tool_attributes, traced_chat, traced_tool
from ._run_trace import RunInstruments, RunTrace

if TYPE_CHECKING:
    from reactivex import Observable

__all__ = ["SCOPE", "Telemetry"]

SCOPE = "rxgraph"
"""The instrumentation scope of every span and instrument rxgraph makes."""


class Telemetry:
    """Where rxgraph's spans and measurements go (see ``rxgraph.otel.instrument``)."""

    __slots__ = ("capture_content", "instruments", "tracer")

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
        *,
        capture_content: bool,
        version: str,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, version, tracer_provider)
        meter = metrics.get_meter(SCOPE, version, meter_provider)
        self.capture_content = capture_content
        self.instruments = RunInstruments(
            tracer=self.tracer,
            runs=meter.create_counter("rxgraph.runs", unit="{run}", description="Runs that ended, by outcome"),
            run_duration=meter.create_histogram(
                "rxgraph.run.duration", unit="s", description="How long runs took, from subscription to their end"
            ),
            rewind_duration=meter.create_histogram(
                "rxgraph.rewind.duration", unit="s", description="How long the rewinds of cut runs took"
            ),
            active=meter.create_up_down_counter(
                "rxgraph.runs.active", unit="{run}", description="Runs holding their thread's slot"
            ),
            waiting=meter.create_up_down_counter(
                "rxgraph.runs.waiting", unit="{run}", description="Runs waiting in line for their thread's slot"
            ),
        )

    def start_run(self, *, run_id: str, thread_id: str | None, inner: bool) -> RunTrace:
        """The trace of a run subscribed now: its span is a child of the span current here (the subscriber's)."""
        return RunTrace(self.instruments, run_id=run_id, thread_id=thread_id, inner=inner)

    def chat(
        self,
        source: Observable[Any],
        *,
        model: str,
        messages: Sequence[Any],
        provider: str | None = None,
        server: tuple[str, int | None] | None = None,
    ) -> Observable[Any]:
        """``source`` (a model's chunk stream) with a ``chat {model}`` span per subscription; a stream traced
        already (a model that traces its own calls) is returned as it is."""
        return traced_chat(
            self.tracer, self.capture_content, source, model=model, messages=messages, provider=provider, server=server
        )

    def tool(
        self,
        source: Observable[Any],
        *,
        name: str,
        call_id: str,
        arguments: str,
        parent: otel_context.Context,
        approval: str | None = None,
    ) -> Observable[Any]:
        """``source`` (one tool call's result) with an ``execute_tool {name}`` span per subscription, a child of
        ``parent`` (the context of the node that runs it) whatever thread subscribes it."""
        return traced_tool(
            self.tracer,
            self.capture_content,
            source,
            name=name,
            call_id=call_id,
            arguments=arguments,
            parent=parent,
            approval=approval,
        )

    def tool_not_run(
        self,
        *,
        name: str,
        call_id: str,
        arguments: str,
        parent: otel_context.Context,
        approval: str | None,
        error_type: str,
        reason: str,
    ) -> None:
        """Report a tool call that was never run (an unknown tool, arguments that do not fit it, a call a human
        rejected) as an ``execute_tool {name}`` span, a child of ``parent``, ended at once with status ERROR and
        ``error.type``: the model reads an error message for it (``reason``, the status's description), and the trace
        shows why."""
        attributes = tool_attributes(
            self.capture_content, name=name, call_id=call_id, arguments=arguments, approval=approval
        )
        attributes["error.type"] = error_type
        span = self.tracer.start_span(f"execute_tool {name}", context=parent, attributes=attributes)
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    def current_context(self) -> otel_context.Context:
        """The OpenTelemetry context current here (to hand to work that starts on another thread)."""
        return otel_context.get_current()

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Add an event to the span current here (a node's, while it is called)."""
        trace.get_current_span().add_event(name, dict(attributes))
