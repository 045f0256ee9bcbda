"""The processes of the ``serve`` benchmark: ``python -m benchmarks._serve_app ROLE ...``.

- ``model``: a local OpenAI-compatible model server (``rxgraph.testing.ChatCompletionsServer``) that answers a user
  message with a tool call and a tool answer with a short streamed text.
- ``rxgraph``: ``rxgraph.serve.create_app`` for a ``ReactAgent`` (``OpenAIChatModel`` on that model server, one
  tool, ``SqliteSaver``) on uvicorn: LangGraph's server API, the agent as the assistant ``agent``.
- ``langgraph``: LangGraph's prebuilt ReAct agent (``ChatOpenAI`` on that model server, the same tool,
  ``AsyncSqliteSaver``) behind an equivalent Starlette SSE endpoint, on uvicorn: ``POST /threads/{id}/runs/stream``
  with ``{"input": TEXT}``, a ``chunk`` event per streamed message chunk, then ``end`` (or ``error``, with the
  exception's type and message, for a turn that failed).
- ``bare``: the floor, a Starlette SSE endpoint on uvicorn that only forwards the model's streams, with no graph and
  no storage: the same route and body as ``langgraph``'s; it streams the user's message to the model with the
  tool's schema (the async ``openai`` client, ``max_retries=0``, the token usage asked for as the agents ask for
  it: ``STREAM_USAGE``), forwarding each model chunk as a ``chunk`` event, calls the tool with the streamed call's
  arguments and sends its text as a ``chunk`` event, streams the second request (the user's message, the
  assistant's tool call, the tool's answer) the same way, then sends ``end`` with the answer's text (or ``error``,
  as ``langgraph``'s). The SSE text is written by hand on a ``StreamingResponse``.

Each prints ``port N`` on its first line once it listens on 127.0.0.1, and runs until its stdin closes. The three
app servers also answer ``GET /_stall?start=1``, which starts a 2 ms timer on their event loop, and ``GET /_stall``,
which stops it and answers its longest delay (and 99th percentile) since the start — how long the loop was kept from
serving anything else — so that a server idle between its rounds spends nothing on being watched.

All three servers keep an idle connection open for ``KEEP_ALIVE`` seconds, far longer than their clients keep one
(httpx: 5 s), so that only a client ever closes an idle connection (see ``KEEP_ALIVE``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, cast

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOOL_ARGUMENTS = '{"city": "Paris"}'
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
"""The tool as the bare endpoint declares it to the model (the agents declare it from ``weather``'s signature)."""
KEEP_ALIVE = 120
"""Seconds the servers keep an idle keep-alive connection open (uvicorn's default is 5 s).

With 5 s on both ends, a server closes connections its client still takes for fresh: the server's clock starts when
it has sent a response, the client's when it has read it, and under this load a client's event loop reads seconds
late (rxgraph's model client, on its own loop, was seen 1 to 2 s late), and may also take seconds between choosing
an idle connection and writing the request on it. A request written on a connection the server has just closed
fails (``httpx.ReadError``), and the model clients here never retry: such a turn ended with an ``error`` event
(``ModelAPIError``, "no connection: ReadError('')") — a failure of the benchmark's wiring, not of the system under
test. A server that keeps idle connections longer than any client leaves the closing to the client, which checks a
connection before it reuses one."""
ANSWER = ("It is ", "sunny ", "in Paris ", "today.")
STREAM_USAGE = True
"""Every side asks the model for the same stream: with the token usage in a last chunk (``stream_options``'
``include_usage``), as rxgraph's ``OpenAIChatModel`` does by default, and langchain-openai's ``ChatOpenAI`` does
by default against OpenAI's own API (not against another base URL, as here, so it is asked to). The bare endpoint
asks for it too, and skips that chunk, which has no choices."""


class LoopWatch:
    """Counts the saver and tool calls of the app, and those made on the event loop's thread (each one a stall
    caused by saver I/O or by a tool)."""

    def __init__(self) -> None:
        self.loop_thread = 0
        self._lock = threading.Lock()
        self.calls = {"saver": 0, "tool": 0}
        self.on_loop = {"saver": 0, "tool": 0}
        self.longest_on_loop_ms = 0.0

    def call(self, kind: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        on_loop = threading.get_ident() == self.loop_thread
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self.calls[kind] += 1
                if on_loop:
                    self.on_loop[kind] += 1
                    self.longest_on_loop_ms = max(self.longest_on_loop_ms, 1000 * (time.perf_counter() - started))

    def report(self) -> dict[str, Any]:
        with self._lock:
            report = {
                "calls": dict(self.calls),
                "on_loop": dict(self.on_loop),
                "longest_on_loop_ms": self.longest_on_loop_ms,
            }
            self.calls = dict.fromkeys(self.calls, 0)
            self.on_loop = dict.fromkeys(self.on_loop, 0)
            self.longest_on_loop_ms = 0.0
        return report


WATCH = LoopWatch()


def weather(city: str) -> str:
    """Current weather for a city."""
    return WATCH.call("tool", lambda: f"Sunny in {city}")


def _reply(body: dict[str, Any]) -> Any:
    from rxgraph.testing import Reply, StreamedCall

    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(*ANSWER)
    return Reply(StreamedCall(f"call_{abs(hash(last.get('content', ''))) % 10**8}", "weather", TOOL_ARGUMENTS))


def _in_saver_or_tool(stack: list[str]) -> bool:
    """Whether a sampled stack of the loop thread is in the saver's code, in ``sqlite3``, or in the tool."""
    return any("rxgraph/checkpoint/" in line or "/sqlite3/" in line or line.endswith(" weather") for line in stack)


class StallMonitor:
    """ASGI middleware that measures how late a 2 ms timer fires on the event loop, and reports it at ``/_stall``.

    A watchdog thread samples the loop thread's stack while the timer is more than ``sample_after`` late, so each
    long stall comes with where the loop was. A stall is put down to the saver or a tool when a sample finds the loop
    in the saver's code, in ``sqlite3`` or in the tool; ``LoopWatch`` counts such calls exactly.
    """

    period = 0.002
    sample_after = 0.005

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.lags: list[float] = []
        self.episodes: dict[int, float] = {}
        self.samples: dict[int, list[list[str]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._watching = threading.Event()  # the sampler thread runs while it is set
        self._beat = (0, time.perf_counter())
        self._sampler_cpu = [0.0]  # the CPU seconds of the current round's sampler thread so far

    def _start(self) -> None:
        self._stop()
        self.lags, self.episodes, self.samples = [], {}, {}
        self._sampler_cpu = [0.0]  # a new one for each sampler thread: one that is ending keeps its own
        WATCH.report()  # the counts start from here too
        self._beat = (0, time.perf_counter())
        self._watching = threading.Event()
        self._watching.set()
        self._task = asyncio.get_running_loop().create_task(self._watch(self._watching))

    def _stop(self) -> None:
        self._watching.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self, watching: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        WATCH.loop_thread = threading.get_ident()
        threading.Thread(target=self._sample, args=(watching, self._sampler_cpu), daemon=True).start()
        count = 0
        while True:
            count += 1
            before = loop.time()
            self._beat = (count, time.perf_counter())
            await asyncio.sleep(self.period)
            lag = max(0.0, loop.time() - before - self.period)
            self.lags.append(lag)
            if lag > self.sample_after:
                self.episodes[count] = lag

    def _sample(self, watching: threading.Event, cpu: list[float]) -> None:
        # Cheap on purpose (no source lines read): it competes for the same interpreter as the loop it watches. Its
        # own CPU time is kept (``monitor_cpu_s``): the benchmark takes it off the server's, as the monitor is
        # not the server's work, and costs more where the loop lags more (it then samples every 2 ms).
        started = time.thread_time()
        while watching.is_set():
            time.sleep(0.002)
            cpu[0] = time.thread_time() - started
            count, beat = self._beat
            if time.perf_counter() - beat - self.period > self.sample_after:
                frame = sys._current_frames().get(WATCH.loop_thread)
                stack: list[str] = []
                while frame is not None:
                    stack.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
                    frame = frame.f_back
                if stack:
                    self.samples.setdefault(count, []).append(stack[::-1])

    def report(self) -> dict[str, Any]:
        lags, self.lags = sorted(self.lags), []
        episodes, self.episodes = self.episodes, {}
        samples, self.samples = self.samples, {}
        ours = [lag for count, lag in episodes.items() if any(map(_in_saver_or_tool, samples.get(count, ())))]
        longest = max(episodes, key=episodes.__getitem__, default=None)
        where = "no stall"
        if longest is not None:
            stacks = samples.get(longest)
            where = stacks[-1][-1].rsplit("/", 1)[-1] if stacks else "not sampled"
        return {
            "max_ms": 1000 * lags[-1] if lags else 0.0,
            "p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
            "ours_max_ms": 1000 * max(ours, default=0.0),
            "longest_where": where,
            "monitor_cpu_s": self._sampler_cpu[0],
            **WATCH.report(),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/_stall":
            if b"start" in scope.get("query_string", b""):
                self._start()
                payload = b"{}"
            else:
                self._stop()
                payload = json.dumps(self.report()).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        await self.app(scope, receive, send)


def _rxgraph_app(model_url: str, db: str) -> ASGIApp:
    import builtins

    import openai

    from rxgraph.agent import ReactAgent, tool
    from rxgraph.checkpoint import Checkpoint, SqliteSaver
    from rxgraph.models.openai import OpenAIChatModel
    from rxgraph.serve import create_app
    from rxgraph.testing import DelegatingSaver

    class WatchedSaver(DelegatingSaver):
        def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
            return WATCH.call("saver", super().get, thread_id, checkpoint_id)  # type: ignore[no-any-return]

        def list(self, thread_id: str, **kwargs: Any) -> builtins.list[Checkpoint]:
            return WATCH.call("saver", super().list, thread_id, **kwargs)  # type: ignore[no-any-return]

        def put(self, checkpoint: Checkpoint, *, expected_head: str | None) -> Checkpoint:
            return WATCH.call("saver", super().put, checkpoint, expected_head=expected_head)  # type: ignore[no-any-return]

        def latest_safe(self, thread_id: str, **kwargs: Any) -> Checkpoint | None:
            return WATCH.call("saver", super().latest_safe, thread_id, **kwargs)  # type: ignore[no-any-return]

    client = openai.AsyncOpenAI(base_url=model_url, api_key="bench", max_retries=0)
    saver = WatchedSaver(SqliteSaver(db))
    agent = ReactAgent(OpenAIChatModel(client, model="bench-model"), tools=[tool(weather)], checkpointer=saver)
    return create_app(agent, page=False)


def _langgraph_app(model_url: str, db: str) -> ASGIApp:
    import contextlib

    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.prebuilt import create_react_agent
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    # the benchmark compares with the agent LangGraph documents for this; its move to another package is only a rename
    warnings.filterwarnings("ignore", message="create_react_agent has been moved")
    model = ChatOpenAI(
        base_url=model_url,
        api_key="bench",  # type: ignore[arg-type]
        model="bench-model",
        streaming=True,
        stream_usage=STREAM_USAGE,
        max_retries=0,
    )
    holder: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            holder["agent"] = create_react_agent(model, [weather], checkpointer=saver)
            yield

    async def stream(request: Request) -> EventSourceResponse:
        body = await request.json()
        config = {"configurable": {"thread_id": request.path_params["thread_id"]}}
        agent = holder["agent"]

        async def events() -> AsyncIterator[dict[str, str]]:
            try:
                async for chunk, metadata in agent.astream(
                    {"messages": [{"role": "user", "content": body["input"]}]}, config, stream_mode="messages"
                ):
                    yield {
                        "event": "chunk",
                        "data": json.dumps({"node": metadata.get("langgraph_node"), "content": chunk.content}),
                    }
            except Exception as error:  # the turn failed: its client is told why, as rxgraph's server tells its own
                yield {"event": "error", "data": json.dumps({"error": type(error).__name__, "message": str(error)})}
                return
            yield {"event": "end", "data": json.dumps({"thread_id": request.path_params["thread_id"]})}

        return EventSourceResponse(events())

    return Starlette(routes=[Route("/threads/{thread_id}/runs/stream", stream, methods=["POST"])], lifespan=lifespan)


def _call_message(call: dict[str, str]) -> dict[str, Any]:
    """A streamed tool call (its pieces joined) as the assistant message's ``tool_calls`` entry."""
    function = {"name": call["name"], "arguments": call["arguments"]}
    return {"id": call["id"], "type": "function", "function": function}


def _bare_app(model_url: str) -> ASGIApp:
    import openai
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    client = openai.AsyncOpenAI(base_url=model_url, api_key="bench", max_retries=0)

    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    async def forward(
        messages: list[dict[str, Any]], calls: dict[int, dict[str, str]], text: list[str]
    ) -> AsyncIterator[str]:
        """One streamed model request: each chunk forwarded as an event, its tool-call pieces gathered in ``calls``
        (by index) and its text in ``text``."""
        stream = await client.chat.completions.create(
            model="bench-model",
            messages=cast(Any, messages),
            tools=cast(Any, [TOOL_SCHEMA]),
            stream=True,
            stream_options={"include_usage": STREAM_USAGE},  # the agents' stream; its usage chunk is skipped below
        )
        async for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            for piece in delta.tool_calls or ():
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += piece.id or ""
                if piece.function is not None:
                    call["name"] += piece.function.name or ""
                    call["arguments"] += piece.function.arguments or ""
            text.append(delta.content or "")
            yield event("chunk", {"content": delta.content or ""})

    async def stream(request: Request) -> StreamingResponse:
        body = await request.json()

        async def events() -> AsyncIterator[str]:
            messages: list[dict[str, Any]] = [{"role": "user", "content": body["input"]}]
            try:
                calls: dict[int, dict[str, str]] = {}
                async for sent in forward(messages, calls, []):
                    yield sent
                if not calls:
                    raise RuntimeError("the model's first answer called no tool")
                messages.append({"role": "assistant", "tool_calls": [_call_message(c) for c in calls.values()]})
                for call in calls.values():
                    answer = weather(**json.loads(call["arguments"]))
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer})
                    yield event("chunk", {"content": answer})
                pieces: list[str] = []
                async for sent in forward(messages, {}, pieces):
                    yield sent
            except Exception as error:  # the turn failed: its client is told why, as the other sides tell theirs
                yield event("error", {"error": type(error).__name__, "message": str(error)})
                return
            yield event("end", {"answer": "".join(pieces)})

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/threads/{thread_id}/runs/stream", stream, methods=["POST"])])


def _serve(app: ASGIApp) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client that connects before uvicorn has started waits in the backlog
    # instead of being refused.
    sock.listen(2048)
    config = uvicorn.Config(StallMonitor(app), log_level="error", lifespan="auto", timeout_keep_alive=KEEP_ALIVE)
    server = uvicorn.Server(config)
    print(f"port {sock.getsockname()[1]}", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), setattr(server, "should_exit", True)), daemon=True).start()
    server.run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["model", "rxgraph", "langgraph", "bare"])
    parser.add_argument("--model-url", default="")
    parser.add_argument("--db", default="")
    args = parser.parse_args()
    if args.role == "model":
        from rxgraph.testing import ChatCompletionsServer

        with ChatCompletionsServer(_reply, keep_alive=KEEP_ALIVE) as server:
            print(f"port {server.port}", flush=True)
            sys.stdin.read()
        return
    if args.role == "bare":
        _serve(_bare_app(args.model_url))
    elif args.role == "rxgraph":
        _serve(_rxgraph_app(args.model_url, args.db))
    else:
        _serve(_langgraph_app(args.model_url, args.db))


if __name__ == "__main__":
    main()
