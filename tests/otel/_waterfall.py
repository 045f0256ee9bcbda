"""Draw recorded spans as a waterfall (an SVG), the way a tracing UI shows a trace: one row per span, nested under
its parent, a bar from its start to its end, its events as marks on it.

Run as a script, it records a turn cancelled while its tool runs (an agent on the local OpenAI-compatible server, the
tool on a pool, the user's Stop 150 ms into the tool) and writes its picture::

    .venv/bin/python tests/otel/_waterfall.py docs/images/cancelled-turn-trace.svg
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

__all__ = ["draw_waterfall", "record_cancelled_turn"]

_ROW, _TOP, _LABELS, _WIDTH = 30, 64, 330, 1000
_COLOURS = {"rxgraph.run": "#3b6fb6", "rxgraph.node": "#2a9d8f", "chat": "#7b5ea7", "execute_tool": "#e08a2c"}


def _colour(span: ReadableSpan) -> str:
    for prefix, colour in _COLOURS.items():
        if span.name.startswith(prefix):
            return colour
    return "#8a8f98"


def _label(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    if span.name == "rxgraph.node":
        return f"rxgraph.node  {attributes.get('rxgraph.node')}"
    if span.name == "rxgraph.run":
        return f"rxgraph.run  {attributes.get('rxgraph.outcome', '')}"
    return span.name


def _ordered(spans: Sequence[ReadableSpan]) -> list[tuple[int, ReadableSpan]]:
    """The spans depth first, children by start time: ``(depth, span)``."""
    ids = {span.context.span_id for span in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)
    rows: list[tuple[int, ReadableSpan]] = []

    def visit(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            rows.append((depth, span))
            visit(span.context.span_id, depth + 1)

    visit(None, 0)
    return rows


def draw_waterfall(spans: Sequence[ReadableSpan], title: str) -> str:
    """``spans`` (ended, of one trace) as an SVG waterfall titled ``title``."""
    rows = _ordered(spans)
    start = min(span.start_time or 0 for _, span in rows)
    end = max(span.end_time or 0 for _, span in rows)
    total = max(end - start, 1)
    scale = (_WIDTH - _LABELS - 170) / total
    marks = [(span, event) for _, span in rows for event in span.events]
    height = _TOP + len(rows) * _ROW + 20 + 22 * len(marks)

    def x(ns: int) -> float:
        return _LABELS + (ns - start) * scale

    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">',
        f'<rect width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="16" y="26" font-size="16" font-weight="bold">{escape(title)}</text>',
    ]
    step = _tick(total)
    tick = 0
    while tick <= total:
        tx = x(start + tick)
        bottom = _TOP + len(rows) * _ROW
        out.append(f'<line x1="{tx:.1f}" y1="{_TOP - 14}" x2="{tx:.1f}" y2="{bottom}" stroke="#e4e6ea"/>')
        out.append(f'<text x="{tx:.1f}" y="{_TOP - 18}" fill="#666" text-anchor="middle">{tick / 1e6:.0f} ms</text>')
        tick += step
    for row, (depth, span) in enumerate(rows):
        y = _TOP + row * _ROW
        attributes: dict[str, Any] = dict(span.attributes or {})
        if row % 2:
            out.append(f'<rect x="0" y="{y - 4}" width="{_WIDTH}" height="{_ROW}" fill="#f6f7f9"/>')
        out.append(f'<text x="{16 + depth * 18}" y="{y + 15}">{escape(_label(span))}</text>')
        left, right = x(span.start_time or start), x(span.end_time or end)
        cut = attributes.get("rxgraph.cancelled") is True or attributes.get("rxgraph.outcome") == "cancelled"
        failed = span.status.status_code is StatusCode.ERROR
        stroke = ' stroke="#c0392b" stroke-width="2" stroke-dasharray="4 2"' if cut or failed else ""
        width = max(right - left, 2)
        out.append(
            f'<rect x="{left:.1f}" y="{y}" width="{width:.1f}" height="{_ROW - 10}" rx="3" fill="{_colour(span)}"'
            f' fill-opacity="0.85"{stroke}/>'
        )
        ms = ((span.end_time or end) - (span.start_time or start)) / 1e6
        note = f"{ms:.1f} ms" + (" · cancelled" if cut else "") + (" · error" if failed else "")
        out.append(f'<text x="{left + width + 6:.1f}" y="{y + 15}" fill="#333">{escape(note)}</text>')
        for event in span.events:
            ex = x(event.timestamp)
            out.append(f'<path d="M {ex:.1f} {y - 2} l 6 10 l -6 10 l -6 -10 z" fill="#c0392b" stroke="#ffffff"/>')
    for number, (span, event) in enumerate(marks):
        y = _TOP + len(rows) * _ROW + 22 + number * 22
        out.append(f'<path d="M 22 {y - 12} l 6 10 l -6 10 l -6 -10 z" fill="#c0392b"/>')
        out.append(f'<text x="36" y="{y + 2}">{escape(_event_text(span, event, start))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _event_text(span: ReadableSpan, event: Any, start: int) -> str:
    at = f"{(event.timestamp - start) / 1e6:.0f} ms"
    attributes = dict(event.attributes or {})
    if event.name != "rxgraph.rewind":
        return f"{event.name} on {span.name}, at {at}"
    to = attributes.get("rxgraph.checkpoint_id")
    left = attributes.get("rxgraph.rewind.left_checkpoint_id")
    took = float(attributes.get("rxgraph.rewind.duration", 0)) * 1e3
    back = f"checkpoint {str(to)[:8]}…" if to else "its empty start"
    return (
        f"rxgraph.rewind at {at}: the thread went back to {back} (the turn's start), leaving the head "
        f"{str(left)[:8]}…, in {took:.2f} ms"
    )


def _tick(total_ns: int) -> int:
    """A round step for the time axis: about eight ticks."""
    for step_ms in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000):
        if total_ns / (step_ms * 1e6) <= 8:
            return int(step_ms * 1e6)
    return int(total_ns / 8)


def record_cancelled_turn() -> Sequence[ReadableSpan]:
    """A served turn of an agent on the local OpenAI-compatible server, its stream closed by its client 150 ms into
    its tool (as a browser tab closing does); the spans it recorded, the request's own among them (the app is
    instrumented with OpenTelemetry's ASGI middleware), less the middleware's spans of each message sent."""
    import threading

    import httpx
    import openai
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind
    from reactivex.scheduler import ThreadPoolScheduler
    from serve._serving import Server, post_turn

    import rxgraph.otel
    from rxgraph import MemorySaver, RunInfo
    from rxgraph.agent import ReactAgent, tool
    from rxgraph.models.openai import OpenAIChatModel
    from rxgraph.serve import create_app
    from rxgraph.testing import ChatCompletionsServer, Pause, Reply, StreamedCall

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rxgraph.otel.instrument(tracer_provider=provider)
    pool = ThreadPoolScheduler(2)
    started = threading.Event()

    @tool(scheduler=pool)
    def get_weather(city: str, run: RunInfo) -> str:
        """Current weather for a city."""
        started.set()
        run.cancelled.wait(2)  # a slow weather service, which stops when the turn is cancelled
        return f"Sunny in {city}"

    script = [
        Reply("Hello! ", "How can I help?", usage=(21, 6)),
        Reply(Pause(0.08), StreamedCall("call_1", "get_weather", '{"city": "Paris"}'), usage=(58, 18)),
    ]
    ask = {"input": {"messages": [{"role": "user", "content": "What's the weather in Paris?"}]}}
    try:
        with ChatCompletionsServer(script) as model, openai.OpenAI(base_url=model.base_url, api_key="k") as client:
            agent = ReactAgent(OpenAIChatModel(client, "gpt-4o-mini"), tools=[get_weather], checkpointer=MemorySaver())
            server = Server(OpenTelemetryMiddleware(create_app(agent), tracer_provider=provider))
            try:
                post_turn(
                    server.url, "t", {"input": {"messages": "Hi"}}
                )  # the turn before: where the cut one goes back to
                exporter.clear()
                with (
                    httpx.Client(base_url=server.url, timeout=10) as http,
                    http.stream("POST", "/threads/t/runs/stream", json={"assistant_id": "agent", **ask}),
                ):
                    started.wait(5)
                    threading.Event().wait(0.15)  # the user closes the tab
                runs = httpx.get(f"{server.url}/threads/t/runs", timeout=10).json()
                httpx.get(f"{server.url}/threads/t/runs/{runs[0]['run_id']}/join", timeout=10)  # ended, rewound
            finally:
                server.stop()
    finally:
        rxgraph.otel.uninstrument()
        pool.executor.shutdown(wait=True)
        provider.shutdown()
    spans = exporter.get_finished_spans()
    [run] = [span for span in spans if span.name == "rxgraph.run"]
    return [  # the cut turn's trace, without the middleware's span per message received or sent
        span
        for span in spans
        if span.context.trace_id == run.context.trace_id
        and (span.kind is not SpanKind.INTERNAL or span.name.startswith(("rxgraph.", "chat ", "execute_tool ")))
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' helpers: serve._serving
    picture = draw_waterfall(record_cancelled_turn(), "A turn cancelled while its tool runs, as its trace shows it")
    with open(sys.argv[1], "w", encoding="utf-8") as file:
        file.write(picture)
