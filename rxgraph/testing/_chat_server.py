"""A local OpenAI-compatible Chat Completions server that answers from a script: ``ChatCompletionsServer``.

It speaks the wire format of the Chat Completions API (``POST /v1/chat/completions``, streamed as server-sent events
or not), refuses with HTTP 400 and an OpenAI-shaped error body whatever a strict endpoint would refuse, records every
request, and tells for every answer whether it was completed or whether the client went away first. It runs on
Starlette and uvicorn (the ``serve`` extra) and checks requests with the ``openai`` package's own request types (the
``openai`` extra); both are imported when a server starts, so importing ``rxgraph.testing`` needs neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from ..errors import ConfigurationError, InvalidArgumentError, InvalidTypeError
from ..messages._rules import request_violations
from ..messages._types import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

__all__ = [
    "ChatCompletionsServer",
    "Cut",
    "ErrorReply",
    "Gate",
    "Outcome",
    "Pause",
    "Refusal",
    "Reply",
    "ServedRequest",
    "StreamedCall",
]

Outcome = Literal["pending", "completed", "aborted", "rejected", "failed", "stopped", "cut"]
"""How a request ended: ``pending`` (not yet), ``completed`` (the whole answer was sent), ``aborted`` (the client went
away before the answer was complete), ``rejected`` (refused as invalid: HTTP 400), ``failed`` (answered with an
``ErrorReply``, or no reply was left in the script), ``stopped`` (the server stopped while answering) or ``cut`` (the
server cut the answer short where its ``Cut`` said)."""


# -- the script ------------------------------------------------------------------------------------------------


class StreamedCall:
    """A tool call in a ``Reply``, streamed as OpenAI streams one: a first chunk with its ``index`` (its place among
    the reply's calls), ``id``, ``type: "function"``, ``function.name`` and empty ``arguments``, then the arguments
    in ``pieces`` chunks (none when they are empty). Several calls in one reply are parallel calls."""

    __slots__ = ("arguments", "id", "name", "pieces")

    def __init__(self, id: str, name: str, arguments: str = "{}", *, pieces: int = 2) -> None:
        if not isinstance(id, str) or not id or not isinstance(name, str) or not isinstance(arguments, str):
            raise InvalidTypeError("a StreamedCall needs a non-empty str id, a str name and str arguments")
        if isinstance(pieces, bool) or not isinstance(pieces, int) or pieces < 1:
            raise InvalidArgumentError(f"pieces must be an int of at least 1, got {pieces!r}", argument="pieces")
        self.id = id
        self.name = name
        self.arguments = arguments
        self.pieces = pieces

    def argument_pieces(self) -> list[str]:
        """The arguments cut into (at most) ``pieces`` consecutive pieces, as they are streamed."""
        text = self.arguments
        if not text:
            return []
        size = -(-len(text) // self.pieces)
        return [text[i : i + size] for i in range(0, len(text), size)]

    def __repr__(self) -> str:
        return f"StreamedCall({self.id!r}, {self.name!r}, {self.arguments!r}, pieces={self.pieces})"


class Refusal:
    """A piece of refusal text in a ``Reply``, streamed as ``delta.refusal``."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise InvalidTypeError(f"a Refusal holds a str, got {type(text).__name__}")
        self.text = text

    def __repr__(self) -> str:
        return f"Refusal({self.text!r})"


class Pause:
    """A pause in a ``Reply``: the server waits ``seconds`` (on its own event loop) before its next chunk."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise InvalidArgumentError(f"a Pause needs seconds >= 0, got {seconds!r}", argument="seconds")
        self.seconds = float(seconds)

    def __repr__(self) -> str:
        return f"Pause({self.seconds})"


class Gate:
    """A point in a ``Reply`` where the server stops until the test opens the gate.

    ``reached`` is set when an answer first arrives at the gate (everything before it has been sent), ``arrivals``
    counts the answers that did; ``wait_for_arrivals(n)`` waits for ``n`` of them. ``open()`` lets every answer
    waiting at it, and every later one, go on. A gate that is never opened holds the answer open until the client
    goes away or the server stops: the way to test a client that gives up while the model is still generating.
    """

    __slots__ = ("_arrived", "_opened", "_waiters", "arrivals", "reached")

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.arrivals = 0
        self._arrived = threading.Condition()
        self._opened = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def opened(self) -> bool:
        """Whether ``open()`` was called."""
        return self._opened

    def open(self) -> None:
        """Let the answers go on (from any thread)."""
        with self._arrived:
            self._opened = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: the server stopped
                loop.call_soon_threadsafe(_resolve, future)

    def wait_for_arrivals(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``count`` answers have arrived at the gate.

        Raises:
            AssertionError: they had not within ``timeout`` seconds.
        """
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.arrivals >= count, timeout):
                raise AssertionError(f"{self.arrivals} answers arrived at the gate within {timeout} s, not {count}")

    async def _pass(self) -> None:
        """Wait on the server's loop until the gate is open."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._arrived:
            self.arrivals += 1
            self._arrived.notify_all()
            opened = self._opened
            if not opened:
                self._waiters.append((loop, future))
        self.reached.set()
        if not opened:
            await future

    def __repr__(self) -> str:
        return f"Gate(arrivals={self.arrivals}, opened={self._opened})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


CutHow = Literal["end", "done", "drop"]
"""How a ``Cut`` ends the response (see ``Cut``)."""


class Cut:
    """The last step of a ``Reply`` that never finishes: the answer stops there, before the chunk with the
    ``finish_reason`` (and the ``usage`` chunk), as when the model's server crashes, a proxy times out or a load
    balancer drops the connection. ``how`` says what the client reads then:

    - ``"end"`` (default): the HTTP response ends properly (its chunked body is complete) without ``data: [DONE]``;
      the client's HTTP layer sees nothing wrong, only the missing ``finish_reason`` tells;
    - ``"done"``: ``data: [DONE]`` is sent first, as a server that ends every stream with it does;
    - ``"drop"``: the first half of the event that would have come next is sent, then the connection is closed in
      the middle of the body: the client's HTTP layer reads a chunked body that never ended.

    The request's outcome is ``"cut"``. A non-streamed answer with a ``Cut`` stops halfway through its JSON body and
    its connection is closed, whatever ``how`` says.

    Raises:
        InvalidArgumentError: ``how`` is none of ``"end"``, ``"done"``, ``"drop"``.
    """

    __slots__ = ("how",)

    def __init__(self, how: CutHow = "end") -> None:
        if how not in ("end", "done", "drop"):
            raise InvalidArgumentError(f"a Cut's how is 'end', 'done' or 'drop', got {how!r}", argument="how")
        self.how: CutHow = how

    def __repr__(self) -> str:
        return f"Cut({self.how!r})"


ReplyStep = str | StreamedCall | Refusal | Pause | Gate | Cut
"""What a ``Reply`` is made of: a ``str`` is one chunk of text."""


class Reply:
    """One scripted answer: its steps in order, streamed one chunk each (a ``str`` is a chunk of text; see
    ``StreamedCall``, ``Refusal``, ``Pause``, ``Gate``; a ``Cut``, last, makes an answer that never finishes).

    ``finish_reason`` defaults to ``"tool_calls"`` when the reply has calls, else ``"stop"``. ``usage`` is
    ``(prompt_tokens, completion_tokens)``; by default the server counts a token per four characters of the request's
    messages and one per streamed piece of the answer. ``done=False`` leaves out the ``data: [DONE]`` that ends a
    streamed answer (some servers do; the answer is complete without it).

    Raises:
        InvalidTypeError: a step is none of those types, or ``done`` is not a bool.
        InvalidArgumentError: a ``Cut`` is not the last step, or ``usage`` is not two counts.
    """

    __slots__ = ("done", "finish_reason", "steps", "usage")

    def __init__(
        self,
        *steps: ReplyStep,
        finish_reason: str | None = None,
        usage: tuple[int, int] | None = None,
        done: bool = True,
    ) -> None:
        for position, step in enumerate(steps):
            if not isinstance(step, str | StreamedCall | Refusal | Pause | Gate | Cut):
                raise InvalidTypeError(
                    f"a Reply's steps are str, StreamedCall, Refusal, Pause, Gate or Cut, got {type(step).__name__}",
                    argument="steps",
                )
            if isinstance(step, Cut) and position != len(steps) - 1:
                raise InvalidArgumentError(
                    "a Cut ends the answer: make it the last step of the Reply", argument="steps"
                )
        if type(done) is not bool:
            raise InvalidTypeError(f"done must be a bool, got {done!r}", argument="done")
        if usage is not None and not (
            isinstance(usage, tuple) and len(usage) == 2 and all(type(n) is int and n >= 0 for n in usage)
        ):
            raise InvalidArgumentError(
                f"usage must be (prompt_tokens, completion_tokens), got {usage!r}", argument="usage"
            )
        self.steps: tuple[ReplyStep, ...] = steps
        self.finish_reason = finish_reason or (
            "tool_calls" if any(isinstance(s, StreamedCall) for s in steps) else "stop"
        )
        self.usage = usage
        self.done = done

    def __repr__(self) -> str:
        return f"Reply({', '.join(map(repr, self.steps))}, finish_reason={self.finish_reason!r})"


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


class ErrorReply:
    """A scripted failure: the server answers with HTTP ``status`` and an OpenAI-shaped error body
    ``{"error": {"message", "type", "param", "code"}}`` (``type`` by default from the status)."""

    __slots__ = ("code", "message", "param", "status", "type")

    def __init__(
        self,
        status: int,
        message: str = "scripted error",
        *,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise InvalidArgumentError(f"an error status is 400-599, got {status!r}", argument="status")
        self.status = status
        self.message = message
        self.type = type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return _error_body(self.message, self.type, self.param, self.code)

    def __repr__(self) -> str:
        return f"ErrorReply({self.status}, {self.message!r})"


def _error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


ServerScript = Iterable[Reply | ErrorReply] | Callable[[dict[str, Any]], Reply | ErrorReply]
"""The replies in the order requests take them, or a function from a request's JSON to its reply."""


# -- what the server saw ---------------------------------------------------------------------------------------


class ServedRequest:
    """One request the server received, and how its answer went.

    - ``index``: its place among the server's requests; ``body``: its JSON as sent (None when it was not JSON);
      ``headers``: its headers, names in lower case; ``stream``: whether it asked for a streamed answer; ``client``:
      the client's address ``(host, port)`` as the server saw it (two requests from one port came over one
      connection, kept alive between them).
    - ``status``: the HTTP status answered (None until then); ``error``: the error body answered, if any; ``reply``:
      the script's reply it got, if any.
    - ``outcome`` (see ``Outcome``) and ``ended``, a ``threading.Event`` set when the outcome is final (for an answer
      that completes, just before its last bytes are sent, so a client that has read it all finds it recorded);
      ``wait()`` waits for it. ``chunks_sent`` counts the streamed chunks (``data:`` events before ``[DONE]``) sent
      so far; ``wait_for_chunks(n)`` waits until that many were sent.
    """

    def __init__(
        self, index: int, body: Any, headers: Mapping[str, str], client: tuple[str, int] | None = None
    ) -> None:
        self.index = index
        self.body = body
        self.headers = dict(headers)
        self.client = client
        self.stream = isinstance(body, dict) and body.get("stream") is True
        self.status: int | None = None
        self.error: dict[str, Any] | None = None
        self.reply: Reply | ErrorReply | None = None
        self.outcome: Outcome = "pending"
        self.chunks_sent = 0
        self.ended = threading.Event()
        self._progress = threading.Condition()

    @property
    def messages(self) -> list[Any]:
        """The request's ``messages``, as sent."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return list(messages) if isinstance(messages, list) else []

    def wait(self, timeout: float = 5.0) -> Outcome:
        """Wait until the answer has ended and return its ``outcome``.

        Raises:
            AssertionError: it did not end within ``timeout`` seconds.
        """
        if not self.ended.wait(timeout):
            raise AssertionError(
                f"request #{self.index} did not end within {timeout} s ({self.chunks_sent} chunks sent)"
            )
        return self.outcome

    def wait_for_chunks(self, count: int, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` chunks were sent.

        Raises:
            AssertionError: they were not within ``timeout`` seconds (or the answer ended with fewer).
        """
        with self._progress:
            done = self._progress.wait_for(lambda: self.chunks_sent >= count or self.ended.is_set(), timeout)
        if not done or self.chunks_sent < count:
            raise AssertionError(
                f"request #{self.index}: {self.chunks_sent} chunks sent, not {count} (outcome {self.outcome})"
            )

    def _sent(self) -> None:
        with self._progress:
            self.chunks_sent += 1
            self._progress.notify_all()

    def _end(self, outcome: Outcome) -> None:
        with self._progress:
            if self.outcome == "pending":
                self.outcome = outcome
            self.ended.set()
            self._progress.notify_all()

    def __repr__(self) -> str:
        return f"ServedRequest(#{self.index}, status={self.status}, outcome={self.outcome!r})"


# -- checking a request as a strict endpoint would ------------------------------------------------------------


class _Validators:
    """The ``openai`` package's request types as pydantic validators, unknown keys refused."""

    def __init__(self) -> None:
        from openai.types.chat import (
            ChatCompletionAssistantMessageParam,
            ChatCompletionDeveloperMessageParam,
            ChatCompletionSystemMessageParam,
            ChatCompletionToolMessageParam,
            ChatCompletionUserMessageParam,
            completion_create_params,
        )
        from pydantic import ConfigDict, TypeAdapter

        strict = ConfigDict(extra="forbid")

        def adapter(kind: Any) -> TypeAdapter[Any]:
            # A list around it, because pydantic takes no config for a TypedDict itself.
            return TypeAdapter(list[kind], config=strict)

        self.messages: dict[str, TypeAdapter[Any]] = {
            "developer": adapter(ChatCompletionDeveloperMessageParam),
            "system": adapter(ChatCompletionSystemMessageParam),
            "user": adapter(ChatCompletionUserMessageParam),
            "assistant": adapter(ChatCompletionAssistantMessageParam),
            "tool": adapter(ChatCompletionToolMessageParam),
        }
        streaming = completion_create_params.CompletionCreateParamsStreaming
        plain = completion_create_params.CompletionCreateParamsNonStreaming
        self.streaming = adapter(streaming)
        self.plain = adapter(plain)
        self.keys = frozenset(streaming.__required_keys__ | streaming.__optional_keys__) | frozenset(
            plain.__required_keys__ | plain.__optional_keys__
        )


@functools.cache
def _validators() -> _Validators:
    return _Validators()


def _first_problem(adapter: TypeAdapter[Any], value: Any) -> str | None:
    """What is wrong with ``value`` for ``adapter`` (lazily validated iterables included), or None."""
    try:
        _materialize(adapter.validate_python([value]))
    except ValidationError as error:
        problems = error.errors()
        # A union reports every member's objection; the shortest location is usually the one that matters.
        first = min(problems, key=lambda p: len(p["loc"]))
        where = ".".join(str(part) for part in first["loc"][1:])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return None


def _materialize(value: Any) -> Any:
    # pydantic validates Iterable[...] fields (content parts, tool calls) only as they are iterated.
    if isinstance(value, Mapping):
        for item in value.values():
            _materialize(item)
    elif isinstance(value, list | tuple | Iterator):
        for item in value:
            _materialize(item)
    return value


def _request_problem(body: Any) -> tuple[str, str | None] | None:
    """Why a strict Chat Completions endpoint would refuse ``body`` (a message and the param it is about), or None."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object", None
    for key in ("model", "messages"):
        if key not in body:
            return f"Missing required parameter: '{key}'.", key
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array of messages.", "messages"
    validators = _validators()
    skeleton: list[Message] = []
    for i, entry in enumerate(messages):
        where = f"messages.[{i}]"
        if not isinstance(entry, dict):
            return f"{where} must be an object, got {type(entry).__name__}", where
        role = entry.get("role")
        adapter = validators.messages.get(role) if isinstance(role, str) else None
        if adapter is None or not isinstance(role, str):
            return (
                f"Invalid value: {role!r}. Supported values are: 'system', 'developer', 'user', 'assistant' and "
                "'tool'.",
                f"{where}.role",
            )
        problem = _first_problem(adapter, entry)
        if problem is not None:
            return f"Invalid {where}: {problem}", where
        if role == "assistant":
            calls = entry.get("tool_calls")
            if calls is not None and not calls:
                return f"Invalid {where}.tool_calls: [] is too short; leave the key out instead.", f"{where}.tool_calls"
            if entry.get("content") is None and not calls and entry.get("refusal") is None:
                return f"Invalid {where}: 'content' is required unless 'tool_calls' is given.", f"{where}.content"
        try:
            skeleton.append(_skeleton(role, entry))
        except ValidationError as error:
            return f"Invalid {where}: {error.errors()[0]['msg']}", where
    params = {key: value for key, value in body.items() if key in validators.keys}
    params["messages"] = []  # checked above, one by one
    problem = _first_problem(validators.streaming if body.get("stream") is True else validators.plain, params)
    if problem is not None:
        return f"Invalid request: {problem}", problem.partition(":")[0] or None
    if body.get("stream_options") is not None and body.get("stream") is not True:
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
    if not body.get("tools"):
        for key in ("tool_choice", "parallel_tool_calls"):
            if body.get(key) is not None:
                return f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.", key
    violations = request_violations(skeleton)
    if violations:
        first = violations[0]
        opening = (
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'."
            if first.rule in (1, 4)
            else "Invalid parameter: messages with role 'tool' must be a response to a preceding message with "
            "'tool_calls'."
            if first.rule == 2
            else "Invalid parameter: the message after tool messages must be an assistant message."
        )
        return f"{opening} {first}", f"messages.[{first.index}].role"
    return None


def _skeleton(role: str, entry: Mapping[str, Any]) -> Message:
    """The message as far as the sequence rules see it: its role and its call ids."""
    if role == "tool":
        return ToolMessage(tool_call_id=entry["tool_call_id"], content="")
    if role == "assistant":
        calls = tuple(ToolCall(id=call["id"], name="", arguments="") for call in entry.get("tool_calls") or ())
        return AssistantMessage(tool_calls=calls)
    if role == "user":
        return UserMessage(content="")
    return SystemMessage(content="")


# -- answering --------------------------------------------------------------------------------------------------

_ids = itertools.count(1)


class _Answer:
    """The ASGI response that plays one ``Reply``: it sends the chunks while it listens for the client going away."""

    def __init__(self, server: ChatCompletionsServer, served: ServedRequest, reply: Reply) -> None:
        self.server = server
        self.served = served
        self.reply = reply
        body = served.body
        self.model = str(body.get("model"))
        options = body.get("stream_options")
        self.with_usage = isinstance(options, dict) and options.get("include_usage") is True
        self.id = f"chatcmpl-{next(_ids):08x}"
        self.created = int(time.time())
        self.started = False
        self.client: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        served = self.served
        self.client = scope.get("client")
        producer = asyncio.ensure_future(self._stream(send) if served.stream else self._whole(send))
        listener = asyncio.ensure_future(_client_gone(receive))
        self.server._answering(producer, True)
        try:
            await asyncio.wait((producer, listener), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.server._answering(producer, False)
        if producer.done() and not producer.cancelled():
            listener.cancel()
            error = producer.exception()
            if error is not None:
                served._end("failed")
                raise error
            served._end("completed")
            return
        if not producer.done():  # the client went away
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
            served._end("aborted")
            return
        # Cancelled by the server's stop: end the response so the connection can close.
        listener.cancel()
        served._end("stopped")
        if self.started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            served.status = 503
            await _send_json(send, 503, _error_body("the server is stopping", "server_error", None, None))

    async def _start(
        self, send: Send, status: int, content_type: bytes, more_headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.served.status = status
        self.started = True
        headers = [(b"content-type", content_type), (b"cache-control", b"no-cache"), *(more_headers or ())]
        await send({"type": "http.response.start", "status": status, "headers": headers})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self.with_usage:
            chunk["usage"] = None
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    async def _stream(self, send: Send) -> None:
        served = self.served

        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})
            served._sent()

        await self._start(send, 200, b"text/event-stream; charset=utf-8")
        pieces = 0
        calls = 0
        role_sent = False
        for step in self.reply.steps:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                continue
            if isinstance(step, Gate):
                await step._pass()
                continue
            if isinstance(step, Cut):  # the last step: nothing after it is sent
                await self._cut(send, step, self._chunk({}, self.reply.finish_reason))
                return
            if isinstance(step, StreamedCall):
                head: dict[str, Any] = {
                    "index": calls,
                    "id": step.id,
                    "type": "function",
                    "function": {"name": step.name, "arguments": ""},
                }
                delta: dict[str, Any] = {"tool_calls": [head]}
                if not role_sent:  # as OpenAI does when an answer starts with a call
                    delta = {"role": "assistant", "content": None, "tool_calls": [head], "refusal": None}
                    role_sent = True
                await emit(self._chunk(delta))
                for piece in step.argument_pieces():
                    await emit(self._chunk({"tool_calls": [{"index": calls, "function": {"arguments": piece}}]}))
                    pieces += 1
                calls += 1
                continue
            if not role_sent:
                await emit(self._chunk({"role": "assistant", "content": "", "refusal": None}))
                role_sent = True
            if isinstance(step, Refusal):
                await emit(self._chunk({"refusal": step.text}))
            else:
                await emit(self._chunk({"content": step}))
            pieces += 1
        if not role_sent:
            await emit(self._chunk({"role": "assistant", "content": "", "refusal": None}))
        await emit(self._chunk({}, self.reply.finish_reason))
        if self.with_usage:
            usage = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": None,
                "choices": [],
                "usage": self._usage(pieces),
            }
            await emit(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
        served._end("completed")  # before the last byte: a client that has the whole answer finds it recorded
        last = b"data: [DONE]\n\n" if self.reply.done else b""
        await send({"type": "http.response.body", "body": last, "more_body": False})

    async def _cut(self, send: Send, cut: Cut, following: bytes) -> None:
        """End the answer short, as ``cut`` says; ``following`` is what would have been sent next."""
        self.served._end("cut")  # before the last bytes, as for a completed answer
        if cut.how != "drop":
            last = b"data: [DONE]\n\n" if cut.how == "done" else b""
            await send({"type": "http.response.body", "body": last, "more_body": False})
            return
        await send({"type": "http.response.body", "body": following[: len(following) // 2], "more_body": True})
        if self.server._drop(self.client):
            # Wait here: the listener hears the connection close and ends the answer. Returning first would have
            # uvicorn find a response left unfinished on an open connection, which it logs as an error.
            await asyncio.get_running_loop().create_future()
        # No connection found to close (another uvicorn): returning with the body unfinished has uvicorn close it.

    async def _whole(self, send: Send) -> None:
        text: list[str] = []
        refusal: list[str] = []
        calls: list[dict[str, Any]] = []
        pieces = 0
        for step in self.reply.steps:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Gate):
                await step._pass()
            elif isinstance(step, Cut):
                break  # the last step: cut below, once the answer's body is known
            elif isinstance(step, StreamedCall):
                calls.append(
                    {"id": step.id, "type": "function", "function": {"name": step.name, "arguments": step.arguments}}
                )
                pieces += len(step.argument_pieces())
            elif isinstance(step, Refusal):
                refusal.append(step.text)
                pieces += 1
            else:
                text.append(step)
                pieces += 1
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(text) if text or not (calls or refusal) else None,
            "refusal": "".join(refusal) if refusal else None,
            "annotations": [],
        }
        if calls:
            message["tool_calls"] = calls
        completion = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.reply.finish_reason}],
            "usage": self._usage(pieces),
        }
        cut = self.reply.steps[-1] if self.reply.steps else None
        if isinstance(cut, Cut):
            body = json.dumps(completion, separators=(",", ":")).encode()
            await self._start(send, 200, b"application/json", [(b"content-length", str(len(body)).encode())])
            await self._cut(send, Cut("drop"), body)
            return
        self.served.status = 200
        self.started = True
        self.served._end("completed")  # before the answer's bytes, as in _stream
        await _send_json(send, 200, completion)

    def _usage(self, pieces: int) -> dict[str, int]:
        if self.reply.usage is not None:
            prompt, completion = self.reply.usage
        else:
            prompt = len(json.dumps(self.served.body.get("messages"))) // 4
            completion = pieces
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _client_gone(receive: Receive) -> None:
    """Return when the client has gone away (the ASGI ``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json(send: Send, status: int, content: Any) -> None:
    body = json.dumps(content, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Refusal:
    """The ASGI response of a request answered with an error body."""

    def __init__(self, served: ServedRequest, status: int, body: dict[str, Any], outcome: Outcome) -> None:
        self.served = served
        self.status = status
        self.body = body
        self.outcome = outcome
        served.status = status
        served.error = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.served._end(self.outcome)  # before the answer's bytes: a client that has it finds it recorded
        await _send_json(send, self.status, self.body)


# -- the server -------------------------------------------------------------------------------------------------


class ChatCompletionsServer:
    """A local OpenAI-compatible Chat Completions server answering from a script, for tests and benchmarks.

    ::

        script = [Reply("Hel", "lo"), Reply(StreamedCall("c1", "weather", '{"city": "Paris"}'))]
        with ChatCompletionsServer(script) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test")
            ...
            assert server.requests[0].wait() == "completed"

    It listens on 127.0.0.1, on a free port, from a thread of its own (started by ``start()`` or ``with``, stopped
    by ``stop()`` or the end of the ``with``: the port is closed and the thread gone when it returns). ``POST
    /v1/chat/completions`` answers:

    - with HTTP 400 and an OpenAI-shaped error body (``{"error": {"message", "type", "param", "code"}}``) a request
      a strict endpoint refuses: one that does not validate against the ``openai`` package's request types with
      unknown keys refused (a ``name`` on a tool message, an unknown role, a mistyped field...), an assistant message
      with ``tool_calls`` not followed by tool messages answering each id, a tool message answering no pending call,
      a user or system message right after tool messages, ``stream_options`` without ``stream``, ``tool_choice`` or
      ``parallel_tool_calls`` without ``tools``. Top-level keys the API does not have (``extra_body``'s) are
      accepted, as vLLM, Ollama and DashScope accept theirs. A refused request takes no reply from the script.
    - otherwise with the script's next reply (or ``script(body)``, when the script is a function), in the API's
      format: streamed as server-sent events when ``stream`` is true (a first chunk with the role, a chunk per text
      piece, tool calls as OpenAI splits them, a last chunk with ``finish_reason``, the ``usage`` chunk when
      ``stream_options.include_usage`` is true, then ``data: [DONE]``), else as one ``chat.completion`` object. An
      ``ErrorReply`` answers its status and error body; with no reply left, the answer is a 500. A reply that ends
      with a ``Cut`` stops before its ``finish_reason``, the way ``Cut`` says: a stream cut short.

    Every request is recorded (``requests``, ``request(i)``) as a ``ServedRequest``: its JSON, its status, and whether
    its answer was completed or ``aborted`` because the client went away first (seen when the connection closes,
    even while the answer waits at a ``Gate``), with a ``threading.Event`` to wait on. Answers are played on the
    server's event loop: ``Pause`` steps sleep there, ``Gate`` steps wait there; tests synchronise on
    ``Gate.reached``, ``ServedRequest.wait_for_chunks``, ``ServedRequest.ended``.

    Args:
        script: the replies in the order requests take them, or a function from a request's JSON to its reply
            (called on the server's loop: keep it quick).
        keep_alive: whole seconds an idle connection is kept open (uvicorn's default, 5). Under load a client may
            reuse a pooled connection it read from late, which a server that closes idle ones as soon as the client
            would has just closed: give it longer than the clients keep theirs.

    Raises:
        InvalidArgumentError: ``keep_alive`` is not a whole number of at least 1.
        ConfigurationError: (from ``start``) the ``serve`` or ``openai`` extra is not installed, or the server did
            not start.
    """

    def __init__(self, script: ServerScript = (), *, keep_alive: int = 5) -> None:
        if isinstance(keep_alive, bool) or not isinstance(keep_alive, int) or keep_alive < 1:
            raise InvalidArgumentError(
                f"keep_alive must be a whole number of seconds, at least 1, got {keep_alive!r}", argument="keep_alive"
            )
        self._keep_alive = keep_alive
        if callable(script):
            self._next: Callable[[dict[str, Any]], Reply | ErrorReply | None] = script
        else:
            replies = list(script)
            for reply in replies:
                if not isinstance(reply, Reply | ErrorReply):
                    raise InvalidTypeError(
                        f"a script holds Reply and ErrorReply values, got {type(reply).__name__}", argument="script"
                    )
            queue = iter(replies)
            self._next = lambda _body: next(queue, None)
        self._requests: list[ServedRequest] = []
        self._arrivals = threading.Condition()
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._producers: set[asyncio.Future[None]] = set()
        self._stopping = False
        self._port: int | None = None
        self._uvicorn: Any = None

    # -- what tests read ---------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: what to give an OpenAI client as its ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def port(self) -> int:
        """The port it listens on.

        Raises:
            ConfigurationError: the server was never started.
        """
        if self._port is None:
            raise ConfigurationError("the server has not been started: use it in a with block, or call start()")
        return self._port

    @property
    def requests(self) -> list[ServedRequest]:
        """Every request received so far, in the order they arrived."""
        with self._arrivals:
            return list(self._requests)

    def request(self, index: int, timeout: float = 5.0) -> ServedRequest:
        """The ``index``-th request (from 0), once it has arrived.

        Raises:
            AssertionError: it did not arrive within ``timeout`` seconds.
        """
        with self._arrivals:
            if not self._arrivals.wait_for(lambda: len(self._requests) > index, timeout):
                raise AssertionError(f"request #{index} did not arrive within {timeout} s ({len(self._requests)} did)")
            return self._requests[index]

    # -- starting and stopping ---------------------------------------------------------------------------------

    def start(self) -> ChatCompletionsServer:
        """Start serving on a free port of 127.0.0.1; returns when it accepts connections.

        Raises:
            ConfigurationError: the extras are missing, the server was started before, or it did not start.
        """
        if self._thread is not None:
            raise ConfigurationError("a ChatCompletionsServer starts once; make a new one")
        try:
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401

            _validators()
        except ImportError as error:
            raise ConfigurationError(
                "ChatCompletionsServer needs the serve and openai extras (pip install 'rxgraph[serve,openai]'): "
                f"{error}"
            ) from error
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self._port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name=f"chat-completions-{self._port}", daemon=True)
        self._thread.start()
        if not self._started.wait(30) or self._failure is not None:
            self.stop()
            raise ConfigurationError(f"the chat completions server did not start: {self._failure!r}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: answers still running end (``stopped``), connections close, the port is released and the
        thread is gone when this returns. Stopping again does nothing.

        Raises:
            ConfigurationError: the server's thread did not end within ``timeout`` seconds.
        """
        thread = self._thread
        if thread is None:
            return
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(self._begin_stop, stop_event)
        thread.join(timeout)
        if thread.is_alive():
            raise ConfigurationError(f"the chat completions server did not stop within {timeout} s")
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> ChatCompletionsServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.base_url if self._port is not None else "not started"
        return f"ChatCompletionsServer({where}, {len(self._requests)} requests)"

    # -- on the server's thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # uvicorn exits with SystemExit when it cannot start
            self._failure = error
        finally:
            self._started.set()

    async def _serve(self) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        server = _uvicorn_server(app, self._started, self._stop_event, self._producers, self._keep_alive)
        self._uvicorn = server
        assert self._socket is not None
        await server.serve(sockets=[self._socket])

    def _begin_stop(self, stop_event: asyncio.Event) -> None:
        self._stopping = True
        for producer in list(self._producers):
            producer.cancel()
        stop_event.set()

    def _drop(self, client: Any) -> bool:
        """Close the connection of the client at ``client`` (its address), on the server's loop, in the middle of
        its response: what has been sent is delivered, then the connection ends. Returns whether it found it."""
        if self._uvicorn is None or client is None:
            return False
        for connection in list(self._uvicorn.server_state.connections):
            # uvicorn's protocols (h11 and httptools alike) keep the peer's address and their transport.
            transport = getattr(connection, "transport", None)
            if getattr(connection, "client", None) == tuple(client) and transport is not None:
                transport.close()
                return True
        return False

    def _answering(self, producer: asyncio.Future[None], running: bool) -> None:
        if not running:
            self._producers.discard(producer)
        elif self._stopping:
            producer.cancel()
        else:
            self._producers.add(producer)

    async def _chat(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        with self._arrivals:
            peer = request.client
            served = ServedRequest(len(self._requests), body, request.headers, (peer.host, peer.port) if peer else None)
            self._requests.append(served)
            self._arrivals.notify_all()
        if body is None:
            message = "We could not parse the JSON body of your request: it must be a JSON object."
            return _Refusal(served, 400, _error_body(message, "invalid_request_error", None, None), "rejected")
        problem = _request_problem(body)
        if problem is not None:
            message, param = problem
            return _Refusal(served, 400, _error_body(message, "invalid_request_error", param, None), "rejected")
        reply = self._next(body)
        served.reply = reply
        if reply is None:
            message = f"the script has no reply left for request #{served.index}"
            return _Refusal(served, 500, _error_body(message, "server_error", None, None), "failed")
        if isinstance(reply, ErrorReply):
            return _Refusal(served, reply.status, reply.body(), "failed")
        return _Answer(self, served, reply)


def _uvicorn_server(
    app: Any,
    started: threading.Event,
    stop_event: asyncio.Event,
    producers: set[asyncio.Future[None]],
    keep_alive: int,
) -> Any:
    """A uvicorn server that says when it listens, waits for ``stop_event`` instead of polling, and shuts down as
    soon as its connections are closed (uvicorn's own waits in steps of 0.1 s)."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            started.set()

        async def main_loop(self) -> None:
            await self.on_tick(0)
            await stop_event.wait()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            for listener in self.servers:
                listener.close()
            for sock in sockets or ():
                sock.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0
            while (self.server_state.connections or self.server_state.tasks or producers) and loop.time() < deadline:
                await asyncio.sleep(0.001)
            for task in list(self.server_state.tasks):
                task.cancel()
            for listener in self.servers:
                await listener.wait_closed()

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        log_config=None,  # leave the process's logging alone
        log_level=None,
        access_log=False,
        lifespan="off",
        loop="asyncio",
        backlog=2048,
        timeout_keep_alive=keep_alive,
    )
    return _Server(config)
