"""serve: concurrent streaming turns through a real HTTP server, rxgraph's and LangGraph's.

Three processes per side (see ``_serve_app.py``): a local OpenAI-compatible model server, the app server on uvicorn,
and this one as the client. Each turn is a ReAct turn with one tool call: the model streams a tool call, the tool
answers, the model streams a four-piece answer — two model requests over HTTP, four messages stored on SQLite.

- rxgraph: ``rxgraph.serve.create_app`` for a ``ReactAgent`` on ``OpenAIChatModel`` (the async ``openai`` client)
  and ``SqliteSaver``.
- LangGraph: its prebuilt ReAct agent (``create_react_agent``) on ``ChatOpenAI`` and ``AsyncSqliteSaver``, streamed
  with ``astream(stream_mode="messages")`` behind an equivalent Starlette SSE endpoint.

The sides run one after the other, rxgraph's first, each with processes of its own: a warm-up round of a few turns,
then ``serve_rounds`` rounds. In a round the client (``httpx`` on one asyncio loop, with a connection for every
turn) starts ``serve_turns`` (200) turns at once, each on a conversation thread of its own (so each is its thread's
first turn), and reads each stream to its end. A side reports the median over its rounds of turns per second (a
round's turns over its wall time); the time to first byte (from sending the request to the first line of the
streamed answer), median and 95th percentile over the turns of all its rounds; and the longest stall, over its
rounds, of the app server's event loop (from a 2 ms timer on that loop: how long it could not serve anything else).
That loop is uvicorn's: LangGraph's model client runs on it, rxgraph's on rxgraph's background loop, which is not
timed.

A turn fails unless its answer is HTTP 200 with an ``end`` event, no ``error`` event, and no exception in the client;
the target counts the failed turns of the measured rounds. Each failed turn is recorded as its client saw it (the
status, the body of an answer that is not 200, the last events, the ``error`` event's body, the exception) in the
results' samples, and the printed notes count the failed turns by reason (the warm-up's too) and describe the first
few. The model clients never retry (``max_retries=0``), so a failed model request fails its turn; the servers keep
idle connections longer than their clients do (``_serve_app.KEEP_ALIVE`` says why).
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._common import NOT_INSTALLED, BenchResult, Figure, Sizes, Target, median

NAME = "serve"

_ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def _process(role: str, *args: str) -> Iterator[int]:
    """A ``_serve_app`` process; yields its port, and stops it (closing its stdin) at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
    # stderr is inherited: a server that fails says why where the benchmark's own errors go
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks._serve_app", role, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=_ROOT,
        env=env,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            line = process.stdout.readline()
            if not line.startswith("port "):
                raise RuntimeError(f"the {role} server did not start (it printed {line!r})")
            yield int(line.split()[1])
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


_LAST_EVENTS = 4
"""How many of a failed turn's last events the benchmark keeps, to say what the client saw."""


@dataclass
class _Turn:
    """What the client saw of one turn: enough to say why it did not end."""

    thread: str
    ttfb: float = float("nan")  # seconds to the first line of the answer (nan: none came)
    seconds: float = 0.0  # from sending the request to the end of the answer or the exception
    status: int | None = None  # the HTTP status (None: no answer came)
    events: int = 0  # events received
    last_events: list[str] = field(default_factory=list)  # the last few events, "name: data", data cut short
    error: str | None = None  # the data of an `error` event
    body: str | None = None  # the body of an answer that was not 200
    exception: str | None = None  # what the client raised (a timeout, a connection reset...)
    ended: bool = False  # an `end` event came

    @property
    def ok(self) -> bool:
        return self.ended and self.status == 200 and self.error is None and self.exception is None

    def reason(self) -> str:
        """Why the turn failed, as the client saw it."""
        if self.exception is not None:
            return f"raised {self.exception}"
        if self.status != 200:
            return f"HTTP {self.status}: {self.body}"
        if self.error is not None:
            return f"error event {self.error}"
        return "the stream ended without an 'end' event"

    def describe(self) -> str:
        """The reason, and what else the client saw."""
        last = " | ".join(self.last_events) or "none"
        return (
            f"{self.thread}: {self.reason()} (HTTP status {self.status}, after {self.seconds:.2f} s, "
            f"{self.events} events, the last: {last})"
        )


@dataclass
class _Round:
    seconds: float
    turns: list[_Turn]
    stall: dict[str, Any]  # the app server's /_stall report for the round

    @property
    def ttfb(self) -> list[float]:
        return [turn.ttfb for turn in self.turns]

    @property
    def failed(self) -> list[_Turn]:
        return [turn for turn in self.turns if not turn.ok]


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _turn(client: Any, url: str, thread: str, text: str) -> _Turn:
    """One turn, read to its end; never raises: what went wrong is in the ``_Turn``."""
    turn = _Turn(thread)
    started = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/threads/{thread}/runs/stream", json={"input": text}) as response:
            turn.status = response.status_code
            if response.status_code != 200:
                turn.body = _short((await response.aread()).decode(errors="replace"), 500)
                return turn
            name, data = "message", []  # the event being read (SSE: fields until a blank line)
            async for line in response.aiter_lines():
                if turn.ttfb != turn.ttfb:  # nan: this is the first line
                    turn.ttfb = time.perf_counter() - started
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    payload = "\n".join(data)
                    turn.events += 1
                    turn.last_events = [*turn.last_events, f"{name}: {_short(payload)}"][-_LAST_EVENTS:]
                    if name == "end":
                        turn.ended = True
                    elif name == "error":
                        turn.error = _short(payload, 1000)
                    name, data = "message", []
    except Exception as error:  # a timeout, a refused or reset connection, a broken stream
        turn.exception = _short(repr(error), 500)
    finally:
        turn.seconds = time.perf_counter() - started
    return turn


async def _round(url: str, turns: int, label: str) -> _Round:
    import httpx

    limits = httpx.Limits(max_connections=turns + 10, max_keepalive_connections=turns + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await client.get(f"{url}/_stall")  # starts (and resets) the server's loop monitor
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                _turn(client, url, f"{label}-{index}", f"What's the weather? ({label} {index})")
                for index in range(turns)
            )
        )
        seconds = time.perf_counter() - started
        stall = (await client.get(f"{url}/_stall")).json()
    return _Round(seconds, list(results), stall)


def _side(role: str, sizes: Sizes, workdir: str) -> tuple[_Round, list[_Round]]:
    """The warm-up round and the measured rounds of one side."""
    rounds: list[_Round] = []
    with ExitStack() as stack:
        model_port = stack.enter_context(_process("model"))
        db = os.path.join(workdir, f"serve-{role}.db")
        app_port = stack.enter_context(_process(role, "--model-url", f"http://127.0.0.1:{model_port}/v1", "--db", db))
        url = f"http://127.0.0.1:{app_port}"
        warmup = asyncio.run(_round(url, max(2, sizes.serve_turns // 20), f"{role}-warmup"))
        for index in range(sizes.serve_rounds):
            rounds.append(asyncio.run(_round(url, sizes.serve_turns, f"{role}-round{index}")))
    return warmup, rounds


def _serve_installed() -> bool:
    try:
        import httpx  # noqa: F401
        import openai  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    turns = sizes.serve_turns
    result = BenchResult(NAME, f"{turns} concurrent streaming ReAct turns (one tool call) through an HTTP server")
    if not _serve_installed():
        result.notes.append("skipped: the serve and openai extras (and httpx) are not installed")
        return result
    measured = {"rxgraph": _side("rxgraph", sizes, workdir)}
    if langgraph:
        measured["langgraph"] = _side("langgraph", sizes, workdir)
    figures: dict[str, dict[str, float]] = {}
    for side, (warmup, rounds) in measured.items():
        result.notes.extend(_failure_notes(side, warmup, rounds))
        ttfb = sorted(t for r in rounds for t in r.ttfb if not math.isnan(t))  # a turn that got no byte has none
        figures[side] = {
            "turns per second": median(turns / r.seconds for r in rounds),
            "ttfb median": 1000 * statistics.median(ttfb) if ttfb else math.nan,
            "ttfb p95": 1000 * ttfb[int(0.95 * (len(ttfb) - 1))] if ttfb else math.nan,
            "stall": max(r.stall["max_ms"] for r in rounds),
            "failures": float(sum(len(r.failed) for r in rounds)),
        }
        result.samples[side] = [
            {
                "seconds": r.seconds,
                "stall": r.stall,
                "failures": len(r.failed),
                "failed": [asdict(turn) for turn in r.failed],
            }
            for r in rounds
        ]
    lg = figures.get("langgraph")
    note = "" if langgraph else NOT_INSTALLED
    rx = figures["rxgraph"]
    for measure, unit, key, lower in (
        ("turns per second", "turns/s", "turns per second", False),
        ("time to first byte, median", "ms", "ttfb median", True),
        ("time to first byte, 95th percentile", "ms", "ttfb p95", True),
        ("event loop's longest stall", "ms", "stall", True),
    ):
        result.figures.append(
            Figure(measure, unit, rx[key], lg[key] if lg else None, langgraph_note=note, lower_is_better=lower)
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
    result.targets.append(_stall_target(measured["rxgraph"][1]))
    result.targets.append(
        Target(
            "serve: every turn ends with an 'end' event",
            ", ".join(f"{side}: {int(values['failures'])} failed" for side, values in figures.items()),
            not any(values["failures"] for values in figures.values()),
        )
    )
    return result


_NOTED_TURNS = 5
"""How many failed turns of a side are described in the printed notes (the results' samples hold them all)."""


def _failure_notes(side: str, warmup: _Round, rounds: list[_Round]) -> list[str]:
    """The failed turns of a side (the warm-up's too, though they count in no figure): how many failed for each
    reason, then what the client saw of the first few."""
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


def _stall_target(rounds: list[_Round]) -> Target:
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
