"""``SaverContract``: the ``CheckpointSaver`` contract as a test suite that a saver's author runs unchanged.

Subclass it in a pytest test module; pytest collects every check as a test of your class::

    from rxgraph.testing import SaverContract

    class TestMySaver(SaverContract):
        def make_saver(self, tmp_path):
            return MySaver(tmp_path / "checkpoints")

        def reopen(self, saver, tmp_path):  # durable savers only: a second saver on the same storage
            return MySaver(tmp_path / "checkpoints")

Optional capabilities are detected, not assumed: the checks that need a second saver on the same storage run
when ``reopen`` gives another instance, the check of a closed saver runs when the saver has a ``close`` method, and
the retention checks when it overrides ``prune`` and ``delete_thread``; otherwise they are skipped. A saver raises
the contract's errors (with the messages the suite expects) by calling ``rxgraph.checkpoint.check_put``,
``check_limit`` and ``check_prune`` under its own lock; ``select_pruned`` says which checkpoints a prune drops.
To make a saver from other fixtures (a database server, say), store them on ``self`` in an autouse fixture of your
class: ``make_saver`` is only called inside each test. Needs pytest, which is imported only when a check runs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

from pydantic import ValidationError

from .._frozen import FrozenDict, FrozenList
from ..checkpoint import Checkpoint, CheckpointSaver, MemorySaver
from ..checkpoint._base import new_checkpoint
from ..errors import (
    CheckpointConflictError,
    CheckpointDecodeError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidTypeError,
)
from ..messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage, check_request

__all__ = ["SaverContract", "ScriptedChatGraph"]

_WAIT = 30.0  # seconds a check waits for its own threads before it fails (never reached by a working saver)


class SaverContract:
    """The ``CheckpointSaver`` contract; subclass it as ``Test...`` and implement :meth:`make_saver`.

    pytest collects the ``test_*`` methods of the subclass. Each check makes its own saver (or savers, on one
    storage) in a fresh ``tmp_path`` and closes them when it ends, passed or failed.
    """

    def make_saver(self, tmp_path: Path) -> CheckpointSaver:
        """A new, empty saver. ``tmp_path`` is the check's own directory (pytest's ``tmp_path``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_saver(self, tmp_path)")

    def reopen(self, saver: CheckpointSaver, tmp_path: Path) -> CheckpointSaver:
        """A second saver on the storage of ``saver`` (a new reader with nothing cached, as another process would
        open). The default returns ``saver`` itself: storage that instances do not share (in memory, say)."""
        return saver

    def close(self, saver: CheckpointSaver) -> None:
        """Release ``saver`` at the end of a check. The default calls its ``close()`` when it has one."""
        close = getattr(saver, "close", None)
        if callable(close):
            close()

    # -- compare-and-set, seq, ids ---------------------------------------------------------------------------------

    def test_put_is_a_compare_and_set_on_the_head(self, tmp_path: Path) -> None:
        import pytest

        with _Session(self, tmp_path) as session:
            saver = session.saver
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

    def test_seq_must_be_the_heads_plus_one(self, tmp_path: Path) -> None:
        import pytest

        with _Session(self, tmp_path) as session:
            saver = session.saver
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

    def test_checkpoint_ids_are_unique_across_threads(self, tmp_path: Path) -> None:
        import pytest

        with _Session(self, tmp_path) as session:
            saver = session.saver
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

    # -- reads -----------------------------------------------------------------------------------------------------

    def test_get_reads_the_head_or_one_checkpoint_of_the_thread(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = session.saver
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

    def test_list_is_newest_first_with_limit_and_before_seq(self, tmp_path: Path) -> None:
        import pytest

        with _Session(self, tmp_path) as session:
            saver = session.saver
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

    def test_threads_lists_every_thread_with_a_checkpoint(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = session.saver
            assert saver.threads() == []
            for thread in ("b", "a", "c"):
                _chain(saver, [True, True], thread=thread)
            assert sorted(saver.threads()) == ["a", "b", "c"]

    # -- latest_safe -----------------------------------------------------------------------------------------------

    def test_latest_safe_is_the_head_when_it_is_safe(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = session.saver
            written = _chain(saver, [True, False, True])
            found = saver.latest_safe("t")
            assert found is not None and found.id == written[-1].id
            below = saver.latest_safe("t", before_seq=3)
            assert below is not None and below.id == written[0].id

    def test_latest_safe_skips_an_unsafe_checkpoint(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            _check_latest_safe_skips(session.saver, unsafe=1)

    def test_latest_safe_skips_a_hundred_unsafe_checkpoints(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            _check_latest_safe_skips(session.saver, unsafe=100)

    def test_latest_safe_is_none_without_a_safe_checkpoint(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = session.saver
            assert saver.latest_safe("t") is None
            _chain(saver, [False, False, False])
            assert saver.latest_safe("t") is None
            assert saver.latest_safe("t", before_seq=3) is None
            _chain(saver, [True], thread="u")
            assert saver.latest_safe("u", before_seq=1) is None

    # -- values ----------------------------------------------------------------------------------------------------

    def test_values_round_trip(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            session.saver.put(
                Checkpoint(id="a", thread_id="t", seq=1, values=_VALUES, run_id="r", source="input"),
                expected_head=None,
            )
            expected = Checkpoint(id="x", thread_id="t", seq=1, values=_VALUES, run_id="r", source="input").values
            for reader in (session.saver, session.fresh()):
                stored = reader.get("t")
                assert stored is not None
                _assert_same_values(stored.values, expected)
                assert list(stored.values) == list(_VALUES)  # key order is kept
                assert stored.source == "input" and stored.run_id == "r" and stored.next == ()

    def test_every_field_round_trips(self, tmp_path: Path) -> None:
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
            error="ValueError: no",
            pending={"interrupt": {"node": "tools", "value": {"calls": [1, "x"]}}, "sends": [["b", {"n": 3}]]},
        )
        with _Session(self, tmp_path) as session:
            session.saver.put(first, expected_head=None)
            session.saver.put(second, expected_head="a")
            for reader in (session.saver, session.fresh()):
                assert reader.list("t") == [second, first]
                assert reader.get("t", "b") == second

    def test_checkpoints_cannot_be_changed_by_callers(self, tmp_path: Path) -> None:
        import pytest

        values: dict[str, Any] = {"items": [1, 2], "meta": {"k": "v"}}
        with _Session(self, tmp_path) as session:
            session.saver.put(
                Checkpoint(id="a", thread_id="t", seq=1, values=values, run_id="r", source="input"),
                expected_head=None,
            )
            values["items"].append(3)
            values["meta"]["k"] = "changed"
            for reader in (session.saver, session.fresh()):
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
                    stored.id = "b"  # frozen

    def test_a_checkpoint_can_hold_the_values_of_an_older_one(self, tmp_path: Path) -> None:
        # What a rewind writes: a new head whose values are an earlier checkpoint's.
        with _Session(self, tmp_path) as session:
            saver = session.saver
            base = saver.put(_cp(1, "a", messages=[UserMessage(content="hi")], step=1), expected_head=None)
            grown = dict(base.values)
            grown["messages"] = base.values["messages"] + [
                AssistantMessage(tool_calls=(ToolCall(id="c", name="x", arguments=""),))
            ]
            saver.put(
                Checkpoint(
                    id="b", thread_id="t", seq=2, parent_id="a", values=grown, run_id="r", source="loop", safe=False
                ),
                expected_head="a",
            )
            rewind = new_checkpoint(
                id="c", thread_id="t", seq=3, parent_id="b", values=base.values, run_id="r", source="rewind", next=()
            )
            saver.put(rewind, expected_head="b")
            for reader in (saver, session.fresh()):
                assert [c.values for c in reader.list("t")] == [base.values, grown, base.values]

    # -- concurrency -----------------------------------------------------------------------------------------------

    def test_concurrent_writers_on_one_head_exactly_one_wins(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            _race_on_one_head([session.saver], session.saver)

    def test_threads_writing_their_own_threads_in_parallel_all_land(self, tmp_path: Path) -> None:
        writers, steps = 4, 25
        with _Session(self, tmp_path) as session:
            saver = session.saver
            barrier = threading.Barrier(writers)
            errors: list[BaseException] = []

            def run(thread_id: str) -> None:
                try:
                    barrier.wait(_WAIT)
                    messages: FrozenList[Any] = FrozenList()
                    parent = None
                    for seq in range(1, steps + 1):
                        messages = messages.extended([UserMessage(content=f"{thread_id}-{seq}")])
                        cp = _cp(seq, f"{thread_id}-{seq}", parent, thread_id, messages=messages)
                        saver.put(cp, expected_head=parent)
                        parent = cp.id
                except BaseException as error:  # reported below, in the test's own thread
                    errors.append(error)

            _run_threads([partial(run, f"t{i}") for i in range(writers)])
            assert errors == []
            assert sorted(saver.threads()) == [f"t{i}" for i in range(writers)]
            for i in range(writers):
                head = saver.get(f"t{i}")
                assert head is not None and head.seq == steps
                assert [m.content for m in head.values["messages"]] == [f"t{i}-{s}" for s in range(1, steps + 1)]

    # -- a real graph ----------------------------------------------------------------------------------------------

    def test_a_graph_produces_the_same_history_on_every_saver(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            reference = MemorySaver()
            reference_chat = _run_conversation(reference)
            chat = _run_conversation(session.saver)
            expected = _history(reference, "chat")
            assert _history(session.saver, "chat") == expected
            assert _history(session.fresh(), "chat") == expected
            assert chat.requests == reference_chat.requests
            for request in chat.requests:
                check_request(request)
            assert any(not row[5] for row in expected) and any(row[7] is not None for row in expected)
            assert chat.graph.get_state(chat.config).values["messages"][-1] == AssistantMessage(content="back again")

    # -- retention (savers that override prune and delete_thread) ------------------------------------------------

    def test_prune_keeps_the_head_the_newest_safe_and_the_newest_ones(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            _chain(saver, [True, True, False, True, False, False, False])
            _chain(saver, [True, True], thread="u")
            assert saver.prune("t", keep_last=2) == 4  # 7 and 6 are the newest two; 4 is the newest safe
            for reader in (saver, session.fresh()):
                assert [c.seq for c in reader.list("t")] == [7, 6, 4]
                assert [reader.get("t", f"t{seq}") is None for seq in (1, 2, 3, 5)] == [True] * 4
                kept = reader.get("t", "t4")
                assert kept is not None and kept.values == {"n": 4}
                found = reader.latest_safe("t")
                assert found is not None and found.id == "t4"
                assert reader.latest_safe("t", before_seq=4) is None
                assert [c.seq for c in reader.list("t", before_seq=6)] == [4]
                assert [c.seq for c in reader.list("t", limit=1, before_seq=7)] == [6]
                assert [c.seq for c in reader.list("u")] == [2, 1]  # other threads are untouched
            assert saver.prune("t", keep_last=2) == 0
            assert saver.prune("t", keep_last=0) == 1  # only the head and the newest safe always stay
            assert [c.seq for c in saver.list("t")] == [7, 4]
            saver.put(_cp(8, "t8", "t7", n=8), expected_head="t7")  # the chain goes on from its head
            head = session.fresh().get("t")
            assert head is not None and head.id == "t8" and sorted(saver.threads()) == ["t", "u"]

    def test_prune_by_time_and_count(self, tmp_path: Path) -> None:
        old, recent = datetime(2020, 1, 1, tzinfo=UTC), datetime.now(UTC)
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            times = [old, old.replace(tzinfo=None), old, recent - timedelta(seconds=1), recent]  # a naive one is UTC
            parent = None
            for seq, created_at in enumerate(times, start=1):
                checkpoint = Checkpoint(
                    id=f"t{seq}", thread_id="t", seq=seq, parent_id=parent, values={"n": seq}, run_id="r",
                    source="loop", created_at=created_at,
                )  # fmt: skip
                parent = saver.put(checkpoint, expected_head=parent).id
            cutoff = datetime(2021, 1, 1, tzinfo=UTC)
            assert saver.prune("t", keep_last=4, before=cutoff) == 1  # both must let a checkpoint go
            assert saver.prune("t", before=cutoff) == 2
            assert [c.seq for c in session.fresh().list("t")] == [5, 4]
            assert saver.prune("t", before=recent + timedelta(days=1)) == 1  # the head, newest safe too, stays
            assert [c.seq for c in saver.list("t")] == [5]

    def test_prune_and_delete_refuse_what_they_cannot_do(self, tmp_path: Path) -> None:
        import pytest

        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            _chain(saver, [True, True, True])
            with pytest.raises(InvalidArgumentError, match="keep_last") as caught:
                saver.prune("t")
            assert caught.value.argument == "keep_last"
            with pytest.raises(InvalidArgumentError) as caught:
                saver.prune("t", keep_last=-1)
            assert caught.value.argument == "keep_last"
            with pytest.raises(InvalidTypeError) as type_caught:
                saver.prune("t", keep_last="2")  # type: ignore[arg-type]
            assert type_caught.value.argument == "keep_last"
            with pytest.raises(InvalidArgumentError, match="time zone") as caught:
                saver.prune("t", before=datetime(2030, 1, 1))
            assert caught.value.argument == "before"
            assert saver.prune("nobody", keep_last=1) == 0 and saver.delete_thread("nobody") == 0
            assert len(saver.list("t")) == 3  # nothing was dropped by the refused calls

    def test_delete_thread_removes_it_and_the_thread_can_start_again(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            _chain(saver, [True, False, True])
            _chain(saver, [True, True], thread="u")
            assert saver.delete_thread("t") == 3
            for reader in (saver, session.fresh()):
                assert reader.get("t") is None and reader.list("t") == [] and reader.latest_safe("t") is None
                assert reader.get("t", "t1") is None and reader.threads() == ["u"]
                assert [c.values["n"] for c in reader.list("u")] == [2, 1]
            import pytest

            with pytest.raises(CheckpointConflictError):  # a run still writing there fails
                saver.put(_cp(4, "t4", "t3", n=4), expected_head="t3")
            saver.put(_cp(1, "again-1", n=1), expected_head=None)
            head = session.fresh().get("t")
            assert head is not None and head.id == "again-1" and sorted(saver.threads()) == ["t", "u"]

    def test_values_of_pruned_checkpoints_are_stored_again_when_reused(self, tmp_path: Path) -> None:
        """A saver that shares storage between checkpoints must not point a new checkpoint at storage a prune
        freed: here a rewind to a pruned state, written through the saver that pruned and (durable storage) through
        another one that read that state before the prune."""
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            other = session.fresh()
            first: FrozenList[Any] = FrozenList([UserMessage(content="hi")])
            second = first.extended([AssistantMessage(content="hello")])
            meta = FrozenDict({"model": "m1", "turn": (1, 2)})
            states: list[dict[str, Any]] = [
                {"messages": first, "meta": meta},
                {"messages": second, "meta": meta},
                {"messages": second.extended([UserMessage(content="more")]), "meta": FrozenDict({"turn": 3})},
                {"messages": FrozenList([SystemMessage(content="fresh start")]), "meta": FrozenDict()},
            ]
            parent = None
            for seq, values in enumerate(states, start=1):
                parent = saver.put(_cp(seq, f"t{seq}", parent, **values), expected_head=parent).id
            remembered = other.get("t", "t2")  # read (and cached) before the prune, as another process would
            assert remembered is not None
            assert saver.prune("t", keep_last=1) == 3
            rewinds: list[str] = []
            for writer in (saver, other):
                head = writer.get("t")
                assert head is not None
                rewind = new_checkpoint(
                    id=f"r{head.seq}", thread_id="t", seq=head.seq + 1, parent_id=head.id, values=remembered.values,
                    run_id="r", source="rewind",
                )  # fmt: skip
                rewinds.append(writer.put(rewind, expected_head=head.id).id)
            reader = session.fresh()
            for rewind_id in rewinds:
                try:
                    back = reader.get("t", rewind_id)
                except CheckpointDecodeError as error:
                    raise AssertionError(f"{rewind_id} points at storage the prune freed: {error}") from error
                assert back is not None and back.values == remembered.values, rewind_id
                assert back.values["messages"] == second and type(back.values["meta"]["turn"]) is tuple

    def test_a_new_turn_runs_on_a_valid_history_after_prune_and_delete(self, tmp_path: Path) -> None:
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            chat = _run_conversation(saver)
            before = chat.graph.get_state(chat.config).values["messages"]
            chat.script.append(_tool_call_reply("c3"))
            chat.script.append(RuntimeError("model is down"))  # leaves an unsafe head behind
            import pytest

            with pytest.raises(RuntimeError, match="model is down"):
                chat.graph.invoke({"messages": UserMessage(content="one more")}, chat.config)
            head = saver.get("chat")
            assert head is not None and not head.safe
            assert saver.prune("chat", keep_last=1) > 0
            kept = saver.list("chat")
            assert kept[0].id == head.id and [c.safe for c in kept] == [False, True]
            assert len(chat.graph.get_state_history(chat.config)) == 2
            chat.script.append(AssistantMessage(content="still here"))
            chat.graph.invoke({"messages": UserMessage(content="are you there?")}, chat.config)
            request = chat.requests[-1]
            check_request(request)
            # From the newest safe checkpoint, which the prune kept: the whole conversation up to it.
            assert request == [*kept[1].values["messages"], UserMessage(content="are you there?")]
            assert request[: len(before)] == before
            first_of_run = min((c for c in saver.list("chat") if c.seq > head.seq), key=lambda c: c.seq)
            assert first_of_run.rolled_back_from == head.id and first_of_run.parent_id == kept[1].id
            assert saver.delete_thread("chat") > 0
            chat.script.append(AssistantMessage(content="nice to meet you"))
            chat.graph.invoke({"messages": UserMessage(content="hello")}, chat.config)
            assert chat.requests[-1] == [UserMessage(content="hello")]
            history = session.fresh().list("chat")
            assert [c.seq for c in history] == [2, 1]  # the input, and the model's answer
            assert history[0].values["messages"] == [
                UserMessage(content="hello"),
                AssistantMessage(content="nice to meet you"),
            ]

    def test_prune_while_a_writer_extends_the_thread(self, tmp_path: Path) -> None:
        """Prunes racing a writer of the same thread (through another saver, when the storage is durable) neither
        block it for good nor break what it writes; every checkpoint that stays reads back as written."""
        with _Session(self, tmp_path) as session:
            saver = _retention_or_skip(session.saver)
            pruner = session.fresh()
            steps = 30
            written: dict[str, Any] = {}
            done = threading.Event()
            errors: list[BaseException] = []

            def write() -> None:
                try:
                    messages: FrozenList[Any] = FrozenList()
                    parent = None
                    for seq in range(1, steps + 1):
                        messages = messages.extended([UserMessage(content=f"m{seq}")])
                        cp = _cp(seq, f"t{seq}", parent, safe=seq % 3 == 0, messages=messages, n=seq % 2)
                        written[cp.id] = cp.values
                        parent = saver.put(cp, expected_head=parent).id
                except BaseException as error:  # reported below, in the test's own thread
                    errors.append(error)
                finally:
                    done.set()

            def prune() -> None:
                try:
                    while not done.is_set():
                        pruner.prune("t", keep_last=3)
                except BaseException as error:
                    errors.append(error)

            _run_threads([write, prune])
            assert errors == []
            pruner.prune("t", keep_last=3)
            reader = session.fresh()
            kept = reader.list("t")
            assert [c.seq for c in kept] == [30, 29, 28]
            for checkpoint in kept:
                assert checkpoint.values == written[checkpoint.id]

    # -- optional capabilities -------------------------------------------------------------------------------------

    def test_a_second_saver_on_the_same_storage_sees_every_write(self, tmp_path: Path) -> None:
        """Durable storage only: a saver never answers from a stale cache, and the compare-and-set and unique ids
        hold between savers (as between processes)."""
        import pytest

        with _Session(self, tmp_path) as session:
            first, second = session.saver, session.second_or_skip()
            assert second.get("t") is None and second.threads() == []
            written = _chain(first, [True, True])
            assert first.get("t") == second.get("t") == written[-1]
            second.put(_cp(3, "t3", "t2", safe=False, n=3), expected_head="t2")
            head = first.get("t")  # the first saver has "t2" cached as the head: it must look again
            assert head is not None and head.id == "t3" and head.values == {"n": 3}
            assert [c.seq for c in first.list("t")] == [3, 2, 1]
            found = first.latest_safe("t")
            assert found is not None and found.id == "t2"
            with pytest.raises(CheckpointConflictError) as caught:
                first.put(_cp(3, "x", "t2"), expected_head="t2")
            assert caught.value.actual_head == "t3"
            with pytest.raises(InvalidCheckpointError, match="already stored"):
                first.put(_cp(1, "t3", thread="u"), expected_head=None)
            assert first.threads() == ["t"] and [c.id for c in second.list("t")] == ["t3", "t2", "t1"]

    def test_concurrent_writers_on_two_savers_on_one_storage_exactly_one_wins(self, tmp_path: Path) -> None:
        """Durable storage only: the compare-and-set holds when the writers go through different savers."""
        with _Session(self, tmp_path) as session:
            _race_on_one_head([session.saver, session.second_or_skip()], session.saver)

    def test_a_closed_saver_raises_instead_of_answering(self, tmp_path: Path) -> None:
        """Savers with a ``close`` method only: after it, every call raises (``rxgraph.errors.SaverClosedError`` is
        the error made for it) rather than answer as if the thread were empty."""
        import pytest

        with _Session(self, tmp_path) as session:
            saver = session.saver
            if not callable(getattr(saver, "close", None)):
                pytest.skip(f"{type(saver).__name__} has no close method")
            _chain(saver, [True])
            session.close(saver)
            calls: list[tuple[str, Callable[[], object]]] = [
                ("get", lambda: saver.get("t")),
                ("list", lambda: saver.list("t")),
                ("latest_safe", lambda: saver.latest_safe("t")),
                ("threads", saver.threads),
                ("put", lambda: saver.put(_cp(2, "t2", "t1"), expected_head="t1")),
            ]
            if _has_retention(saver):
                calls.append(("prune", lambda: saver.prune("t", keep_last=1)))
                calls.append(("delete_thread", lambda: saver.delete_thread("t")))
            for name, call in calls:
                try:
                    answer = call()
                except Exception:
                    continue
                raise AssertionError(f"{name}() on a closed {type(saver).__name__} answered {answer!r}; it must raise")


class _Session:
    """The savers one check opens: ``saver`` from ``make_saver``, more from ``reopen``; all closed at the end."""

    def __init__(self, contract: SaverContract, tmp_path: Path) -> None:
        self._contract = contract
        self._tmp_path = tmp_path
        self.saver = contract.make_saver(tmp_path)
        self._opened = [self.saver]
        self._closed: set[int] = set()

    def fresh(self) -> CheckpointSaver:
        """A saver on the same storage: another instance for durable savers, else ``saver`` itself."""
        other = self._contract.reopen(self.saver, self._tmp_path)
        self._opened.append(other)
        return other

    def second_or_skip(self) -> CheckpointSaver:
        """Another instance on the same storage; skips the check when ``reopen`` gives none."""
        other = self.fresh()
        if other is self.saver:
            import pytest

            pytest.skip("reopen gives the same instance: no second saver on the same storage to check against")
        return other

    def __enter__(self) -> _Session:
        return self

    def close(self, saver: CheckpointSaver) -> None:
        """Close ``saver`` with the contract's ``close``, once."""
        if id(saver) not in self._closed:
            self._closed.add(id(saver))
            self._contract.close(saver)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for saver in reversed(self._opened):
            self.close(saver)


# -- building checkpoints --------------------------------------------------------------------------------------------


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
    """Put a chain of checkpoints ``{thread}1``, ``{thread}2``, ... with the given ``safe`` flags and ``n`` = seq."""
    written: list[Checkpoint] = []
    parent = None
    for seq, is_safe in enumerate(safe, start=1):
        written.append(saver.put(_cp(seq, f"{thread}{seq}", parent, thread, safe=is_safe, n=seq), expected_head=parent))
        parent = written[-1].id
    return written


def _has_retention(saver: CheckpointSaver) -> bool:
    kind = type(saver)
    return kind.prune is not CheckpointSaver.prune and kind.delete_thread is not CheckpointSaver.delete_thread


def _retention_or_skip(saver: CheckpointSaver) -> CheckpointSaver:
    if not _has_retention(saver):
        import pytest

        pytest.skip(f"{type(saver).__name__} keeps every checkpoint (no prune and delete_thread)")
    return saver


def _check_latest_safe_skips(saver: CheckpointSaver, *, unsafe: int) -> None:
    written = _chain(saver, [True, True] + [False] * unsafe)
    head = saver.get("t")
    assert head is not None and not head.safe
    for before in (None, head.seq, 3):
        found = saver.latest_safe("t", before_seq=before)
        assert found is not None and found.id == written[1].id and found.safe
    found = saver.latest_safe("t", before_seq=2)
    assert found is not None and found.id == written[0].id


# -- values ----------------------------------------------------------------------------------------------------------

_VALUES: dict[str, Any] = {
    "messages": [
        SystemMessage(content="be brief"),
        UserMessage(content="weather in Oslo?"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="weather", arguments='{"city":"Oslo"}'),)),
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


# -- threads ---------------------------------------------------------------------------------------------------------


def _run_threads(targets: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_WAIT)
    assert not any(thread.is_alive() for thread in threads), "a writer is still running"


def _race_on_one_head(savers: list[CheckpointSaver], reader: CheckpointSaver) -> None:
    """Eight writers, spread over ``savers``, put a child of the same head at once: exactly one may win."""
    savers[0].put(_cp(1, "root", messages=[UserMessage(content="hi")]), expected_head=None)
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        saver = savers[i % len(savers)]
        checkpoint = _cp(2, f"w{i}", "root", messages=[UserMessage(content="hi"), UserMessage(content=f"w{i}")])
        try:
            barrier.wait(_WAIT)
            saver.put(checkpoint, expected_head="root")
            result: tuple[str, str | None] = (f"won:w{i}", None)
        except CheckpointConflictError as error:
            result = ("conflict", error.actual_head)
        except BaseException as error:  # reported below, in the test's own thread
            result = (f"error: {error!r}", None)
        with lock:
            outcomes.append(result)

    _run_threads([partial(write, i) for i in range(writers)])
    winners = [o for o, _ in outcomes if o.startswith("won")]
    assert len(winners) == 1 and [o for o, _ in outcomes].count("conflict") == writers - 1, outcomes
    for outcome, actual_head in outcomes:
        if outcome == "conflict":
            assert actual_head is not None and actual_head.startswith("w")
    head = reader.get("t")
    assert head is not None and f"won:{head.id}" == winners[0] and len(reader.list("t")) == 2


# -- a real graph ----------------------------------------------------------------------------------------------------


class ScriptedChatGraph:
    """A two-node chat graph (model, tools) on ``saver``, whose model answers from a script and records every
    request; for tests of savers and of the engine.

    Each script item is an ``AssistantMessage`` (the model's reply), an exception (the model call fails), or a
    callable ``(scheduler) -> Observable`` for replies that take virtual time. ``compile_options`` go to
    ``compile``. The thread of ``config`` is ``"chat"``.
    """

    def __init__(self, script: list[Any], saver: CheckpointSaver, **compile_options: Any) -> None:
        from ..graph import END, START, KeyStrategy, RunnableConfig, StateGraph

        self.script = list(script)
        self.requests: list[list[Any]] = []
        self.saver = saver
        self.config = RunnableConfig(thread_id="chat")

        def model(state: Any, config: Any) -> Any:
            self.requests.append(list(state["messages"]))
            reply = self.script.pop(0)
            if isinstance(reply, Exception):
                raise reply
            if callable(reply):
                return reply(config.scheduler)
            return {"messages": reply}

        def tools(state: Any) -> dict[str, Any]:
            last = state["messages"][-1]
            assert isinstance(last, AssistantMessage)
            return {
                "messages": [
                    ToolMessage(tool_call_id=call.id, content=f"{call.name} says ok") for call in last.tool_calls
                ]
            }

        def route(state: Any) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AssistantMessage) and last.tool_calls else END

        self.graph = (
            StateGraph({"messages": KeyStrategy.APPEND})
            .add_node("model", model)
            .add_node("tools", tools)
            .add_edge(START, "model")
            .add_conditional_edges("model", route)
            .add_edge("tools", "model")
            .compile(checkpointer=saver, **compile_options)
        )


def _tool_call_reply(call_id: str, name: str = "lookup") -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(id=call_id, name=name, arguments="{}"),))


def _run_conversation(saver: CheckpointSaver) -> ScriptedChatGraph:
    """Four turns on thread ``chat``: one with a tool call, a plain one, one whose model fails after a tool call
    (leaving an unsafe head), and one that starts again from the newest safe checkpoint."""
    import pytest

    chat = ScriptedChatGraph(
        [
            _tool_call_reply("c1"),
            AssistantMessage(content="sunny"),
            AssistantMessage(content="you are welcome"),
            _tool_call_reply("c2", "search"),
            RuntimeError("model is down"),
            AssistantMessage(content="back again"),
        ],
        saver,
    )
    chat.graph.invoke({"messages": UserMessage(content="weather?")}, chat.config)
    chat.graph.invoke({"messages": UserMessage(content="thanks")}, chat.config)
    with pytest.raises(RuntimeError, match="model is down"):
        chat.graph.invoke({"messages": UserMessage(content="search something")}, chat.config)
    chat.graph.invoke({"messages": UserMessage(content="hello?")}, chat.config)
    return chat


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
