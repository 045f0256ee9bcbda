"""Key strategies: how a node's update is merged into the state."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .._frozen import FrozenDict, FrozenList, freeze
from ..errors import InvalidTypeError, InvalidUpdateError

__all__ = ["KeyStrategy", "StateSchema"]


class KeyStrategy(enum.Enum):
    """How an update to one state key combines with the value already there."""

    REPLACE = "replace"
    """The update's value replaces the old one (the default for keys a schema does not list)."""
    APPEND = "append"
    """The value is a :class:`~rxgraph.FrozenList`; an update appends one item, or every item of a list or tuple."""
    MERGE = "merge"
    """The value is a :class:`~rxgraph.FrozenDict`; an update (a mapping) is merged in shallowly, its keys winning."""


_EMPTY: FrozenList[Any] = FrozenList()


class StateSchema:
    """The key strategies of a graph and the merge that applies them.

    States are plain dicts that are never mutated once built: :meth:`merge` returns a new dict (a shallow copy) that
    shares every unchanged value with the old one, and freezes what the update brings in.
    """

    __slots__ = ("_strategies",)

    def __init__(self, strategies: Mapping[str, KeyStrategy] | None = None) -> None:
        checked: dict[str, KeyStrategy] = {}
        for key, strategy in (strategies or {}).items():
            if not isinstance(key, str):
                raise InvalidTypeError(f"state keys must be strings, got {key!r}", argument="schema")
            if not isinstance(strategy, KeyStrategy):
                raise InvalidTypeError(
                    f"state key {key!r}: expected a KeyStrategy, got {strategy!r}", argument="schema"
                )
            checked[key] = strategy
        self._strategies = checked

    @property
    def strategies(self) -> Mapping[str, KeyStrategy]:
        """The declared strategies (keys not listed use ``REPLACE``)."""
        return dict(self._strategies)

    def strategy(self, key: str) -> KeyStrategy:
        return self._strategies.get(key, KeyStrategy.REPLACE)

    def merge(
        self, state: Mapping[str, Any], update: Mapping[str, Any] | None, *, origin: str, node: str | None = None
    ) -> dict[str, Any]:
        """A new state: ``state`` with ``update`` applied key by key.

        Args:
            state: the state before (not changed).
            update: the keys to merge in (None or empty: a copy of ``state``).
            origin: what the update comes from, for error messages ("node 'x'", "input", ...).
            node: the node it comes from, if one (the error's ``node``).

        Raises:
            InvalidUpdateError: the update is not a mapping of string keys, or a ``MERGE`` key gets a non-mapping.
        """
        new = dict(state)
        if not update:
            return new
        if not isinstance(update, Mapping):
            raise InvalidUpdateError(
                f"{origin}: an update must be a mapping of state keys, got {type(update).__name__}", node=node
            )
        strategies = self._strategies
        for key, value in update.items():
            if not isinstance(key, str):
                raise InvalidUpdateError(f"{origin}: state keys must be strings, got {key!r}", node=node)
            strategy = strategies.get(key, KeyStrategy.REPLACE)
            if strategy is KeyStrategy.REPLACE:
                new[key] = freeze(value)
            elif strategy is KeyStrategy.APPEND:
                old = new.get(key, _EMPTY)
                if not isinstance(old, FrozenList):
                    old = FrozenList(freeze(v) for v in old) if isinstance(old, list | tuple) else FrozenList([old])
                items = value if isinstance(value, list | tuple | FrozenList) else (value,)
                new[key] = old.extended(freeze(v) for v in items)
            else:
                if not isinstance(value, Mapping):
                    raise InvalidUpdateError(
                        f"{origin}: key {key!r} uses KeyStrategy.MERGE and needs a mapping, got {type(value).__name__}",
                        node=node,
                    )
                old_map = new.get(key)
                merged: dict[Any, Any] = dict(old_map) if isinstance(old_map, Mapping) else {}
                merged.update((k, freeze(v)) for k, v in value.items())
                new[key] = FrozenDict(merged)
        return new
