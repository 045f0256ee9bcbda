"""rxgraph: stateful LLM agents and workflows as reactive graphs, where a turn is atomic under cancellation."""

import logging as _logging

from .checkpoint import Checkpoint, CheckpointSaver, MemorySaver
from .errors import (
    CheckpointConflictError,
    CheckpointNotFoundError,
    GraphRecursionError,
    GraphValidationError,
    RxGraphError,
    UnsafeHistoryError,
)
from .graph import (
    END,
    START,
    CompiledGraph,
    FrozenDict,
    FrozenList,
    KeyStrategy,
    NodeOutput,
    RunnableConfig,
    StateGraph,
    StateSnapshot,
    StreamingOutput,
)

__all__ = [
    "END",
    "START",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointNotFoundError",
    "CheckpointSaver",
    "CompiledGraph",
    "FrozenDict",
    "FrozenList",
    "GraphRecursionError",
    "GraphValidationError",
    "KeyStrategy",
    "MemorySaver",
    "NodeOutput",
    "RunnableConfig",
    "RxGraphError",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "UnsafeHistoryError",
]

__version__ = "0.1.0"

# A library does not configure logging; this keeps Python's last-resort handler from printing our warnings.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
