"""Tools an agent can call: ``@tool`` turns a typed function into one, with a JSON schema and validated arguments."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, get_type_hints, overload

import reactivex as rx
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from reactivex import Observable
from reactivex import operators as ops

from ..errors import InvalidArgumentError, InvalidTypeError, ToolInputError
from ._model import ToolSpec

__all__ = ["Tool", "json_object", "tool"]


class Tool:
    """A function the model may call. Build one with ``@tool``.

    Calling the ``Tool`` calls the function directly. ``invoke(arguments)`` is what the agent uses: it parses and
    validates the JSON text the model sent, then runs the function. A function may return a value, or an Observable
    of one value (for work on another thread or a timer on the run's scheduler).
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> None:
        """Wrap ``fn``; the arguments and errors are those of ``tool``."""
        if not callable(fn):
            raise InvalidTypeError(f"a tool wraps a function, got {type(fn).__name__}", argument="fn")
        self.fn = fn
        self.name = name or fn.__name__
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgumentError(
                f"tool name {self.name!r} must contain only letters, digits, '_' and '-'", argument="name"
            )
        self.description = description if description is not None else inspect.cleandoc(fn.__doc__ or "")
        self._arguments = _arguments_model(fn, self.name)
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        self.spec = ToolSpec(name=self.name, description=self.description, parameters=schema)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """The validated keyword arguments for the function, from the model's JSON text.

        Args:
            arguments: the JSON object the model sent, as text; ``""`` means ``{}``.

        Raises:
            ToolInputError: the text is not a JSON object, or does not match the tool's schema (``tool`` is this
                tool's name).
        """
        raw = json_object(arguments, self.name)
        try:
            validated = self._arguments.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in error.errors()
            )
            raise ToolInputError(f"the arguments do not match the tool's schema: {problems}", tool=self.name) from None
        return {field: getattr(validated, field) for field in type(validated).model_fields}

    def run(self, **arguments: Any) -> Observable[Any]:
        """A cold Observable of the tool's one result for arguments already validated (see ``parse_arguments``).

        Args:
            arguments: the keyword arguments for the function.

        The function runs when the Observable is subscribed; what it raises, or the Observable it returns fails
        with, reaches ``on_error``. Of an Observable result only the first value counts.
        """

        def _start(_: Any) -> Observable[Any]:
            result = self.fn(**arguments)
            return result.pipe(ops.take(1)) if isinstance(result, Observable) else rx.of(result)

        return rx.defer(_start)

    def invoke(self, arguments: str) -> Observable[Any]:
        """A cold Observable of the tool's one result for the model's JSON ``arguments``.

        Args:
            arguments: the JSON object the model sent, as text.

        Nothing is raised: invalid arguments (``ToolInputError``, see ``parse_arguments``) and the function's own
        errors reach ``on_error`` when it is subscribed.
        """
        return rx.defer(lambda _: self.run(**self.parse_arguments(arguments)))


def json_object(arguments: str, tool_name: str) -> dict[str, Any]:
    """The JSON object a model sent as the arguments of tool ``tool_name`` (``""`` means ``{}``), or
    ``ToolInputError`` saying why it is not one."""
    try:
        raw = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as error:
        raise ToolInputError(
            f"the arguments are not valid JSON ({error.msg} at position {error.pos})", tool=tool_name
        ) from None
    if not isinstance(raw, dict):
        raise ToolInputError(f"the arguments must be a JSON object, got {type(raw).__name__}", tool=tool_name)
    return raw


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as error:
        raise InvalidTypeError(
            f"tool {name!r}: cannot resolve the type hints of its parameters ({error})", argument="fn"
        ) from error
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise InvalidTypeError(
                f"tool {name!r}: *args and **kwargs cannot be described to a model; name each argument", argument="fn"
            )
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise InvalidTypeError(f"tool {name!r}: positional-only parameters cannot be passed by name", argument="fn")
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of a typed function: its name, its docstring as the description, its parameters' types and
    defaults as the JSON schema of its arguments. Use as ``@tool`` or ``@tool(name=..., description=...)``.

    Args:
        fn: the function; every parameter must be passable by name and its type must have a JSON schema.
        name: the name the model calls it by (default: the function's): letters, digits, ``_`` and ``-``.
        description: what the model is told it does (default: the function's docstring).

    Raises:
        InvalidTypeError: ``fn`` is not callable, has ``*args``, ``**kwargs`` or positional-only parameters, or
            type hints that cannot be resolved (``argument="fn"``).
        InvalidArgumentError: the name has other characters (``argument="name"``).
    """
    if fn is not None:
        return Tool(fn, name=name, description=description)

    def _decorate(function: Callable[..., Any]) -> Tool:
        return Tool(function, name=name, description=description)

    return _decorate
