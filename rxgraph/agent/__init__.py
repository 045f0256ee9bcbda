"""Agents: a chat model and its tools, run as a graph with atomic turns.

Their errors (``MaxIterationsError``, ``ToolInputError``) are exported by ``rxgraph`` and ``rxgraph.errors``.
"""

from ._model import ChatChunk, ChatModel, TokenUsage, ToolCallDelta, ToolSpec, merge_chunks
from ._react import AgentInput, ReactAgent
from ._tools import Tool, tool

__all__ = [
    "AgentInput",
    "ChatChunk",
    "ChatModel",
    "ReactAgent",
    "TokenUsage",
    "Tool",
    "ToolCallDelta",
    "ToolSpec",
    "merge_chunks",
    "tool",
]
