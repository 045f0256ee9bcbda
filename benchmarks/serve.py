"""serve: concurrent streaming turns through a real HTTP server: rxgraph's, LangGraph's, and a bare endpoint's.

Three processes per side (see ``_serve_app.py``): a local OpenAI-compatible model server, the app server on uvicorn,
and this one as the client. Each turn is a ReAct turn with one tool call: the model streams a tool call, the tool
answers, the model streams a four-piece answer — two model requests over HTTP, four messages stored on SQLite (none
by the bare endpoint).

- rxgraph: ``rxgraph.serve.create_app`` for a ``ReactAgent`` on ``OpenAIChatModel`` (the async ``openai`` client)
  and ``SqliteSaver``, spoken to as LangGraph's server API is by a chat client: ``POST /threads/{id}/runs/stream``
  with ``{"assistant_id": "agent", "input": {"messages": [...]}, "stream_mode": ["values", "messages-tuple"],
  "if_not_exists": "create"}`` — the thread made by the run's own request (one request per turn; a ``POST
  /threads`` first would add a second). The stream sends ``metadata``, a ``messages`` event per model chunk and tool
  message, and the state's ``values`` after each superstep (three), then closes.
- LangGraph: its prebuilt ReAct agent (``create_react_agent``) on ``ChatOpenAI`` and ``AsyncSqliteSaver``, streamed
  with ``astream(stream_mode="messages")`` behind an equivalent Starlette SSE endpoint (a ``chunk`` event per
  streamed message chunk, then ``end``). It streams no ``values``: rxgraph's side sends more per turn.
- bare endpoint, the floor: what the same turn costs at least when served over SSE. A Starlette SSE endpoint on
  uvicorn that only forwards the model's streams (the same model server, the same async ``openai`` client): it
  streams the first request (the model's tool call), answers the call with the tool's text itself (no graph, no
  agent), streams the second request (the answer), a ``chunk`` event per model chunk and one for the tool's text,
  then ``end`` with the answer's text. Nothing is stored. Its figures are the ``floor`` of the table, and rxgraph's
  in floors (rxgraph / bare) beside them: the server CPU per turn and turns per second first among them.

Every side asks the model for the same streams: the token usage comes in a last chunk of each, as rxgraph's
``OpenAIChatModel`` asks for it by default (``_serve_app.STREAM_USAGE``).

Every side's processes run for the whole benchmark and their rounds alternate, the order rotated every round
(rxgraph, bare, LangGraph; bare, LangGraph, rxgraph; LangGraph, rxgraph, bare...; without LangGraph, rxgraph and
bare alternate), so that no side is always first and the machine's drift hits all alike; an idle side's servers do
nothing meanwhile (its loop monitor is stopped). Each side first plays a warm-up round of a few turns. In a round the
client (``httpx`` on one asyncio loop, with a connection for every turn) starts ``serve_turns`` (200) turns at once,
each on a conversation thread of its own (so each is its thread's first turn), and reads each stream to its end.
Over its ``serve_rounds`` rounds a side reports:

- the median of turns per second (a round's turns over its wall time);
- the time to the first model chunk (from sending the request to the first ``messages`` event, rxgraph, or
  ``chunk`` event, LangGraph and bare), median and 95th percentile over the turns of all its rounds. rxgraph's
  stream opens with a ``metadata`` event once the run is recorded and started, before the model is called, so its
  first byte says nothing of the model (the samples keep each round's median time to it: how long a run took to
  start); before the move to LangGraph's API the first event was the first model chunk, so this is what "time to
  first byte" measured;
- the app server's CPU time per turn (its process's user + system time over a round, from ``/proc``; Linux only),
  less the CPU time of the thread that samples the stalls below (the benchmark's, not the server's: it samples
  every 2 ms while the loop lags, so its cost differs from side to side and round to round, 0.19 to 0.66 ms a
  turn in two runs);
- the longest stall, over its rounds, of the app server's event loop (from a 2 ms timer on that loop: how long it
  could not serve anything else). That loop is uvicorn's; every side's model client runs on it (rxgraph's, as the
  loop of the code that awaits its runs).

A turn completes when its answer is HTTP 200 and its stream ends with the turn's answer — rxgraph: the last
``values`` event holds the model's final message, the four pieces joined; LangGraph: an ``end`` event; bare: an
``end`` event holding the four pieces joined — with no ``error`` event and no exception in the client; the target
counts the turns of the measured rounds that did not. Each failed turn is recorded as its client saw it (the status,
the body of an answer that is not 200, the last events, the ``error`` event's body, the exception) and, on rxgraph's
side, as the server saw it (the thread's runs and their status, a failed run's error); LangGraph's and the bare
endpoints send a turn's exception as an ``error`` event. They are in the results' samples, and the printed notes
count the failed turns by reason (the warm-up's too) and describe the first few. The model clients never retry
(``max_retries=0``), so a failed model request fails its turn; the servers keep idle connections longer than their
clients do (``_serve_app.KEEP_ALIVE`` says why).

Targets: throughput at least 1.5x LangGraph's, and rxgraph's server CPU per turn at most 1.3x the bare endpoint's
(goals, reported met or NOT MET); no event-loop stall caused by saver I/O or tools; every turn completes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, median

NAME = "serve"

_ROOT = Path(__file__).resolve().parent.parent

STREAM_MODES = ["values", "messages-tuple"]
"""What a chat client streams: the messages as they are made, and the state after each superstep."""


@dataclass(frozen=True)
class Server:
    """A ``_serve_app`` process: where it listens, and the process (its id gives its CPU time)."""

    port: int
    process: subprocess.Popen[str] = field(repr=False, compare=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self, role: str) -> None:
        """Raise if the process has exited (what it said is on the benchmark's stderr, which it shares)."""
        code = self.process.poll()
        if code is not None:
            raise RuntimeError(f"the {role} server (pid {self.pid}) exited with code {code}; its stderr says why")


@contextmanager
def serve_process(role: str, *args: str, root: Path = _ROOT) -> Iterator[Server]:
    """A ``_serve_app`` process of the tree at ``root`` (its ``benchmarks`` and ``rxgraph``); stopped (its stdin
    closed) at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    # stderr is inherited: a server that fails says why where the benchmark's own errors go
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks._serve_app", role, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env=env,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            line = process.stdout.readline()
            if not line.startswith("port "):
                raise RuntimeError(f"the {role} server did not start (it printed {line!r})")
            yield Server(int(line.split()[1]), process)
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time of a process so far (nan where ``/proc`` does not say)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_LAST_EVENTS = 4
"""How many of a failed turn's last events the benchmark keeps, to say what the client saw."""


@dataclass
class Turn:
    """What the client saw of one turn: enough to say why it did not complete."""

    thread: str
    first_chunk: float = float("nan")  # seconds to the first model chunk (nan: none came)
    first_event: float = float("nan")  # seconds to the stream's first event (rxgraph: metadata, as the run starts)
    seconds: float = 0.0  # from sending the request to the end of the answer or the exception
    status: int | None = None  # the HTTP status (None: no answer came)
    events: int = 0  # events received
    last_events: list[str] = field(default_factory=list)  # the last few events, "name: data", data cut short
    error: str | None = None  # the data of an `error` event
    body: str | None = None  # the body of an answer that was not 200
    exception: str | None = None  # what the client raised (a timeout, a connection reset...)
    completed: bool = False  # the stream ended with the turn's answer
    missing: str | None = None  # what the end of a stream without the answer lacked
    server: str | None = None  # what the server says of the thread's runs (rxgraph; for a failed turn)

    @property
    def ok(self) -> bool:
        return self.completed and self.status == 200 and self.error is None and self.exception is None

    def reason(self) -> str:
        """Why the turn failed, as the client saw it."""
        if self.exception is not None:
            return f"raised {self.exception}"
        if self.status != 200:
            return f"HTTP {self.status}: {self.body}"
        if self.error is not None:
            return f"error event {self.error}"
        return f"the stream closed without the answer ({self.missing})"

    def describe(self) -> str:
        """The reason, and what else the client and the server saw."""
        last = " | ".join(self.last_events) or "none"
        server = f"; the server: {self.server}" if self.server is not None else ""
        return (
            f"{self.thread}: {self.reason()} (HTTP status {self.status}, after {self.seconds:.2f} s, "
            f"{self.events} events, the last: {last}){server}"
        )


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _answered(values: str | None) -> str | None:
    """None when a ``values`` event's state ends with the model's final answer; else what it lacks."""
    # Imported here: ``python -m benchmarks._serve_app`` must not find the module imported by the package already.
    from ._serve_app import ANSWER

    if values is None:
        return "no values event"
    try:
        messages = json.loads(values)["messages"]
        last = messages[-1]
    except (ValueError, KeyError, IndexError, TypeError) as error:
        return f"its last values event holds no messages ({type(error).__name__})"
    if last.get("type") != "ai" or last.get("tool_calls") or last.get("content") != "".join(ANSWER):
        return f"its last values event ends with {_short(json.dumps(last), 200)}"
    return None


async def _stream(
    client: Any, method: str, url: str, turn: Turn, on_event: Callable[[str, str], None], **kwargs: Any
) -> None:
    """Read a server-sent event stream to its end into ``turn`` (status, events, error, exception); never raises."""
    started = time.perf_counter()
    try:
        async with client.stream(method, url, **kwargs) as response:
            turn.status = response.status_code
            if response.status_code != 200:
                turn.body = _short((await response.aread()).decode(errors="replace"), 500)
                return
            name, data = "message", []  # the event being read (SSE: fields until a blank line)
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    payload = "\n".join(data)
                    if not turn.events:
                        turn.first_event = time.perf_counter() - started
                    turn.events += 1
                    turn.last_events = [*turn.last_events, f"{name}: {_short(payload)}"][-_LAST_EVENTS:]
                    if name == "error":
                        turn.error = _short(payload, 1000)
                    on_event(name, payload)
                    name, data = "message", []
    except Exception as error:  # a timeout, a refused or reset connection, a broken stream
        turn.exception = _short(repr(error), 500)
    finally:
        turn.seconds = time.perf_counter() - started


def run_request(text: str) -> dict[str, Any]:
    """The body of rxgraph's turn: a chat client's run on a thread it names, created by the run's request."""
    return {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": text}]},
        "stream_mode": STREAM_MODES,
        "if_not_exists": "create",
    }


async def rxgraph_turn(client: Any, url: str, thread: str, text: str) -> Turn:
    """One turn on rxgraph's server (LangGraph's API), read to its end; never raises."""
    turn = Turn(thread)
    started = time.perf_counter()
    last_values: list[str] = []

    def on_event(name: str, data: str) -> None:
        if name == "messages" and turn.first_chunk != turn.first_chunk:  # nan: the first model chunk
            turn.first_chunk = time.perf_counter() - started
        elif name == "values":
            last_values[:] = [data]

    await _stream(client, "POST", f"{url}/threads/{thread}/runs/stream", turn, on_event, json=run_request(text))
    if turn.status == 200 and turn.exception is None:
        turn.missing = _answered(last_values[0] if last_values else None)
        turn.completed = turn.missing is None
    return turn


async def langgraph_turn(client: Any, url: str, thread: str, text: str) -> Turn:
    """One turn on LangGraph's endpoint (``_serve_app``), read to its end; never raises."""
    turn = Turn(thread)
    started = time.perf_counter()

    def on_event(name: str, data: str) -> None:
        if name == "chunk" and turn.first_chunk != turn.first_chunk:
            turn.first_chunk = time.perf_counter() - started
        elif name == "end":
            turn.completed = True

    await _stream(client, "POST", f"{url}/threads/{thread}/runs/stream", turn, on_event, json={"input": text})
    if not turn.completed:
        turn.missing = "no 'end' event"
    return turn


async def bare_turn(client: Any, url: str, thread: str, text: str) -> Turn:
    """One turn on the bare endpoint (``_serve_app``), read to its end; never raises."""
    from ._serve_app import ANSWER

    turn = Turn(thread)
    started = time.perf_counter()
    ends: list[str] = []

    def on_event(name: str, data: str) -> None:
        if name == "chunk" and turn.first_chunk != turn.first_chunk:
            turn.first_chunk = time.perf_counter() - started
        elif name == "end":
            ends.append(data)

    await _stream(client, "POST", f"{url}/threads/{thread}/runs/stream", turn, on_event, json={"input": text})
    if not ends:
        turn.missing = "no 'end' event"
    elif json.loads(ends[-1]).get("answer") != "".join(ANSWER):
        turn.missing = f"its 'end' event holds {_short(ends[-1], 200)}"
    turn.completed = turn.missing is None
    return turn


async def explain(client: Any, url: str, turn: Turn) -> None:
    """What rxgraph's server says of a failed turn's thread: its runs, their status, a failed run's error."""
    try:
        answer = await client.get(f"{url}/threads/{turn.thread}/runs", params={"limit": 5})
        if answer.status_code != 200:
            turn.server = f"GET /threads/{turn.thread}/runs: HTTP {answer.status_code} {_short(answer.text, 300)}"
            return
        runs = answer.json()
        if not runs:
            turn.server = "the thread exists but has no run"
            return
        said = []
        for run in runs:
            line = f"run {run['run_id']} {run['status']}"
            if run["status"] == "error":
                joined = await client.get(f"{url}/threads/{turn.thread}/runs/{run['run_id']}/join")
                line += f": {_short(json.dumps(joined.json().get('__error__')), 500)}"
            said.append(line)
        turn.server = "; ".join(said)
    except Exception as error:
        turn.server = f"could not be asked: {_short(repr(error), 300)}"


TurnFn = Callable[[Any, str, str, str], Awaitable[Turn]]


@dataclass(frozen=True)
class Side:
    """One side under test: its app server and how a turn is played against it."""

    name: str
    app: Server
    turn: TurnFn
    explain: Callable[[Any, str, Turn], Awaitable[None]] | None = None
    model: Server | None = None


@dataclass
class Round:
    seconds: float
    turns: list[Turn]
    stall: dict[str, Any]  # the app server's /_stall report for the round
    cpu: float  # the app server's CPU seconds over the round, less its loop monitor's sampler thread's

    @property
    def first_chunk(self) -> list[float]:
        return [turn.first_chunk for turn in self.turns]

    @property
    def failed(self) -> list[Turn]:
        return [turn for turn in self.turns if not turn.ok]


async def _round(side: Side, turns: int, label: str) -> Round:
    import httpx

    limits = httpx.Limits(max_connections=turns + 10, max_keepalive_connections=turns + 10)
    try:
        return await _measured_round(side, turns, label, httpx.AsyncClient(timeout=120, limits=limits))
    except httpx.TransportError:
        side.app.check_alive(f"{side.name} app")  # a server that died is the cause, not the client's error
        if side.model is not None:
            side.model.check_alive(f"{side.name} model")
        raise


async def _measured_round(side: Side, turns: int, label: str, http: Any) -> Round:
    url = side.app.url
    async with http as client:
        await client.get(f"{url}/_stall", params={"start": "1"})  # starts (and resets) the server's loop monitor
        cpu = cpu_seconds(side.app.pid)
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                side.turn(client, url, f"{label}-{index}", f"What's the weather? ({label} {index})")
                for index in range(turns)
            )
        )
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(side.app.pid) - cpu
        stall = (await client.get(f"{url}/_stall")).json()  # the round's report; the monitor stops
        cpu -= stall["monitor_cpu_s"]  # the loop monitor's sampler thread is the benchmark's, not the server's
        if side.explain is not None:
            for turn in results:
                if not turn.ok:
                    await side.explain(client, url, turn)
    return Round(seconds, list(results), stall, cpu)


def play_round(side: Side, turns: int, label: str) -> Round:
    """One round of ``turns`` concurrent turns against ``side`` (a full collection first, in this process)."""
    gc.collect()
    return asyncio.run(_round(side, turns, label))


@contextmanager
def start_side(role: str, workdir: str) -> Iterator[Side]:
    """A side's model server and app server (``role``: rxgraph, langgraph or bare), for as long as the block runs."""
    with ExitStack() as stack:
        model = stack.enter_context(serve_process("model"))
        db = os.path.join(workdir, f"serve-{role}.db")
        app = stack.enter_context(serve_process(role, "--model-url", f"{model.url}/v1", "--db", db))
        if role == "rxgraph":
            yield Side(role, app, rxgraph_turn, explain, model)
        elif role == "bare":
            yield Side(role, app, bare_turn, model=model)
        else:
            yield Side(role, app, langgraph_turn, model=model)


def _serve_installed() -> bool:
    try:
        import httpx  # noqa: F401
        import openai  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


def rotation(sides: list[Side], index: int) -> list[Side]:
    """The order of round ``index``: the sides rotated by ``index``, so that each side leads in turn."""
    shift = index % len(sides)
    return sides[shift:] + sides[:shift]


def measure(sides: list[Side], sizes: Sizes) -> dict[str, tuple[Round, list[Round]]]:
    """Each side's warm-up round, then ``serve_rounds`` rounds each, alternating (the order rotated every round)."""
    warmups = {side.name: play_round(side, max(2, sizes.serve_turns // 20), f"{side.name}-warmup") for side in sides}
    rounds: dict[str, list[Round]] = {side.name: [] for side in sides}
    for index in range(sizes.serve_rounds):
        for side in rotation(sides, index):
            rounds[side.name].append(play_round(side, sizes.serve_turns, f"{side.name}-round{index}"))
    return {name: (warmups[name], rounds[name]) for name in rounds}


def summary(turns: int, rounds: list[Round]) -> dict[str, float]:
    """A side's figures over its measured rounds."""
    first = sorted(t for r in rounds for t in r.first_chunk if not math.isnan(t))  # a turn with no chunk has none
    return {
        "turns per second": median(turns / r.seconds for r in rounds),
        "first chunk median": 1000 * statistics.median(first) if first else math.nan,
        "first chunk p95": 1000 * first[int(0.95 * (len(first) - 1))] if first else math.nan,
        "cpu per turn": 1000 * median(r.cpu / len(r.turns) for r in rounds),
        "stall": max(r.stall["max_ms"] for r in rounds),
        "failures": float(sum(len(r.failed) for r in rounds)),
    }


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    turns = sizes.serve_turns
    result = BenchResult(
        NAME,
        f"{turns} concurrent streaming ReAct turns (one tool call) through an HTTP server",
        floor="a bare endpoint: Starlette SSE on uvicorn forwarding the same model's two streams, no graph, no storage",
    )
    if not _serve_installed():
        result.notes.append("skipped: the serve and openai extras (and httpx) are not installed")
        return result
    with ExitStack() as stack:
        sides = [stack.enter_context(start_side("rxgraph", workdir)), stack.enter_context(start_side("bare", workdir))]
        if langgraph:
            sides.append(stack.enter_context(start_side("langgraph", workdir)))
        measured = measure(sides, sizes)
    figures: dict[str, dict[str, float]] = {}
    for side, (warmup, rounds) in measured.items():
        result.notes.extend(_failure_notes(side, warmup, rounds))
        figures[side] = summary(turns, rounds)
        result.samples[side] = [
            {
                "seconds": r.seconds,
                "cpu_seconds": r.cpu,
                "monitor_cpu_seconds": r.stall["monitor_cpu_s"],
                "first_event_median": _median_of(t.first_event for t in r.turns),
                "first_chunk_median": _median_of(t.first_chunk for t in r.turns),
                "stall": r.stall,
                "failures": len(r.failed),
                "failed": [asdict(turn) for turn in r.failed],
            }
            for r in rounds
        ]
    lg = figures.get("langgraph")
    note = "" if langgraph else NOT_INSTALLED
    rx, bare = figures["rxgraph"], figures["bare"]
    for measure_name, unit, key, lower in (
        ("turns per second", "turns/s", "turns per second", False),
        ("time to first model chunk, median", "ms", "first chunk median", True),
        ("time to first model chunk, 95th percentile", "ms", "first chunk p95", True),
        ("app server CPU per turn", "ms", "cpu per turn", True),
        ("event loop's longest stall", "ms", "stall", True),
    ):
        if math.isnan(rx[key]):
            continue  # no /proc: no CPU time
        floor = None if math.isnan(bare[key]) else bare[key]
        result.figures.append(
            Figure(
                measure_name,
                unit,
                rx[key],
                lg[key] if lg else None,
                langgraph_note=note,
                lower_is_better=lower,
                floor=floor,
            )
        )
    if lg:
        ratio = rx["turns per second"] / lg["turns per second"]
        result.targets.append(
            Target(
                "serve: throughput >= 1.5x LangGraph's",
                f"{rx['turns per second']:.1f} vs {lg['turns per second']:.1f} turns/s: {ratio:.2f}x",
                ratio >= 1.5,
            )
        )
    result.targets.append(_cpu_target(rx["cpu per turn"], bare["cpu per turn"]))
    result.targets.append(_stall_target(measured["rxgraph"][1]))
    result.targets.append(
        Target(
            "serve: every turn completes (its answer streamed, no error)",
            ", ".join(f"{side}: {int(values['failures'])} failed" for side, values in figures.items()),
            not any(values["failures"] for values in figures.values()),
        )
    )
    return result


def _median_of(values: Iterable[float]) -> float:
    """The median of the values that are not nan (nan when none is)."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


_NOTED_TURNS = 5
"""How many failed turns of a side are described in the printed notes (the results' samples hold them all)."""


def _failure_notes(side: str, warmup: Round, rounds: list[Round]) -> list[str]:
    """The failed turns of a side (the warm-up's too, though they count in no figure): how many failed for each
    reason, then what the client (and rxgraph's server) saw of the first few."""
    failed = [("warm-up", turn) for turn in warmup.failed]
    failed += [(f"round {index}", turn) for index, r in enumerate(rounds) for turn in r.failed]
    if not failed:
        return []
    reasons = Counter(turn.reason() for _, turn in failed)
    notes = [f"{side}: {count} failed turn(s): {reason}" for reason, count in reasons.most_common()]
    notes += [f"{side} {where}: {turn.describe()}" for where, turn in failed[:_NOTED_TURNS]]
    if len(failed) > _NOTED_TURNS:
        notes.append(f"{side}: {len(failed) - _NOTED_TURNS} more failed turns in the results' samples")
    return notes


def _cpu_target(rxgraph: float, bare: float) -> Target:
    """rxgraph's server CPU per turn at most 1.3x the bare endpoint's (n/a where ``/proc`` gave no CPU time)."""
    goal = "serve: served turn CPU <= 1.3x the bare endpoint's"
    if math.isnan(rxgraph) or math.isnan(bare) or bare <= 0:
        return Target(goal, "no CPU time (no /proc)", None)
    ratio = rxgraph / bare
    return Target(goal, f"{rxgraph:.2f} vs {bare:.2f} ms per turn: {ratio:.2f}x", ratio <= 1.3)


def _stall_target(rounds: list[Round]) -> Target:
    """No stall above 20 ms caused by saver I/O or tools: no saver or tool call ran on the loop's thread (counted
    exactly), and no long stall was sampled with the loop in the saver's code, ``sqlite3`` or the tool."""
    calls = {kind: sum(r.stall["calls"][kind] for r in rounds) for kind in ("saver", "tool")}
    on_loop = {kind: sum(r.stall["on_loop"][kind] for r in rounds) for kind in ("saver", "tool")}
    ours = max(max(r.stall["ours_max_ms"], r.stall["longest_on_loop_ms"]) for r in rounds)
    longest = max(rounds, key=lambda r: float(r.stall["max_ms"])).stall
    measured = (
        f"on the loop: {on_loop['saver']} of {calls['saver']} saver calls, {on_loop['tool']} of {calls['tool']} tool "
        f"calls; longest stall in saver or tool code {ours:.1f} ms (longest of any cause {longest['max_ms']:.1f} ms, "
        f"loop in {longest['longest_where']})"
    )
    return Target(
        "serve: no event-loop stall above 20 ms caused by saver I/O or tools",
        measured,
        not any(on_loop.values()) and calls["saver"] > 0 and calls["tool"] > 0 and ours <= 20.0,
    )
