"""What an MCP tool's result becomes in a tool message: its text, and a description of what is not text."""

from __future__ import annotations

import base64
import binascii
import json

from mcp import types

__all__ = ["result_text"]


def result_text(result: types.CallToolResult) -> str:
    """The text a tool message holds for ``result``: its content blocks one per line, text as it is and every other
    block described in brackets (rxgraph's tool messages hold text only); a result with no content but structured
    content gives that as JSON."""
    if not result.content and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(_block_text(block) for block in result.content)


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} not shown: {block.mime_type}, {_size(block.data)}; tool messages hold text only]"
    if isinstance(block, types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return f"[resource link {block.name!r} at {block.uri}{_mime(block.mime_type)}{about}]"
    contents = block.resource  # an embedded resource
    if isinstance(contents, types.TextResourceContents):
        return f"[resource {contents.uri}{_mime(contents.mime_type)}]\n{contents.text}"
    size = _size(contents.blob)
    return f"[resource not shown: {contents.uri}{_mime(contents.mime_type)}, {size}; tool messages hold text only]"


def _mime(mime_type: str | None) -> str:
    return f" ({mime_type})" if mime_type else ""


def _size(data: str) -> str:
    """The size of base64 ``data`` once decoded, for a reader."""
    try:
        size = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return f"{len(data)} characters of data that are not base64"
    return f"{size} bytes"
