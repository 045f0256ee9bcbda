"""serve: concurrent streaming turns through a real HTTP server, rxgraph's and LangGraph's.

Three processes per side (see ``_serve_app.py``): a local OpenAI-compatible model server, the app server on uvicorn,
and this one as the client. Each turn is a ReAct turn with one tool call: the model streams a tool call, the tool
answers, the model streams a four-piece answer — two model requests over HTTP, four messages stored on SQLite.

- rxgraph: ``rxgraph.serve.create_app`` for a ``ReactAgent`` on ``OpenAIChatModel`` (the async ``openai`` client)
  and ``SqliteSaver``.
- LangGraph: its prebuilt ReAct agent (``create_react_agent``) on ``ChatOpenAI`` and ``AsyncSqliteSaver``, streamed
  with ``astream(stream_mode="messages")`` behind an equivalent Starlette SSE endpoint.

The client (``httpx``) starts ``serve_turns`` (200) turns at once, each on a thread of its own, reads each stream to
its end, and reports turns per second (all turns over the wall time), the time to first byte of the answer stream
(median and 95th percentile), and the app server's event loop's longest stall during the round (from a 2 ms timer
on its loop: how long the loop could not serve anything else). A warm-up round of a few turns runs first; the two
sides run one after the other, ``serve_rounds`` times each, alternating, and the figures are medians of the rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
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


@dataclass
class _Round:
    seconds: float
    ttfb: list[float]
    stall: dict[str, Any]  # the app server's /_stall report for the round
    failures: int


async def _turn(client: Any, url: str, thread: str, text: str) -> tuple[float, bool]:
    started = time.perf_counter()
    first: float | None = None
    ok = False
    async with client.stream("POST", f"{url}/threads/{thread}/runs/stream", json={"input": text}) as response:
        async for line in response.aiter_lines():
            if first is None:
                first = time.perf_counter() - started
            if line.startswith("event: end"):
                ok = True
            elif line.startswith("event: error"):
                ok = False
    return (first if first is not None else float("nan")), ok and response.status_code == 200


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
    return _Round(seconds, [r[0] for r in results], stall, sum(1 for r in results if not r[1]))


def _side(role: str, sizes: Sizes, workdir: str) -> list[_Round]:
    rounds: list[_Round] = []
    with ExitStack() as stack:
        model_port = stack.enter_context(_process("model"))
        db = os.path.join(workdir, f"serve-{role}.db")
        app_port = stack.enter_context(_process(role, "--model-url", f"http://127.0.0.1:{model_port}/v1", "--db", db))
        url = f"http://127.0.0.1:{app_port}"
        asyncio.run(_round(url, max(2, sizes.serve_turns // 20), f"{role}-warmup"))
        for index in range(sizes.serve_rounds):
            rounds.append(asyncio.run(_round(url, sizes.serve_turns, f"{role}-round{index}")))
    return rounds


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
    sides = {"rxgraph": _side("rxgraph", sizes, workdir)}
    if langgraph:
        sides["langgraph"] = _side("langgraph", sizes, workdir)
    figures: dict[str, dict[str, float]] = {}
    for side, rounds in sides.items():
        ttfb = [t for r in rounds for t in r.ttfb]
        figures[side] = {
            "turns per second": median(turns / r.seconds for r in rounds),
            "ttfb median": 1000 * statistics.median(ttfb),
            "ttfb p95": 1000 * sorted(ttfb)[int(0.95 * (len(ttfb) - 1))],
            "stall": max(r.stall["max_ms"] for r in rounds),
            "failures": float(sum(r.failures for r in rounds)),
        }
        result.samples[side] = [{"seconds": r.seconds, "stall": r.stall, "failures": r.failures} for r in rounds]
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
    result.targets.append(_stall_target(sides["rxgraph"]))
    result.targets.append(
        Target(
            "serve: every turn ends with an 'end' event",
            ", ".join(f"{side}: {int(values['failures'])} failed" for side, values in figures.items()),
            not any(values["failures"] for values in figures.values()),
        )
    )
    return result


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
