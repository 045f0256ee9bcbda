"""The errors rxgraph raises. Each names the graph element, thread or checkpoint involved."""

from __future__ import annotations

__all__ = [
    "CheckpointConflictError",
    "CheckpointNotFoundError",
    "GraphRecursionError",
    "GraphValidationError",
    "RxGraphError",
    "UnsafeHistoryError",
]


class RxGraphError(Exception):
    """Base class of every error rxgraph raises on purpose."""


class GraphValidationError(RxGraphError, ValueError):
    """The graph is malformed (found at build or compile time), or a route chose an unknown target at run time."""


class GraphRecursionError(RxGraphError, RecursionError):
    """A run took more steps than ``RunnableConfig.recursion_limit`` allows.

    Raise the limit in the config if the graph is meant to loop that often; otherwise check the routing function,
    which probably never reaches ``END``.
    """


class CheckpointConflictError(RxGraphError):
    """A compare-and-set write found that the thread's head had moved: another writer got there first."""

    def __init__(self, message: str, *, thread_id: str, expected_head: str | None, actual_head: str | None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.expected_head = expected_head
        self.actual_head = actual_head


class CheckpointNotFoundError(RxGraphError, LookupError):
    """A checkpoint id given in a config does not exist in the thread."""


class UnsafeHistoryError(RxGraphError, ValueError):
    """A message history breaks the chat-API sequence rules (for example a tool call with no tool response)."""
