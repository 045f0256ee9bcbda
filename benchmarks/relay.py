"""relay: a run executing in one ``rxgraph serve`` process, followed from another through their PostgreSQL database.

Two server processes, A and B, each ``python -m rxgraph serve benchmarks._relay_graph:make --db URL --schema S``
on one PostgreSQL database and schema (each with its own ``PostgresSaver``; the server's ``PostgresRelay`` carries
a run's events between them: rows in a table, with ``LISTEN``/``NOTIFY`` wake-ups). The database is
``$RXGRAPH_BENCH_POSTGRES`` (or ``$RXGRAPH_TEST_POSTGRES``), else a throwaway cluster started with ``.ci/postgres``
for the run and stopped after it.

A run is started in A in the background (``POST /threads/{id}/runs``, ``stream_mode: ["custom"]``); its one node
(``_relay_graph.emit``) writes a ``ready`` event, then waits until the benchmark opens its gate — once each client
following the run has the ``ready`` event, so that every timed event is written while they listen — and writes
events of about ``PAYLOAD`` bytes, each carrying ``time.time()`` from the moment the node wrote it. The followers
read the run's stream with ``join_stream`` (``GET /threads/{id}/runs/{run_id}/stream``), from B (relayed) or from A
itself (direct: the process's own event log), and stamp each event with ``time.time()`` as its bytes arrive (the
client runs on the same machine, so the clocks are one). Three kinds of round, alternating in a rotating order,
``relay_rounds`` of each:

- *relayed*: ``relay_events`` events written as fast as the node writes them, followed from B only: events per
  second = events / (B's receipt of the last - the first one's write);
- *direct*: the same, followed from A only — how fast the run's events come at all, for comparison;
- *paced*: ``relay_paced_events`` events, one every ``relay_interval`` seconds (a model streaming tokens), followed
  from A and B at once: the latency of each event from its write in A to B's client, and the latency the relay adds,
  B's receipt minus A's receipt of the same event. Medians and 95th percentiles over every event of these rounds.

Every follower must receive every event once, in order: the target says whether they did, and the notes say what
was lost, repeated or out of order, and any HTTP error, ``error`` event or client exception. LangGraph has no
column: its library has no server (LangGraph's own server, which relays runs through Redis, is not measured here).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import BenchResult, Figure, Sizes, Target, median
from .postgres import postgres_server

NAME = "relay"
PAYLOAD = 500
"""Characters of text in each timed event (a ``messages`` event of a streamed token is about this size)."""

_ROOT = Path(__file__).resolve().parent.parent
_NO_LANGGRAPH = "no equivalent"
_SEPARATOR = re.compile(rb"\r?\n\r?\n")


@contextmanager
def _server(url: str, schema: str) -> Iterator[str]:
    """An ``rxgraph serve`` process of the relay graph on ``url`` / ``schema``; yields its base URL. It is stopped
    with SIGINT (killed if it has not exited 30 s later)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "rxgraph", "serve", "benchmarks._relay_graph:make", "--db", url]
    command += ["--schema", schema, "--port", "0", "--log-level", "info"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=_ROOT, env=env)
    said: collections.deque[str] = collections.deque(maxlen=40)
    assert process.stdout is not None
    stdout = process.stdout
    drain = threading.Thread(target=lambda: said.extend(line.rstrip() for line in stdout), daemon=True)
    try:
        base = None
        for line in stdout:  # ends if the server exits
            said.append(line.rstrip())
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                base = found.group(1)
                break
        if base is None:
            raise RuntimeError("rxgraph serve did not start; it said:\n" + "\n".join(said))
        drain.start()  # what it says later is kept (the last lines), so that its pipe never fills
        yield base
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if drain.is_alive():
            drain.join(timeout=10)  # the pipe ends with the process
        stdout.close()


@dataclass
class _Follower:
    """What one client following the run saw."""

    where: str  # "A" or "B"
    status: int | None = None
    received: list[tuple[int, float, float]] = field(default_factory=list)  # (i, written, received), as they came
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    problem: str | None = None  # an HTTP error, an error event, an exception

    def check(self, events: int) -> str | None:
        """What is wrong with what came (None: every event once, in order)."""
        if self.problem is not None:
            return self.problem
        numbers = [i for i, _, _ in self.received]
        if numbers == list(range(events)):
            return None
        lost = events - len(set(numbers))
        repeated = len(numbers) - len(set(numbers))
        disordered = sum(1 for a, b in itertools.pairwise(numbers) if b < a)
        return f"{len(numbers)} of {events} events: {lost} lost, {repeated} repeated, {disordered} out of order"

    def latencies(self) -> dict[int, float]:
        return {i: received - written for i, written, received in self.received}

    def rate(self, events: int) -> float:
        """Events per second: all of them over (the last one's receipt - the first one's write)."""
        if len(self.received) < 2:
            return math.nan
        first = min(written for _, written, _ in self.received)
        return events / (self.received[-1][2] - first)


async def _follow(client: Any, base: str, thread: str, run_id: str, follower: _Follower) -> None:
    """Read the run's stream from ``base`` to its end into ``follower``; never raises."""
    try:
        path = f"{base}/threads/{thread}/runs/{run_id}/stream"
        async with client.stream("GET", path, params={"stream_mode": "custom"}) as response:
            follower.status = response.status_code
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")[:300]
                follower.problem = f"HTTP {response.status_code}: {body}"
                return
            pending = b""
            async for chunk in response.aiter_bytes():
                arrived = time.time()
                pending += chunk
                *complete, pending = _SEPARATOR.split(pending)
                for raw in complete:
                    name, data = "message", []
                    for line in raw.splitlines():
                        if line.startswith(b"event:"):
                            name = line[6:].strip().decode()
                        elif line.startswith(b"data:"):
                            data.append(line[5:].strip())
                    if name == "error":
                        follower.problem = f"error event {b''.join(data).decode(errors='replace')[:300]}"
                    elif name == "custom" and data:
                        value = json.loads(b"\n".join(data))
                        if "ready" in value:
                            follower.ready.set()
                        else:
                            follower.received.append((value["i"], value["t"], arrived))
    except Exception as error:  # a timeout, a reset connection
        follower.problem = f"raised {error!r}"[:300]
    finally:
        follower.ready.set()  # a follower that ended (or failed) holds nothing up


async def _round(a: str, b: str, kind: str, sizes: Sizes, workdir: str, label: str) -> tuple[list[_Follower], int]:
    """One run in A, followed from A, B or both (by ``kind``); the followers, and how many events the run wrote."""
    import httpx

    paced = kind == "paced"
    events = sizes.relay_paced_events if paced else sizes.relay_events
    thread = f"relay-{label}-{uuid.uuid4().hex[:8]}"
    gate = Path(workdir) / f"gate-{thread}"
    context = {"events": events, "interval": sizes.relay_interval if paced else 0.0, "size": PAYLOAD}
    body = {
        "assistant_id": "agent",
        "input": {"sent": 0},
        "stream_mode": ["custom"],
        "if_not_exists": "create",
        "context": {**context, "gate": str(gate)},
    }
    where = {"relayed": [("B", b)], "direct": [("A", a)], "paced": [("A", a), ("B", b)]}[kind]
    followers = [_Follower(name) for name, _ in where]
    async with httpx.AsyncClient(timeout=120) as client:
        created = await client.post(f"{a}/threads/{thread}/runs", json=body)
        if created.status_code != 200:
            raise RuntimeError(f"A refused the run: HTTP {created.status_code} {created.text[:300]}")
        run_id = created.json()["run_id"]
        tasks = [
            asyncio.create_task(_follow(client, url, thread, run_id, follower))
            for follower, (_, url) in zip(followers, where, strict=True)
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(f.ready.wait() for f in followers)), 60)
        finally:
            gate.touch()  # the node goes on (or, when a follower failed, ends) either way
        await asyncio.gather(*tasks)
        state = (await client.get(f"{a}/threads/{thread}/runs/{run_id}")).json()
        if state.get("status") != "success":
            for follower in followers:
                follower.problem = follower.problem or f"the run ended {state.get('status')!r} in A"
    return followers, events


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[int(fraction * (len(ordered) - 1))] if ordered else math.nan


def run(sizes: Sizes, *, langgraph: bool, workdir: str) -> BenchResult:
    result = BenchResult(NAME, "a run in one rxgraph serve process followed from another, through PostgreSQL")
    try:
        import httpx  # noqa: F401
        import psycopg  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        result.notes.append("skipped: the serve and postgres extras (and httpx) are not installed")
        return result
    with postgres_server() as url:
        if url is None:
            result.notes.append("skipped: no PostgreSQL server (set RXGRAPH_BENCH_POSTGRES, or install postgresql)")
            return result
        schema = f"bench_relay_{uuid.uuid4().hex[:8]}"
        try:
            with ExitStack() as stack:
                a = stack.enter_context(_server(url, schema))
                b = stack.enter_context(_server(url, schema))
                _measure(result, a, b, sizes, workdir)
        finally:
            _drop_schema(url, schema)
    return result


def _measure(result: BenchResult, a: str, b: str, sizes: Sizes, workdir: str) -> None:
    kinds = ["relayed", "direct", "paced"]
    for kind in kinds:  # warm-up: each path once, thrown away
        asyncio.run(_round(a, b, kind, sizes, workdir, f"warmup-{kind}"))
    rates: dict[str, list[float]] = {"relayed": [], "direct": []}
    latency: dict[str, list[float]] = {"A": [], "B": [], "added": []}
    problems: list[str] = []
    samples: list[dict[str, Any]] = []
    for index in range(sizes.relay_rounds):
        order = kinds[index % 3 :] + kinds[: index % 3]
        for kind in order if index % 2 == 0 else reversed(order):
            followers, events = asyncio.run(_round(a, b, kind, sizes, workdir, f"{kind}-{index}"))
            sample: dict[str, Any] = {"kind": kind, "round": index, "events": events}
            for follower in followers:
                problem = follower.check(events)
                if problem is not None:
                    problems.append(f"{kind} round {index}, follower {follower.where}: {problem}")
                lat = list(follower.latencies().values())
                sample[follower.where] = {
                    "received": len(follower.received),
                    "events_per_second": follower.rate(events),
                    "latency_median": statistics.median(lat) if lat else math.nan,
                    "latency_p95": _percentile(lat, 0.95),
                    "latency_max": max(lat, default=math.nan),
                    "problem": problem,
                }
                if kind != "paced":
                    rates[kind].append(follower.rate(events))
            if kind == "paced":
                by_where = {f.where: f.latencies() for f in followers}
                latency["A"] += by_where["A"].values()
                latency["B"] += by_where["B"].values()
                latency["added"] += [by_where["B"][i] - by_where["A"][i] for i in by_where["B"] if i in by_where["A"]]
            samples.append(sample)
    result.samples["rounds"] = samples
    paced = f"{sizes.relay_paced_events} events at {1 / sizes.relay_interval:g}/s" if sizes.relay_interval else ""
    burst = f"{sizes.relay_events} events"
    rows = (
        (f"events per second, run in A followed from B ({burst})", "events/s", median(rates["relayed"]), False),
        (f"events per second, run in A followed from A ({burst})", "events/s", median(rates["direct"]), False),
        (f"latency, A's write to B's client, median ({paced})", "ms", 1000 * _median(latency["B"]), True),
        (f"latency, A's write to B's client, 95th percentile ({paced})", "ms", 1000 * _pct(latency["B"]), True),
        (f"latency, A's write to A's client, median ({paced})", "ms", 1000 * _median(latency["A"]), True),
        (f"latency the relay adds (B's receipt - A's), median ({paced})", "ms", 1000 * _median(latency["added"]), True),
        (f"latency the relay adds, 95th percentile ({paced})", "ms", 1000 * _pct(latency["added"]), True),
    )
    for measure, unit, value, lower in rows:
        result.figures.append(Figure(measure, unit, value, None, langgraph_note=_NO_LANGGRAPH, lower_is_better=lower))
    rounds = 3 * sizes.relay_rounds
    result.targets.append(
        Target(
            "relay: every follower receives every event once, in order",
            f"{rounds - len({p.split(',')[0] for p in problems})} of {rounds} rounds clean"
            + (f"; {problems[0]}" if problems else ""),
            not problems,
        )
    )
    result.notes.extend(problems)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _pct(values: list[float]) -> float:
    return _percentile(values, 0.95)


def _drop_schema(url: str, schema: str) -> None:
    """Drop the benchmark's schema (the servers have stopped)."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error:
        pass  # a throwaway cluster is gone already
