"""Agents: a chat model and its tools, run as a graph with atomic turns."""

from ..errors import MaxIterationsError, ToolInputError
from ._model import ChatChunk, ChatModel, ToolCallDelta, ToolSpec, merge_chunks
from ._react import AgentInput, ReactAgent
from ._tools import Tool, tool

__all__ = [
    "AgentInput",
    "ChatChunk",
    "ChatModel",
    "MaxIterationsError",
    "ReactAgent",
    "Tool",
    "ToolCallDelta",
    "ToolInputError",
    "ToolSpec",
    "merge_chunks",
    "tool",
]
