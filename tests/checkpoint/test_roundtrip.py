"""Generated histories through every saver: each checkpoint reads back with the very values and types written.

A history is a thread's successive states, written as the engine writes them (each checkpoint the child of the
previous one, its values frozen); from one state to the next a key keeps its value, gets a new one, or has its
list extended in place, rebuilt with the same items, or rebuilt with items that are only equal to the old ones
(``1`` for ``True``, ``1.0`` for ``1``, a tuple for a list, a dict in another order). Reads back happen on the saver
that wrote, on a fresh saver on the same file (or PostgreSQL schema), and in another process.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import messages._part_strategies as parts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxgraph import Checkpoint, CheckpointSaver, FrozenDict, FrozenList, MemorySaver
from rxgraph._frozen import freeze
from rxgraph.checkpoint import PostgresSaver, SqliteSaver

REPO = Path(__file__).resolve().parents[2]
_WORKER_PATH = Path(__file__).with_name("_roundtrip_worker.py")


def _load_worker() -> Any:
    spec = importlib.util.spec_from_file_location("_roundtrip_worker", _WORKER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the model's annotations through its module
    spec.loader.exec_module(module)
    return module


worker = _load_worker()
Reading = worker.Reading
SERDE = worker.make_serde()

# -- what a history is made of ------------------------------------------------------------------------------------

_TRICKY_TEXT = ["", "\ud83d", "\ude00", "\ud83d\ude00", "😀", "\udc80", "$", "$type", "$wtf8", "$$x", "é", "\x00"]

texts = st.text(st.characters(exclude_categories=()), max_size=5) | st.lists(
    st.sampled_from(_TRICKY_TEXT), max_size=3
).map("".join)

floats = st.floats() | st.sampled_from(
    [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1e308, -1e-308, 5e-324, 2.0**53 + 2, 0.1, 1.0]
)

scalars = st.none() | st.booleans() | st.integers() | st.sampled_from([0, 1, -1, 2**63, -(2**70)]) | floats | texts
scalars |= st.binary(max_size=6)

hashables = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)
# A new nan object at each draw: a set can hold several of them (nan != nan).
set_items = hashables | st.builds(float, st.just("nan")) | st.builds(lambda: (float("nan"),))

readings = st.builds(
    Reading,
    label=texts,
    amount=st.floats(allow_nan=False, allow_infinity=False),
    count=st.integers(),
    flags=st.lists(st.booleans(), max_size=3).map(tuple),
    note=st.none() | texts,
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(texts, inner, max_size=3)
        | st.dictionaries(texts, inner, max_size=2).map(MappingProxyType)
        | st.frozensets(set_items, max_size=3)
        | st.sets(set_items, max_size=3)
    )


values = st.recursive(scalars | readings, _containers, max_leaves=10)

# Mostly a few keys, so that states share keys and lists get extended; now and then any key.
state_keys = st.sampled_from(["messages", "a", "\ud83d\ude00", "😀"]) | st.sampled_from(["$x", "\udc80", "", "$wtf8"])
state_keys |= texts

# List items that have equal twins stored differently (see _lookalike), to make those likely.
list_items = values | st.sampled_from([0, 1, True, False, 0.0, -0.0, 1.0, 2, 2.0, (), (1, 2), FrozenList([3])])

_MISSING = object()


def _lookalike(item: Any) -> Any:
    """An item equal to ``item`` that a saver stores differently, when there is one."""
    kind = type(item)
    if kind is bool:
        return int(item)
    if kind is int and item in (0, 1):
        return bool(item)
    if kind is int and abs(item) < 2**53:
        return float(item)
    if kind is float and item == 0:
        return -item
    if kind is float and item.is_integer() and abs(item) < 2**53:
        return int(item)
    if kind is tuple:
        return FrozenList(item)
    if kind is FrozenList:
        return tuple(item)
    if kind is FrozenDict and len(item) > 1:
        return FrozenDict(reversed(list(item.items())))
    return item


@st.composite
def histories(draw: st.DrawFn, max_states: int = 6) -> list[tuple[dict[str, Any], bool]]:
    """States of one thread, each with whether its put goes through a newly opened saver (as another process
    would write it: with nothing cached, its parent read back from the file)."""
    history: list[tuple[dict[str, Any], bool]] = []
    previous: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, max_states))):
        state: dict[str, Any] = {}
        # As in the engine's states, most keys carry over from one state to the next.
        kept = [key for key in previous if draw(st.integers(0, 5))]
        for key in dict.fromkeys([*kept, *draw(st.lists(state_keys, max_size=3))]):
            old = previous.get(key, _MISSING)
            how = draw(st.sampled_from(["new", "new list", "new list", "same", "extend", "rebuild", "lookalike"]))
            if type(old) is FrozenList and how in ("extend", "rebuild", "lookalike"):
                added = freeze(draw(st.lists(list_items, max_size=3)))
                if how == "extend":  # shares storage with the parent's list
                    state[key] = old.extended(added)
                elif how == "rebuild":  # the very same items, in new storage
                    state[key] = FrozenList([*old, *added])
                else:  # items equal to the parent's, stored differently
                    state[key] = FrozenList([*(_lookalike(item) for item in old), *added])
            elif old is not _MISSING and how == "same":
                state[key] = old
            elif how == "new list":
                state[key] = freeze(draw(st.lists(list_items, max_size=4)))
            else:
                state[key] = freeze(draw(values))
        history.append((state, draw(st.booleans())))
        previous = state
    return history


def _checkpoints(history: list[tuple[dict[str, Any], bool]], thread: str) -> list[tuple[Checkpoint, bool]]:
    """The history as the engine writes it: checkpoint ``n`` has seq ``n`` and the previous one as its parent."""
    chain: list[tuple[Checkpoint, bool]] = []
    parent: str | None = None
    for seq, (state, reopen) in enumerate(history, start=1):
        checkpoint = Checkpoint(
            id=f"{thread}-{seq}",
            thread_id=thread,
            seq=seq,
            parent_id=parent,
            values={key: freeze(value) for key, value in state.items()},
            run_id="r",
            source="input" if seq == 1 else "loop",
        )
        chain.append((checkpoint, reopen))
        parent = checkpoint.id
    return chain


def _write_sqlite(path: Path, chain: list[tuple[Checkpoint, bool]]) -> None:
    saver = SqliteSaver(path, serde=SERDE)
    try:
        for checkpoint, reopen in chain:
            if reopen:
                saver.close()
                saver = SqliteSaver(path, serde=SERDE)
            saver.put(checkpoint, expected_head=checkpoint.parent_id)
    finally:
        saver.close()


# -- strict comparison ----------------------------------------------------------------------------------------


def assert_same(expected: Any, actual: Any, where: str = "") -> None:
    """``actual`` is ``expected``'s equal with the same type at every level (mapping keys in the same order; nan
    equal to nan, -0.0 not equal to 0.0)."""
    kind = type(expected)
    assert type(actual) is kind, f"at {where or 'the top'}: {type(actual).__name__} {actual!r}, expected {expected!r}"
    if kind is float:
        same = (math.isnan(expected) and math.isnan(actual)) or (
            expected == actual and math.copysign(1, expected) == math.copysign(1, actual)
        )
        assert same, f"at {where or 'the top'}: {actual!r}, expected {expected!r}"
    elif kind is tuple or kind is FrozenList:
        assert len(actual) == len(expected), f"at {where or 'the top'}: {actual!r}, expected {expected!r}"
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{where}[{index}]")
    elif kind is FrozenDict or kind is MappingProxyType:
        assert list(actual) == list(expected), f"at {where or 'the top'}: keys {list(actual)!r} != {list(expected)!r}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif kind is frozenset:
        # Items cannot be paired by equality (1 == True, nan != nan): compare them as canonical forms.
        canonical = worker.canonical
        assert sorted(json.dumps(canonical(i)) for i in actual) == sorted(json.dumps(canonical(i)) for i in expected), (
            f"at {where or 'the top'}: {actual!r}, expected {expected!r}"
        )
    elif kind is Reading:
        for name in Reading.model_fields:
            assert_same(getattr(expected, name), getattr(actual, name), f"{where}.{name}")
    else:
        assert actual == expected, f"at {where or 'the top'}: {actual!r} != {expected!r}"
        if kind is str:
            assert [ord(c) for c in actual] == [ord(c) for c in expected]


def _assert_reads_back(read: Callable[[Checkpoint], Mapping[str, Any] | None], chain: list[Checkpoint]) -> None:
    for checkpoint in chain:
        back = read(checkpoint)
        assert back is not None, checkpoint.id
        assert_same(checkpoint.values, back, f"<{checkpoint.id}>")


def _by_id(saver: CheckpointSaver) -> Callable[[Checkpoint], Mapping[str, Any] | None]:
    def read(checkpoint: Checkpoint) -> Mapping[str, Any] | None:
        found = saver.get(checkpoint.thread_id, checkpoint.id)
        return None if found is None else found.values

    return read


def _listed(saver: CheckpointSaver, thread: str) -> Callable[[Checkpoint], Mapping[str, Any] | None]:
    listed = {c.id: c.values for c in saver.list(thread)}
    return lambda checkpoint: listed.get(checkpoint.id)


def test_the_strict_comparison_tells_apart_what_equality_does_not() -> None:
    assert_same(FrozenList([math.nan, -0.0, (1, "x")]), FrozenList([math.nan, -0.0, (1, "x")]))
    for expected, actual in [
        (1, True),
        (1, 1.0),
        (0.0, -0.0),
        ((1, 2), FrozenList([1, 2])),
        (FrozenDict({"a": 1, "b": 2}), FrozenDict({"b": 2, "a": 1})),
        (frozenset({1}), frozenset({True})),
        ("\ud83d\ude00", "😀"),
        (FrozenList([Reading(label="x", amount=0.0, count=1)]), FrozenList([Reading(label="x", amount=-0.0, count=1)])),
    ]:
        try:
            assert_same(expected, actual)
        except AssertionError:
            continue
        raise AssertionError(f"{actual!r} passed for {expected!r}")


# -- the properties -----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_any_history_reads_back_exactly_from_every_saver(history: list[tuple[dict[str, Any], bool]]) -> None:
    chain_and_reopens = _checkpoints(history, "t")
    chain = [checkpoint for checkpoint, _ in chain_and_reopens]
    memory = MemorySaver()
    for checkpoint in chain:
        memory.put(checkpoint, expected_head=checkpoint.parent_id)
    _assert_reads_back(_by_id(memory), chain)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoints.db"
        # (a) the saver that wrote them; a cache of one checkpoint makes it decode most of what it reads.
        with SqliteSaver(path, serde=SERDE, cache_size=1) as saver:
            for checkpoint in chain:
                saver.put(checkpoint, expected_head=checkpoint.parent_id)
            _assert_reads_back(_by_id(saver), chain)
            _assert_reads_back(_listed(saver, "t"), chain)
        # (b) the same history written with puts from newly opened savers in between, then read by a fresh saver.
        second = Path(folder) / "reopened.db"
        _write_sqlite(second, chain_and_reopens)
        for written in (path, second):
            with SqliteSaver(written, serde=SERDE) as fresh:
                _assert_reads_back(_listed(fresh, "t"), chain)
            with SqliteSaver(written, serde=SERDE) as fresh:
                _assert_reads_back(_by_id(fresh), chain[::-1])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(history=histories())
def test_any_history_reads_back_exactly_from_postgres(
    history: list[tuple[dict[str, Any], bool]], postgres_server: str, postgres_schema: str
) -> None:
    from psycopg_pool import ConnectionPool

    chain_and_reopens = _checkpoints(history, "t")
    chain = [checkpoint for checkpoint, _ in chain_and_reopens]
    # A schema per example (the test's fixtures are made once for all of them); every saver, a fresh one included,
    # shares one pool.
    schema = f"{postgres_schema}_{uuid.uuid4().hex[:8]}"
    with ConnectionPool(postgres_server, min_size=1, max_size=2, open=True) as pool:

        def fresh(**options: Any) -> PostgresSaver:
            return PostgresSaver(pool, schema=schema, serde=SERDE, **options)

        with fresh(cache_size=1) as saver:  # the saver that wrote them, decoding most of what it reads
            for checkpoint in chain:
                saver.put(checkpoint, expected_head=checkpoint.parent_id)
            _assert_reads_back(_by_id(saver), chain)
            _assert_reads_back(_listed(saver, "t"), chain)
        # The same history on another thread, with puts from newly opened savers in between.
        again = _checkpoints(history, "u")
        saver = fresh()
        try:
            for checkpoint, reopen in again:
                if reopen:
                    saver.close()
                    saver = fresh()
                saver.put(checkpoint, expected_head=checkpoint.parent_id)
        finally:
            saver.close()
        for thread, written in (("t", chain), ("u", [checkpoint for checkpoint, _ in again])):
            with fresh() as reader:
                _assert_reads_back(_listed(reader, thread), written)
            with fresh() as reader:
                _assert_reads_back(_by_id(reader), written[::-1])


# -- message histories with content parts ---------------------------------------------------------------------------


@st.composite
def message_histories(draw: st.DrawFn) -> list[tuple[dict[str, Any], bool]]:
    """A thread's states as an agent writes them: its message list growing (images, audio, files, refusal parts, an
    assistant's null content among them), a few messages at a time."""
    messages = draw(parts.histories())
    cuts = sorted(set(draw(st.lists(st.integers(0, len(messages)), max_size=4))) | {len(messages)})
    return [({"messages": FrozenList(messages[:cut]), "turn": cut}, draw(st.booleans())) for cut in cuts]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(message_histories())
def test_histories_with_content_parts_read_back_exactly_from_memory_and_sqlite(
    history: list[tuple[dict[str, Any], bool]],
) -> None:
    test_any_history_reads_back_exactly_from_every_saver.hypothesis.inner_test(history)  # type: ignore[attr-defined]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(history=message_histories())
def test_histories_with_content_parts_read_back_exactly_from_postgres(
    history: list[tuple[dict[str, Any], bool]], postgres_server: str, postgres_schema: str
) -> None:
    test_any_history_reads_back_exactly_from_postgres.hypothesis.inner_test(  # type: ignore[attr-defined]
        history=history, postgres_server=postgres_server, postgres_schema=postgres_schema
    )


def test_another_process_reads_back_exactly_what_was_written(tmp_path: Path) -> None:
    batch: list[list[tuple[dict[str, Any], bool]]] = []

    @settings(max_examples=14, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(histories(max_states=5))
    def collect(history: list[tuple[dict[str, Any], bool]]) -> None:
        batch.append(history)

    collect()  # one batch of generated histories (some 40 states in all), read by one other process
    path = tmp_path / "checkpoints.db"
    expected: dict[str, list[list[Any]]] = {}
    for index, history in enumerate(batch):
        thread = f"h{index}"
        chain = _checkpoints(history, thread)
        _write_sqlite(path, chain)
        expected[thread] = [[checkpoint.id, worker.canonical_values(checkpoint.values)] for checkpoint, _ in chain]
    assert sum(len(chain) for chain in expected.values()) >= 12
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(_WORKER_PATH), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    read = json.loads(result.stdout)
    assert sorted(read) == sorted(expected)
    for thread, rows in expected.items():
        assert [row[0] for row in read[thread]] == [row[0] for row in rows]
        for (checkpoint_id, want), (_, listed, by_id) in zip(rows, read[thread], strict=True):
            for how, got in (("list", listed), ("get", by_id)):
                assert [key for key, _ in got] == [key for key, _ in want], f"{checkpoint_id} ({how}): keys differ"
                for (key, want_value), (_, got_value) in zip(want, got, strict=True):
                    assert got_value == want_value, (
                        f"{checkpoint_id} ({how}) key {''.join(map(chr, key))!r}: another process read {got_value}, "
                        f"expected {want_value}"
                    )
