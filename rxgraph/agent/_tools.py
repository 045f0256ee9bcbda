"""Tools an agent can call: ``@tool`` turns a typed function into one, with a JSON schema and validated arguments."""

from __future__ import annotations

import contextvars
import inspect
import json
import sys
import uuid
from collections import ChainMap
from collections.abc import Callable, MutableMapping
from types import FrameType, MappingProxyType
from typing import Any, get_type_hints, overload

import reactivex as rx
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable

from .._arguments import check_scheduler
from ..errors import InvalidArgumentError, InvalidTypeError, ToolInputError
from ..graph._node import run_info_parameter
from ..graph._run_info import RunInfo
from ..rx._at_once import at_once
from ..rx._awaitable import background_loop, from_awaitable
from ._model import ToolSpec

__all__ = ["Tool", "json_object", "tool"]


class Tool:
    """A function the model may call. Build one with ``@tool``.

    Calling the ``Tool`` calls the function directly. ``invoke(arguments)`` is what the agent uses: it parses and
    validates the JSON text the model sent, then runs the function. The function may return:

    - a value, which is the result;
    - an Observable of one value (a timer on the run's scheduler, work another library does elsewhere...);
    - from an ``async def`` function, a coroutine: it is awaited on the run's event loop (``RunInfo.loop``), and
      disposing the call cancels it (the coroutine sees ``asyncio.CancelledError``).

    A blocking function is given a ``scheduler`` (e.g. ``ThreadPoolScheduler``): it is then called there, never on
    the thread that delivers the run's events. A parameter annotated ``RunInfo`` receives the run's ``RunInfo`` (its
    ``context``, and the ``cancelled`` Event a blocking function can wait on to stop early); it is not part of the
    JSON schema the model sees, and the model cannot pass it.

    Attributes:
        fn: the function.
        name: the name the model calls it by.
        description: what the model is told it does.
        spec: what the model is shown (``ToolSpec``): name, description and the JSON schema of the arguments.
        scheduler: where the function is called; None for the caller's choice (see ``run``).
        run_info: the name of the function's ``RunInfo`` parameter, if it declares one.
        requires_approval: a ``ReactAgent`` asks a human before it runs a call of this tool (see ``ApprovalRequest``).
    """

    # Class-level defaults, for subclasses that set their fields themselves instead of calling __init__.
    scheduler: abc.SchedulerBase | None = None
    run_info: str | None = None
    requires_approval: bool = False

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        scheduler: abc.SchedulerBase | None = None,
        requires_approval: bool = False,
    ) -> None:
        """Wrap ``fn``; the arguments and errors are those of ``tool``."""
        if not callable(fn):
            raise InvalidTypeError(f"a tool wraps a function, got {type(fn).__name__}", argument="fn")
        self.fn = fn
        self.name = name or fn.__name__
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgumentError(
                f"tool name {self.name!r} must contain only letters, digits, '_' and '-'", argument="name"
            )
        check_scheduler(scheduler, argument="scheduler", owner=f"tool {self.name!r}")
        self.scheduler = scheduler
        if type(requires_approval) is not bool:
            raise InvalidTypeError(
                f"tool {self.name!r}: requires_approval must be a bool, got {requires_approval!r}",
                argument="requires_approval",
            )
        self.requires_approval = requires_approval
        self.description = description if description is not None else inspect.cleandoc(fn.__doc__ or "")
        self.run_info = run_info_parameter(fn)
        self._arguments = _arguments_model(fn, self.name, self.run_info, _maker_names(self))
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
                tool's name); naming the ``RunInfo`` parameter is an unknown argument too.
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

    def run(
        self,
        info: RunInfo | None = None,
        default_scheduler: abc.SchedulerBase | None = None,
        /,
        **arguments: Any,
    ) -> Observable[Any]:
        """A cold Observable of the tool's one result for arguments already validated (see ``parse_arguments``).

        Args:
            info: the run the tool works for: what its ``RunInfo`` parameter receives, and where its coroutine is
                awaited (``info.loop``). Without one, each subscription makes its own: no thread, an empty
                ``context``, rxgraph's background loop, and ``cancelled`` set when the subscription is disposed
                before the result.
            default_scheduler: where to call the function when the tool has no ``scheduler`` of its own (an
                agent's ``tool_scheduler``); with neither, it is called on the subscribing thread.
            arguments: the keyword arguments for the function.

        The function is called when the Observable is subscribed — on the scheduler, if there is one; disposing
        before the scheduler got to it means it is never called. What it raises, the error its Observable fails
        with, or its coroutine's exception reaches ``on_error``. Of an Observable result only the first value
        counts; a coroutine's result is its value. Disposing the subscription disposes the Observable or cancels
        the coroutine.
        """
        scheduler = self.scheduler or default_scheduler
        parameter = self.run_info

        def _subscribe(
            observer: abc.ObserverBase[Any], subscribe_scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            run = info if info is not None else _standalone_run()
            keywords = dict(arguments)
            if parameter is not None:
                keywords[parameter] = run

            # Called on the scheduler's thread, the function sees the context vars of the subscriber (an
            # OpenTelemetry span, say), as a call on the subscribing thread would.
            context = contextvars.copy_context() if scheduler is not None else None

            def _call() -> Any:
                if context is not None:
                    return context.run(self.fn, **keywords)
                return self.fn(**keywords)

            def _result(value: Any) -> Observable[Any]:
                if isinstance(value, Observable):  # checked first: an Observable is awaitable too
                    return value.pipe(ops.take(1))
                if inspect.isawaitable(value):
                    return from_awaitable(value, run.loop)
                return at_once(value)  # already here: emitted at once, not a hop onto the run's scheduler

            if scheduler is None:
                source = rx.defer(lambda _: _result(_call()))
            else:
                source = rx.from_callable(_call, scheduler).pipe(ops.flat_map(_result))
            if info is not None:
                return source.subscribe(observer, scheduler=subscribe_scheduler)
            # A run of its own: its `cancelled` is set when the subscriber leaves before the result.
            finished = False

            def _finished(*_: Any) -> None:
                nonlocal finished
                finished = True

            subscription = source.pipe(ops.do_action(on_error=_finished, on_completed=_finished)).subscribe(
                observer, scheduler=subscribe_scheduler
            )

            def _dispose() -> None:
                if not finished:
                    run.set_cancelled()
                subscription.dispose()

            return Disposable(_dispose)

        return Observable(_subscribe)

    def invoke(
        self, arguments: str, info: RunInfo | None = None, default_scheduler: abc.SchedulerBase | None = None
    ) -> Observable[Any]:
        """A cold Observable of the tool's one result for the model's JSON ``arguments``.

        Args:
            arguments: the JSON object the model sent, as text.
            info: the run the tool works for (see ``run``).
            default_scheduler: where to call the function when the tool has no ``scheduler`` (see ``run``).

        Nothing is raised: invalid arguments (``ToolInputError``, see ``parse_arguments``) and the function's own
        errors reach ``on_error`` when it is subscribed.
        """
        return rx.defer(lambda _: self.run(info, default_scheduler, **self.parse_arguments(arguments)))


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


def _standalone_run() -> RunInfo:
    """The ``RunInfo`` of a tool run outside any graph run."""
    return RunInfo(thread_id=None, run_id=uuid.uuid4().hex, context=MappingProxyType({}), loop_of=background_loop)


_Names = tuple[MutableMapping[str, Any], MutableMapping[str, Any]]
"""The local and the global names of a frame."""


def _maker_names(made: Tool) -> _Names:
    """The names where ``made`` is being made — ``@tool`` applied, or ``Tool(...)`` called — for its type hints.

    That is the first frame up the stack outside this module (``tool`` and its decorator) and outside a ``Tool``
    subclass's ``__init__`` for this same tool: its local names (none when it runs at module level) and its global
    names. A function defined in a factory, a test or a notebook cell under ``from __future__ import annotations``
    names types the factory imported or defined, which its module's globals do not have (pydantic looks there too).
    """
    getframe: Callable[[int], FrameType] | None = getattr(sys, "_getframe", None)
    if getframe is None:  # an interpreter without frames: the function's module only
        return {}, {}
    frame: FrameType | None = getframe(1)
    try:
        while frame is not None and (
            frame.f_globals is globals() or (frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is made)
        ):
            frame = frame.f_back
        if frame is None:
            return {}, {}
        if frame.f_locals is frame.f_globals:  # module level: those are globals, looked up after the function's own
            return {}, frame.f_globals
        return frame.f_locals, frame.f_globals
    finally:
        del frame  # keep no frame alive from this one


def _type_hints(fn: Callable[..., Any], name: str, maker: _Names) -> dict[str, Any]:
    """``fn``'s resolved type hints. A name is looked up in the local names where the tool is made, then in the
    function's own module, then in the maker's module (see ``_maker_names``), then in the builtins.

    Raises:
        InvalidTypeError: a hint names something none of them has (``argument="fn"``).
    """
    maker_locals, maker_globals = maker
    try:
        own_globals = getattr(inspect.unwrap(fn), "__globals__", {})
    except ValueError:  # a __wrapped__ cycle
        own_globals = getattr(fn, "__globals__", {})
    # The function's module before the maker's: a function made a tool in another module keeps its meaning.
    names = ChainMap(maker_locals, own_globals, maker_globals)
    try:
        return get_type_hints(fn, localns=names)
    except Exception as error:
        raise InvalidTypeError(
            f"tool {name!r}: cannot resolve the type hints of its parameters ({error}); define or import each type "
            "before the tool is made, in the function's module or where @tool is applied",
            argument="fn",
        ) from error


def _arguments_model(fn: Callable[..., Any], name: str, run_info: str | None, maker: _Names) -> type[BaseModel]:
    signature = inspect.signature(fn)
    hints = _type_hints(fn, name, maker)
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise InvalidTypeError(
                f"tool {name!r}: *args and **kwargs cannot be described to a model; name each argument", argument="fn"
            )
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise InvalidTypeError(f"tool {name!r}: positional-only parameters cannot be passed by name", argument="fn")
        if parameter.name == run_info:
            continue  # the agent passes it; the model neither sees nor sends it
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    scheduler: abc.SchedulerBase | None = None,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    scheduler: abc.SchedulerBase | None = None,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of a typed function: its name, its docstring as the description, its parameters' types and
    defaults as the JSON schema of its arguments. Use as ``@tool`` or ``@tool(name=..., description=...)``.

    The type hints are resolved when the tool is made, as pydantic resolves them: with the local names of the
    function (or class body) where ``@tool`` is applied first — so a tool defined in a factory, a test or a notebook
    can use types imported or defined there, even under ``from __future__ import annotations`` — then the names of
    the function's module.

    Args:
        fn: the function, plain or ``async def``; every parameter must be passable by name and its type must have
            a JSON schema — except one annotated ``RunInfo``, which receives the run's ``RunInfo`` and is left out
            of the schema.
        name: the name the model calls it by (default: the function's): letters, digits, ``_`` and ``-``.
        description: what the model is told it does (default: the function's docstring).
        scheduler: where the function is called, e.g. a ``ThreadPoolScheduler`` for blocking work (default: none
            of its own; an agent's ``tool_scheduler`` if it has one, else the thread that runs the agent's turn).
        requires_approval: a ``ReactAgent`` stops its turn before running a call of this tool and asks a human to
            approve, edit or reject it (see ``ApprovalRequest``).

    Raises:
        InvalidTypeError: ``fn`` is not callable, has ``*args``, ``**kwargs`` or positional-only parameters, or
            type hints that cannot be resolved (``argument="fn"``); ``scheduler`` is not a reactivex scheduler
            (``argument="scheduler"``); ``requires_approval`` is not a bool.
        InvalidArgumentError: the name has other characters (``argument="name"``).
    """
    if fn is not None:
        return Tool(fn, name=name, description=description, scheduler=scheduler, requires_approval=requires_approval)

    def _decorate(function: Callable[..., Any]) -> Tool:
        return Tool(
            function, name=name, description=description, scheduler=scheduler, requires_approval=requires_approval
        )

    return _decorate
