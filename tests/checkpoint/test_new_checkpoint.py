"""``new_checkpoint`` builds, field for field, the checkpoint ``Checkpoint.model_construct`` builds of the same
fields (it is the faster way to the same object: one is built per step)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rxgraph import Checkpoint
from rxgraph.checkpoint._base import new_checkpoint

_names = st.text(alphabet="abcxyz_-0123456789", min_size=1, max_size=8)
_optional_text = st.none() | st.text(max_size=12)
_fields = st.fixed_dictionaries(
    {
        "id": _names,
        "thread_id": _names,
        "seq": st.integers(min_value=1, max_value=10**9),
        "values": st.dictionaries(_names, st.integers() | st.text(max_size=5), max_size=3).map(MappingProxyType),
        "run_id": _names,
        "source": st.sampled_from(["input", "loop", "rewind", "update", "error", "interrupt"]),
        "parent_id": st.none() | _names,
        "node": st.none() | _names,
        "next": st.lists(_names, max_size=3).map(tuple),
        "safe": st.booleans(),
        "unsafe_reason": _optional_text,
        "rolled_back_from": st.none() | _names,
        "error": _optional_text,
        "created_at": st.datetimes(timezones=st.just(UTC)),
        "pending": st.none() | st.just({}) | st.dictionaries(_names, st.integers(), min_size=1, max_size=2),
    }
)


def _constructed(fields: dict[str, Any]) -> Checkpoint:
    """The reference: pydantic's own constructor without validation, as ``new_checkpoint`` documents its fields."""
    return Checkpoint.model_construct(**{**fields, "pending": fields["pending"] or None})


@settings(max_examples=200, derandomize=True)
@given(_fields)
def test_it_builds_what_model_construct_builds(fields: dict[str, Any]) -> None:
    built, reference = new_checkpoint(**fields), _constructed(fields)

    assert type(built) is Checkpoint
    assert list(built.__dict__.items()) == list(reference.__dict__.items())  # the same fields, in the same order
    assert built.model_fields_set == reference.model_fields_set
    assert built.__pydantic_extra__ == reference.__pydantic_extra__
    assert built.__pydantic_private__ == reference.__pydantic_private__
    assert built == reference and repr(built) == repr(reference)


def test_what_it_builds_behaves_as_a_checkpoint() -> None:
    built = new_checkpoint(id="c1", thread_id="t", seq=1, values=MappingProxyType({"x": 1}), run_id="r", source="loop")

    assert built.created_at.tzinfo is UTC and built.created_at <= datetime.now(UTC)
    copied = built.model_copy(update={"seq": 2})
    assert copied.seq == 2 and built.seq == 1 and copied.model_fields_set == built.model_fields_set
    assert built.model_fields_set is not copied.model_fields_set
    other = new_checkpoint(id="c2", thread_id="t", seq=2, values=MappingProxyType({}), run_id="r", source="loop")
    assert other.model_fields_set is built.model_fields_set  # every field set: one set of their names for all
    changed = built.model_copy(update={"error": "E: late"})  # pydantic adds to the copy's own set
    assert changed.error == "E: late" and other.model_fields_set == set(Checkpoint.model_fields)
    with pytest.raises(ValidationError):
        built.error = "E: never"  # type: ignore[misc]  # frozen: nothing assigns a field (or adds its name)
    assert built.error is None and other.model_fields_set == set(Checkpoint.model_fields)
    assert Checkpoint.model_validate(dict(built)) == built  # and it validates as a checkpoint built by hand
