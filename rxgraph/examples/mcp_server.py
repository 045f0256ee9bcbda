"""A small MCP server, for the MCP guide (docs/guides/mcp.md): ``python -m rxgraph.examples.mcp_server`` serves its
one tool, ``get_weather``, over stdio. Needs the ``mcp`` extra (``pip install 'rxgraph[mcp]'``)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

server = MCPServer("rxgraph-example-weather")

FORECASTS = {"paris": "sunny, 24 °C", "oslo": "snow, -3 °C"}


@server.tool()
def get_weather(city: str) -> CallToolResult:
    """Today's weather in a city."""
    forecast = FORECASTS.get(city.lower())
    if forecast is None:  # an error result: the agent's model reads it in an error tool message
        return CallToolResult(content=[TextContent(type="text", text=f"no forecast for {city}")], is_error=True)
    return CallToolResult(content=[TextContent(type="text", text=f"{city}: {forecast}")])


if __name__ == "__main__":
    server.run()
