"""``MCPTool``: one tool of an MCP server, as a ``ReactAgent`` calls it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mcp import types
from reactivex import Observable

from ..agent import Tool, ToolSpec
from ..agent._tools import json_object

__all__ = ["MCPTool", "tool_name"]

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server_name: str) -> str:
    """The name the model calls an MCP tool by: the server's, each character chat APIs refuse in a function name
    (anything but letters, digits, ``_`` and ``-``) made ``_``."""
    return _NOT_IN_A_NAME.sub("_", server_name)


class MCPTool(Tool):
    """A tool of an MCP server, as ``MCPToolset.tools`` lists it: its name, description and input schema are what
    the model is shown (``spec``); a call sends ``tools/call`` through the toolset's session.

    The model's arguments are checked to be a JSON object and passed to the server as they are: the server validates
    them against its schema, and a refusal comes back as an error result, which the model reads in an error tool
    message. Calling the tool (``tool(a=1, b=2)``, or ``run``) returns a cold Observable of the result's text (see
    ``MCPToolset``); disposing it cancels the call.

    Attributes:
        definition: the tool as the server listed it (``mcp.types.Tool``): its own name (``server_name``), title,
            annotations, output schema...
        server_name: the name the server knows it by; ``name`` is the same, except that characters chat APIs refuse
            in a function name are made ``_``.
    """

    def __init__(
        self,
        definition: types.Tool,
        call: Callable[[str, dict[str, Any]], Observable[str]],
        *,
        requires_approval: bool = False,
    ) -> None:
        """Made by ``MCPToolset``: ``call(server_name, arguments)`` is its call through the toolset's session."""
        self.definition = definition
        self.server_name = definition.name
        self.name = tool_name(definition.name)
        self.description = definition.description or definition.title or ""
        self.spec = ToolSpec(name=self.name, description=self.description, parameters=dict(definition.input_schema))
        self.requires_approval = requires_approval
        server_name = definition.name

        def _call(**arguments: Any) -> Observable[str]:
            return call(server_name, arguments)

        self.fn = _call

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """The arguments to send, from the model's JSON text: any JSON object (``""`` means ``{}``); the server
        checks them against its schema.

        Raises:
            ToolInputError: the text is not a JSON object.
        """
        return json_object(arguments, self.name)
