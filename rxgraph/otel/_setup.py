"""``instrument`` and ``uninstrument``: whether rxgraph reports to OpenTelemetry, and to which providers."""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

from ..errors import ConfigurationError, InvalidTypeError
from ._active import set_telemetry, telemetry

__all__ = ["CAPTURE_MESSAGE_CONTENT", "instrument", "is_instrumented", "uninstrument"]

CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' environment switch for message contents on spans (``true`` to capture them)."""


def instrument(
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_message_content: bool | None = None,
) -> None:
    """Report runs, node calls, model calls and tool calls to OpenTelemetry, from the next run on.

    rxgraph emits through ``opentelemetry-api`` only (the ``otel`` extra: ``pip install 'rxgraph[otel]'``) to the
    providers the application configured: the global ones (``trace.set_tracer_provider``,
    ``metrics.set_meter_provider``) unless others are given here. It ships no exporter. Until this is called, a run asks
    once, as it starts, whether to report, and nothing of OpenTelemetry is imported. Under a tracer that makes no spans
    (no SDK configured: the API's own) runs trace nothing and step as they do uninstrumented; their metrics still go
    to the meter provider. Calling it again replaces the providers; ``uninstrument`` stops reporting.

    Args:
        tracer_provider: where spans go (default: the global tracer provider, also one set later).
        meter_provider: where measurements go (default: the global meter provider, also one set later).
        capture_message_content: put message contents (the model's requests and answers, tools' arguments and
            results) on the spans. Default None: as the GenAI conventions' switch says, the environment variable
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true`` to capture) read now. Off unless asked.

    Raises:
        ConfigurationError: ``opentelemetry-api`` is not installed.
        InvalidTypeError: a provider is not an OpenTelemetry provider, or ``capture_message_content`` not a bool.
    """
    try:
        from opentelemetry import metrics, trace
    except ImportError as missing:
        raise ConfigurationError(
            "rxgraph.otel.instrument() needs the OpenTelemetry API: pip install 'rxgraph[otel]' (opentelemetry-api)"
        ) from missing
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise InvalidTypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, got {type(tracer_provider).__name__}",
            argument="tracer_provider",
        )
    if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
        raise InvalidTypeError(
            f"meter_provider must be an opentelemetry MeterProvider, got {type(meter_provider).__name__}",
            argument="meter_provider",
        )
    if capture_message_content is None:
        capture_message_content = os.environ.get(CAPTURE_MESSAGE_CONTENT, "").strip().lower() == "true"
    elif type(capture_message_content) is not bool:
        raise InvalidTypeError(
            f"capture_message_content must be a bool or None, got {capture_message_content!r}",
            argument="capture_message_content",
        )
    from ._telemetry import Telemetry

    set_telemetry(
        Telemetry(tracer_provider, meter_provider, capture_content=capture_message_content, version=_version())
    )


def uninstrument() -> None:
    """Stop reporting, from the next run on (a run started before reports to its end)."""
    set_telemetry(None)


def is_instrumented() -> bool:
    """Whether runs report to OpenTelemetry now (``instrument`` was called, and ``uninstrument`` not since)."""
    return telemetry() is not None


def _version() -> str:
    try:
        return metadata.version("rxgraph")
    except metadata.PackageNotFoundError:
        return "0"
