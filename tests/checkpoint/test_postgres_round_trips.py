"""How many round trips a turn on ``PostgresSaver`` costs, counted on every connection the saver holds: its pool's,
the run locks' and the listener's.

A round trip is one exchange with the server: psycopg runs each through ``Connection.wait`` (a statement, a BEGIN or
a COMMIT of ``transaction()``, a ``commit()`` that has something to commit), and prepares a statement it has run
often enough in an exchange of its own first. Both are counted, on every connection of the process, by the
connection's application name (the saver names its connections after their role and its schema). What a connection
does once, when it opens (its settings, LISTEN), is not a turn's: each test runs a turn first, on another thread.
The listener asks the server a question every ``timeout`` seconds; the saver here has a minute of it, so that no
such question falls inside a turn.

The floor: one round trip per checkpoint (the compare-and-set of the head and the inserts in one statement), the
claim of the thread (which reads its head too) and its release. A one-node turn writes two checkpoints (the input's
and the node's): 4.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from typing import Any

import psycopg
import pytest
import reactivex.operators as ops
from psycopg import _cursor_base

from rxgraph import END, START, KeyStrategy, RunnableConfig, StateGraph
from rxgraph.checkpoint import PostgresSaver
from rxgraph.graph import NodeOutput
from rxgraph.messages import AssistantMessage, UserMessage


class RoundTrips:
    """Counts the round trips of every psycopg connection of the process, by the connection's application name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_role: Counter[str] = Counter()
        self.not_autocommit: set[str] = set()

    def note(self, conn: psycopg.Connection[Any]) -> None:
        name = conn.pgconn.parameter_status(b"application_name")
        role = name.decode() if name else "(unnamed)"
        with self._lock:
            self.by_role[role] += 1
            if not conn.autocommit:
                # A statement outside transaction() would begin one in the same exchange, uncounted.
                self.not_autocommit.add(role)

    def take(self, schema: str) -> dict[str, int]:
        """The counts of the saver on ``schema`` since the last ``take`` (by role: checkpoints, run locks...)."""
        with self._lock:
            counts = {role: n for role, n in self.by_role.items() if role.endswith(f"({schema})")}
            self.by_role.clear()
            assert not self.not_autocommit, f"connections not in autocommit mode: {self.not_autocommit}"
            return counts


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    counter = RoundTrips()
    wait = psycopg.Connection.wait

    def counted(conn: psycopg.Connection[Any], gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        # An exchange waits on the socket at least once (for the answer); a generator that has nothing to send (a
        # commit with no transaction open) ends without waiting, and is no round trip.
        try:
            waiting_for = next(gen)
        except StopIteration as done:
            return done.value
        counter.note(conn)
        while True:
            ready = yield waiting_for
            try:
                waiting_for = gen.send(ready)
            except StopIteration as done:
                return done.value

    def counting_wait(self: psycopg.Connection[Any], gen: Any, *args: Any, **kwargs: Any) -> Any:
        if "notifies" in getattr(gen, "__name__", ""):
            return wait(self, gen, *args, **kwargs)  # the listener waiting for news: nothing is sent
        return wait(self, counted(self, gen), *args, **kwargs)

    send_prepare = _cursor_base.BaseCursor._send_prepare

    def counting_send_prepare(self: Any, name: bytes, query: Any) -> None:
        if not self._conn._pipeline:  # answered before the statement is sent, in the same wait
            counter.note(self._conn)
        send_prepare(self, name, query)

    monkeypatch.setattr(psycopg.Connection, "wait", counting_wait)
    monkeypatch.setattr(_cursor_base.BaseCursor, "_send_prepare", counting_send_prepare)
    return counter


@pytest.fixture
def saver(postgres_server: str, postgres_schema: str) -> Iterator[PostgresSaver]:
    with PostgresSaver(postgres_server, schema=postgres_schema, timeout=60) as opened:
        yield opened


def _chain(saver: PostgresSaver, nodes: int) -> Any:
    def answer(state: Any) -> dict[str, Any]:
        return {"messages": AssistantMessage(content="Sure.")}

    graph = StateGraph({"messages": KeyStrategy.APPEND})
    before = START
    for index in range(nodes):
        graph = graph.add_node(f"n{index}", answer).add_edge(before, f"n{index}")
        before = f"n{index}"
    return graph.add_edge(before, END).compile(checkpointer=saver)


def _turn(app: Any, thread_id: str) -> Callable[[], None]:
    return lambda: app.invoke({"messages": UserMessage(content="Hello?")}, RunnableConfig(thread_id=thread_id))


def _count(round_trips: RoundTrips, schema: str, what: str, turn: Callable[[], None]) -> tuple[int, dict[str, int]]:
    round_trips.take(schema)
    turn()  # a turn returns once its thread is let go in the database (its release included)
    counts = round_trips.take(schema)
    print(f"{what}: {sum(counts.values())} round trips {counts}")
    return sum(counts.values()), counts


def _warm(app: Any) -> None:
    """Open what a saver opens once (the run locks, the listener) and let psycopg prepare the statements a turn
    repeats (on its sixth run): a turn measured afterwards counts what every turn costs."""
    for _ in range(6):
        _turn(app, "warm-up")()


@pytest.mark.parametrize("nodes", [1, 3])
def test_a_turn_costs_four_round_trips_and_one_more_per_further_node(
    nodes: int, saver: PostgresSaver, postgres_schema: str, round_trips: RoundTrips
) -> None:
    app = _chain(saver, nodes)
    _warm(app)
    first, by_role = _count(round_trips, postgres_schema, f"{nodes}-node turn, first", _turn(app, "t"))
    # The claim and the release on the run locks' connection; one statement per checkpoint on the pool's.
    assert by_role.get(f"rxgraph run locks ({postgres_schema})") == 2
    assert by_role.get(f"rxgraph checkpoints ({postgres_schema})") == 1 + nodes
    assert first <= 4 + (nodes - 1)
    later, _ = _count(round_trips, postgres_schema, f"{nodes}-node turn, second", _turn(app, "t"))
    assert later <= 4 + (nodes - 1)
    history = saver.list("t")
    assert [c.seq for c in history] == list(range(2 * (nodes + 1), 0, -1))
    head = history[0]
    assert [m.content for m in head.values["messages"]] == ["Hello?"] + ["Sure."] * nodes + ["Hello?"] + [
        "Sure."
    ] * nodes


def test_a_later_turn_started_by_a_fresh_saver_reads_the_head_through_the_claim(
    postgres_server: str, postgres_schema: str, saver: PostgresSaver, round_trips: RoundTrips
) -> None:
    app = _chain(saver, 1)
    _turn(app, "t")()
    with PostgresSaver(postgres_server, schema=postgres_schema, timeout=60) as other:
        other_app = _chain(other, 1)
        _warm(other_app)
        total, by_role = _count(round_trips, postgres_schema, "a fresh saver's turn", _turn(other_app, "t"))
    # The claim brought the head's row; its values, never seen by this saver, are read once (a blob-free state: the
    # list's items), and the turn goes on as any other.
    assert total <= 5, by_role
    head = saver.get("t")
    assert head is not None
    assert [m.content for m in head.values["messages"]] == ["Hello?", "Sure.", "Hello?", "Sure."]


def test_a_cut_turn_rewinds_with_a_compare_and_set_in_a_transaction(
    saver: PostgresSaver, postgres_schema: str, round_trips: RoundTrips
) -> None:
    app = _chain(saver, 3)
    _warm(app)
    _turn(app, "t")()
    before = saver.get("t")
    seen: list[NodeOutput] = []

    def cut() -> None:
        stream = app.stream({"messages": UserMessage(content="Hello?")}, RunnableConfig(thread_id="t"))
        stream.pipe(ops.take(1)).subscribe(seen.append)  # synchronous: rewound and let go when it returns

    total, by_role = _count(round_trips, postgres_schema, "a cut turn", cut)
    assert [output.node for output in seen] == ["n0"]
    # The claim, the input's and the node's checkpoints, the run locks told that the run is ending, the rewind (its
    # rows are the turn's base's, which a concurrent prune may free: checked in a transaction after its
    # compare-and-set: BEGIN, UPDATE, the check, INSERT, COMMIT), and the release.
    assert total <= 10, by_role
    head = saver.get("t")
    assert head is not None and before is not None
    assert head.source == "rewind" and head.values == before.values


def test_a_thread_id_that_needs_quoting_is_claimed_and_its_head_read_in_one_round_trip(
    saver: PostgresSaver, postgres_schema: str, round_trips: RoundTrips
) -> None:
    # The claim's two statements are sent as one text, with the values quoted by psycopg (client-side binding).
    thread_id = "it's a \\ 100% {odd} ünïcode thread; -- $1 %(thread)s"
    app = _chain(saver, 1)
    _warm(app)
    _turn(app, thread_id)()
    total, _ = _count(round_trips, postgres_schema, "a later turn of an odd thread id", _turn(app, thread_id))
    assert total <= 4
    head = saver.get(thread_id)
    assert head is not None and head.thread_id == thread_id and head.seq == 4
    assert saver.threads().count(thread_id) == 1
