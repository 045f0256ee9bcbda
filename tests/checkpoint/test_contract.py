"""The CheckpointSaver contract, run against every saver.

To check a new saver, add a factory to ``KITS``: it gets pytest's ``tmp_path`` and returns a ``SaverKit`` whose
``reopen`` gives a second saver on the same storage (a fresh reader, with nothing cached) — for an in-memory saver,
the same instance.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from _support import ScriptedChat, final_reply, tool_call_reply
from pydantic import ValidationError

from rxgraph import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointSaver,
    FrozenDict,
    FrozenList,
    MemorySaver,
    RunnableConfig,
)
from rxgraph.checkpoint import SqliteSaver
from rxgraph.checkpoint._base import new_checkpoint
from rxgraph.errors import InvalidArgumentError, InvalidCheckpointError
from rxgraph.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage, check_request


@dataclass
class SaverKit:
    """A saver under test and a way to open another one on the same storage."""

    saver: CheckpointSaver
    reopen: Callable[[], CheckpointSaver]
    opened: list[CheckpointSaver] = field(default_factory=list)

    def fresh(self) -> CheckpointSaver:
        other = self.reopen()
        self.opened.append(other)
        return other


def _memory_kit(tmp_path: Path) -> SaverKit:
    saver = MemorySaver()
    return SaverKit(saver, lambda: saver)


def _sqlite_kit(tmp_path: Path) -> SaverKit:
    path = tmp_path / "checkpoints.db"
    return SaverKit(SqliteSaver(path), lambda: SqliteSaver(path))


KITS: dict[str, Callable[[Path], SaverKit]] = {"memory": _memory_kit, "sqlite": _sqlite_kit}


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SaverKit]:
    made = KITS[request.param](tmp_path)
    yield made
    for saver in {id(s): s for s in [made.saver, *made.opened]}.values():
        close = getattr(saver, "close", None)
        if close is not None:
            close()


@pytest.fixture
def saver(kit: SaverKit) -> CheckpointSaver:
    return kit.saver


def _cp(
    seq: int, cid: str, parent: str | None = None, thread: str = "t", *, safe: bool = True, **values: Any
) -> Checkpoint:
    return Checkpoint(
        id=cid,
        thread_id=thread,
        seq=seq,
        parent_id=parent,
        values=values,
        run_id="r",
        source="loop",
        safe=safe,
        unsafe_reason=None if safe else "ends with a tool call",
    )


def _chain(saver: CheckpointSaver, safe: list[bool], thread: str = "t") -> list[Checkpoint]:
    written: list[Checkpoint] = []
    parent = None
    for seq, is_safe in enumerate(safe, start=1):
        written.append(saver.put(_cp(seq, f"{thread}{seq}", parent, thread, safe=is_safe, n=seq), expected_head=parent))
        parent = written[-1].id
    return written


# -- compare-and-set, seq, ids -------------------------------------------------------------------------------------


def test_put_is_a_compare_and_set_on_the_head(saver: CheckpointSaver) -> None:
    saver.put(_cp(1, "a"), expected_head=None)
    with pytest.raises(CheckpointConflictError, match="head is 'a', expected None") as caught:
        saver.put(_cp(2, "b", "a"), expected_head=None)
    assert (caught.value.thread_id, caught.value.expected_head, caught.value.actual_head) == ("t", None, "a")
    assert "read the thread again" in str(caught.value).lower()
    with pytest.raises(CheckpointConflictError) as caught:
        saver.put(_cp(2, "b", "a"), expected_head="zzz")
    assert caught.value.actual_head == "a" and caught.value.expected_head == "zzz"
    assert [c.id for c in saver.list("t")] == ["a"]  # a refused write leaves nothing behind
    saver.put(_cp(2, "b", "a"), expected_head="a")
    head = saver.get("t")
    assert head is not None and head.id == "b"
    with pytest.raises(CheckpointConflictError, match="head is None, expected 'a'"):
        saver.put(_cp(1, "x", thread="new"), expected_head="a")


def test_seq_must_be_the_heads_plus_one(saver: CheckpointSaver) -> None:
    with pytest.raises(InvalidCheckpointError, match="has seq 2, expected 1") as caught:
        saver.put(_cp(2, "a"), expected_head=None)
    assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", "a")
    assert isinstance(caught.value, ValueError)
    saver.put(_cp(1, "a"), expected_head=None)
    with pytest.raises(InvalidCheckpointError, match="has seq 3, expected 2"):
        saver.put(_cp(3, "b", "a"), expected_head="a")
    with pytest.raises(InvalidCheckpointError, match="has seq 1, expected 2"):
        saver.put(_cp(1, "b", "a"), expected_head="a")
    assert [c.seq for c in saver.list("t")] == [1]


def test_checkpoint_ids_are_unique_across_threads(saver: CheckpointSaver) -> None:
    saver.put(_cp(1, "a"), expected_head=None)
    with pytest.raises(InvalidCheckpointError, match="already stored") as caught:
        saver.put(_cp(2, "a", "a"), expected_head="a")
    assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", "a")
    with pytest.raises(InvalidCheckpointError, match="already stored") as caught:
        saver.put(_cp(1, "a", thread="other"), expected_head=None)
    assert (caught.value.thread_id, caught.value.checkpoint_id) == ("other", "a")
    assert isinstance(caught.value, ValueError)
    assert saver.threads() == ["t"]
    saver.put(_cp(2, "b", "a"), expected_head="a")  # the saver is still usable


# -- reads ---------------------------------------------------------------------------------------------------------


def test_get_reads_the_head_or_one_checkpoint_of_the_thread(saver: CheckpointSaver) -> None:
    assert saver.get("t") is None and saver.get("t", "a") is None
    written = _chain(saver, [True, True, True])
    _chain(saver, [True], thread="u")
    head = saver.get("t")
    assert head is not None and head.id == written[-1].id and head.seq == 3
    middle = saver.get("t", written[1].id)
    assert middle is not None and middle.seq == 2 and middle.values == {"n": 2}
    assert saver.get("t", "u1") is None  # another thread's checkpoint
    assert saver.get("u", written[0].id) is None
    assert saver.get("t", "missing") is None and saver.get("nobody") is None


def test_list_is_newest_first_with_limit_and_before_seq(saver: CheckpointSaver) -> None:
    _chain(saver, [True] * 5)
    assert [c.seq for c in saver.list("t")] == [5, 4, 3, 2, 1]
    assert [c.seq for c in saver.list("t", limit=2)] == [5, 4]
    assert [c.seq for c in saver.list("t", before_seq=3)] == [2, 1]
    assert [c.seq for c in saver.list("t", limit=1, before_seq=5)] == [4]
    assert [c.seq for c in saver.list("t", limit=10, before_seq=99)] == [5, 4, 3, 2, 1]
    assert saver.list("t", limit=0) == [] and saver.list("t", before_seq=1) == []
    assert saver.list("other") == []
    assert [c.values["n"] for c in saver.list("t")] == [5, 4, 3, 2, 1]
    with pytest.raises(InvalidArgumentError, match="limit") as caught:
        saver.list("t", limit=-1)
    assert caught.value.argument == "limit" and isinstance(caught.value, ValueError)


def test_threads_lists_every_thread_with_a_checkpoint(saver: CheckpointSaver) -> None:
    assert saver.threads() == []
    for thread in ("b", "a", "c"):
        _chain(saver, [True, True], thread=thread)
    assert sorted(saver.threads()) == ["a", "b", "c"]


# -- latest_safe ---------------------------------------------------------------------------------------------------


def test_latest_safe_is_the_head_when_it_is_safe(saver: CheckpointSaver) -> None:
    written = _chain(saver, [True, False, True])
    found = saver.latest_safe("t")
    assert found is not None and found.id == written[-1].id
    below = saver.latest_safe("t", before_seq=3)
    assert below is not None and below.id == written[0].id


@pytest.mark.parametrize("unsafe", [1, 100])
def test_latest_safe_skips_unsafe_checkpoints(saver: CheckpointSaver, unsafe: int) -> None:
    written = _chain(saver, [True, True] + [False] * unsafe)
    head = saver.get("t")
    assert head is not None and not head.safe
    for before in (None, head.seq, 3):
        found = saver.latest_safe("t", before_seq=before)
        assert found is not None and found.id == written[1].id and found.safe
    found = saver.latest_safe("t", before_seq=2)
    assert found is not None and found.id == written[0].id


def test_latest_safe_is_none_without_a_safe_checkpoint(saver: CheckpointSaver) -> None:
    assert saver.latest_safe("t") is None
    _chain(saver, [False, False, False])
    assert saver.latest_safe("t") is None
    assert saver.latest_safe("t", before_seq=3) is None
    _chain(saver, [True], thread="u")
    assert saver.latest_safe("u", before_seq=1) is None


# -- values --------------------------------------------------------------------------------------------------------

_VALUES: dict[str, Any] = {
    "messages": [
        SystemMessage(content="be brief"),
        UserMessage(content="weather in Oslo?"),
        AssistantMessage(tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city":"Oslo"}')]),
        ToolMessage(tool_call_id="c1", content="rain, 4°C", name="weather"),
        AssistantMessage(content="Rain, 4°C."),
    ],
    "nested": {"a": [1, [2, {"b": None}]], "c": {"d": (1, "x")}, "$odd": {"$type": "not a tag"}},
    "pair": (1, ("two", 3.5), [4]),
    "frozen": FrozenDict({"k": FrozenList(["v"])}),
    "empty_list": [],
    "empty_map": {},
    "none": None,
    "yes": True,
    "no": False,
    "int": -(2**40),
    "float": 0.1,
    "inf": math.inf,
    "text": "héllo ☃\n",
    "tags": frozenset({"a", "b"}),
}


def _assert_same_values(back: Any, expected: Any) -> None:
    assert back == expected
    assert isinstance(back["messages"], FrozenList)
    assert [type(m) for m in back["messages"]] == [type(m) for m in expected["messages"]]
    assert isinstance(back["nested"], FrozenDict) and isinstance(back["nested"]["a"], FrozenList)
    assert type(back["pair"]) is tuple and type(back["pair"][1]) is tuple and isinstance(back["pair"][2], FrozenList)
    for key in ("none", "yes", "no", "int", "float", "inf", "text", "tags"):
        assert type(back[key]) is type(expected[key]), key


def test_values_round_trip(kit: SaverKit) -> None:
    kit.saver.put(
        Checkpoint(id="a", thread_id="t", seq=1, values=_VALUES, run_id="r", source="input"), expected_head=None
    )
    for reader in (kit.saver, kit.fresh()):
        stored = reader.get("t")
        assert stored is not None
        _assert_same_values(
            stored.values, Checkpoint(id="x", thread_id="t", seq=1, values=_VALUES, run_id="r", source="input").values
        )
        assert list(stored.values) == list(_VALUES)  # key order is kept
        assert stored.source == "input" and stored.run_id == "r" and stored.next == ()


def test_every_field_round_trips(kit: SaverKit) -> None:
    first = _cp(1, "a", n=1)
    second = Checkpoint(
        id="b",
        thread_id="t",
        seq=2,
        parent_id="a",
        values={"n": 2},
        node="tools",
        next=("model", "audit"),
        run_id="run-2",
        source="rewind",
        safe=False,
        unsafe_reason="message 3: pending tool call (rule 4)",
        rolled_back_from="zz",
    )
    kit.saver.put(first, expected_head=None)
    kit.saver.put(second, expected_head="a")
    for reader in (kit.saver, kit.fresh()):
        assert reader.list("t") == [second, first]
        assert reader.get("t", "b") == second


def test_checkpoints_cannot_be_changed_by_callers(kit: SaverKit) -> None:
    values: dict[str, Any] = {"items": [1, 2], "meta": {"k": "v"}}
    kit.saver.put(
        Checkpoint(id="a", thread_id="t", seq=1, values=values, run_id="r", source="input"), expected_head=None
    )
    values["items"].append(3)
    values["meta"]["k"] = "changed"
    for reader in (kit.saver, kit.fresh()):
        stored = reader.get("t")
        assert stored is not None
        assert isinstance(stored.values, MappingProxyType)
        assert stored.values == {"items": [1, 2], "meta": {"k": "v"}}
        with pytest.raises(TypeError):
            stored.values["items"] = ()  # type: ignore[index]
        with pytest.raises(AttributeError):
            stored.values["items"].append(3)
        with pytest.raises(TypeError):
            stored.values["meta"]["k"] = "x"
        with pytest.raises(ValidationError):
            stored.id = "b"  # type: ignore[misc]


def test_a_checkpoint_can_hold_the_values_of_an_older_one(kit: SaverKit) -> None:
    # What a rewind writes: a new head whose values are an earlier checkpoint's.
    saver = kit.saver
    base = saver.put(_cp(1, "a", messages=[UserMessage(content="hi")], step=1), expected_head=None)
    grown = dict(base.values)
    grown["messages"] = base.values["messages"] + [
        AssistantMessage(tool_calls=[ToolCall(id="c", name="x", arguments="")])
    ]
    saver.put(
        Checkpoint(id="b", thread_id="t", seq=2, parent_id="a", values=grown, run_id="r", source="loop", safe=False),
        expected_head="a",
    )
    rewind = new_checkpoint(
        id="c", thread_id="t", seq=3, parent_id="b", values=base.values, run_id="r", source="rewind", next=()
    )
    saver.put(rewind, expected_head="b")
    for reader in (saver, kit.fresh()):
        assert [c.values for c in reader.list("t")] == [base.values, grown, base.values]


# -- concurrency ---------------------------------------------------------------------------------------------------


def test_concurrent_writers_on_one_head_exactly_one_wins(saver: CheckpointSaver) -> None:
    saver.put(_cp(1, "root", messages=[UserMessage(content="hi")]), expected_head=None)
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        checkpoint = _cp(2, f"w{i}", "root", messages=[UserMessage(content="hi"), UserMessage(content=f"w{i}")])
        barrier.wait()
        try:
            saver.put(checkpoint, expected_head="root")
            result = f"won:w{i}"
        except CheckpointConflictError as error:
            assert error.actual_head is not None and error.actual_head.startswith("w")
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("conflict") == writers - 1
    head = saver.get("t")
    assert head is not None and f"won:{head.id}" == winners[0] and len(saver.list("t")) == 2


def test_threads_writing_their_own_threads_in_parallel_all_land(saver: CheckpointSaver) -> None:
    writers, steps = 4, 25
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def run(thread_id: str) -> None:
        barrier.wait()
        try:
            messages: FrozenList[Any] = FrozenList()
            parent = None
            for seq in range(1, steps + 1):
                messages = messages.extended([UserMessage(content=f"{thread_id}-{seq}")])
                cp = _cp(seq, f"{thread_id}-{seq}", parent, thread_id, messages=messages)
                saver.put(cp, expected_head=parent)
                parent = cp.id
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(saver.threads()) == [f"t{i}" for i in range(writers)]
    for i in range(writers):
        head = saver.get(f"t{i}")
        assert head is not None and head.seq == steps
        assert [m.content for m in head.values["messages"]] == [f"t{i}-{s}" for s in range(1, steps + 1)]


# -- a real graph --------------------------------------------------------------------------------------------------


def _run_conversation(saver: CheckpointSaver) -> tuple[ScriptedChat, RunnableConfig]:
    config = RunnableConfig(thread_id="chat")
    chat = ScriptedChat(
        [
            tool_call_reply("c1"),
            final_reply("sunny"),
            final_reply("you are welcome"),
            tool_call_reply("c2", "search"),
            RuntimeError("model is down"),
            final_reply("back again"),
        ],
        saver,  # type: ignore[arg-type]
    )
    chat.graph.invoke({"messages": UserMessage(content="weather?")}, config)
    chat.graph.invoke({"messages": UserMessage(content="thanks")}, config)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke({"messages": UserMessage(content="search something")}, config)
    chat.graph.invoke({"messages": UserMessage(content="hello?")}, config)  # starts from the newest safe checkpoint
    return chat, config


def _history(saver: CheckpointSaver, thread_id: str) -> list[tuple[Any, ...]]:
    """A thread's checkpoints with ids replaced by seqs (ids are random per run)."""
    chain = list(reversed(saver.list(thread_id)))
    seq_of = {c.id: c.seq for c in chain}
    return [
        (
            c.seq,
            seq_of.get(c.parent_id) if c.parent_id else None,
            c.node,
            c.next,
            c.source,
            c.safe,
            c.unsafe_reason,
            seq_of.get(c.rolled_back_from) if c.rolled_back_from else None,
            dict(c.values),
        )
        for c in chain
    ]


def test_a_graph_produces_the_same_history_on_every_saver(kit: SaverKit) -> None:
    reference = MemorySaver()
    reference_chat, _ = _run_conversation(reference)
    chat, config = _run_conversation(kit.saver)
    expected = _history(reference, "chat")
    assert _history(kit.saver, "chat") == expected
    assert _history(kit.fresh(), "chat") == expected
    assert chat.requests == reference_chat.requests
    for request in chat.requests:
        check_request(request)
    assert any(not row[5] for row in expected) and any(row[7] is not None for row in expected)
    assert chat.graph.get_state(config).values["messages"][-1] == final_reply("back again")
