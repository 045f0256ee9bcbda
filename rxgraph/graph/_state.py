"""Key strategies: how a node's update is merged into the state.

A state key has one strategy: a :class:`KeyStrategy` (``REPLACE``, the default; ``APPEND``; ``MERGE``) or a reducer
function ``reducer(current, update) -> new`` (:data:`KeyReducer`). Every update goes through it: a node's, a run's
input, and ``update_state``'s. ``None`` is a value like any other; an update that means "no change" to a key leaves
the key out.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from .._frozen import FrozenDict, FrozenList, freeze
from ..errors import InvalidTypeError, InvalidUpdateError

__all__ = ["KeyReducer", "KeyStrategy", "StateSchema"]


class KeyStrategy(enum.Enum):
    """How an update to one state key combines with the value already there.

    ``None`` is a value like any other: ``REPLACE`` stores it, ``APPEND`` appends it as one item, ``MERGE`` refuses
    it (it is not a mapping). To leave a key as it is, leave it out of the update.
    """

    REPLACE = "replace"
    """The update's value replaces the old one, whatever it is (``None`` included). The default for keys a schema
    does not list."""
    APPEND = "append"
    """The value is a :class:`~rxgraph.FrozenList`. An update that is a list, a tuple or a ``FrozenList`` appends each
    of its items (an empty one appends nothing); anything else — a scalar, a string, a mapping, ``None`` — is appended
    as one item. An absent key starts from ``[]``. A value already there that is not a list (stored before the key
    was ``APPEND``) is kept: a tuple's items, or any other value (``None`` included) as the first item."""
    MERGE = "merge"
    """The value is a :class:`~rxgraph.FrozenDict`. The update must be a mapping — anything else, ``None`` included,
    fails the run with :class:`~rxgraph.errors.InvalidUpdateError` — and its keys are set over the old ones,
    shallowly: a nested mapping in the update replaces the old nested mapping whole (it is not merged into it), and
    a key set to ``None`` stays, with the value ``None`` (``MERGE`` never removes a key). An absent key, or one that
    holds something other than a mapping, starts from ``{}``; an empty mapping changes nothing."""


KeyReducer: TypeAlias = Callable[[Any, Any], Any]
"""A state key's reducer, given instead of a :class:`KeyStrategy`: ``reducer(current, update) -> new``.

``current`` is the key's value (frozen: lists are ``FrozenList``, dicts ``FrozenDict``), or ``None`` when the state
has no such key yet; ``update`` is the update's value for the key as it was given (``None`` too, if that is what was
given). The result is frozen and stored like any value, so a checkpointed graph's reducers must return what its saver
can store. A reducer is called synchronously, once per update of its key, and should be a pure function of its two
arguments. One that raises fails the run with :class:`~rxgraph.errors.InvalidUpdateError`.
"""


_EMPTY: FrozenList[Any] = FrozenList()


def _checked_strategy(key: str, strategy: object) -> KeyStrategy | KeyReducer:
    """``strategy`` if it is a ``KeyStrategy`` or a reducer that can be called as ``reducer(current, update)``.

    Raises:
        InvalidTypeError: anything else, with what was given.
    """
    if isinstance(strategy, KeyStrategy):
        return strategy
    expected = f"state key {key!r}: expected a KeyStrategy or a reducer function (current, update) -> new"
    if isinstance(strategy, type) and issubclass(strategy, KeyStrategy):
        raise InvalidTypeError(
            f"{expected}, got the KeyStrategy class itself: use one of its members, such as KeyStrategy.APPEND",
            argument="schema",
        )
    if not callable(strategy):
        hint = ""
        if isinstance(strategy, str) and strategy.upper() in KeyStrategy.__members__:
            hint = f" (did you mean KeyStrategy.{strategy.upper()}?)"
        raise InvalidTypeError(f"{expected}, got {strategy!r}{hint}", argument="schema")
    if inspect.iscoroutinefunction(strategy):
        raise InvalidTypeError(
            f"state key {key!r}: a reducer is called synchronously and must return the new value, but {strategy!r} "
            "is an async def function",
            argument="schema",
        )
    try:
        signature = inspect.signature(strategy)
    except (TypeError, ValueError):  # builtins and some C callables have none: trust them
        return strategy
    try:
        signature.bind(None, None)
    except TypeError:
        raise InvalidTypeError(
            f"state key {key!r}: a reducer is called as reducer(current, update), but {strategy!r} cannot take those "
            f"two arguments (its signature is {signature})",
            argument="schema",
        ) from None
    return strategy


class StateSchema:
    """The key strategies of a graph and the merge that applies them.

    States are plain dicts that are never mutated once built: :meth:`merge` returns a new dict (a shallow copy) that
    shares every unchanged value with the old one, and freezes what the update brings in.
    """

    __slots__ = ("_strategies",)

    def __init__(self, strategies: Mapping[str, KeyStrategy | KeyReducer] | None = None) -> None:
        """Args:
            strategies: each key's ``KeyStrategy`` or reducer function (keys not listed use ``REPLACE``).

        Raises:
            InvalidTypeError: a key that is not a string, or a strategy that is neither a ``KeyStrategy`` nor a
                function that can be called as ``reducer(current, update)``.
        """
        checked: dict[str, KeyStrategy | KeyReducer] = {}
        for key, strategy in (strategies or {}).items():
            if not isinstance(key, str):
                raise InvalidTypeError(f"state keys must be strings, got {key!r}", argument="schema")
            checked[key] = _checked_strategy(key, strategy)
        self._strategies = checked

    @property
    def strategies(self) -> Mapping[str, KeyStrategy | KeyReducer]:
        """The declared strategies and reducers (keys not listed use ``REPLACE``)."""
        return dict(self._strategies)

    def strategy(self, key: str) -> KeyStrategy | KeyReducer:
        """The strategy of ``key``: its ``KeyStrategy`` or reducer function, ``REPLACE`` if it has none declared."""
        return self._strategies.get(key, KeyStrategy.REPLACE)

    def has_reducer(self, key: str) -> bool:
        """True when updates to ``key`` combine with its value (``APPEND``, ``MERGE`` or a reducer function), False
        when the last update simply wins (``REPLACE``, declared or by default)."""
        return self._strategies.get(key, KeyStrategy.REPLACE) is not KeyStrategy.REPLACE

    def merge_superstep(
        self, state: Mapping[str, Any], updates: Sequence[tuple[str, Sequence[Mapping[str, Any] | None]]]
    ) -> dict[str, Any]:
        """A new state: the updates of one superstep's tasks (``(node, its updates)`` in task order) merged in that
        order. A key with no reducer (``REPLACE``) may be written by one task only: two tasks running in parallel
        have no order in which one of them should win.

        Raises:
            InvalidUpdateError: two tasks wrote one key that has no reducer, or an update does not fit (see
                ``merge``).
        """
        owners: dict[str, str] = {}
        new: Mapping[str, Any] = state
        for node, node_updates in updates:
            for update in node_updates:
                if isinstance(update, Mapping):
                    for key in update:
                        owner = owners.setdefault(key, node) if not self.has_reducer(key) else node
                        if owner != node:
                            raise InvalidUpdateError(
                                f"nodes {owner!r} and {node!r} both wrote state key {key!r} in one superstep, and it "
                                "has no reducer to combine them; give the key a strategy (KeyStrategy.APPEND, MERGE "
                                "or a function) or write it from one node",
                                node=node,
                            )
                new = self.merge(new, update, origin=f"node {node!r}", node=node)
        return dict(new)

    def merge(
        self, state: Mapping[str, Any], update: Mapping[str, Any] | None, *, origin: str, node: str | None = None
    ) -> dict[str, Any]:
        """A new state: ``state`` with ``update`` applied key by key.

        Args:
            state: the state before (not changed).
            update: the keys to merge in (None or empty: a copy of ``state``).
            origin: what the update comes from, for error messages ("node 'x'", "input", ...).
            node: the node it comes from, if one (the error's ``node``).

        Returns:
            The new state; every value the update brought in (a reducer's result included) is frozen.

        Raises:
            InvalidUpdateError: the update is not a mapping of string keys, a ``MERGE`` key gets a non-mapping, or a
                key's reducer raised (its exception is the ``__cause__``).
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
            elif strategy is KeyStrategy.MERGE:
                if not isinstance(value, Mapping):
                    raise InvalidUpdateError(
                        f"{origin}: key {key!r} uses KeyStrategy.MERGE and needs a mapping, got {type(value).__name__}",
                        node=node,
                    )
                old_map = new.get(key)
                merged: dict[Any, Any] = dict(old_map) if isinstance(old_map, Mapping) else {}
                merged.update((k, freeze(v)) for k, v in value.items())
                new[key] = FrozenDict(merged)
            else:
                try:
                    reduced = strategy(new.get(key), value)
                except Exception as error:
                    raise InvalidUpdateError(
                        f"{origin}: the reducer of state key {key!r} raised {type(error).__name__}: {error}", node=node
                    ) from error
                new[key] = freeze(reduced)
        return new
