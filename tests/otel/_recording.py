"""What the instrumented runs of one test reported: its spans (ended, and still open) and its metrics."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class OpenSpans(SpanProcessor):
    """The spans started and not ended yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            self._open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._open.pop(span.context.span_id, None)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._open.values())


@dataclass
class Recorded:
    """What the instrumented runs of one test reported."""

    tracer_provider: TracerProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    open: OpenSpans = field(default_factory=OpenSpans)

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        """The recorded span that is ``span``'s parent (None for a root, or a parent not recorded here)."""
        if span.parent is None:
            return None
        return next((s for s in self.spans() if s.context.span_id == span.parent.span_id), None)

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == span.context.span_id]

    def spans(self) -> Sequence[ReadableSpan]:
        """Every span that ended so far, in the order they ended."""
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        spans = self.named(name)
        assert len(spans) == 1, f"{len(spans)} spans named {name!r}: {[s.name for s in self.spans()]}"
        return spans[0]

    def metric_points(self, name: str) -> list[Any]:
        """The data points of metric ``name`` collected now (empty when it was never recorded)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


__all__ = ["OpenSpans", "Recorded"]
