"""The saver contract's retention: ``prune`` and ``delete_thread``, alone, on a running conversation, and racing a
writer.

Its checks run on savers that override both ``prune`` and ``delete_thread``, and are skipped on the others.
Subclass ``RetentionContract`` as ``Test...`` with your ``make_saver`` (and ``reopen``, for durable storage) to run
only these checks.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..._frozen import FrozenDict, FrozenList
from ...checkpoint import Checkpoint
from ...checkpoint._base import new_checkpoint
from ...errors import CheckpointConflictError, CheckpointDecodeError, InvalidArgumentError, InvalidTypeError
from ...messages import AssistantMessage, SystemMessage, UserMessage, check_request
from ._base import SaverContractBase, Session, retention_or_skip
from ._chat import run_conversation, tool_call_reply
from ._support import chain, make_cp, run_threads

__all__ = ["RetentionContract"]


class RetentionContract(SaverContractBase):
    """The checks of retention (savers that override ``prune`` and ``delete_thread``): what a prune keeps and drops,
    what both refuse, and a conversation that goes on after them."""

    def test_prune_keeps_the_head_the_newest_safe_and_the_newest_ones(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
            chain(saver, [True, True, False, True, False, False, False])
            chain(saver, [True, True], thread="u")
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
            saver.put(make_cp(8, "t8", "t7", n=8), expected_head="t7")  # the chain goes on from its head
            head = session.fresh().get("t")
            assert head is not None and head.id == "t8" and sorted(saver.threads()) == ["t", "u"]

    def test_prune_by_time_and_count(self, tmp_path: Path) -> None:
        old, recent = datetime(2020, 1, 1, tzinfo=UTC), datetime.now(UTC)
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
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

        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
            chain(saver, [True, True, True])
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
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
            chain(saver, [True, False, True])
            chain(saver, [True, True], thread="u")
            assert saver.delete_thread("t") == 3
            for reader in (saver, session.fresh()):
                assert reader.get("t") is None and reader.list("t") == [] and reader.latest_safe("t") is None
                assert reader.get("t", "t1") is None and reader.threads() == ["u"]
                assert [c.values["n"] for c in reader.list("u")] == [2, 1]
            import pytest

            with pytest.raises(CheckpointConflictError):  # a run still writing there fails
                saver.put(make_cp(4, "t4", "t3", n=4), expected_head="t3")
            saver.put(make_cp(1, "again-1", n=1), expected_head=None)
            head = session.fresh().get("t")
            assert head is not None and head.id == "again-1" and sorted(saver.threads()) == ["t", "u"]

    def test_values_of_pruned_checkpoints_are_stored_again_when_reused(self, tmp_path: Path) -> None:
        """A saver that shares storage between checkpoints must not point a new checkpoint at storage a prune
        freed: here a rewind to a pruned state, written through the saver that pruned and (durable storage) through
        another one that read that state before the prune."""
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
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
                parent = saver.put(make_cp(seq, f"t{seq}", parent, **values), expected_head=parent).id
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
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
            chat = run_conversation(saver)
            before = chat.graph.get_state(chat.config).values["messages"]
            chat.script.append(tool_call_reply("c3"))
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
        with Session(self, tmp_path) as session:
            saver = retention_or_skip(session.saver)
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
                        cp = make_cp(seq, f"t{seq}", parent, safe=seq % 3 == 0, messages=messages, n=seq % 2)
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

            run_threads([write, prune])
            assert errors == []
            pruner.prune("t", keep_last=3)
            reader = session.fresh()
            kept = reader.list("t")
            assert [c.seq for c in kept] == [30, 29, 28]
            for checkpoint in kept:
                assert checkpoint.values == written[checkpoint.id]
