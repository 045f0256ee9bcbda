"""The errors rxgraph raises. Each names the graph element, thread or checkpoint involved."""

from __future__ import annotations

__all__ = [
    "CheckpointConflictError",
    "CheckpointDecodeError",
    "CheckpointNotFoundError",
    "DeadlockError",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleDatabaseError",
    "MaxIterationsError",
    "RunInterruptedError",
    "RxGraphError",
    "SerializationError",
    "ThreadBusyError",
    "UnsafeHistoryError",
]


class RxGraphError(Exception):
    """Base class of every error rxgraph raises on purpose."""


class MaxIterationsError(RxGraphError):
    """An agent's model kept calling tools after its last allowed call (``max_iterations``), which offered it no
    tools. The turn fails; the next turn starts from the newest safe checkpoint."""


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


class IncompatibleDatabaseError(RxGraphError, ValueError):
    """The file is not an rxgraph checkpoint database, or its schema version is one this code cannot use."""


class UnsafeHistoryError(RxGraphError, ValueError):
    """A message history breaks the chat-API sequence rules (for example a tool call with no tool response)."""


class CheckpointDecodeError(RxGraphError):
    """A stored checkpoint could not be read back: its row is damaged, or it holds a type this process does not know.

    Unsafe-head selection skips such a checkpoint (with a warning); reading it directly raises this error.
    """

    def __init__(self, message: str, *, thread_id: str, checkpoint_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id


class SerializationError(RxGraphError, TypeError):
    """A state value cannot be stored: its type is not one a saver can write back exactly.

    Register pydantic models with the saver's serde (``rxgraph.checkpoint.serde.register(MyModel)``); other types
    have to be converted to supported ones (or wrapped in a registered model) before they go into the state.
    """

    def __init__(self, message: str, *, key: str | None = None, value_type: type | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.value_type = value_type


class ThreadBusyError(RxGraphError):
    """A run was refused because another run holds its thread (``multitask="reject"``), or a state update was
    refused while a run is live on the thread.

    ``run_id`` is the run that holds the thread.
    """

    def __init__(self, message: str, *, thread_id: str, run_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.run_id = run_id


class RunInterruptedError(RxGraphError):
    """The run was cancelled, and rewound like any cancelled run, because a newer run on its thread asked for the
    thread with ``multitask="interrupt"``. Its subscriber receives this error; ``by_run_id`` is the newer run."""

    def __init__(self, message: str, *, thread_id: str, run_id: str, by_run_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.run_id = run_id
        self.by_run_id = by_run_id


class DeadlockError(RxGraphError, RuntimeError):
    """A blocking call would wait for work that can only make progress on the very thread it blocks: for example
    ``invoke()`` called on the event loop that its run's ``AsyncIOScheduler`` uses. Subscribe to ``stream()``
    instead, or make the call from another thread."""
