"""Safe serialisation of state values: JSON, with an explicit registry of the pydantic models allowed in it.

Nothing is ever unpickled: a stored value can only turn back into JSON scalars, the frozen containers of
:mod:`rxgraph._frozen`, tuples, frozensets, bytes, and instances of models registered by name.

Encoding (standard JSON throughout, so any JSON store can hold it):

- ``None``, ``bool``, ``int``, ``str`` and finite ``float`` are themselves;
- ``FrozenList`` and ``list`` are JSON arrays, decoded as ``FrozenList``;
- ``FrozenDict``, ``dict`` and ``MappingProxyType`` with ``str`` keys are JSON objects, decoded as ``FrozenDict``;
- everything else is a *tagged* object, whose single tag key starts with ``$``: ``{"$tuple": [...]}``,
  ``{"$set": [...]}`` (frozenset and set, decoded as frozenset), ``{"$bytes": "<base64>"}``,
  ``{"$float": "nan" | "inf" | "-inf"}`` and ``{"$type": "<registered name>", "data": {...}}`` for a model
  (``data`` is pydantic's JSON-mode dump by alias, read back with a lax ``model_validate``);
- a whole text that holds a lone surrogate (``"\\ud83d"``: half of an emoji split across two streamed deltas), which
  UTF-8 cannot encode, is wrapped once more: ``{"$wtf8": "<base64>"}`` holds the text encoded as UTF-8 with
  ``surrogatepass``. Escaping the surrogates as ``\\u`` sequences instead would not be exact: ``json.loads`` turns an
  escaped pair back into one code point. Every text ``dumps`` produces can therefore be encoded as UTF-8.

Non-finite floats are handled explicitly: outside models they are tagged (above) and come back as they were; inside a
model's data they are refused with ``SerializationError``, because pydantic's JSON-mode dump leaves them as bare
floats, which standard JSON cannot carry.

User keys cannot be mistaken for tags: a key of a user mapping that starts with ``$`` is stored with one more ``$``
in front, so an object with a key that starts with exactly one ``$`` is always a tag.

Types are matched exactly (``type(value) is int``, not ``isinstance``): an ``IntEnum``, a named tuple or a subclass of
a registered model would come back as something else, so they are refused rather than silently changed.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel

from .._frozen import FrozenDict, FrozenList
from ..errors import DecodeError, InvalidArgumentError, InvalidTypeError, SerializationError
from ..messages._approval import ApprovalRequest, Approve, Edit, Reject
from ..messages._types import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

__all__ = ["Serde", "default_serde", "json_text", "parse_json_text", "register"]

_M = TypeVar("_M", bound=type[BaseModel])

_MESSAGE_MODELS: tuple[tuple[type[BaseModel], str], ...] = (
    (SystemMessage, "rxgraph.SystemMessage"),
    (UserMessage, "rxgraph.UserMessage"),
    (AssistantMessage, "rxgraph.AssistantMessage"),
    (ToolMessage, "rxgraph.ToolMessage"),
    (ToolCall, "rxgraph.ToolCall"),
    (ApprovalRequest, "rxgraph.ApprovalRequest"),
    (Approve, "rxgraph.Approve"),
    (Edit, "rxgraph.Edit"),
    (Reject, "rxgraph.Reject"),
)

_NON_FINITE = frozenset({"nan", "inf", "-inf"})
_MAPPING_TYPES = (dict, FrozenDict, MappingProxyType)
_TAGS = frozenset({"$type", "$tuple", "$set", "$bytes", "$float", "$wtf8"})


class _Unencodable(Exception):
    """Raised inside the encoder; carries the path to the offending value so the error can name it."""

    def __init__(self, value: Any, reason: str) -> None:
        super().__init__(reason)
        self.value = value
        self.reason = reason
        self.path: list[str] = []


class Serde:
    """JSON encoding of state values with an explicit registry of pydantic models.

    A new ``Serde`` knows the rxgraph message types (and ``ToolCall``, and the tool approval's request and
    decisions). Register your own models with
    :meth:`register`; frozen models are strongly recommended, because savers share stored values between
    checkpoints instead of copying them. Thread-safe.
    """

    def __init__(self, models: Iterable[type[BaseModel]] = ()) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, type[BaseModel]] = {}
        self._by_type: dict[type[BaseModel], str] = {}
        for model_cls, name in _MESSAGE_MODELS:
            self.register(model_cls, name)
        for model_cls in models:
            self.register(model_cls)

    # -- the registry ------------------------------------------------------------------------------------------

    def register(self, model_cls: _M, name: str | None = None) -> _M:
        """Allow instances of ``model_cls`` in stored values; usable as a decorator.

        The name is what is written to storage, so keep it stable once data exists (pass it explicitly before
        moving or renaming the class). Registering the same class under the same name again does nothing.

        Args:
            model_cls: a pydantic model class (frozen, preferably).
            name: the name to store it under; default ``module.QualName``.

        Returns:
            ``model_cls``.

        Raises:
            InvalidTypeError: ``model_cls`` is not a pydantic model class (``argument="model_cls"``).
            InvalidArgumentError: ``name`` is empty, or it or the class is already registered with another
                (``argument="name"``).
        """
        if not (isinstance(model_cls, type) and issubclass(model_cls, BaseModel)):
            raise InvalidTypeError(f"only pydantic models can be registered, got {model_cls!r}", argument="model_cls")
        if name is None:
            name = f"{model_cls.__module__}.{model_cls.__qualname__}"
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a registered name must be a non-empty string, got {name!r}", argument="name")
        with self._lock:
            known_cls = self._by_name.get(name)
            known_name = self._by_type.get(model_cls)
            if known_cls is model_cls and known_name == name:
                return model_cls
            if known_cls is not None:
                raise InvalidArgumentError(
                    f"the name {name!r} is already registered for {_qualname(known_cls)}; choose another name",
                    argument="name",
                )
            if known_name is not None:
                raise InvalidArgumentError(
                    f"{_qualname(model_cls)} is already registered as {known_name!r}; keep that name (it is the "
                    "one in storage)",
                    argument="name",
                )
            # Copy-on-write: readers look the dicts up without the lock.
            by_name = dict(self._by_name)
            by_name[name] = model_cls
            by_type = dict(self._by_type)
            by_type[model_cls] = name
            self._by_name, self._by_type = by_name, by_type
        return model_cls

    @property
    def registered(self) -> Mapping[str, type[BaseModel]]:
        """The registered models by name."""
        return MappingProxyType(self._by_name)

    # -- text --------------------------------------------------------------------------------------------------

    def dumps(self, value: Any, *, key: str | None = None, index: int | None = None) -> str:
        """Encode ``value`` as standard JSON text, which UTF-8 can always encode.

        Args:
            value: the value to encode.
            key: the state key it belongs to; only for error messages.
            index: its position in the list at ``key``, when it is an item of one; only for error messages.

        Returns:
            The text; :meth:`loads` gives back an equal value of the same types (containers frozen).

        Raises:
            SerializationError: ``value`` holds something that cannot be stored exactly (``key`` and
                ``value_type`` say what); the message says how to fix it.
        """
        try:
            tree = self._encode(value) if index is None else self._encode_at(value, index)
        except _Unencodable as error:
            raise _serialization_error(error, key) from None
        try:
            text = json.dumps(tree, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:
            # Only a model's own dump can still hold a non-finite float (everything else was tagged).
            where, model_name = _find_non_finite(tree)
            raise SerializationError(
                f"cannot store {_describe_key(key)}: the model {model_name} holds a non-finite float at {where}, "
                "which JSON cannot carry; use a finite value or None in the model, or store the number outside "
                "the model (floats outside models are tagged)",
                key=key,
                value_type=self._by_name.get(model_name or ""),
            ) from None
        return _utf8_safe(text)

    def loads(self, text: str | bytes) -> Any:
        """Decode text written by :meth:`dumps`.

        Args:
            text: the text, or its UTF-8 bytes.

        Returns:
            The value; containers come back frozen.

        Raises:
            DecodeError: ``text`` is not an encoding ``dumps`` writes, or names a model not registered here.
            pydantic.ValidationError: a registered model's stored data no longer validates against the class (it
                changed since the data was written); left as pydantic raised it, so its details stay readable.
        """
        return self._decode(_parse(text))

    def loads_many(self, texts: Iterable[str]) -> list[Any]:
        """Decode several texts written by :meth:`dumps` at once (one JSON parse for all of them).

        Args:
            texts: the texts.

        Returns:
            Their values, in order.

        Raises:
            DecodeError: a text is not such an encoding (one that would shift the others included).
            pydantic.ValidationError: a registered model's stored data no longer validates (see :meth:`loads`).
        """
        texts = list(texts)
        parsed = _parse("[" + ",".join(texts) + "]")
        if len(parsed) != len(texts):
            # A damaged text can hold a comma (or brackets) and shift every value after it.
            raise DecodeError(f"expected {len(texts)} encoded values, the texts hold {len(parsed)}")
        decode = self._decode
        return [decode(obj) for obj in parsed]

    # -- trees -------------------------------------------------------------------------------------------------

    def _encode(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return value
        if kind is float:
            if math.isfinite(value):
                return value
            return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        name = self._by_type.get(kind)
        if name is not None:
            try:
                data = value.model_dump(mode="json", by_alias=True, round_trip=True)
            except Exception as error:  # pydantic's serialisation errors do not share a useful base class
                raise _Unencodable(value, f"pydantic cannot dump the registered model {name!r}: {error}") from error
            return {"$type": name, "data": data}
        if kind is FrozenList or kind is list:
            return [self._encode_at(item, index) for index, item in enumerate(value)]
        if kind in _MAPPING_TYPES:
            out: dict[str, Any] = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise _Unencodable(
                        value, f"a mapping with a {type(k).__name__} key ({k!r}); only str keys can be stored"
                    )
                out["$" + k if k.startswith("$") else k] = self._encode_at(v, k)
            return out
        if kind is tuple:
            return {"$tuple": [self._encode_at(item, index) for index, item in enumerate(value)]}
        if kind is frozenset or kind is set:
            return {"$set": [self._encode_at(item, "<item>") for item in value]}
        if kind is bytes:
            return {"$bytes": base64.b64encode(value).decode("ascii")}
        raise _Unencodable(value, self._refusal(value))

    def _encode_at(self, value: Any, step: object) -> Any:
        try:
            return self._encode(value)
        except _Unencodable as error:
            error.path.append(f"[{step!r}]")
            raise

    def _refusal(self, value: Any) -> str:
        kind = type(value)
        if isinstance(value, BaseModel):
            return (
                f"the pydantic model {_qualname(kind)} is not registered; register it with "
                f"rxgraph.checkpoint.register({kind.__name__}) (or on the Serde given to the saver)"
            )
        return (
            f"a value of type {_qualname(kind)} cannot be stored; state values must be None, bool, int, float, "
            "str, bytes, lists, tuples, sets, str-keyed dicts, or registered pydantic models: convert it, or wrap "
            "it in a pydantic model and register that with rxgraph.checkpoint.register(...)"
        )

    def _decode(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is list:
            decode = self._decode
            return FrozenList([decode(item) for item in obj])
        if kind is not dict:
            return obj
        tag = None
        for k in obj:
            if k.startswith("$") and not k.startswith("$$"):
                tag = k
                break
        if tag is None:
            decode = self._decode
            return FrozenDict({(k[1:] if k.startswith("$") else k): decode(v) for k, v in obj.items()})
        return self._decode_tagged(tag, obj)

    def _decode_tagged(self, tag: str, obj: dict[str, Any]) -> Any:
        if tag not in _TAGS or len(obj) != 1 + (tag == "$type") or (tag == "$type" and "data" not in obj):
            raise DecodeError(f"not an rxgraph value encoding: an object with keys {sorted(obj)}")
        body = obj[tag]
        if tag == "$type":
            model_cls = self._by_name.get(body)
            if model_cls is None:
                raise DecodeError(
                    f"the stored value is a {body!r}, which is not registered in this process; register the model "
                    "under that name before reading it"
                )
            # Lax: the data is pydantic's JSON-mode dump (lists for tuples, strings for datetimes), which a strict
            # model would refuse in Python mode.
            return model_cls.model_validate(obj["data"], strict=False)
        if tag == "$tuple":
            decode = self._decode
            return tuple(decode(item) for item in _expect_list(body, tag))
        if tag == "$set":
            decode = self._decode
            return frozenset(decode(item) for item in _expect_list(body, tag))
        if tag == "$bytes":
            return _b64decode(body, tag)
        if tag == "$wtf8":
            return self._decode(_unwrap_wtf8(body))
        if body not in _NON_FINITE:
            raise DecodeError(f"a $float tag must be one of {sorted(_NON_FINITE)}, got {body!r}")
        # A new object each time: distinct nan objects are distinct members of a set (nan != nan), one shared nan
        # would make a set of them collapse.
        return float(body)


def json_text(obj: Any) -> str:
    """``obj`` (made of JSON types only) as standard JSON text that UTF-8 can encode, read back exactly by
    :func:`parse_json_text`. For JSON a saver writes beside the values (a row's manifest, say): strings stay as they
    are rather than ``\\u`` escapes, and a text with a lone surrogate is wrapped as ``dumps`` wraps one.

    Raises:
        ValueError: ``obj`` holds a non-finite float.
        TypeError: ``obj`` holds something that is not a JSON type.
    """
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if type(obj) is dict and len(obj) == 1 and type(obj.get("$wtf8")) is str:
        # An object that looks like the wrapper: wrap it, or parse_json_text would take it for one.
        return _wrap_wtf8(text)
    return _utf8_safe(text)


def parse_json_text(text: str | bytes) -> Any:
    """The JSON value of a text :func:`json_text` wrote (plain JSON, unwrapped when wrapped).

    Raises:
        DecodeError: ``text`` is not JSON, or its wrapper is damaged.
    """
    obj = _parse(text)
    if type(obj) is dict and len(obj) == 1 and type(obj.get("$wtf8")) is str:
        return _unwrap_wtf8(obj["$wtf8"])
    return obj


def _utf8_safe(text: str) -> str:
    """JSON ``text`` as it is when UTF-8 can encode it (the common case, checked cheaply), else wrapped in a
    ``{"$wtf8": "<base64>"}`` object that decodes to exactly ``text`` (see :func:`_unwrap_wtf8`)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _wrap_wtf8(text)
    return text


def _wrap_wtf8(text: str) -> str:
    return '{"$wtf8":"' + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii") + '"}'


def _unwrap_wtf8(body: Any) -> Any:
    """The JSON text a ``$wtf8`` tag holds, parsed (not decoded into values)."""
    raw = _b64decode(body, "$wtf8")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise DecodeError(f"a $wtf8 tag must hold UTF-8 (surrogates allowed): {error}") from error
    return _parse(text)


def _parse(text: str | bytes) -> Any:
    """``json.loads``, raising ``DecodeError`` for text that is not JSON."""
    try:
        return json.loads(text)
    except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
        raise DecodeError(f"not an rxgraph value encoding: {error}") from error


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


def _qualname(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _describe_key(key: str | None) -> str:
    return f"state key {key!r}" if key is not None else "the value"


def _serialization_error(error: _Unencodable, key: str | None) -> SerializationError:
    path = "".join(reversed(error.path))
    where = _describe_key(key) + (f" at {path}" if path else "")
    return SerializationError(f"cannot store {where}: {error.reason}", key=key, value_type=type(error.value))


def _find_non_finite(tree: Any, where: str = "", model: str | None = None) -> tuple[str, str | None]:
    """Where the first non-finite float of an encoded tree is, and the model holding it."""
    if isinstance(tree, float) and not math.isfinite(tree):
        return where or "the top", model
    if isinstance(tree, dict):
        if "$type" in tree and "data" in tree:
            return _find_non_finite(tree["data"], "", str(tree["$type"]))
        items: Iterable[tuple[object, Any]] = tree.items()
    elif isinstance(tree, list):
        items = enumerate(tree)
    else:
        return "", None
    for step, child in items:
        found, found_model = _find_non_finite(child, f"{where}[{step!r}]", model)
        if found:
            return found, found_model
    return "", None


default_serde = Serde()
"""The registry savers use when they are not given one. Register your models here (or build your own ``Serde``)."""


def register(model_cls: _M, name: str | None = None) -> _M:
    """Register ``model_cls`` with :data:`default_serde`, which savers use unless given a ``Serde``; usable as a
    decorator.

    Args:
        model_cls: a pydantic model class (frozen, preferably).
        name: the name to store it under; default ``module.QualName``. Keep it stable once data exists.

    Returns:
        ``model_cls``.

    Raises:
        InvalidTypeError: ``model_cls`` is not a pydantic model class.
        InvalidArgumentError: ``name`` is empty, or it or the class is already registered with another.
    """
    return default_serde.register(model_cls, name)
