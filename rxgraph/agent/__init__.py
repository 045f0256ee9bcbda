"""Agents: a chat model and its tools, run as a graph with atomic turns.

Their errors (``MaxIterationsError``, ``ToolInputError``) are exported by ``rxgraph`` and ``rxgraph.errors``.
"""

from ..messages._approval import ApprovalRequest, Approve, Edit, Reject, ToolDecision
from ._model import ChatChunk, ChatModel, TokenUsage, ToolCallDelta, ToolSpec, merge_chunks
from ._react import AgentInput, ReactAgent
from ._tools import Tool, tool

__all__ = [
    "AgentInput",
    "ApprovalRequest",
    "Approve",
    "ChatChunk",
    "ChatModel",
    "Edit",
    "ReactAgent",
    "Reject",
    "TokenUsage",
    "Tool",
    "ToolCallDelta",
    "ToolDecision",
    "ToolSpec",
    "merge_chunks",
    "tool",
]
