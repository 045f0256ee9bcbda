"""State schemas written as classes: a ``TypedDict`` or a pydantic model, each key's strategy given as
``Annotated[type, reducer]`` (a ``KeyStrategy`` or a function), the way LangGraph users write them.

A class declares the state's keys: a graph whose state is a class refuses updates to keys it does not declare. A
pydantic model also declares each key's type, and the values an update brings in are validated (and coerced) with
it; nodes of such a graph receive the state as an instance of the model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, cast, get_args, get_origin, get_type_hints

from pydantic import BaseModel, TypeAdapter

from .._frozen import freeze
from ..errors import InvalidTypeError
from ._state import KeyReducer, KeyStrategy, StateSchema, checked_strategy

__all__ = ["Declared", "StateDeclaration", "declared", "is_schema_class", "node_schema", "reader"]


@dataclass(frozen=True, slots=True)
class Declared:
    """What a schema class declares: its keys in order, their strategies, the value a reducer function's key starts
    from (``Annotated[list, operator.add]`` starts from ``[]``), and, for a pydantic model, the model and a validator
    per key."""

    keys: tuple[str, ...]
    strategies: Mapping[str, KeyStrategy | KeyReducer] = field(default_factory=dict)
    initial: Mapping[str, Any] = field(default_factory=dict)
    model: type[BaseModel] | None = None
    validators: Mapping[str, TypeAdapter[Any]] = field(default_factory=dict)


def is_schema_class(value: object) -> bool:
    """True for a ``TypedDict`` class or a pydantic model class."""
    if not isinstance(value, type):
        return False
    # typing's and typing_extensions' TypedDicts alike: a dict subclass with the TypedDict's own attributes
    typed_dict = issubclass(value, dict) and hasattr(value, "__total__") and hasattr(value, "__required_keys__")
    return typed_dict or issubclass(value, BaseModel)


def _strategy_in(key: str, metadata: tuple[Any, ...]) -> KeyStrategy | KeyReducer | None:
    """The last ``KeyStrategy`` or function among a key's ``Annotated`` extras (pydantic's constraints, such as
    ``Field(ge=0)``, are not functions and are left to pydantic)."""
    for extra in reversed(metadata):
        if isinstance(extra, KeyStrategy) or (callable(extra) and not isinstance(extra, type)):
            return checked_strategy(key, extra)
    return None


def _initial(annotation: Any) -> Any:
    """What a reducer function's key starts from: the annotated type called with nothing (``list()``, ``int()``)
    when that works, else None (the reducer's first ``current``, as for a key of a mapping schema)."""
    origin = get_origin(annotation) or annotation
    if get_origin(origin) is Annotated:
        origin = get_args(origin)[0]
    if not isinstance(origin, type):
        return None
    try:
        return freeze(origin())
    except Exception:
        return None


def declared(schema: type, argument: str) -> Declared:
    """Read a ``TypedDict`` or pydantic model class.

    Raises:
        InvalidTypeError: ``schema`` is neither, or one of its keys' strategies cannot be used.
    """
    if not is_schema_class(schema):
        raise InvalidTypeError(
            f"{argument} must be a TypedDict or a pydantic model class (or, for the state, a mapping of key "
            f"strategies), got {schema!r}",
            argument=argument,
        )
    strategies: dict[str, KeyStrategy | KeyReducer] = {}
    initial: dict[str, Any] = {}
    if issubclass(schema, BaseModel):
        validators: dict[str, TypeAdapter[Any]] = {}
        for key, info in schema.model_fields.items():
            strategy = _strategy_in(key, tuple(info.metadata))
            constraints = [extra for extra in info.metadata if not (callable(extra) or isinstance(extra, KeyStrategy))]
            annotation: Any = info.annotation
            validators[key] = TypeAdapter(Annotated[(annotation, *constraints)] if constraints else annotation)
            if strategy is not None:
                strategies[key] = strategy
                if not isinstance(strategy, KeyStrategy):
                    initial[key] = _initial(info.annotation)
        keys = tuple(schema.model_fields)
        return Declared(keys, strategies, initial, schema, MappingProxyType(validators))
    hints = _hints(schema, argument)
    for key, hint in hints.items():
        if get_origin(hint) is not Annotated:
            continue
        base, *metadata = get_args(hint)
        strategy = _strategy_in(key, tuple(metadata))
        if strategy is not None:
            strategies[key] = strategy
            if not isinstance(strategy, KeyStrategy):
                initial[key] = _initial(base)
    return Declared(tuple(hints), strategies, initial)


def _hints(schema: type, argument: str) -> dict[str, Any]:
    """A ``TypedDict``'s keys and their annotations, extras kept. Its own annotations serve when they are not strings
    and cannot be resolved in its module (a class made by ``exec``, say).

    Raises:
        InvalidTypeError: they cannot be read.
    """
    try:
        return get_type_hints(schema, include_extras=True)
    except Exception as error:
        own = dict(getattr(schema, "__annotations__", {}))
        if own and not any(isinstance(hint, str) for hint in own.values()):
            return own
        raise InvalidTypeError(
            f"{argument}: the annotations of {schema.__name__} cannot be read: {error}", argument=argument
        ) from error


def node_schema(action: Callable[..., Any]) -> type | None:
    """The class annotating ``action``'s first parameter, if it is a ``TypedDict`` or pydantic model: the part of
    the state the node reads (``def node(state: Private) -> ...``)."""
    try:
        hints = get_type_hints(action)
        first = next(iter(inspect.signature(action).parameters.values()), None)
    except Exception:
        return None
    if first is None:
        return None
    hint = hints.get(first.name)
    return hint if is_schema_class(hint) else None


def reader(schema: type, every_key: bool) -> Callable[[Mapping[str, Any]], Any] | None:
    """How a node that reads ``schema`` receives the state: a pydantic model's instance (validated as the model
    says), or the state's keys that a ``TypedDict`` declares; a ``Send``'s payload that is not a mapping as it is. None
    for a ``TypedDict`` that declares ``every_key`` of the state: the state as it is."""
    if issubclass(schema, BaseModel):
        as_model = StateSchema(model=schema).as_model

        def model_of(state: Mapping[str, Any]) -> Any:
            return as_model(state) if isinstance(state, Mapping) else state  # a Send's payload may be anything

        return model_of
    if every_key:
        return None
    keys = frozenset(_hints(schema, "input_schema"))

    def subset(state: Mapping[str, Any]) -> Any:
        if not isinstance(state, Mapping):
            return state  # a Send's payload that is not a mapping: the node gets it as it is
        return MappingProxyType({key: value for key, value in state.items() if key in keys})

    return subset


class StateDeclaration:
    """What a ``StateGraph`` was told of its state — the state schema, the input and output schemas, and the classes
    its nodes read — and the ``StateSchema`` and node readers ``compile`` makes of it."""

    def __init__(
        self,
        state: Mapping[str, KeyStrategy | KeyReducer] | type | None,
        input_schema: type | None,
        output_schema: type | None,
    ) -> None:
        """Raises:
        InvalidTypeError: a schema that is neither a mapping of strategies (the state only), a ``TypedDict``
            nor a pydantic model, or a strategy that cannot be used.
        """
        if state is None or isinstance(state, Mapping):
            self.state: Declared | None = None
            self.strategies: dict[str, KeyStrategy | KeyReducer] = dict(StateSchema(state).strategies)
        else:
            self.state = declared(state, "state_schema")
            self.strategies = dict(self.state.strategies)
        self.state_class = state if self.state is not None else None
        self.input = declared(input_schema, "input_schema") if input_schema is not None else None
        self.output = declared(output_schema, "output_schema") if output_schema is not None else None
        self.nodes: dict[type, Declared] = {}

    def read_by_node(self, schema: type) -> None:
        """A node reads ``schema`` (``add_node(input_schema=...)`` or its first parameter's annotation): its keys
        are the state's too.

        Raises:
            InvalidTypeError: ``schema`` is neither a ``TypedDict`` nor a pydantic model.
        """
        if schema is not self.state_class and schema not in self.nodes:
            self.nodes[schema] = declared(schema, "input_schema")

    def schema(self) -> StateSchema:
        """The state schema of the compiled graph."""
        others = [one for one in (self.input, self.output, *self.nodes.values()) if one is not None]
        strategies = dict(self.strategies)
        state = self.state
        initial: dict[str, Any] = dict(state.initial) if state is not None else {}
        validators: dict[str, TypeAdapter[Any]] = dict(state.validators) if state is not None else {}
        own = set(state.keys) if state is not None else None
        for other in others:
            for key in other.keys:
                if own is not None and key in own:
                    continue
                if key in other.strategies and key not in strategies:
                    strategies[key] = other.strategies[key]
                    if key in other.initial:
                        initial[key] = other.initial[key]
                if key in other.validators and key not in validators:
                    validators[key] = other.validators[key]
        keys: set[str] | None = None
        if own is not None:
            keys = set(own).union(*(other.keys for other in others))
        if self.output is not None:
            output_keys: Collection[str] | None = self.output.keys
        elif own is not None and keys != own:
            output_keys = own  # keys only the input or some node declares are private
        else:
            output_keys = None
        return StateSchema(
            strategies,
            keys=keys,
            input_keys=self.input.keys if self.input is not None else own,  # private keys are not input
            output_keys=output_keys,
            initial=initial,
            validators=validators,
            model=state.model if state is not None else None,
        )

    def reader_of(self, schema: type | None, compiled: StateSchema) -> Callable[[Mapping[str, Any]], Any] | None:
        """How a node or route that reads ``schema`` (None: the state schema) receives the state of a graph whose
        schema ``compile`` made ``compiled``: the state schema's keys (a model's instance, for a pydantic one; the
        whole state, for a mapping of strategies), or those of its own class. None: the state as it is."""
        if schema is None or schema is self.state_class:
            if self.state is None:
                return None
            if self.state.model is not None:
                return reader(self.state.model, every_key=True)
            every_key = compiled.keys is not None and compiled.keys == frozenset(self.state.keys)
            return reader(cast("type", self.state_class), every_key=every_key)
        return reader(schema, every_key=False)
