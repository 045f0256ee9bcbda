"""The tools of MCP servers (Model Context Protocol) for a ``ReactAgent``: ``MCPToolset.stdio([...])`` starts a
server and talks to it over its stdin and stdout, ``MCPToolset.http(url)`` connects to a streamable HTTP endpoint;
opened with ``with`` or ``async with``, ``toolset.tools`` are rxgraph tools. Needs the ``mcp`` extra
(``pip install 'rxgraph[mcp]'``: the official MCP SDK, 2.x)."""

from __future__ import annotations

from ..errors import ConfigurationError

try:
    from mcp import Client as _Client
except ImportError as missing:
    raise ConfigurationError(
        f"rxgraph.tools.mcp needs the official MCP SDK, 2.x: pip install 'rxgraph[mcp]' ({missing})"
    ) from missing
del _Client

from ._mcp_tool import MCPTool  # noqa: E402  (after the check, so that its error is the one raised)
from ._mcp_toolset import MCPToolset  # noqa: E402

__all__ = ["MCPTool", "MCPToolset"]
