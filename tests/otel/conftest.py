"""Each test gets its own OpenTelemetry SDK providers, with an in-memory span exporter and metric reader, given to
rxgraph through ``rxgraph.otel.instrument`` (the global providers are never set, so tests do not depend on order)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _openai_clients import make_client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel._recording import OpenSpans, Recorded

import rxgraph.otel

__all__ = ["make_client", "otel"]  # make_client: the openai clients of OpenAIChatModel's spans


@pytest.fixture
def otel() -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    open_spans = OpenSpans()
    tracer_provider.add_span_processor(open_spans)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    rxgraph.otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Recorded(tracer_provider, exporter, reader, open_spans)
    finally:
        rxgraph.otel.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()
