"""rxgraph: stateful LLM agents and workflows as reactive graphs, where a turn is atomic under cancellation."""

import logging as _logging

from .checkpoint import Checkpoint, CheckpointSaver, MemorySaver, SqliteSaver
from .errors import (
    CheckpointConflictError,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    DeadlockError,
    GraphRecursionError,
    GraphValidationError,
    IncompatibleDatabaseError,
    MaxIterationsError,
    RunInterruptedError,
    RxGraphError,
    SerializationError,
    ThreadBusyError,
    UnsafeHistoryError,
)
from .graph import (
    END,
    START,
    CompiledGraph,
    FrozenDict,
    FrozenList,
    KeyStrategy,
    MultitaskPolicy,
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
    "DeadlockError",
    "FrozenDict",
    "FrozenList",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleDatabaseError",
    "KeyStrategy",
    "MaxIterationsError",
    "MemorySaver",
    "MultitaskPolicy",
    "NodeOutput",
    "RunInterruptedError",
    "RunnableConfig",
    "RxGraphError",
    "SerializationError",
    "SqliteSaver",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "ThreadBusyError",
    "UnsafeHistoryError",
]

__version__ = "0.1.0"

# A library does not configure logging; this keeps Python's last-resort handler from printing our warnings.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
