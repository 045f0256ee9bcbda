"""``rxgraph.otel.instrument``: nothing is reported, or imported, until it is called; bad arguments are refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rxgraph.otel
from rxgraph import END, START, StateGraph
from rxgraph.errors import ConfigurationError, InvalidTypeError


def test_runs_report_nothing_until_instrumented_and_nothing_after_uninstrument() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    graph = StateGraph().add_node("a", lambda s: None).add_edge(START, "a").add_edge("a", END).compile()
    try:
        assert not rxgraph.otel.is_instrumented()
        graph.invoke({})
        assert exporter.get_finished_spans() == ()
        rxgraph.otel.instrument(tracer_provider=provider)
        assert rxgraph.otel.is_instrumented()
        graph.invoke({})
        assert [span.name for span in exporter.get_finished_spans()] == ["rxgraph.node", "rxgraph.run"]
        rxgraph.otel.uninstrument()
        graph.invoke({})
        assert len(exporter.get_finished_spans()) == 2
    finally:
        rxgraph.otel.uninstrument()
        provider.shutdown()


def test_nothing_of_opentelemetry_is_imported_by_runs_that_are_not_instrumented() -> None:
    script = textwrap.dedent(
        """
        import sys
        from rxgraph import END, START, MemorySaver, RunnableConfig, StateGraph
        from rxgraph.agent import ReactAgent
        from rxgraph.models.openai import OpenAIChatModel
        from rxgraph.testing import ScriptedChatModel, finish, text
        import rxgraph.otel
        graph = StateGraph().add_node("a", lambda s: None).add_edge(START, "a").add_edge("a", END).compile()
        graph.invoke({})
        agent = ReactAgent(ScriptedChatModel([[text("hi"), finish("stop")]]), checkpointer=MemorySaver())
        agent.invoke("hello", RunnableConfig(thread_id="t"))
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_instrument_refuses_what_is_not_a_provider_and_explains_a_missing_api(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidTypeError, match="tracer_provider must be an opentelemetry TracerProvider"):
        rxgraph.otel.instrument(tracer_provider=object())
    with pytest.raises(InvalidTypeError, match="meter_provider must be an opentelemetry MeterProvider"):
        rxgraph.otel.instrument(meter_provider="console")
    with pytest.raises(InvalidTypeError, match="capture_message_content must be a bool"):
        rxgraph.otel.instrument(capture_message_content="yes")  # type: ignore[arg-type]
    assert not rxgraph.otel.is_instrumented()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if the otel extra was not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'rxgraph\[otel\]'"):
        rxgraph.otel.instrument()
    assert not rxgraph.otel.is_instrumented()
