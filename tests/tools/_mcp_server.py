"""A real MCP server for the tests of ``rxgraph.tools.mcp``, made with the SDK's ``MCPServer`` (FastMCP in mcp 1.x).

``python _mcp_server.py`` serves over stdio; ``python _mcp_server.py --http`` serves streamable HTTP on 127.0.0.1,
on a port the system chose, and prints its URL as the first line of its stdout once it listens.

The tool ``slow`` tells a test what it sees on the Unix socket it is given: ``started`` when it runs, then
``cancelled`` when its call is cancelled (the request's cancellation reached it). The test waits on those lines.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

server = MCPServer("rxgraph-test-tools")

PNG_BYTES = b"\x89PNG\r\n\x1a\n"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Fails, always, for the reason given."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def picture() -> list[TextContent | ImageContent]:
    """A caption and a picture."""
    image = ImageContent(type="image", data=base64.b64encode(PNG_BYTES).decode(), mime_type="image/png")
    return [TextContent(type="text", text="a tiny picture"), image]


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def env(name: str) -> str:
    """The value of the server's environment variable ``name`` ("" when it has none)."""
    return os.environ.get(name, "")


@server.tool()
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@server.tool()
async def slow(report_to: str) -> str:
    """Runs until its call is cancelled, telling the Unix socket at ``report_to`` when it starts and when it ends."""
    with socket.socket(socket.AF_UNIX) as report:
        report.connect(report_to)
        report.sendall(b"started\n")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            report.sendall(b"cancelled\n")  # blocking and at once: awaiting anything now would be cancelled again
            raise
    return "never"


def serve_http() -> None:
    import uvicorn

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    print(f"http://127.0.0.1:{listening.getsockname()[1]}/mcp", flush=True)  # connections queue until served
    asyncio.run(uvicorn.Server(config).serve(sockets=[listening]))


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        serve_http()
    else:
        server.run()
