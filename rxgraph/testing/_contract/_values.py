"""The saver contract's values: what a checkpoint holds reads back exactly, field by field and type by type, from
the saver that wrote it and from another on the same storage; and no caller can change it.

Subclass ``ValuesContract`` as ``Test...`` with your ``make_saver`` (and ``reopen``, for durable storage) to run
only these checks.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ..._frozen import FrozenDict, FrozenList
from ...checkpoint import Checkpoint
from ...checkpoint._base import new_checkpoint
from ...messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._base import SaverContractBase, Session
from ._support import make_cp

__all__ = ["ValuesContract"]


class ValuesContract(SaverContractBase):
    """The checks of what a checkpoint holds: every field and value round-trips, and stored checkpoints are frozen."""

    def test_values_round_trip(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
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
        first = make_cp(1, "a", n=1)
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
        with Session(self, tmp_path) as session:
            session.saver.put(first, expected_head=None)
            session.saver.put(second, expected_head="a")
            for reader in (session.saver, session.fresh()):
                assert reader.list("t") == [second, first]
                assert reader.get("t", "b") == second

    def test_checkpoints_cannot_be_changed_by_callers(self, tmp_path: Path) -> None:
        import pytest

        values: dict[str, Any] = {"items": [1, 2], "meta": {"k": "v"}}
        with Session(self, tmp_path) as session:
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
        with Session(self, tmp_path) as session:
            saver = session.saver
            base = saver.put(make_cp(1, "a", messages=[UserMessage(content="hi")], step=1), expected_head=None)
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
