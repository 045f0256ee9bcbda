"""LangChain tools as rxgraph tools: ``from_langchain_tool``. Needs the ``langchain`` extra.

A ``ReactAgent`` takes LangChain tools as they are (``ReactAgent(model, tools=[search, get_weather])``, a
``BaseTool`` next to rxgraph tools) and converts each with ``from_langchain_tool``; call it yourself for a tool's
``scheduler`` or ``requires_approval``.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import ToolMessage as LangChainToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import Tool as LangChainSimpleTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from reactivex import abc

from .._arguments import check_scheduler
from ..agent._model import ToolSpec
from ..agent._tools import Tool, json_object
from ..errors import InvalidArgumentError, InvalidTypeError
from ..messages._langchain import from_langchain
from ..messages._types import ToolMessage

__all__ = ["from_langchain_tool"]


def from_langchain_tool(
    tool: BaseTool, *, scheduler: abc.SchedulerBase | None = None, requires_approval: bool = False
) -> Tool:
    """An rxgraph ``Tool`` that calls a LangChain tool (a ``BaseTool``: made with ``langchain_core.tools.tool``,
    ``StructuredTool.from_function``, a ``BaseTool`` subclass, or a toolkit's).

    The model sees the tool as LangChain shows it to a model (``convert_to_openai_tool``): its ``name``, its
    ``description`` and the JSON schema of its arguments (``tool_call_schema``: ``args_schema`` without the arguments
    LangChain injects). A call runs the tool as LangChain runs it, with the model's call (``tool.invoke`` or
    ``tool.ainvoke`` of a ``ToolCall``): LangChain validates the arguments, runs the tool's callbacks, and handles
    its errors as the tool says. So:

    - the tool's answer (its content; an ``artifact`` is never shown to the model) is the tool message;
    - a ``ToolException`` the tool handles (``handle_tool_error``), or arguments it handles
      (``handle_validation_error``), is an error tool message (``is_error=True``) with the text LangChain made of it;
    - anything it raises — a ``ToolException`` it does not handle, arguments that fail its schema, another error —
      is an error tool message too, saying what was raised, as for any rxgraph tool.

    An async tool (a ``coroutine``, or a ``BaseTool`` subclass with its own ``_arun``) is awaited on the run's event
    loop, and cancelling the turn cancels it: the tool sees ``asyncio.CancelledError``. A sync one is called as a
    blocking rxgraph tool is: on ``scheduler``, else the agent's ``tool_scheduler``, else the thread of the turn.

    An argument the tool declares with LangChain's ``InjectedToolCallId`` receives an id this adapter makes for the
    call, not the model's call id. LangGraph's injections (``InjectedState``, ``InjectedStore``, ``ToolRuntime``)
    and a ``Command`` result are LangGraph's, not LangChain's: rxgraph passes none of them.

    Args:
        tool: the LangChain tool.
        scheduler: where a sync tool is called (see ``rxgraph.agent.tool``).
        requires_approval: a ``ReactAgent`` asks a human before it runs a call of the tool (see
            ``ApprovalRequest``).

    Raises:
        InvalidTypeError: ``tool`` is not a LangChain ``BaseTool``, ``scheduler`` is not a reactivex scheduler, or
            ``requires_approval`` is not a bool.
        InvalidArgumentError: the tool's name has characters other than letters, digits, ``_`` and ``-`` (what
            chat APIs take).
    """
    return _LangChainTool(tool, scheduler=scheduler, requires_approval=requires_approval)


class _LangChainTool(Tool):
    """A ``Tool`` whose function runs a LangChain tool with the model's call; see ``from_langchain_tool``."""

    def __init__(
        self, tool: BaseTool, *, scheduler: abc.SchedulerBase | None, requires_approval: bool
    ) -> None:  # the base's __init__ describes a Python function; this one is described by LangChain
        if not isinstance(tool, BaseTool):
            raise InvalidTypeError(f"expected a LangChain BaseTool, got {type(tool).__name__}", argument="tool")
        name = tool.name
        if not name.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgumentError(
                f"LangChain tool name {name!r} must contain only letters, digits, '_' and '-' for a model to call it; "
                "rename the tool (tool.name = ...)",
                argument="tool",
            )
        if type(requires_approval) is not bool:
            raise InvalidTypeError(
                f"tool {name!r}: requires_approval must be a bool, got {requires_approval!r}",
                argument="requires_approval",
            )
        self.tool = tool
        self.name = name
        self.scheduler = check_scheduler(scheduler, argument="scheduler", owner=f"tool {name!r}")
        self.requires_approval = requires_approval
        function = convert_to_openai_tool(tool)["function"]
        self.description = function.get("description") or ""
        self.spec = ToolSpec(
            name=name,
            description=self.description,
            parameters=function.get("parameters") or {"type": "object", "properties": {}},
        )
        self.fn = self._ainvoke if _is_async(tool) else self._invoke

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, LangChain {type(self.tool).__name__})"

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """The model's arguments as a JSON object; LangChain validates them against the tool's schema when it runs.

        Raises:
            ToolInputError: the text is not a JSON object.
        """
        return json_object(arguments, self.name)

    def _invoke(self, /, **arguments: Any) -> ToolMessage:
        return self._answer(self.tool.invoke(self._call(arguments)))

    async def _ainvoke(self, /, **arguments: Any) -> ToolMessage:
        return self._answer(await self.tool.ainvoke(self._call(arguments)))

    def _call(self, arguments: dict[str, Any]) -> dict[str, Any]:
        # A ToolCall, so that LangChain answers with a ToolMessage whose status tells a handled error.
        return {"type": "tool_call", "name": self.name, "args": arguments, "id": f"rxgraph-{uuid.uuid4().hex}"}

    def _answer(self, output: Any) -> ToolMessage:
        """LangChain's answer as an rxgraph ``ToolMessage``: its content as text, ``is_error`` from its status."""
        if not isinstance(output, LangChainToolMessage):
            raise InvalidTypeError(
                f"LangChain tool {self.name!r} returned a {type(output).__name__}; rxgraph takes a tool's content "
                "(a LangGraph Command is for LangGraph's own agents)",
                argument="tool",
            )
        (message,) = from_langchain([output])
        assert isinstance(message, ToolMessage)
        return message


def _is_async(tool: BaseTool) -> bool:
    """Whether LangChain runs ``tool`` as a coroutine of its own (else ``ainvoke`` would run its sync code on a
    thread, where no cancellation reaches it)."""
    if isinstance(tool, StructuredTool | LangChainSimpleTool):
        return tool.coroutine is not None
    # The check LangChain's own arun makes to tell a subclass's async code from the default's.
    return type(tool)._arun is not BaseTool._arun
