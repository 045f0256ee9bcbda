"""Safe serialisation of state values: JSON, with an explicit registry of the pydantic models allowed in it.

Nothing is ever unpickled: a stored value can only turn back into JSON scalars, the frozen containers of
:mod:`rxgraph._frozen`, tuples, frozensets, bytes, and instances of models registered by name.

Encoding (standard JSON throughout, so any JSON store can hold it):

- ``None``, ``bool``, ``str``, finite ``float`` and ``int`` are themselves, except an int whose decimal text is
  longer than Python reads back by default (4,300 digits, ``sys.set_int_max_str_digits``): ``{"$int": "<hex>"}``;
- ``FrozenList`` and ``list`` are JSON arrays, decoded as ``FrozenList``;
- ``FrozenDict``, ``dict`` and ``MappingProxyType`` with ``str`` keys are JSON objects, decoded as ``FrozenDict``;
- everything else is a *tagged* object, whose single tag key starts with ``$``: ``{"$tuple": [...]}``,
  ``{"$set": [...]}`` (frozenset and set, decoded as frozenset), ``{"$bytes": "<base64>"}``,
  ``{"$float": "nan" | "inf" | "-inf"}``, and a registered model (below);
- a whole text that holds a lone surrogate (``"\\ud83d"``: half of an emoji split across two streamed deltas), which
  UTF-8 cannot encode, is wrapped once more: ``{"$wtf8": "<base64>"}`` holds the text encoded as UTF-8 with
  ``surrogatepass``. Escaping the surrogates as ``\\u`` sequences instead would not be exact: ``json.loads`` turns an
  escaped pair back into one code point. Every text ``dumps`` produces can therefore be encoded as UTF-8.

A registered model is ``{"$type": "<registered name>", "data": {...}}``: ``data`` is pydantic's JSON-mode dump by
alias, read back with a lax ``model_validate``, which restores what the field types say (a tuple, a datetime, a
nested model). A field whose type leaves the value open (``Any``, ``object``, ``dict[str, Any]``, a bare ``list``, a
union such as ``int | str``, an extra field) gets no such help: pydantic's JSON would turn nan into None, a tuple into
a list, bytes into text, a model into a dict, int keys into text. Such a field, when it holds anything but plain JSON
(None, bools, short ints, finite floats, strings, lists and str-keyed dicts of those), is stored in the serde's own
encoding instead: ``{"$model": "<name>", "data": {<the other fields>}, "values": {<key>: <encoded value>}}``. Inside
``values`` the containers are the ones a model holds: arrays are lists, objects dicts, ``$set`` a set; frozen ones
are wrapped, ``{"$frozen": [...]}`` (a ``FrozenList``), ``{"$frozen": {...}}`` (a ``FrozenDict``), ``{"$frozen":
{"$set": [...]}}`` (a frozenset); a dict with keys other than strings is ``{"$dict": [[key, value], ...]}``. What
that encoding cannot hold either (a datetime in a field typed ``Any``) is refused with ``SerializationError`` naming
the key and the field. A model whose fields are all typed (the rxgraph messages) is always stored as ``$type``, byte
for byte as before, and rows written before ``$model`` existed read as they always did.

Non-finite floats and ints too long for decimal text are handled explicitly: outside models and in open fields they
are tagged (above) and come back as they were; in a model's typed fields (``x: float``, ``n: int``) they are refused
with ``SerializationError``, because pydantic's JSON-mode dump leaves them as they are, which standard JSON cannot
carry (or Python cannot read back).

Values nest at most ``MAX_DEPTH`` (100) levels of containers and models: deeper ones are refused with
``SerializationError`` when written, so that no write or read of them meets Python's recursion limit.

User keys cannot be mistaken for tags: a key of a user mapping that starts with ``$`` is stored with one more ``$``
in front, so an object with a key that starts with exactly one ``$`` is always a tag.

Types are matched exactly (``type(value) is int``, not ``isinstance``): an ``IntEnum``, a named tuple or a subclass of
a registered model would come back as something else, so they are refused rather than silently changed.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import threading
import types
import typing
from collections import abc
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, Discriminator

from .._frozen import MAX_DEPTH, FrozenDict, FrozenList
from ..agent._approval import ApprovalRequest, Approve, Edit, Reject
from ..errors import DecodeError, InvalidArgumentError, InvalidTypeError, SerializationError
from ..messages._parts import AudioPart, CacheBreakpoint, FilePart, ImagePart, RefusalPart, TextPart
from ..messages._types import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._decoding import TreeDecoder, is_root_model, parse, unwrap_wtf8

__all__ = ["Serde", "default_serde", "encode_int", "json_text", "parse_json_text", "register_model"]

_M = TypeVar("_M", bound=type[BaseModel])

_MESSAGE_MODELS: tuple[tuple[type[BaseModel], str], ...] = (
    (SystemMessage, "rxgraph.SystemMessage"),
    (UserMessage, "rxgraph.UserMessage"),
    (AssistantMessage, "rxgraph.AssistantMessage"),
    (ToolMessage, "rxgraph.ToolMessage"),
    (ToolCall, "rxgraph.ToolCall"),
    (TextPart, "rxgraph.TextPart"),
    (RefusalPart, "rxgraph.RefusalPart"),
    (ImagePart, "rxgraph.ImagePart"),
    (AudioPart, "rxgraph.AudioPart"),
    (FilePart, "rxgraph.FilePart"),
    (CacheBreakpoint, "rxgraph.CacheBreakpoint"),
    (ApprovalRequest, "rxgraph.ApprovalRequest"),
    (Approve, "rxgraph.Approve"),
    (Edit, "rxgraph.Edit"),
    (Reject, "rxgraph.Reject"),
)

_MAPPING_TYPES = (dict, FrozenDict, MappingProxyType)
# Python refuses to turn an int of more than 4,300 decimal digits into text or back (sys.set_int_max_str_digits,
# whose default this is), which json.dumps and json.loads do: such ints are tagged and written in hexadecimal, which
# the limit does not cover. The bound is the default, not the current setting, so that any process reads the text.
_BIG_INT = 10**4300
# What a model's typed field can hold that its JSON dump cannot carry: (what it is, why and what to do).
_UNJSONABLE = {
    "float": (
        "a non-finite float",
        "which JSON cannot carry; use a finite value or None in the model, or store the number outside the model "
        "(floats outside models are tagged)",
    ),
    "int": (
        "an int of more than 4300 digits",
        "which Python does not read back from decimal text; store the number outside the model's typed fields "
        "(elsewhere ints of any size are stored exactly), or as text",
    ),
}


class _Unencodable(Exception):
    """Raised inside the encoder; carries the path to the offending value so the error can name it."""

    def __init__(self, value: Any, reason: str, *, by_type: bool = False) -> None:
        super().__init__(reason)
        self.value = value
        self.reason = reason
        self.by_type = by_type  # refused for its type (not for its depth, its keys...)
        self.path: list[str] = []


class Serde:
    """JSON encoding of state values with an explicit registry of pydantic models.

    A new ``Serde`` knows the rxgraph message types (and ``ToolCall``, the content parts, and the tool approval's
    request and decisions). Register your own models with :meth:`register`; frozen models are strongly recommended,
    because savers share stored values between checkpoints instead of copying them. Thread-safe.

    Reading back is a :class:`~rxgraph.checkpoint._decoding.TreeDecoder`'s work: the serde keeps one for its
    registered models, and makes a new one when a model is registered.
    """

    def __init__(self, models: Iterable[type[BaseModel]] = ()) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, type[BaseModel]] = {}
        self._by_type: dict[type[BaseModel], str] = {}
        self._decoder = TreeDecoder(self._by_name)
        # Per registered class, its fields whose type leaves the value open (see _open_fields); filled when first
        # needed (a class's annotations may only resolve once the module that defines it has finished loading).
        self._open_fields: dict[type[BaseModel], tuple[tuple[str, str], ...]] = {}
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
            self._decoder = TreeDecoder(by_name)
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
            SerializationError: ``value`` holds something that cannot be stored exactly, or nests more than
                ``MAX_DEPTH`` (100) levels deep (``key`` and ``value_type`` say what; the message says where, by
                its path from ``key``: ``[0]`` an item, ``['name']`` a dict's key, ``.name`` a model's field, and
                how to fix it).
        """
        try:
            tree = self._encode(value) if index is None else self._encode_at(value, index)
        except _Unencodable as error:
            raise _serialization_error(error, key) from None
        try:
            text = json.dumps(tree, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:
            # Only a model's own dump can still hold a non-finite float or a huge int (elsewhere they are tagged).
            raise self._unjsonable(tree, key) from None
        except RecursionError:
            # Only a model's own dump can nest this deeply (elsewhere MAX_DEPTH stops it): a recursive model.
            raise SerializationError(
                f"cannot store {_describe_key(key)}: a registered model's fields nest too deeply for JSON; store "
                f"at most {MAX_DEPTH} levels",
                key=key,
            ) from None
        return _utf8_safe(text)

    def _unjsonable(self, tree: Any, key: str | None) -> SerializationError:
        """The error for a tree that ``json.dumps`` refused: what a model's typed field holds that JSON cannot."""
        where, model_name, found = _find_unjsonable(tree)
        what, why = _UNJSONABLE.get(found, ("something", "which JSON cannot carry"))
        return SerializationError(
            f"cannot store {_describe_key(key)}: the model {model_name} holds {what} at {where}, {why}",
            key=key,
            value_type=self._by_name.get(model_name or ""),
        )

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
        return self._decoder.decode(parse(text))

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
        parsed = parse("[" + ",".join(texts) + "]")
        if len(parsed) != len(texts):
            # A damaged text can hold a comma (or brackets) and shift every value after it.
            raise DecodeError(f"expected {len(texts)} encoded values, the texts hold {len(parsed)}")
        decode = self._decoder.decode
        return [decode(obj) for obj in parsed]

    # -- trees ---------------------------------------------------------------------------------------------------

    def _encode(self, value: Any, depth: int = 0, plain: bool = False) -> Any:
        """The JSON tree of ``value``, which sits ``depth`` containers deep in the stored value. ``plain``: inside a
        model's field, where JSON arrays, objects and ``$set`` are the mutable containers a model holds (list, dict,
        set) and the frozen ones are wrapped in ``$frozen``."""
        kind = type(value)
        if kind is str or kind is bool or value is None:
            return value
        if kind is int:
            return value if -_BIG_INT < value < _BIG_INT else {"$int": _int_hex(value)}
        if kind is float:
            if math.isfinite(value):
                return value
            return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        name = self._by_type.get(kind)
        if name is not None:
            return self._encode_model(value, name, _deeper(value, depth))
        if kind is FrozenList or kind is list:
            items = self._encode_items(value, _deeper(value, depth), plain)
            return {"$frozen": items} if plain and kind is FrozenList else items
        if kind in _MAPPING_TYPES:
            if plain and kind is MappingProxyType:
                raise _Unencodable(
                    value,
                    "a MappingProxyType inside a model's field would come back as another type; use a dict",
                    by_type=True,
                )
            tree = self._encode_mapping(value, _deeper(value, depth), plain)
            return {"$frozen": tree} if plain and kind is FrozenDict else tree
        if kind is tuple:
            return {"$tuple": self._encode_items(value, _deeper(value, depth), plain)}
        if kind is frozenset or kind is set:
            tree = {"$set": self._encode_items(value, _deeper(value, depth), plain, "<item>")}
            return {"$frozen": tree} if plain and kind is frozenset else tree
        if kind is bytes:
            return {"$bytes": base64.b64encode(value).decode("ascii")}
        raise _Unencodable(value, self._refusal(value), by_type=True)

    def _encode_items(self, items: Iterable[Any], depth: int, plain: bool, step: object = None) -> list[Any]:
        # A loop rather than a comprehension: one frame per level of nesting, not two.
        out: list[Any] = []
        encode = self._encode
        for index, item in enumerate(items):
            try:
                out.append(encode(item, depth, plain))
            except _Unencodable as error:
                error.path.append(f"[{index if step is None else step!r}]")
                raise
        return out

    def _encode_mapping(self, mapping: Mapping[Any, Any], depth: int, plain: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        encode = self._encode
        for k, v in mapping.items():
            if type(k) is not str:
                if plain:
                    return {"$dict": self._encode_pairs(mapping, depth)}
                raise _Unencodable(
                    mapping, f"a mapping with a {type(k).__name__} key ({k!r}); only str keys can be stored"
                )
            try:
                out["$" + k if k.startswith("$") else k] = encode(v, depth, plain)
            except _Unencodable as error:
                error.path.append(f"[{k!r}]")
                raise
        return out

    def _encode_pairs(self, mapping: Mapping[Any, Any], depth: int) -> list[list[Any]]:
        """A model's dict with keys other than strings, as ``[key, value]`` pairs (JSON object keys are text)."""
        out: list[list[Any]] = []
        encode = self._encode
        for k, v in mapping.items():
            try:
                out.append([encode(k, depth, True), encode(v, depth, True)])
            except _Unencodable as error:
                error.path.append(f"[{k!r}]")
                raise
        return out

    def _encode_model(self, model: BaseModel, name: str, depth: int) -> dict[str, Any]:
        """A registered model: pydantic's JSON dump, which its field types read back exactly; and, when a field
        whose type leaves its value open (``Any``, ``dict[str, Any]``, an extra field...) holds something that JSON
        would turn into something else (a tuple, bytes, nan, a model...), that field in the serde's own encoding."""
        values: dict[str, Any] = {}
        encoded: set[str] = set()  # the attributes in `values`, left out of `data`
        fields = model.__dict__
        extra = model.__pydantic_extra__ or {}
        for attribute, key in self._moved_fields(model, depth):
            value = fields[attribute] if attribute in fields else extra[attribute]
            try:
                values[key] = self._encode(value, depth, True)
            except _Unencodable as error:
                # Something the serde has no encoding for (a datetime, a dataclass, a model not registered) may still
                # come back exactly from pydantic's JSON (a field typed A | B holding an A): then it stays there.
                # Otherwise it is refused, as it would come back changed.
                if not (error.by_type and _json_keeps(model, attribute, value)):
                    error.path.append(f".{attribute}")
                    raise
            else:
                encoded.add(attribute)
        try:
            if not values:
                return {"$type": name, "data": model.model_dump(mode="json", by_alias=True, round_trip=True)}
            # A root model's root is its whole value, which is then in `values`.
            data = (
                None
                if is_root_model(type(model))
                else model.model_dump(mode="json", by_alias=True, round_trip=True, exclude=encoded)
            )
        except Exception as error:  # pydantic's serialisation errors do not share a useful base class
            raise _Unencodable(model, f"pydantic cannot dump the registered model {name!r}: {error}") from error
        return {"$model": name, "data": data, "values": values}

    def _moved_fields(self, model: BaseModel, depth: int) -> list[tuple[str, str]]:
        """The fields (attribute, key in the dump) of ``model`` that pydantic's JSON would not give back as they
        are; none for a model whose field types pin every value (the rxgraph messages, among others)."""
        kind = type(model)
        open_fields = self._open_fields.get(kind)
        if open_fields is None:
            open_fields = self._open_fields[kind] = _open_fields(kind)
        extra = model.__pydantic_extra__
        if not open_fields and not extra:
            return []
        fields = model.__dict__
        moved = [(attribute, key) for attribute, key in open_fields if not _json_plain(fields[attribute], depth)]
        if extra and not all(_json_plain(value, depth) for value in extra.values()):
            # All of them, so that they come back in their order.
            moved.extend((name, name) for name in extra)
        return moved

    def _encode_at(self, value: Any, step: object) -> Any:
        try:
            return self._encode(value, 1)
        except _Unencodable as error:
            error.path.append(f"[{step!r}]")
            raise

    def _refusal(self, value: Any) -> str:
        kind = type(value)
        if isinstance(value, BaseModel):
            return (
                f"the pydantic model {_qualname(kind)} is not registered; register it with "
                f"rxgraph.checkpoint.register_model({kind.__name__}) (or on the Serde given to the saver)"
            )
        return (
            f"a value of type {_qualname(kind)} cannot be stored; state values must be None, bool, int, float, "
            "str, bytes, lists, tuples, sets, str-keyed dicts, or registered pydantic models: convert it, or wrap "
            "it in a pydantic model and register that with rxgraph.checkpoint.register_model(...)"
        )


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
    obj = parse(text)
    if type(obj) is dict and len(obj) == 1 and type(obj.get("$wtf8")) is str:
        return unwrap_wtf8(obj["$wtf8"])
    return obj


def _utf8_safe(text: str) -> str:
    """JSON ``text`` as it is when UTF-8 can encode it (the common case, checked cheaply), else wrapped in a
    ``{"$wtf8": "<base64>"}`` object that decodes to exactly ``text`` (see ``unwrap_wtf8`` in ``_decoding``)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _wrap_wtf8(text)
    return text


def _wrap_wtf8(text: str) -> str:
    return '{"$wtf8":"' + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii") + '"}'


def _qualname(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _describe_key(key: str | None) -> str:
    return f"state key {key!r}" if key is not None else "the value"


def _serialization_error(error: _Unencodable, key: str | None) -> SerializationError:
    steps = error.path[::-1]
    # A value refused for its depth has a path a hundred steps long: its start and its end say where.
    path = "".join(steps) if len(steps) <= 12 else "".join(steps[:6]) + "..." + "".join(steps[-3:])
    where = _describe_key(key) + (f" at {path}" if path else "")
    return SerializationError(f"cannot store {where}: {error.reason}", key=key, value_type=type(error.value))


def _find_unjsonable(tree: Any, where: str = "", model: str | None = None) -> tuple[str, str | None, str]:
    """Where the first value of an encoded tree that JSON text cannot carry is (a non-finite float, an int too long
    for decimal text: both only ever in a model's JSON dump), the model holding it, and which kind it is."""
    kind = type(tree)
    if kind is float and not math.isfinite(tree):
        return where or "the top", model, "float"
    if kind is int and not -_BIG_INT < tree < _BIG_INT:
        return where or "the top", model, "int"
    if kind is dict:
        name = tree.get("$type", tree.get("$model"))
        if type(name) is str and "data" in tree:
            found = _find_unjsonable(tree["data"], "", name)
            if found[0] or "values" not in tree:
                return found
            tree = tree["values"]  # models nested in a field of this one
        items: Iterable[tuple[object, Any]] = tree.items()
    elif kind is list:
        items = enumerate(tree)
    else:
        return "", None, ""
    for step, child in items:
        found = _find_unjsonable(child, f"{where}[{step!r}]", model)
        if found[0]:
            return found
    return "", None, ""


def _deeper(value: Any, depth: int) -> int:
    """The depth of what ``value`` (a container or a model, ``depth`` levels down) holds; refused past MAX_DEPTH."""
    if depth >= MAX_DEPTH:
        raise _Unencodable(
            value,
            f"it nests lists, tuples, dicts, sets or models more than {MAX_DEPTH} levels deep, which rxgraph does not "
            "store (writing or reading back deeper values would exhaust Python's recursion limit); flatten it, or "
            "keep it as text (a JSON string, say)",
        )
    return depth + 1


def _int_hex(value: int) -> str:
    return format(value, "x")  # "-1f..." for a negative one; hexadecimal is not subject to the digit limit


def encode_int(value: int) -> int | dict[str, str]:
    """``value`` as JSON data: itself, or ``{"$int": "<hex>"}`` when its decimal text is longer than Python turns
    into an int or back by default (4,300 digits). For showing values too (``rxgraph._json``)."""
    return value if -_BIG_INT < value < _BIG_INT else {"$int": _int_hex(value)}


def _json_plain(value: Any, depth: int) -> bool:
    """Whether pydantic's JSON dump of ``value`` in a field typed ``Any`` reads back as ``value`` itself: None,
    bools, ints short enough for decimal text, finite floats, strings, and lists and str-keyed dicts of those,
    within MAX_DEPTH. (A loop per container: one frame per level.)"""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_BIG_INT < value < _BIG_INT)
    if kind is float:
        return math.isfinite(value)
    if kind is not list and kind is not dict:
        return False
    if depth >= MAX_DEPTH:
        return False
    depth += 1
    if kind is list:
        for item in value:  # noqa: SIM110 - all(...) would add a generator's frame per level
            if not _json_plain(item, depth):
                return False
        return True
    for k, item in value.items():  # noqa: SIM110 - as above
        if type(k) is not str or not _json_plain(item, depth):
            return False
    return True


_BARE_CONTAINERS = frozenset(
    {list, dict, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Mapping, abc.MutableMapping}
    | {abc.Set, abc.MutableSet, abc.Collection, abc.Iterable}
)


def _open_fields(model_cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """The fields of ``model_cls`` whose type leaves their value open to JSON: each as (attribute, its key in
    ``model_dump(by_alias=True)``, which ``model_validate`` takes back)."""
    return tuple(
        (attribute, info.serialization_alias or info.alias or attribute)
        for attribute, info in model_cls.model_fields.items()
        if _is_open(info.annotation, {model_cls}, discriminated=info.discriminator is not None)
    )


def _is_open(annotation: Any, seen: set[type], *, discriminated: bool = False) -> bool:
    """Whether pydantic's JSON of a value typed ``annotation`` may read back as something else: the type leaves the
    value open (``Any``, ``object``, a bare ``list``, a type variable, a model with such a field or with extra
    fields), or it is a union that JSON could resolve to another member (``int | str``, ``A | B`` for two models
    with the same fields; but not ``X | None``, nor a union with a discriminator). Field types pydantic restores
    from JSON (``int``, ``datetime``, ``tuple[int, ...]``, an enum, a model with such fields) are not open."""
    if annotation is Any or annotation is object or isinstance(annotation, TypeVar | typing.ForwardRef | str):
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        marked = any(
            isinstance(meta, Discriminator) or getattr(meta, "discriminator", None) is not None for meta in args[1:]
        )
        return _is_open(args[0], seen, discriminated=discriminated or marked)
    if origin is typing.Union or origin is types.UnionType:
        members = [member for member in args if member is not type(None)]
        if len(members) > 1 and not discriminated and not _one_per_json_kind(members):
            return True
        return any(_is_open(member, seen) for member in members)
    if origin is typing.Literal:
        return False
    if origin is not None:
        return not args or any(arg is not Ellipsis and _is_open(arg, seen) for arg in args)
    if not isinstance(annotation, type):
        return False  # something pydantic knows how to restore (a type alias of JSON values, say)
    if annotation in _BARE_CONTAINERS:
        return True
    if annotation in seen:
        return False  # a model already being looked at (a recursive type): its other fields decide
    seen.add(annotation)
    if issubclass(annotation, BaseModel):
        return (
            annotation is BaseModel  # a field typed BaseModel dumps any model as {}
            or annotation.model_config.get("extra") == "allow"
            or any(
                _is_open(info.annotation, seen, discriminated=info.discriminator is not None)
                for info in annotation.model_fields.values()
            )
        )
    if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
        try:
            hints = typing.get_type_hints(annotation)
        except Exception:  # an annotation that does not resolve here: pydantic has it resolved, we cannot tell
            return True
        return any(_is_open(hint, seen) for hint in hints.values())
    return False


def _one_per_json_kind(members: list[Any]) -> bool:
    """Whether a union's members are a ``str`` and a tuple (a message's content: text or parts): JSON tells them
    apart (a string, an array), so the union reads back as the member it was."""
    kinds = [
        "string" if member is str else "array" if typing.get_origin(member) is tuple else None for member in members
    ]
    return None not in kinds and len(set(kinds)) == len(kinds)


def _json_keeps(model: BaseModel, attribute: str, value: Any) -> bool:
    """Whether ``value``, at ``attribute`` of ``model``, comes back exactly (the same types at every level) from
    pydantic's JSON dump of ``model`` read back as the serde reads a ``$type``. Only for values the serde has no
    encoding of its own for; costs a dump and a validation."""
    try:
        data = json.loads(json.dumps(model.model_dump(mode="json", by_alias=True, round_trip=True), allow_nan=False))
        again = type(model).model_validate(data, strict=False)
    except Exception:  # it does not even come back
        return False
    missing = object()
    back = again.__dict__.get(attribute, (again.__pydantic_extra__ or {}).get(attribute, missing))
    return _same(value, back)


def _same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are equal with the same types at every level (floats by sign too, nan equal to nan; models
    and dataclasses field by field)."""
    kind = type(a)
    if type(b) is not kind:
        return False
    if kind is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if kind is list or kind is tuple or kind is FrozenList:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if kind is dict or kind is FrozenDict:
        return len(a) == len(b) and all(
            _same(ka, kb) and _same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, BaseModel):
        return all(_same(getattr(a, name), getattr(b, name)) for name in kind.model_fields) and _same(
            a.__pydantic_extra__ or {}, b.__pydantic_extra__ or {}
        )
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, field.name), getattr(b, field.name)) for field in dataclasses.fields(a))
    try:
        return bool(a == b)
    except Exception:
        return False


default_serde = Serde()
"""The registry savers use when they are not given one. Register your models here (or build your own ``Serde``)."""


def register_model(model_cls: _M, name: str | None = None) -> _M:
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
