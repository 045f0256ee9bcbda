"""Reading back what :class:`~rxgraph.checkpoint.Serde` writes: parsed JSON trees turned into values again.

The encoding is described in :mod:`rxgraph.checkpoint._serde`. A :class:`TreeDecoder` holds the registered models it
may build, as they were when it was made: the ``Serde`` makes a new one whenever a model is registered.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from .._frozen import FrozenDict, FrozenList
from ..errors import DecodeError

__all__ = ["TreeDecoder", "is_root_model", "parse", "unwrap_wtf8"]

_NON_FINITE = frozenset({"nan", "inf", "-inf"})
# The keys of each tagged object (the tag first).
_TAG_KEYS: dict[str, tuple[str, ...]] = {
    "$type": ("$type", "data"),
    "$model": ("$model", "data", "values"),
    "$tuple": ("$tuple",),
    "$set": ("$set",),
    "$bytes": ("$bytes",),
    "$float": ("$float",),
    "$int": ("$int",),
    "$wtf8": ("$wtf8",),
    "$frozen": ("$frozen",),
    "$dict": ("$dict",),
}
_PLAIN_TAGS = frozenset({"$frozen", "$dict"})  # written only inside a model's field
_HEX_INT = re.compile(r"-?[0-9a-f]+")


class TreeDecoder:
    """Turns a parsed tree back into the value it encodes, building only the models it was given. Thread-safe: it
    never changes.

    Args:
        models: the registered models by name; kept as given, so it must not change afterwards.
    """

    def __init__(self, models: Mapping[str, type[BaseModel]]) -> None:
        self._models = models

    def decode(self, obj: Any) -> Any:
        """The value of a parsed tree :meth:`Serde.dumps` wrote (containers frozen)."""
        kind = type(obj)
        if kind is list:
            decode = self.decode
            return FrozenList([decode(item) for item in obj])
        if kind is not dict:
            return obj
        tag = _tag_of(obj)
        if tag is None:
            decode = self.decode
            return FrozenDict({(k[1:] if k.startswith("$") else k): decode(v) for k, v in obj.items()})
        if tag in _PLAIN_TAGS:
            raise DecodeError(f"a {tag} tag is only written inside a model's field: an object with keys {sorted(obj)}")
        return self._decode_tagged(tag, obj)

    def _decode_plain(self, obj: Any) -> Any:
        """A tree written inside a model's field (where the serde encodes ``plain``): arrays are lists, objects
        dicts, and frozen containers are wrapped in ``$frozen``."""
        kind = type(obj)
        if kind is list:
            decode = self._decode_plain
            return [decode(item) for item in obj]
        if kind is not dict:
            return obj
        tag = _tag_of(obj)
        if tag is None:
            decode = self._decode_plain
            return {(k[1:] if k.startswith("$") else k): decode(v) for k, v in obj.items()}
        if tag not in _PLAIN_TAGS and tag != "$set" and tag != "$tuple":
            return self._decode_tagged(tag, obj)  # models, bytes, floats and big ints read the same everywhere
        if len(obj) != 1:
            raise DecodeError(f"not an rxgraph value encoding: an object with keys {sorted(obj)}")
        body = obj[tag]
        decode = self._decode_plain
        if tag == "$tuple":
            return tuple([decode(item) for item in _expect_list(body, tag)])
        if tag == "$set":
            return _hashed(set, [decode(item) for item in _expect_list(body, tag)], tag)
        if tag == "$dict":
            pairs = [decode(pair) for pair in _expect_list(body, tag)]
            if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
                raise DecodeError("a $dict tag must hold [key, value] pairs")
            return _hashed(dict, pairs, tag)
        inner = decode(body)  # $frozen: the mutable container, frozen
        if type(inner) is list:
            return FrozenList(inner)
        if type(inner) is dict:
            return FrozenDict(inner)
        if type(inner) is set:
            return frozenset(inner)
        raise DecodeError("a $frozen tag must hold an array, an object, a $dict or a $set")

    def _decode_model(self, model_cls: type[BaseModel], obj: dict[str, Any]) -> BaseModel:
        """A ``$model``: pydantic's JSON for the fields it carries exactly, the serde's encoding for the others."""
        data, values = obj["data"], obj["values"]
        if type(values) is not dict or not (type(data) is dict or (data is None and is_root_model(model_cls))):
            raise DecodeError("a $model tag must hold a data object (null for a root model) and a values object")
        decode = self._decode_plain
        if data is None:
            if list(values) != ["root"]:
                raise DecodeError("a root model's $model tag must hold its value as values.root")
            return model_cls.model_validate(decode(values["root"]), strict=False)
        merged = dict(data)
        for key, tree in values.items():
            merged[key] = decode(tree)
        return model_cls.model_validate(merged, strict=False)

    def _decode_tagged(self, tag: str, obj: dict[str, Any]) -> Any:
        keys = _TAG_KEYS.get(tag)
        if keys is None or len(obj) != len(keys) or not all(key in obj for key in keys):
            raise DecodeError(f"not an rxgraph value encoding: an object with keys {sorted(obj)}")
        body = obj[tag]
        if tag == "$type" or tag == "$model":
            model_cls = self._models.get(body) if type(body) is str else None
            if model_cls is None:
                raise DecodeError(
                    f"the stored value is a {body!r}, which is not registered in this process; register the model "
                    "under that name before reading it"
                )
            if tag == "$model":
                return self._decode_model(model_cls, obj)
            # Lax: the data is pydantic's JSON-mode dump (lists for tuples, strings for datetimes), which a strict
            # model would refuse in Python mode.
            return model_cls.model_validate(obj["data"], strict=False)
        if tag == "$tuple":
            decode = self.decode
            return tuple([decode(item) for item in _expect_list(body, tag)])
        if tag == "$set":
            decode = self.decode
            return frozenset([decode(item) for item in _expect_list(body, tag)])
        if tag == "$bytes":
            return _b64decode(body, tag)
        if tag == "$int":
            if type(body) is not str or not _HEX_INT.fullmatch(body):
                raise DecodeError(f"a $int tag must hold an int in hexadecimal digits, got {body!r}")
            return int(body, 16)
        if tag == "$wtf8":
            return self.decode(unwrap_wtf8(body))
        if body not in _NON_FINITE:
            raise DecodeError(f"a $float tag must be one of {sorted(_NON_FINITE)}, got {body!r}")
        # A new object each time: distinct nan objects are distinct members of a set (nan != nan), one shared nan
        # would make a set of them collapse.
        return float(body)


def unwrap_wtf8(body: Any) -> Any:
    """The JSON text a ``$wtf8`` tag holds, parsed (not decoded into values)."""
    raw = _b64decode(body, "$wtf8")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise DecodeError(f"a $wtf8 tag must hold UTF-8 (surrogates allowed): {error}") from error
    return parse(text)


def parse(text: str | bytes) -> Any:
    """``json.loads``, raising ``DecodeError`` for text that is not JSON."""
    try:
        return json.loads(text)
    except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
        raise DecodeError(f"not an rxgraph value encoding: {error}") from error
    except RecursionError:  # nothing dumps writes nests this deeply (MAX_DEPTH): damaged, or not ours
        raise DecodeError("not an rxgraph value encoding: it nests too deeply") from None


def _b64decode(body: Any, tag: str) -> bytes:
    if type(body) is not str:
        raise DecodeError(f"a {tag} tag must hold a base64 string")
    try:
        return base64.b64decode(body, validate=True)
    except ValueError as error:  # binascii.Error
        raise DecodeError(f"a {tag} tag must hold a base64 string: {error}") from error


def _expect_list(body: Any, tag: str) -> list[Any]:
    if type(body) is not list:
        raise DecodeError(f"a {tag} tag must hold an array")
    return body


def _tag_of(obj: dict[str, Any]) -> str | None:
    """The tag of an encoded object: its key that starts with exactly one ``$`` (user keys get one more)."""
    for k in obj:
        if k.startswith("$") and not k.startswith("$$"):
            return k
    return None


def is_root_model(model_cls: type[BaseModel]) -> bool:
    """Whether ``model_cls`` is a pydantic ``RootModel``, whose whole value is its ``root``."""
    return bool(getattr(model_cls, "__pydantic_root_model__", False))


def _hashed(build: Callable[[Any], Any], items: Any, tag: str) -> Any:
    """``build(items)`` (a set or a dict), raising ``DecodeError`` when an item that must be hashable is not."""
    try:
        return build(items)
    except TypeError as error:
        raise DecodeError(f"a {tag} tag holds an item that cannot be a set member or a key: {error}") from error
