"""Worker process for test_roundtrip: reads every checkpoint of a database file, as another process would.

Usage: ``python _roundtrip_worker.py DB_PATH``. Registers ``Reading`` under the name the test uses, reads each thread
twice (``list``, whose lists are read as extensions of the previous checkpoint's, and ``get`` by id on a saver that
caches one checkpoint) and prints one JSON object: thread id -> ``[[checkpoint id, canonical values from list,
canonical values from get], ...]`` oldest first. The canonical form (:func:`canonical`) tells apart every type and
every float the savers must keep, and is plain ASCII JSON whatever the strings hold.

The test imports this module for ``Reading``, ``make_serde`` and ``canonical``, so both sides share them.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from rxgraph import FrozenDict, FrozenList
from rxgraph.checkpoint import Serde, SqliteSaver

MODEL_NAME = "tests.roundtrip.Reading"


class Reading(BaseModel):
    """A registered model with a few typed fields."""

    model_config = ConfigDict(frozen=True)

    label: str
    amount: float
    count: int
    flags: tuple[bool, ...] = ()
    note: str | None = None


def make_serde() -> Serde:
    serde = Serde()
    serde.register(Reading, MODEL_NAME)
    return serde


def canonical(value: Any) -> Any:
    """``value`` as type-tagged JSON: equal for two values exactly when they have the same types at every level and
    the same contents (strings by code point, floats by bits except that every nan is the same, mappings in
    order)."""
    kind = type(value)
    if value is None:
        return ["None"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", "nan" if math.isnan(value) else value.hex()]
    if kind is str:
        return ["str", [ord(c) for c in value]]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind is tuple or kind is FrozenList:
        return [kind.__name__, [canonical(item) for item in value]]
    if kind is FrozenDict:
        return ["FrozenDict", [[[ord(c) for c in k], canonical(v)] for k, v in value.items()]]
    if kind is frozenset:
        return ["frozenset", sorted(json.dumps(canonical(item)) for item in value)]
    if kind is Reading:
        return ["Reading", [[name, canonical(getattr(value, name))] for name in Reading.model_fields]]
    return ["unexpected", f"{kind.__module__}.{kind.__qualname__}", repr(value)]


def canonical_values(values: Mapping[str, Any]) -> Any:
    return [[[ord(c) for c in key], canonical(value)] for key, value in values.items()]


def main(path: str) -> int:
    serde = make_serde()
    result: dict[str, list[list[Any]]] = {}
    with SqliteSaver(path, serde=serde) as listing, SqliteSaver(path, serde=serde, cache_size=1) as by_id:
        for thread in sorted(listing.threads()):
            rows = []
            for checkpoint in reversed(listing.list(thread)):
                single = by_id.get(thread, checkpoint.id)
                assert single is not None
                rows.append([checkpoint.id, canonical_values(checkpoint.values), canonical_values(single.values)])
            result[thread] = rows
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
