"""Model and tool calls as the OpenTelemetry GenAI semantic conventions name them: a ``chat {model}`` span per
model stream, an ``execute_tool {tool}`` span per tool call.

Message contents go on the spans (``gen_ai.input.messages``, ``gen_ai.output.messages``, the tool call's arguments
and result) only when the application opts in: ``instrument(capture_message_content=True)``, or the conventions'
switch ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` when ``instrument`` was called.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable

from ..messages._types import ToolMessage
from ..rx._subscribe import subscribe_source

__all__ = ["TracedStream", "message_parts", "tool_attributes", "traced_chat", "traced_tool"]


class TracedStream(Observable[Any]):
    """A stream whose subscriptions are traced already (a model adapter's own): the agent does not trace it again."""


def traced_chat(
    tracer: Tracer,
    capture: bool,
    source: Observable[Any],
    *,
    model: str,
    messages: Sequence[Any],
    provider: str | None,
    server: tuple[str, int | None] | None,
) -> Observable[Any]:
    """``source`` with a ``chat {model}`` span per subscription (see ``Telemetry.chat``)."""
    if isinstance(source, TracedStream):
        return source
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if provider is not None:
        attributes["gen_ai.provider.name"] = provider
    if server is not None:
        attributes["server.address"] = server[0]
        if server[1] is not None:
            attributes["server.port"] = server[1]

    def _subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        span = tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
        if not span.is_recording():
            # Nothing of it would be kept (no SDK configured, or a trace sampled out): the model's chunks go to the
            # subscriber as they would uninstrumented, with no frame of ours between them.
            span.end()
            return subscribe_source(source, observer.on_next, observer.on_error, observer.on_completed, scheduler)
        if capture:
            span.set_attribute("gen_ai.input.messages", json.dumps(message_parts(messages), ensure_ascii=False))
        call = _ChatCall(span, observer, capture)
        subscription = source.subscribe(call.on_next, call.on_error, call.on_completed, scheduler=scheduler)
        return CompositeDisposable(subscription, Disposable(call.disposed))

    return TracedStream(_subscribe)


def traced_tool(
    tracer: Tracer,
    capture: bool,
    source: Observable[Any],
    *,
    name: str,
    call_id: str,
    arguments: str,
    parent: otel_context.Context,
    approval: str | None,
) -> Observable[Any]:
    """``source`` with an ``execute_tool {name}`` span per subscription (see ``Telemetry.tool``)."""
    attributes = tool_attributes(capture, name=name, call_id=call_id, arguments=arguments, approval=approval)

    def _subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        span = tracer.start_span(f"execute_tool {name}", context=parent, attributes=attributes)
        call = _ToolCall(span, observer, capture)
        # Current while it is subscribed: a tool called here, or on a pool (its context goes with it), sees its span.
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            subscription = source.subscribe(call.on_next, call.on_error, call.on_completed, scheduler=scheduler)
        finally:
            otel_context.detach(token)
        return CompositeDisposable(subscription, Disposable(call.disposed))

    return Observable(_subscribe)


def tool_attributes(capture: bool, *, name: str, call_id: str, arguments: str, approval: str | None) -> dict[str, Any]:
    """The attributes of the ``execute_tool`` span of a call (its arguments only with content capture)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }
    if approval is not None:
        attributes["rxgraph.tool.approval"] = approval
    if capture:
        attributes["gen_ai.tool.call.arguments"] = arguments
    return attributes


class _Call:
    """One traced call: forwards its events and ends its span once — at its end, or when it is disposed."""

    def __init__(self, span: Span, observer: abc.ObserverBase[Any], capture: bool) -> None:
        self.span = span
        self.observer = observer
        self.capture = capture
        self._lock = threading.Lock()
        self._ended = False

    def end(self) -> bool:
        with self._lock:
            ended, self._ended = self._ended, True
        return not ended

    def on_error(self, error: Exception) -> None:
        if self.end():
            span = self.span
            span.record_exception(error)
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()
        self.observer.on_error(error)

    def disposed(self) -> None:
        if self.end():  # cut before its end: the span says so, and ends with the call
            self.span.set_attribute("rxgraph.cancelled", True)
            self.span.end()


class _ChatCall(_Call):
    """A model stream's chunks: their token usage, finish reasons and (with content capture) the answer."""

    def __init__(self, span: Span, observer: abc.ObserverBase[Any], capture: bool) -> None:
        super().__init__(span, observer, capture)
        self.usage: Any = None
        self.reasons: list[str] = []
        self.text: list[str] = []
        self.calls: dict[int, list[Any]] = {}

    def on_next(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        reason = getattr(chunk, "finish_reason", None)
        if reason:
            self.reasons.append(reason)
        if self.capture:
            self._keep(chunk)
        self.observer.on_next(chunk)

    def _keep(self, chunk: Any) -> None:
        content = getattr(chunk, "content", "")
        if isinstance(content, str) and content:
            self.text.append(content)
        for delta in getattr(chunk, "tool_calls", ()):
            call = self.calls.setdefault(delta.index, [None, None, []])
            call[0] = call[0] or delta.id
            call[1] = call[1] or delta.name
            call[2].append(delta.arguments)

    def on_completed(self) -> None:
        if self.end():
            span = self.span
            usage = self.usage
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            if self.reasons:
                span.set_attribute("gen_ai.response.finish_reasons", tuple(self.reasons))
            if self.capture:
                span.set_attribute("gen_ai.output.messages", json.dumps([self._answer()], ensure_ascii=False))
            span.end()
        self.observer.on_completed()

    def _answer(self) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if self.text:
            parts.append({"type": "text", "content": "".join(self.text)})
        for index in sorted(self.calls):
            call_id, name, pieces = self.calls[index]
            parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": _json("".join(pieces))})
        answer: dict[str, Any] = {"role": "assistant", "parts": parts}
        if self.reasons:
            answer["finish_reason"] = self.reasons[-1]
        return answer


class _ToolCall(_Call):
    """A tool call's one result."""

    def on_next(self, value: Any) -> None:
        if self.capture:
            # A tool that answers with its message (a LangChain tool): the message's text.
            result = value.content if isinstance(value, ToolMessage) else value
            self.span.set_attribute("gen_ai.tool.call.result", result if isinstance(result, str) else repr(result))
        self.observer.on_next(value)

    def on_completed(self) -> None:
        if self.end():
            self.span.end()
        self.observer.on_completed()


def message_parts(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """rxgraph messages in the conventions' ``gen_ai.input.messages`` form: a role and its parts each (text, tool
    calls and their responses, images and audio as ``uri`` or ``blob`` parts, files as ``file`` or ``blob``)."""
    result: list[dict[str, Any]] = []
    for message in messages:
        role = getattr(message, "role", "user")
        parts: list[dict[str, Any]] = []
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": message.tool_call_id, "response": message.text})
        else:
            content = getattr(message, "content", None)
            if isinstance(content, str):
                if content:
                    parts.append({"type": "text", "content": content})
            elif content:
                parts.extend(_part(part) for part in content)
        for call in getattr(message, "tool_calls", ()) or ():
            parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": _json(call.arguments)})
        result.append({"role": role, "parts": parts})
    return result


def _part(part: Any) -> dict[str, Any]:
    """One content part as the conventions name it."""
    kind = getattr(part, "type", None)
    if kind == "text":
        return {"type": "text", "content": part.text}
    if kind == "refusal":
        return {"type": "text", "content": part.refusal}
    if kind == "image":
        return _located(part.url, "image")
    if kind == "audio":
        mime = "audio/wav" if part.format == "wav" else "audio/mpeg"
        return {"type": "blob", "modality": "audio", "mime_type": mime, "content": part.data}
    if kind == "file":
        if part.file_data is not None:
            if part.file_data.startswith("data:"):
                return _located(part.file_data, "file")
            return {"type": "blob", "modality": "file", "mime_type": None, "content": part.file_data}
        return {"type": "file", "modality": "file", "file_id": part.file_id}
    return {"type": str(kind)}


def _located(url: str, modality: str) -> dict[str, Any]:
    """A part given by URL: a ``data:`` URL is the bytes themselves (a ``blob``), any other a ``uri``."""
    if url.startswith("data:") and ";base64," in url:
        mime, _, data = url[len("data:") :].partition(";base64,")
        return {"type": "blob", "modality": modality, "mime_type": mime or None, "content": data}
    return {"type": "uri", "modality": modality, "uri": url}


def _json(text: str) -> Any:
    """A tool call's arguments as the JSON value they are, or as their text when they are not JSON."""
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text
