"""Agents: a chat model and its tools, run as a graph with atomic turns.

Their errors (``MaxIterationsError``, ``ToolInputError``) are exported by ``rxgraph`` and ``rxgraph.errors``; the
messages they exchange (and ``TokenUsage``) by ``rxgraph.messages``.
"""

import typing

from .._deprecated import deprecated_names as _deprecated_names
from ..messages import TokenUsage as _TokenUsage
from ._approval import ApprovalRequest, Approve, Edit, Reject, ToolDecision
from ._model import ChatChunk, ChatModel, ToolCallDelta, ToolSpec, merge_chunks
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
    "Tool",
    "ToolCallDelta",
    "ToolDecision",
    "ToolSpec",
    "merge_chunks",
    "tool",
]

# Old names, kept for one release: they work, with a DeprecationWarning; type checkers see only the new ones.
if not typing.TYPE_CHECKING:
    __getattr__ = _deprecated_names(__name__, {"TokenUsage": ("rxgraph.messages.TokenUsage", lambda: _TokenUsage)})
