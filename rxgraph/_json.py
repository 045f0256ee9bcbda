"""Stored values and checkpoints as plain JSON, for people and programs that read them (``rxgraph inspect``,
``rxgraph.serve``). One way to show them, so the command line and the server always agree."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence, Set
from typing import Any

from pydantic import BaseModel

from .checkpoint._base import Checkpoint
from .checkpoint._serde import encode_int

__all__ = ["checkpoint_metadata", "to_json"]


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data (what ``json.dumps(..., allow_nan=False)`` accepts), for reading.

    Pydantic models (messages, your registered models) become their JSON dump (``model_dump(mode="json")``, or
    their Python dump shown as below when pydantic cannot write that); lists,
    tuples, ``FrozenList``s and sets become arrays (a set's items sorted by their JSON text, so the output is
    stable); dicts and ``FrozenDict``s objects, with string keys; bytes ``{"$bytes": "<base64>"}``; non-finite
    floats the strings ``"nan"``, ``"inf"`` and ``"-inf"``; an int too long for decimal text (over 4,300 digits)
    ``{"$int": "<hex>"}``; anything else ``{"$repr": repr(value)}``. It is for
    showing, not for reading back: a tuple and a list look the same.
    """
    if isinstance(value, BaseModel):
        try:
            return to_json(value.model_dump(mode="json"))
        except Exception:  # pydantic's serialisation errors share no useful base class
            # A field typed Any can hold what pydantic's JSON cannot show (bytes that are not UTF-8), and the serde
            # stores exactly: show the Python values the way this function shows them.
            return to_json(value.model_dump())
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return encode_int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, Set):
        items = [to_json(v) for v in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, Sequence):
        return [to_json(v) for v in value]
    return {"$repr": repr(value)}


def checkpoint_metadata(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a checkpoint says about itself, as plain JSON data — everything but its thread and its values:
    ``seq``, ``id``, ``parent_id``, ``node``, ``next`` (a list), ``source``, ``run_id``, ``created_at`` (ISO 8601),
    ``messages`` (how many the ``messages`` key holds; None without one), ``safe``, ``unsafe_reason``,
    ``rolled_back_from``, ``error`` (a failed run's, as ``"Type: message"``) and ``pending`` (the work a resume
    needs — an interrupt waiting for its answer, ``Send`` payloads, joins waiting — or None)."""
    messages = checkpoint.values.get("messages")
    return {
        "seq": checkpoint.seq,
        "id": checkpoint.id,
        "parent_id": checkpoint.parent_id,
        "node": checkpoint.node,
        "next": list(checkpoint.next),
        "source": checkpoint.source,
        "run_id": checkpoint.run_id,
        "created_at": checkpoint.created_at.isoformat(),
        "messages": len(messages) if messages is not None else None,
        "safe": checkpoint.safe,
        "unsafe_reason": checkpoint.unsafe_reason,
        "rolled_back_from": checkpoint.rolled_back_from,
        "error": checkpoint.error,
        "pending": to_json(checkpoint.pending) if checkpoint.pending else None,
    }
