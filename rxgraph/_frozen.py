"""Immutable containers for state values.

State values are shared between successive states and checkpoints instead of being copied, so they must not change
once stored. :func:`freeze` turns the mutable built-in containers of an update into immutable ones;
:class:`FrozenList` is the value of an ``APPEND`` key and appends in amortised O(1) without copying the history.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, overload

from .errors import InvalidArgumentError

__all__ = ["MAX_DEPTH", "FrozenDict", "FrozenList", "freeze"]

_T = TypeVar("_T")

MAX_DEPTH = 100
"""How many levels of containers (lists, tuples, dicts, sets; a registered model counts as one) a stored value may
nest. Far above what state holds in practice, and low enough that freezing, encoding, decoding and validating such
a value stay well within Python's default recursion limit (1,000 frames), whatever the caller's stack."""
_K = TypeVar("_K")
_V = TypeVar("_V")

# Guards the "is this view the tail of its backing list?" check and the append that follows.
_EXTEND_LOCK = threading.Lock()


class _Storage(list):  # type: ignore[type-arg]
    """The backing list of ``FrozenList`` views. ``origin`` says which list (weakly) and how long a prefix of it
    this one was copied from when a view forked, so a fork still knows its prefix is the same items."""

    __slots__ = ("__weakref__", "origin")

    def __init__(self, items: Iterable[Any] = (), origin: tuple[weakref.ref[_Storage], int] | None = None) -> None:
        super().__init__(items)
        self.origin = origin


class FrozenList(Sequence[_T]):
    """An immutable list that shares storage with the lists it was extended from.

    ``extended(items)`` returns a new ``FrozenList``; when the receiver is the newest view of its backing list (the
    common case: a conversation that grows by appending), the items are appended to that backing list in place and
    both views share it, so a step costs O(len(items)) however long the history is. Extending an older view (a run
    that starts again from an earlier checkpoint) copies once and forks.

    Compares equal to any list or tuple with the same items, so ``state["messages"] == [m1, m2]`` works.
    """

    __slots__ = ("_items", "_len")

    _items: _Storage
    _len: int

    def __init__(self, items: Iterable[_T] = ()) -> None:
        self._items = _Storage(items)
        self._len = len(self._items)

    @classmethod
    def _view(cls, items: _Storage, length: int) -> FrozenList[_T]:
        view: FrozenList[_T] = cls.__new__(cls)
        view._items = items
        view._len = length
        return view

    def extended(self, items: Iterable[_T]) -> FrozenList[_T]:
        """A new list with ``items`` added at the end; this one is unchanged."""
        new = list(items)
        if not new:
            return self
        with _EXTEND_LOCK:
            if len(self._items) == self._len:
                backing = self._items
                backing.extend(new)
            else:
                # A slice copies the prefix at C speed; an islice fed it item by item (50 times slower).
                backing = _Storage(self._items[: self._len], (weakref.ref(self._items), self._len))
                backing.extend(new)
            return self._view(backing, len(backing))

    def shares_prefix_with(self, older: FrozenList[Any]) -> bool:
        """True when the first ``len(older)`` items of this list are ``older``'s very items, known without comparing
        them: both are views of one storage, or this one's storage was forked from ``older``'s (possibly through a
        few forks) at or after ``len(older)``. Used to check and store only what was appended."""
        items, limit = self._items, self._len
        for _ in range(16):  # forks of forks: a short walk; beyond it the caller compares items instead
            if items is older._items:
                return older._len <= limit
            origin = items.origin
            parent = origin[0]() if origin is not None else None
            if origin is None or parent is None:
                return False
            items, limit = parent, min(limit, origin[1])
        return False

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> _T: ...

    @overload
    def __getitem__(self, index: slice) -> FrozenList[_T]: ...

    def __getitem__(self, index: int | slice) -> _T | FrozenList[_T]:
        if isinstance(index, slice):
            return FrozenList(self._items[: self._len][index])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("FrozenList index out of range")
        item: _T = self._items[index]
        return item

    def __iter__(self) -> Iterator[_T]:
        # The backing list may grow while we iterate (another view appending); islice stops at our own length.
        return itertools.islice(self._items, self._len)

    def __reversed__(self) -> Iterator[_T]:
        items = self._items
        for i in range(self._len - 1, -1, -1):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenList):
            return self._len == other._len and (
                self._items is other._items or all(a == b for a, b in zip(self, other, strict=True))
            )
        if isinstance(other, list | tuple):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Iterable[_T]) -> FrozenList[_T]:
        return self.extended(other)

    def __repr__(self) -> str:
        return f"FrozenList({list(self)!r})"


class FrozenDict(Mapping[_K, _V]):
    """An immutable, hashable mapping (the value of a ``MERGE`` key, and any dict stored in the state)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[_K, _V] | Iterable[tuple[_K, _V]] = ()) -> None:
        self._data: dict[_K, _V] = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __or__(self, other: Mapping[_K, _V]) -> FrozenDict[_K, _V]:
        return FrozenDict({**self._data, **other})

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"


# What freeze returns as it is, by exact type (one set lookup: the common case, a message or a number, costs no
# more). Subclasses of these go the long way round, and come back as they are too.
_KEPT = frozenset({str, int, float, bool, bytes, type(None), FrozenList, FrozenDict, frozenset})


def freeze(value: Any) -> Any:
    """Return ``value`` with every list, dict and set inside it replaced by an immutable equivalent.

    Lists become :class:`FrozenList`, dicts and ``MappingProxyType`` views :class:`FrozenDict`, sets ``frozenset``;
    tuples are rebuilt only if an item changed. Anything else (numbers, strings, frozen pydantic models, user
    objects) is returned as it is: keeping those immutable is the caller's part of the contract.

    Containers may nest at most :data:`MAX_DEPTH` levels below ``value`` (``value`` itself one more, since it is
    often a mapping of state values: a run's input, a node's update). Already frozen containers are kept as they
    are, not walked; the saver checks those when it stores them.

    Raises:
        InvalidArgumentError: ``value`` nests deeper than that; raised before anything runs or is stored, so that
            no later step (storing, reading back, validating) meets a bare ``RecursionError``.
    """
    if type(value) in _KEPT:
        return value
    return _freeze(value, 0)


def _freeze(value: Any, depth: int) -> Any:
    """``freeze`` of ``value``, which sits ``depth`` containers below the value given to ``freeze``. Two frames per
    level (this function and a comprehension), so that the depth limit, not Python's recursion limit, stops it."""
    if isinstance(value, list):
        inner = _below(depth)
        return FrozenList([v if type(v) in _KEPT else _freeze(v, inner) for v in value])
    if isinstance(value, dict | MappingProxyType):  # a proxy is read-only, not frozen: its dict can still change
        inner = _below(depth)
        return FrozenDict({k: v if type(v) in _KEPT else _freeze(v, inner) for k, v in value.items()})
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        inner = _below(depth)
        frozen = tuple([v if type(v) in _KEPT else _freeze(v, inner) for v in value])
        return value if all(a is b for a, b in zip(frozen, value, strict=True)) else frozen
    if isinstance(value, set):
        _below(depth)
        return frozenset(value)
    return value


def _below(depth: int) -> int:
    """The depth of the items of a container at ``depth``; refused past :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise InvalidArgumentError(
            f"a value nests lists, tuples, dicts or sets more than {MAX_DEPTH} levels deep, which rxgraph does not "
            "store (deeper values would exhaust Python's recursion limit when they are written or read back): "
            "flatten it, or keep it as text (a JSON string, say)"
        )
    return depth + 1
