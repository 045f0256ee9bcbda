"""rxgraph: stateful LLM agents and workflows as reactive graphs, where a turn is atomic under cancellation."""

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
