"""rxgraph: stateful LLM agents and workflows as reactive graphs, where a turn is atomic under cancellation."""

import logging as _logging

from .checkpoint import Checkpoint, CheckpointSaver, MemorySaver, SqliteSaver
from .errors import (
    CheckpointConflictError,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    GraphRecursionError,
    GraphValidationError,
    IncompatibleDatabaseError,
    MaxIterationsError,
    RxGraphError,
    SerializationError,
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
    "CheckpointDecodeError",
    "CheckpointNotFoundError",
    "CheckpointSaver",
    "CompiledGraph",
    "FrozenDict",
    "FrozenList",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleDatabaseError",
    "KeyStrategy",
    "MaxIterationsError",
    "MemorySaver",
    "NodeOutput",
    "RunnableConfig",
    "RxGraphError",
    "SerializationError",
    "SqliteSaver",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "UnsafeHistoryError",
]

__version__ = "0.1.0"

# A library does not configure logging; this keeps Python's last-resort handler from printing our warnings.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
