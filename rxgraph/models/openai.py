"""``OpenAIChatModel``: a ``ChatModel`` on the official ``openai`` client, for any OpenAI-compatible Chat Completions
API (OpenAI, DashScope's compatible mode, vLLM, Ollama, ...). Needs the ``openai`` extra."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any

import openai
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.scheduler import NewThreadScheduler, ThreadPoolScheduler

from .._arguments import check_scheduler
from ..agent._model import ChatChunk, ToolCallDelta, ToolSpec
from ..errors import InvalidArgumentError, InvalidTypeError, ModelAPIError
from ..messages._openai import to_openai
from ..messages._types import Message, TokenUsage
from ..otel._active import telemetry
from ..rx._awaitable import awaiting_loop, background_loop, running_loop
from ._call import ModelCall

__all__ = ["OpenAIChatModel"]

_OWN = ("messages", "stream", "tools", "model")
"""Request parameters the adapter sets itself."""

_TOOL_ONLY = ("tool_choice", "parallel_tool_calls")
"""Request parameters an API refuses in a request without tools (an agent's last allowed call has none)."""

_TRANSPORT = {"extra_headers": "headers", "extra_query": "params", "extra_body": "extra_json", "timeout": "timeout"}
"""``create``'s options that are not in the request's body, and what ``client.post``'s ``options`` call them."""

_OPENAI_CODE = os.path.dirname(os.path.abspath(openai.__file__)) + os.sep
"""Where the ``openai`` package's own code is: a ``create`` whose code is elsewhere is wrapped by instrumentation."""

_UNSENT = tuple(kind for kind in (getattr(openai, "NotGiven", None), getattr(openai, "Omit", None)) if kind is not None)
"""The ``openai`` client's markers of a parameter left out (``NOT_GIVEN``, ``omit``)."""

_POOL_SIZE = 32
_pool: ThreadPoolScheduler | None = None
_pool_lock = threading.Lock()


def _streams_pool() -> ThreadPoolScheduler:
    """The threads the blocking client's streams are read on when the subscriber gives no pool (one per open stream,
    at most ``_POOL_SIZE`` at a time)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolScheduler(max_workers=_POOL_SIZE)
        return _pool


class OpenAIChatModel:
    """A ``ChatModel`` that streams its answers from a Chat Completions API with the official ``openai`` client.

    ::

        client = openai.OpenAI(base_url="https://dashscope.aliyuncs.com/compatible-mode/v1", api_key=key)
        agent = ReactAgent(OpenAIChatModel(client, "qwen-plus", temperature=0.2), tools=[get_weather])

    Each call to the model sends the history (``to_openai``: the wire format of ``rxgraph.messages``) and the tools
    offered, with ``stream=True`` and ``stream_options={"include_usage": True}``, and emits the answer's
    ``ChatChunk``s as they arrive: text and refusal pieces, tool-call deltas by index, the finish reason, and the
    token usage on the chunk that reports it (``merge_chunks`` puts it on the ``AssistantMessage``). A request with
    no tools leaves out ``tool_choice`` and ``parallel_tool_calls``, which APIs refuse without tools.

    The request goes through the client's ``post``, as its ``chat.completions.create`` sends it, and each chunk is
    read as its JSON object rather than as a typed ``ChatCompletionChunk`` (a third less CPU). When instrumentation
    wrapped ``chat.completions.create`` (OpenTelemetry's, LangSmith's, Sentry's), the request goes through it
    instead, so that the wrapper sees every request.

    The Observable is cold: nothing is sent until it is subscribed, and **disposing the subscription closes the HTTP
    stream**, so the server sees the client go away while it is still generating:

    - with ``openai.OpenAI`` (blocking), the request is made and the stream read on a worker thread — the
      ``scheduler`` given here, else the scheduler the stream is subscribed with when it is a thread pool
      (``ThreadPoolScheduler`` / ``NewThreadScheduler``), else a pool of this module's own (32 threads): the
      subscribing thread never blocks. A stream holds its thread while it is open; for many concurrent streams, use
      the async client. Disposing shuts the connection's socket down at once (an HTTP/1.1 connection is the
      stream's alone), which also ends the blocked read. Only a request still waiting for the response's headers,
      or in the client's sleep between retries, finishes that first.
    - with ``openai.AsyncOpenAI``, the request runs as a task on an event loop — the one of the ``AsyncIOScheduler``
      it is subscribed with; in a run of asyncio code (``astream``, ``ainvoke``, ``rxgraph.serve``), the loop of the
      code that awaits the run, where its ``async def`` nodes and tools are awaited too; else the loop running on
      the subscribing thread; else rxgraph's background loop (``invoke`` and ``stream`` from blocking code) — and
      disposing cancels the task, which closes the response. Chunks arrive on that loop's thread. An async client
      keeps connections that belong to the loop that opened them, and one used on a loop that has since closed
      fails its next request (``RuntimeError: Event loop is closed``), as any ``httpx`` client does: use a client
      on one loop (a server's), or a client per loop (each ``asyncio.run``), and close it there.

    A failed request fails the Observable with ``ModelAPIError``: ``status_code`` (None when no response came: a
    connection refused, a timeout, a broken stream), ``body`` (the API's JSON error object, as the ``openai`` client
    read it) and ``provider``; the client's exception is its ``__cause__``. The client's own retries
    (``max_retries``) happen before that.

    **An answer is complete only once its** ``finish_reason`` **has come.** A stream that ends before it — closed by
    the server or a proxy, with or without ``data: [DONE]``, or broken in the middle of its body — fails the
    Observable with ``ModelAPIError`` (``status_code`` None, a message saying the stream was cut before the model
    finished) instead of completing, so a cut answer, or a tool call with half its arguments, is never taken for a
    whole one: an agent's turn fails and is rewound. A stream whose ``finish_reason`` came and whose ``[DONE]`` did
    not is complete (the answer is all there).

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a subclass, such as Azure's), with its
            ``base_url``, key, timeout and retries as you want them.
        model: the model's name, as the API knows it.
        provider: the API's name in errors (``ModelAPIError.provider``); default ``"openai"``.
        scheduler: where the blocking client reads its streams (see above).
        **request_options: more request parameters, sent as they are: ``temperature``, ``max_tokens``,
            ``tool_choice``, ``extra_body`` (for parameters of other APIs: ``{"enable_thinking": False}``),
            ``extra_headers``, ``timeout``... ``stream_options`` is merged over ``{"include_usage": True}``
            (``stream_options=None`` sends none, for APIs that refuse it). An option set to ``openai.NOT_GIVEN``
            (or ``omit``) is left out.

    Raises:
        InvalidTypeError: ``client`` is not an ``openai`` client, or ``scheduler`` not a reactivex scheduler.
        InvalidArgumentError: ``model`` is empty, ``n`` is not 1 (an agent takes one answer), an option is one the
            adapter sets itself (``messages``, ``stream``, ``tools``) or is not a parameter of the client's
            ``chat.completions.create`` (another API's parameters go in ``extra_body``), or ``response_format`` is a
            class rather than the request's JSON object.
    """

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        model: str,
        *,
        provider: str = "openai",
        scheduler: abc.SchedulerBase | None = None,
        **request_options: Any,
    ) -> None:
        if not isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
            raise InvalidTypeError(
                f"client must be an openai.OpenAI or openai.AsyncOpenAI, got {type(client).__name__}",
                argument="client",
            )
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError(f"model must be a non-empty string, got {model!r}", argument="model")
        for key in _OWN:
            if key in request_options:
                raise InvalidArgumentError(
                    f"{key!r} is set by OpenAIChatModel itself; it cannot be a request option", argument=key
                )
        known = inspect.signature(type(client.chat.completions).create).parameters
        for key in request_options:
            if key not in known or key == "self":
                raise InvalidArgumentError(
                    f"{key!r} is not a parameter of the client's chat.completions.create; send a parameter of another "
                    "API in extra_body",
                    argument=key,
                )
        if isinstance(request_options.get("response_format"), type):
            raise InvalidArgumentError(
                "response_format must be the request's JSON object (a json_schema), not a class: the adapter reads "
                "the answer's text as it streams",
                argument="response_format",
            )
        if request_options.get("n", 1) != 1:
            raise InvalidArgumentError(
                f"n must be 1 (an agent takes one answer), got {request_options['n']!r}", argument="n"
            )
        self.client = client
        self.model = model
        self.provider = provider
        self.scheduler = check_scheduler(scheduler, argument="scheduler")
        options = {key: value for key, value in request_options.items() if not isinstance(value, _UNSENT)}
        if "stream_options" not in options:
            options["stream_options"] = {"include_usage": True}
        elif options["stream_options"] is None:
            del options["stream_options"]
        elif isinstance(options["stream_options"], Mapping):
            options["stream_options"] = {"include_usage": True, **options["stream_options"]}
        self.request_options: Mapping[str, Any] = options

    def __repr__(self) -> str:
        kind = "async" if self._is_async else "sync"
        return f"OpenAIChatModel({self.model!r}, {kind} client at {self.client.base_url}, provider={self.provider!r})"

    @property
    def _is_async(self) -> bool:
        return isinstance(self.client, openai.AsyncOpenAI)

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        """A cold Observable of the answer's chunks for one request (see the class)."""
        messages = list(messages)
        tools = list(tools)

        def subscribe(observer: abc.ObserverBase[ChatChunk], scheduler: abc.SchedulerBase | None = None) -> Any:
            call = _Call(observer)
            if self._is_async:
                loop = awaiting_loop(scheduler) or running_loop() or background_loop()
                future = asyncio.run_coroutine_threadsafe(self._read_async(call, messages, tools), loop)
                return Disposable(lambda: call.cancel(future.cancel))
            if self.scheduler is not None:
                worker = self.scheduler
            elif isinstance(scheduler, NewThreadScheduler):
                worker = scheduler
            else:
                worker = _streams_pool()
            scheduled = worker.schedule(lambda *_: self._read(call, messages, tools))
            return Disposable(lambda: call.cancel(scheduled.dispose))

        reporting = telemetry()
        if reporting is None:
            return Observable(subscribe)
        # A chat span per subscription (rxgraph.otel.instrument): the model, the server, the tokens it reports.
        url = self.client.base_url
        return reporting.chat(
            Observable(subscribe),
            model=self.model,
            messages=messages,
            provider=self.provider,
            server=(url.host, url.port),
        )

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """The parameters of the request ``stream`` sends for ``messages`` and ``tools`` (to log or check it)."""
        params: dict[str, Any] = {**self.request_options, "model": self.model, "messages": to_openai(messages)}
        params["stream"] = True
        if tools:
            params["tools"] = [spec.to_openai() for spec in tools]
        else:
            for key in _TOOL_ONLY:
                params.pop(key, None)
        return params

    def _open(self, params: dict[str, Any]) -> Any:
        """Send the request: the client's stream of the answer's chunks (a coroutine of it for the async client).

        The client's own ``chat.completions.create`` builds the same request as ``client.post`` and reads each chunk
        into a ``ChatCompletionChunk``; here the chunks are read as the JSON objects they are, which spares about a
        third of the client's CPU per request. The request goes through ``client.post``, as ``create`` sends it:
        the client's base URL, auth, headers, retries and timeout, and its errors, are the same. When ``create`` is
        wrapped by instrumentation (OpenTelemetry's, LangSmith's, Sentry's: code outside the ``openai`` package),
        the request goes through it instead, so that the instrumentation sees every call.
        """
        create = self.client.chat.completions.create
        if not _is_openais_own(create):
            return create(**params)
        body = {key: value for key, value in params.items() if key not in _TRANSPORT}
        options: dict[str, Any] = {_TRANSPORT[key]: params[key] for key in _TRANSPORT if key in params}
        options["security"] = {"bearer_auth": True}  # as create asks: the API key, never an admin key
        stream_cls = openai.AsyncStream[object] if self._is_async else openai.Stream[object]
        client: Any = self.client  # (post's overloads are one per kind of client; the call is the same)
        return client.post(
            "/chat/completions", cast_to=object, body=body, options=options, stream=True, stream_cls=stream_cls
        )

    # -- the blocking client, on a worker thread -----------------------------------------------------------------

    def _read(self, call: _Call, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        assert isinstance(self.client, openai.OpenAI)
        if call.cancelled:
            return
        try:
            params = self.request(messages, tools)
        except Exception as error:
            call.fail(error)
            return
        try:
            stream = self._open(params)
        except Exception as error:
            call.fail(self._error(error))
            return
        if not call.attach(stream):
            stream.close()  # disposed while the request was under way
            return
        try:
            chunks = iter(stream)
            while True:
                try:
                    raw = next(chunks)
                except StopIteration:
                    break
                except Exception as error:
                    call.fail(self._error(error, finished=call.finished))
                    return
                chunk = _chunk(raw)
                if chunk is not None and not call.emit(chunk):
                    return
            call.end(self._cut)
        except Exception as error:
            call.fail(error)
        finally:
            call.detach()
            stream.close()

    # -- the async client, on an event loop ------------------------------------------------------------------------

    async def _read_async(self, call: _Call, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        assert isinstance(self.client, openai.AsyncOpenAI)
        try:
            params = self.request(messages, tools)
        except Exception as error:
            call.fail(error)
            return
        try:
            stream = await self._open(params)
        except Exception as error:
            call.fail(self._error(error))
            return
        try:
            chunks = stream.__aiter__()
            while True:
                try:
                    raw = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as error:
                    call.fail(self._error(error, finished=call.finished))
                    return
                chunk = _chunk(raw)
                if chunk is not None and not call.emit(chunk):
                    return
            call.end(self._cut)
        except Exception as error:
            call.fail(error)
        finally:
            await stream.close()

    # -- errors ----------------------------------------------------------------------------------------------------

    def _cut(self) -> ModelAPIError:
        """The error of a stream that ended (cleanly, to the HTTP client) before the answer's ``finish_reason``."""
        return ModelAPIError(
            f"the {self.provider} chat completions stream was cut before the model finished: it ended without a "
            "finish_reason, so the answer is incomplete; retry the request (a server or proxy that closes streams "
            "early, on a timeout or a restart, is the usual cause)",
            status_code=None,
            provider=self.provider,
        )

    def _error(self, error: Exception, *, finished: bool | None = None) -> ModelAPIError:
        """The client's exception as a ``ModelAPIError`` (the exception is its cause). ``finished`` is None when it
        came before the answer's stream opened, else whether the answer's ``finish_reason`` had come."""
        status: int | None = None
        body: object = None
        if isinstance(error, openai.APIStatusError):
            status, body = error.status_code, error.body
            said = body.get("message") if isinstance(body, Mapping) else None
            detail = f"HTTP {status}: {said if isinstance(said, str) else error.message}"
        elif isinstance(error, (openai.APITimeoutError, *_transport_errors(timeouts=True))):
            detail = "the request timed out"
        elif isinstance(error, (openai.APIConnectionError, *_transport_errors(timeouts=False))):
            if isinstance(error, openai.APIConnectionError):
                cause = error.__cause__
                said = repr(cause) if cause is not None else error.message
            else:  # the HTTP client's own error, out of a stream an openai client before 3 was reading
                said = repr(error)
            if finished is None:
                detail = f"no connection: {said}"
            elif finished:
                detail = f"the stream broke after the model finished: {said}"
            else:  # the connection was there and broke mid-answer: the answer is cut short
                detail = f"the stream was cut before the model finished: {said}"
        elif isinstance(error, openai.APIError):
            body = error.body
            detail = error.message
        else:
            detail = f"{type(error).__name__}: {error}"
        failure = ModelAPIError(
            f"the {self.provider} chat completions request failed: {detail}",
            status_code=status,
            body=body,
            provider=self.provider,
        )
        failure.__cause__ = error
        return failure


def _transport_errors(*, timeouts: bool) -> tuple[type[BaseException], ...]:
    """The HTTP client's timeout errors (``timeouts``), or all its transport errors: ``httpx``'s (under the openai
    clients before 3) and ``httpx2``'s (from 3 on), of those imported. The clients before 3 raise them as they are
    when a stream they are reading times out or breaks, where later ones wrap them in ``APITimeoutError`` and
    ``APIConnectionError``."""
    name = "TimeoutException" if timeouts else "TransportError"
    found = (getattr(sys.modules.get(module), name, None) for module in ("httpx", "httpx2"))
    return tuple(kind for kind in found if isinstance(kind, type))


class _Call(ModelCall):
    """One subscription's request: a ``ModelCall`` with the open stream to close when it is disposed."""

    __slots__ = ("_lock", "_stream")

    def __init__(self, observer: abc.ObserverBase[ChatChunk]) -> None:
        super().__init__(observer)
        self._lock = threading.Lock()
        self._stream: Any = None

    def cancel(self, stop: Any) -> None:
        with self._lock:
            self.cancelled = True
            if self.ended:
                return  # the dispose that follows the end: the reader closes its stream and keeps the connection
            stream, self._stream = self._stream, None
            if stream is not None:
                _abort(stream)
        stop()

    def attach(self, stream: Any) -> bool:
        with self._lock:
            if self.cancelled:
                return False
            self._stream = stream
            return True

    def detach(self) -> None:
        with self._lock:  # after this, cancel() leaves the stream to the reader, which closes it
            self._stream = None


def _abort(stream: Any) -> None:
    """End a blocking client's stream from another thread, now.

    Closing the response from here would not do: the reading thread holds the socket in a blocking read, so the
    connection stays open until the server sends more. Shutting the socket down sends the server a FIN at once and
    ends that read; the reader then closes the stream. Only an HTTP/1.1 connection is shut down this way (it carries
    this one stream); anything else is closed.
    """
    response = getattr(stream, "response", None)
    network = response.extensions.get("network_stream") if response is not None else None
    sock = network.get_extra_info("socket") if network is not None else None
    if isinstance(sock, socket.socket) and getattr(response, "http_version", None) == "HTTP/1.1":
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
        return
    with contextlib.suppress(Exception):  # a close racing the reader's: the reader closes it again
        stream.close()


def _is_openais_own(create: Any) -> bool:
    """Whether ``create`` is the ``openai`` package's own method (not replaced or wrapped by code from elsewhere)."""
    if type(create) is not types.MethodType:
        return False  # a wrapper object (wrapt's), or a function set on the instance
    code = getattr(create.__func__, "__code__", None)
    return code is not None and code.co_filename.startswith(_OPENAI_CODE)


def _chunk(raw: Any) -> ChatChunk | None:
    """A chunk of the stream as a ``ChatChunk`` (None when it says nothing: a role-only chunk, say).

    ``raw`` is the chunk's JSON object, or a ``ChatCompletionChunk`` when a wrapped ``create`` read it.
    """
    data = raw.model_dump() if hasattr(raw, "model_dump") else raw
    if not isinstance(data, Mapping):
        raise ModelAPIError(
            f"the stream sent a chunk that is not a JSON object: {str(data)[:200]}", status_code=None, body=data
        )
    content = refusal = ""
    calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    for choice in data.get("choices") or ():
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        if delta is not None:
            content = delta.get("content") or ""
            refusal = delta.get("refusal") or ""
            calls = tuple(_call_delta(position, call) for position, call in enumerate(delta.get("tool_calls") or ()))
        finish_reason = choice.get("finish_reason")
    reported = data.get("usage")
    usage = (
        None
        if reported is None
        else TokenUsage(
            prompt_tokens=reported.get("prompt_tokens") or 0,
            completion_tokens=reported.get("completion_tokens") or 0,
            total_tokens=reported.get("total_tokens") or 0,
        )
    )
    if not (content or refusal or calls or finish_reason or usage):
        return None
    return ChatChunk(content=content, refusal=refusal, tool_calls=calls, finish_reason=finish_reason, usage=usage)


def _call_delta(position: int, call: Mapping[str, Any]) -> ToolCallDelta:
    index = call.get("index")
    function = call.get("function")
    return ToolCallDelta(
        index=index if isinstance(index, int) else position,  # some servers leave it out: their order, then
        id=call.get("id") or None,
        name=(function.get("name") or None) if function is not None else None,
        arguments=(function.get("arguments") or "") if function is not None else "",
    )
