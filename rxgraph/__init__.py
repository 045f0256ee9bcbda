"""rxgraph: stateful LLM agents and workflows as reactive graphs, where a turn is atomic under cancellation.

The public names, nothing else: graphs and runs from ``rxgraph.graph``, checkpoints and savers from
``rxgraph.checkpoint``, and every error from ``rxgraph.errors``. Agents, messages and the testing tools live in
their subpackages (``rxgraph.agent``, ``rxgraph.messages``, ``rxgraph.testing``), and the reactive operators in
``rxgraph.rx``.
"""

import logging as _logging

from .checkpoint import Checkpoint, CheckpointSaver, MemorySaver, SqliteSaver
from .errors import (
    CheckpointConflictError,
    CheckpointDecodeError,
    CheckpointError,
    CheckpointNotFoundError,
    ConfigurationError,
    DeadlockError,
    DecodeError,
    GraphRecursionError,
    GraphValidationError,
    IncompatibleDatabaseError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidTypeError,
    InvalidUpdateError,
    MaxIterationsError,
    MessageFormatError,
    ModelAPIError,
    RouteError,
    RunError,
    RunInterruptedError,
    RxGraphError,
    SaverClosedError,
    SaverTimeoutError,
    SerializationError,
    ThreadBusyError,
    ThreadNotFoundError,
    ToolInputError,
    UnsafeHistoryError,
)
from .graph import (
    END,
    START,
    CancelPolicy,
    CompiledGraph,
    ErrorPolicy,
    FrozenDict,
    FrozenList,
    KeyStrategy,
    MultitaskPolicy,
    NodeOutput,
    RunInfo,
    RunnableConfig,
    RunOutput,
    StateGraph,
    StateSnapshot,
    StreamingOutput,
    TurnPolicy,
    UnsafeHeadPolicy,
)

__all__ = [
    "END",
    "START",
    "CancelPolicy",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointDecodeError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointSaver",
    "CompiledGraph",
    "ConfigurationError",
    "DeadlockError",
    "DecodeError",
    "ErrorPolicy",
    "FrozenDict",
    "FrozenList",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleDatabaseError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidTypeError",
    "InvalidUpdateError",
    "KeyStrategy",
    "MaxIterationsError",
    "MemorySaver",
    "MessageFormatError",
    "ModelAPIError",
    "MultitaskPolicy",
    "NodeOutput",
    "RouteError",
    "RunError",
    "RunInfo",
    "RunInterruptedError",
    "RunOutput",
    "RunnableConfig",
    "RxGraphError",
    "SaverClosedError",
    "SaverTimeoutError",
    "SerializationError",
    "SqliteSaver",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ToolInputError",
    "TurnPolicy",
    "UnsafeHeadPolicy",
    "UnsafeHistoryError",
]

__version__ = "0.1.0"

# A library does not configure logging; this keeps Python's last-resort handler from printing our warnings.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
