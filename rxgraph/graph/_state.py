"""Key strategies: how a node's update is merged into the state.

A state key has one strategy: a :class:`KeyStrategy` (``REPLACE``, the default; ``APPEND``; ``MERGE``) or a reducer
function ``reducer(current, update) -> new`` (:data:`KeyReducer`). Every update goes through it: a node's, a run's
input, and ``update_state``'s. ``None`` is a value like any other; an update that means "no change" to a key leaves
the key out.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, TypeAlias

from pydantic import BaseModel, ValidationError

from .._frozen import FrozenDict, FrozenList, freeze
from ..errors import InvalidTypeError, InvalidUpdateError

__all__ = ["KeyReducer", "KeyStrategy", "StateSchema", "Validator", "as_update", "checked_strategy"]


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


class Validator(Protocol):
    """What validates one key's values (a pydantic ``TypeAdapter``)."""

    def validate_python(self, value: Any, /) -> Any: ...


def checked_strategy(key: str, strategy: object) -> KeyStrategy | KeyReducer:
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


def as_update(value: Any) -> Any:
    """A pydantic model instance a node returned (or a run was given) as the update it stands for: its fields, but
    those left at a ``None`` default it was not given explicitly. Anything else as it is."""
    if not isinstance(value, BaseModel):
        return value
    fields = type(value).model_fields
    given = value.model_fields_set
    update: dict[str, Any] = {}
    for key, info in fields.items():
        field_value = getattr(value, key)
        if field_value is None and key not in given and info.get_default(call_default_factory=True) is None:
            continue
        update[key] = field_value
    return update


class StateSchema:
    """The key strategies of a graph and the merge that applies them.

    States are plain dicts that are never mutated once built: :meth:`merge` returns a new dict (a shallow copy) that
    shares every unchanged value with the old one, and freezes what the update brings in.
    """

    __slots__ = ("_initial", "_keys", "_strategies", "_validators", "input_keys", "model", "output_keys")

    def __init__(
        self,
        strategies: Mapping[str, KeyStrategy | KeyReducer] | None = None,
        *,
        keys: Collection[str] | None = None,
        input_keys: Collection[str] | None = None,
        output_keys: Collection[str] | None = None,
        initial: Mapping[str, Any] | None = None,
        validators: Mapping[str, Validator] | None = None,
        model: type[BaseModel] | None = None,
    ) -> None:
        """Args:
            strategies: each key's ``KeyStrategy`` or reducer function (keys not listed use ``REPLACE``).
            keys: the state's keys, for a schema that declares them (a class): an update to any other key is
                refused. None: any key is taken.
            input_keys: the keys a run's input may bring (None: the state's).
            output_keys: the keys a run's outputs show (None: every key of the state).
            initial: where a reducer function's key starts when the state does not have it yet (else None).
            validators: per key, what validates (and coerces) the key's new value (a pydantic ``TypeAdapter``).
            model: the pydantic model nodes and routes receive the state as, if the state is one.

        Raises:
            InvalidTypeError: a key that is not a string, or a strategy that is neither a ``KeyStrategy`` nor a
                function that can be called as ``reducer(current, update)``.
        """
        checked: dict[str, KeyStrategy | KeyReducer] = {}
        for key, strategy in (strategies or {}).items():
            if not isinstance(key, str):
                raise InvalidTypeError(f"state keys must be strings, got {key!r}", argument="schema")
            checked[key] = checked_strategy(key, strategy)
        self._strategies = checked
        self._keys = frozenset(keys) if keys is not None else None
        self.input_keys = frozenset(input_keys) if input_keys is not None else None
        self.output_keys = frozenset(output_keys) if output_keys is not None else None
        self._initial = dict(initial or {})
        self._validators = dict(validators or {})
        self.model = model

    @property
    def keys(self) -> frozenset[str] | None:
        """The keys the state may hold, or None when any key is taken (a mapping schema)."""
        return self._keys

    def as_model(self, state: Mapping[str, Any]) -> Any:
        """``state`` as an instance of the state's pydantic model, validated as the model says (its field and
        model validators run; missing keys take the model's defaults). The state itself is not changed.

        Raises:
            InvalidUpdateError: the state does not make a valid instance (a required key has no value yet, or a
                validator refused it), with pydantic's errors.
        """
        model = self.model
        assert model is not None
        fields = model.model_fields
        try:
            # Copies of the models inside: a node that changes its instance and returns it (as LangGraph's nodes may)
            # must not change the values the thread's checkpoints already hold.
            return model.model_validate({key: _copied(value) for key, value in state.items() if key in fields})
        except ValidationError as error:
            raise InvalidUpdateError(
                f"the state does not make a valid {model.__name__}: {_first_error(error)}"
            ) from error

    def shown(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """What a run's outputs show of ``state``: the output keys (all of them unless an output schema or private
        keys leave some out)."""
        shown = self.output_keys
        if shown is None or not isinstance(state, Mapping):  # a Send's payload is shown as it is
            return state
        return MappingProxyType({key: value for key, value in state.items() if key in shown})

    def shown_update(self, update: Any) -> Any:
        """What a run's outputs show of a node's update (``NodeOutput.update``: a mapping, None, or a tuple of
        them): only the output keys."""
        if isinstance(update, tuple):
            return tuple(self.shown_update(one) for one in update)
        shown = self.output_keys
        if shown is None or not isinstance(update, Mapping):
            return update
        return {key: value for key, value in update.items() if key in shown}

    def taken_in(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The part of ``values`` that is this graph's input: the input keys (a subgraph takes these of its
        parent's state and leaves the rest)."""
        accepted = self.input_keys if self.input_keys is not None else self._keys
        if accepted is None:
            return dict(values)
        return {key: value for key, value in values.items() if key in accepted}

    def check_input(self, values: Mapping[str, Any]) -> None:
        """Refuse an input that brings keys the input schema does not declare.

        Raises:
            InvalidUpdateError: naming the keys and those the input takes.
        """
        accepted = self.input_keys if self.input_keys is not None else self._keys
        if accepted is None or not isinstance(values, Mapping):
            return
        unknown = sorted(str(key) for key in values if key not in accepted)
        if unknown:
            raise InvalidUpdateError(
                f"input: key(s) {unknown} are not in the graph's input schema; it takes {sorted(accepted)}"
            )

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
                if update is not None and not isinstance(update, Mapping):
                    update = as_update(update)
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
                new = self.merge(new, update, node=node)
        return dict(new)

    def merge(
        self,
        state: Mapping[str, Any],
        update: Mapping[str, Any] | None,
        *,
        origin: str | None = None,
        node: str | None = None,
    ) -> dict[str, Any]:
        """A new state: ``state`` with ``update`` applied key by key.

        Args:
            state: the state before (not changed).
            update: the keys to merge in (None or empty: a copy of ``state``).
            origin: what the update comes from, for error messages ("input", ...; default: "node '<node>'").
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
        if type(update) is not dict and not isinstance(update, Mapping):
            update = as_update(update)  # a pydantic model stands for its fields
            if not isinstance(update, Mapping):
                raise InvalidUpdateError(
                    f"{_where(origin, node)}: an update must be a mapping of state keys, got {type(update).__name__}",
                    node=node,
                )
        strategies, keys, validators = self._strategies, self._keys, self._validators
        for key, value in update.items():
            if not isinstance(key, str):
                raise InvalidUpdateError(f"{_where(origin, node)}: state keys must be strings, got {key!r}", node=node)
            if keys is not None and key not in keys:
                raise InvalidUpdateError(
                    f"{_where(origin, node)}: state key {key!r} is not in the state schema; its keys are "
                    f"{sorted(keys)}",
                    node=node,
                )
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
                        f"{_where(origin, node)}: key {key!r} uses KeyStrategy.MERGE and needs a mapping, got "
                        f"{type(value).__name__}",
                        node=node,
                    )
                old_map = new.get(key)
                merged: dict[Any, Any] = dict(old_map) if isinstance(old_map, Mapping) else {}
                merged.update((k, freeze(v)) for k, v in value.items())
                new[key] = FrozenDict(merged)
            else:
                current = new[key] if key in new else self._initial.get(key)
                try:
                    reduced = strategy(current, value)
                except Exception as error:
                    raise InvalidUpdateError(
                        f"{_where(origin, node)}: the reducer of state key {key!r} raised {type(error).__name__}: "
                        f"{error}",
                        node=node,
                    ) from error
                new[key] = freeze(reduced)
            if validators:
                new[key] = self._validated(key, new[key], origin, node)
        return new

    def _validated(self, key: str, value: Any, origin: str | None, node: str | None) -> Any:
        validator = self._validators.get(key)
        if validator is None:
            return value
        try:
            return freeze(validator.validate_python(value))
        except ValidationError as error:
            raise InvalidUpdateError(
                f"{_where(origin, node)}: state key {key!r} does not fit the state schema: {_first_error(error)}",
                node=node,
            ) from error


def _copied(value: Any) -> Any:
    """``value`` with every pydantic model inside it copied (deeply), the containers around them rebuilt; a value
    with no model inside is returned as it is."""
    if isinstance(value, BaseModel):
        return value.model_copy(deep=True)
    if isinstance(value, FrozenList | list | tuple):
        items = [_copied(item) for item in value]
        return items if any(new is not old for new, old in zip(items, value, strict=True)) else value
    if isinstance(value, Mapping):
        pairs = {key: _copied(item) for key, item in value.items()}
        return pairs if any(pairs[key] is not value[key] for key in pairs) else value
    return value


def _where(origin: str | None, node: str | None) -> str:
    """What an update came from, for an error message (built only when one is raised)."""
    return origin if origin is not None else f"node {node!r}"


def _first_error(error: ValidationError) -> str:
    """Pydantic's errors of one value, on one line."""
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'value'}: {item['msg']} (got {item.get('input')!r})"
        for item in error.errors()
    )
