"""freeze: what a checkpoint's values are made of, so that a saver reads back exactly what was written."""

from __future__ import annotations

from types import MappingProxyType

from rxgraph import Checkpoint, FrozenDict, FrozenList
from rxgraph._frozen import freeze
from rxgraph.checkpoint import default_serde


def test_a_mapping_proxy_is_frozen_into_a_frozen_dict_all_the_way_down() -> None:
    proxy = MappingProxyType({"a": [1, {"b": [2]}], "c": MappingProxyType({"d": {3}})})
    frozen = freeze(proxy)
    assert type(frozen) is FrozenDict and frozen == proxy
    assert type(frozen["a"]) is FrozenList and type(frozen["a"][1]) is FrozenDict
    assert type(frozen["a"][1]["b"]) is FrozenList
    assert type(frozen["c"]) is FrozenDict and type(frozen["c"]["d"]) is frozenset
    hash(frozen)
    # What a saver stores is what it reads back: the same types, not a proxy that comes back as a FrozenDict.
    back = default_serde.loads(default_serde.dumps(frozen))
    assert back == frozen and type(back["c"]) is FrozenDict and type(back["a"][1]["b"]) is FrozenList


def test_a_checkpoint_freezes_a_mapping_proxy_value() -> None:
    checkpoint = Checkpoint(
        id="a",
        thread_id="t",
        seq=1,
        values={"settings": MappingProxyType({"tools": ["search"]})},
        run_id="r",
        source="input",
    )
    assert type(checkpoint.values["settings"]) is FrozenDict
    assert type(checkpoint.values["settings"]["tools"]) is FrozenList


def test_frozen_values_are_returned_as_they_are() -> None:
    items = FrozenList([1, 2])
    mapping = FrozenDict({"a": 1})
    assert freeze(items) is items and freeze(mapping) is mapping
    pair = (1, "x")
    assert freeze(pair) is pair
