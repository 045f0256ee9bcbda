"""Every error rxgraph raises on purpose, in one tree. Each carries what it is about as attributes.

::

    RxGraphError
    ├── ConfigurationError                     something was set up wrong; found when it is built, called or used
    │   ├── GraphValidationError (ValueError)      the graph is malformed                        .node
    │   ├── InvalidArgumentError (ValueError)      an option or argument has a value it cannot have  .argument
    │   │   └── InvalidConfigError                     a RunnableConfig's fields do not validate    .errors
    │   └── InvalidTypeError (TypeError)           an option or argument has a type it cannot have   .argument
    ├── RunError                               a run failed; its subscriber's on_error gets it
    │   ├── GraphRecursionError (RecursionError)   more steps than recursion_limit      .limit .next_node
    │   ├── RouteError (GraphValidationError)      a route chose a target the graph has not    .node .label
    │   ├── InvalidUpdateError (TypeError)         a node returned or streamed something that is no update  .node
    │   ├── MaxIterationsError                     an agent's model kept calling tools   .max_iterations
    │   ├── ModelAPIError                          the chat model's API refused or failed   .status_code .body
    │   ├── ThreadBusyError                        another run holds the thread          .thread_id .run_id
    │   ├── RunInterruptedError                    a newer run took the thread   .thread_id .run_id .by_run_id
    │   ├── NodeTimeoutError (TimeoutError)        a node's attempt outran its timeout   .node .timeout .attempt
    │   ├── InterruptSwallowedError                a node caught its interrupt() and returned   .node
    │   └── DeadlockError (RuntimeError)           a blocking call would wait for itself
    ├── NodeInterrupt                          a node asks the run to stop for a human (not a failure)  .value
    ├── UnsafeHistoryError (ValueError)        a message history breaks the chat-API rules    .violations .thread_id
    ├── MessageFormatError (ValueError)        a message (or a model's chunk) cannot be what it says   .index
    ├── ToolInputError (ValueError)            a model's arguments for a tool are not valid     .tool
    ├── MCPError                               an MCP server failed, or its tool reported an error   .server .tool
    └── CheckpointError                        about stored checkpoints                          .thread_id
        ├── CheckpointConflictError                another writer moved the head        .expected_head .actual_head
        ├── CheckpointNotFoundError (LookupError)  no such checkpoint in the thread      .checkpoint_id
        ├── ThreadNotFoundError (LookupError)      no such thread (a resume needs one)
        ├── InvalidCheckpointError (ValueError)    a put the contract refuses (seq, duplicate id)  .checkpoint_id
        ├── CheckpointDecodeError                  a stored checkpoint cannot be read    .checkpoint_id
        ├── SerializationError (TypeError)         a value cannot be stored exactly      .key .value_type
        ├── DecodeError (ValueError)               a text is not an encoding rxgraph wrote
        ├── IncompatibleDatabaseError (ValueError) a file that is not (or not yet, or no longer) ours   .path
        ├── SaverClosedError (RuntimeError)        the saver was closed
        └── SaverTimeoutError (TimeoutError)       the database did not answer in time

Where users already catch a built-in exception for the same failure, the error keeps it as a second base: a
malformed graph is still a ``ValueError``, a missing checkpoint a ``LookupError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "CheckpointConflictError",
    "CheckpointDecodeError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "ConfigurationError",
    "DeadlockError",
    "DecodeError",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleDatabaseError",
    "InterruptSwallowedError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidConfigError",
    "InvalidTypeError",
    "InvalidUpdateError",
    "MCPError",
    "MaxIterationsError",
    "MessageFormatError",
    "ModelAPIError",
    "NodeInterrupt",
    "NodeTimeoutError",
    "RouteError",
    "RunError",
    "RunInterruptedError",
    "RxGraphError",
    "SaverClosedError",
    "SaverTimeoutError",
    "SerializationError",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ToolInputError",
    "UnsafeHistoryError",
]


class RxGraphError(Exception):
    """Base class of every error rxgraph raises on purpose."""


# -- set up wrong ----------------------------------------------------------------------------------------------


class ConfigurationError(RxGraphError):
    """A graph, agent, tool, saver or call was set up wrong. Raised where it is built or called — or, for what only
    shows when it is used (a node's Observable whose subscribe returns something unusable), when the run uses it."""


class GraphValidationError(ConfigurationError, ValueError):
    """The graph is malformed: an unknown node in an edge, no edge from START, a node with no way out, ...

    ``node`` is the node (or ``START``) the problem is about, when there is one.
    """

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class InvalidArgumentError(ConfigurationError, ValueError):
    """An option or argument has a value it cannot have (a negative limit, an unknown policy, a config without the
    thread a checkpointer needs, ...). ``argument`` names it."""

    def __init__(self, message: str, *, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


class InvalidConfigError(InvalidArgumentError):
    """A ``RunnableConfig`` was given a field it does not have, or a value its field cannot take. ``errors`` is
    pydantic's account of every problem (dicts with ``loc``, ``msg`` and ``type``, as ``ValidationError.errors()``
    gives them), and pydantic's ``ValidationError`` is the ``__cause__``; ``argument`` is the first field at fault."""

    def __init__(self, message: str, *, errors: Sequence[Mapping[str, object]], argument: str = "config") -> None:
        super().__init__(message, argument=argument)
        self.errors = tuple(errors)


class InvalidTypeError(ConfigurationError, TypeError):
    """An option or argument has a type it cannot have (an action that is not callable, a checkpointer that is not a
    ``CheckpointSaver``, ...). ``argument`` names it."""

    def __init__(self, message: str, *, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


# -- a run failed ----------------------------------------------------------------------------------------------


class RunError(RxGraphError):
    """A run failed for a reason of rxgraph's own; the run's subscriber receives it in ``on_error``. (An exception a
    node raises reaches the subscriber as it is.)"""


class GraphRecursionError(RunError, RecursionError):
    """A run took more steps than ``RunnableConfig.recursion_limit`` allows.

    ``limit`` is the limit, ``next_node`` the node the run would have run next, ``run_id``/``thread_id`` the run.
    Raise the limit in the config if the graph is meant to loop that often; otherwise check the routing function,
    which probably never reaches ``END``.
    """

    def __init__(
        self, message: str, *, limit: int, next_node: str, run_id: str | None = None, thread_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.next_node = next_node
        self.run_id = run_id
        self.thread_id = thread_id


class RouteError(RunError, GraphValidationError):
    """A route function chose a target the graph does not have. ``node`` is the node whose route it is, ``label``
    what the route returned."""

    def __init__(self, message: str, *, node: str, label: object) -> None:
        super().__init__(message, node=node)
        self.label = label


class InvalidUpdateError(RunError, TypeError):
    """A node returned, or streamed, something that is not a state update (with no ``reduce`` to make one), or an
    update that does not fit the state's key strategies. ``node`` is that node (None for a run's input)."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class MaxIterationsError(RunError):
    """An agent's model kept calling tools after its last allowed call (``max_iterations``), which offered it no
    tools. The turn fails; the next turn starts from the newest safe checkpoint."""

    def __init__(self, message: str, *, max_iterations: int) -> None:
        super().__init__(message)
        self.max_iterations = max_iterations


class ModelAPIError(RunError):
    """The chat model's API answered with an error, or the connection to it failed. ``status_code`` is the HTTP
    status (None when there was no response), ``body`` what the API said (its JSON error object when it sent one),
    ``provider`` the adapter's name for the API. A 400 about the request itself (a context too long, a message
    sequence it rejects) will not go away by retrying; a 429 or a 5xx may."""

    def __init__(
        self, message: str, *, status_code: int | None, body: object = None, provider: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.provider = provider


class ThreadBusyError(RunError):
    """A run was refused because another run holds its thread (``multitask="reject"``), or a state update was
    refused while a run is live on the thread. ``run_id`` is the run that holds the thread."""

    def __init__(self, message: str, *, thread_id: str, run_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.run_id = run_id


class RunInterruptedError(RunError):
    """The run was cancelled, and rewound like any cancelled run, because a newer run on its thread asked for the
    thread with ``multitask="interrupt"``. Its subscriber receives this error; ``by_run_id`` is the newer run."""

    def __init__(self, message: str, *, thread_id: str, run_id: str, by_run_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.run_id = run_id
        self.by_run_id = by_run_id


class NodeTimeoutError(RunError, TimeoutError):
    """An attempt of a node ran longer than the node's ``timeout`` (``add_node(..., timeout=...)``): it was disposed
    (an ``async def`` is cancelled, a stream unsubscribed; a blocking call on a thread runs on, and what it returns
    is dropped). A node's ``RetryPolicy`` retries it by default. ``node`` is the node, ``timeout`` its limit in
    seconds, ``attempt`` the attempt that ran out of time (1 for the first)."""

    def __init__(self, message: str, *, node: str, timeout: float, attempt: int = 1) -> None:
        super().__init__(message)
        self.node = node
        self.timeout = timeout
        self.attempt = attempt


class InterruptSwallowedError(RunError):
    """A node called ``interrupt()`` and returned anyway: it caught the ``NodeInterrupt`` (an ``except Exception``
    around the call, say), so going on would run the node past a question nobody answered. The run fails with this
    error instead; ``node`` is the node. Let ``NodeInterrupt`` propagate (catch narrower exceptions, or re-raise it).
    """

    def __init__(self, message: str, *, node: str) -> None:
        super().__init__(message)
        self.node = node


class DeadlockError(RunError, RuntimeError):
    """A blocking call would wait for work that can only make progress on the very thread it blocks — for example
    ``invoke()`` called on the event loop that its run's ``AsyncIOScheduler`` uses — or for work that is never
    scheduled. Subscribe to ``stream()`` instead, or make the call from another thread."""


# -- messages and tools ----------------------------------------------------------------------------------------


class NodeInterrupt(RxGraphError):
    """Raised by ``interrupt(value)`` in a node (or returned by the node): the run stops before the node's superstep
    as an interrupted run — not a failed one — with ``value`` in its ``InterruptOutput`` and the thread's state, until
    ``stream(Command(resume=...), config)`` runs the superstep again (but its branches that had finished). ``index``
    is which ``interrupt()`` call of the node it is (0 for the first), so that a resumed node gets each of its answers
    back in order."""

    def __init__(self, value: object = None, *, index: int = 0, subgraph: object = None) -> None:
        super().__init__(f"the node interrupted the run with {value!r}")
        self.value = value
        self.index = index
        self.subgraph = subgraph  # a subgraph node's inner state, kept in the parent's checkpoint for the resume


class UnsafeHistoryError(RxGraphError, ValueError):
    """A message history breaks the chat-API sequence rules (for example a tool call with no tool response).

    ``violations`` lists each broken rule (``rxgraph.messages.SequenceViolation``); ``thread_id`` and
    ``checkpoint_id`` say which stored history it is, when it is one.
    """

    def __init__(
        self,
        message: str,
        *,
        violations: Sequence[object] = (),
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.violations = tuple(violations)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id


class MessageFormatError(RxGraphError, ValueError):
    """A message, or a model's streamed chunk, cannot be what it claims to be: a wire-format entry that is not a
    message, a tool call streamed without an id or a name, ... ``index`` is its position, when it has one."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ToolInputError(RxGraphError, ValueError):
    """The arguments a model sent for a tool are not valid (bad JSON, or failing the tool's schema). ``tool`` is the
    tool's name. The agent turns it into an error tool message the model can read."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


class MCPError(RxGraphError):
    """Talking to an MCP server failed (``rxgraph.tools.mcp``): it could not be started or reached, it answered a
    request with an error or went away, the toolset was closed — or a tool's result reported an error (``isError``).
    ``server`` says which server (its command or URL); ``tool`` names the tool, for a call. A ``ReactAgent`` turns a
    call's error into an error tool message the model can read."""

    def __init__(self, message: str, *, server: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.tool = tool


# -- stored checkpoints ----------------------------------------------------------------------------------------


class CheckpointError(RxGraphError):
    """Something about stored checkpoints. ``thread_id`` is the thread, when the error is about one."""

    def __init__(self, message: str, *, thread_id: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id


class CheckpointConflictError(CheckpointError):
    """A compare-and-set write found that the thread's head had moved: another writer got there first.

    ``expected_head`` is the head the writer built on, ``actual_head`` the head it found. Nothing was written. Read
    the thread again and decide: a run fails with this error (its turn is not written over a newer one); retry it
    on the new head if that is what you want.
    """

    def __init__(self, message: str, *, thread_id: str, expected_head: str | None, actual_head: str | None) -> None:
        super().__init__(message, thread_id=thread_id)
        self.expected_head = expected_head
        self.actual_head = actual_head


class CheckpointNotFoundError(CheckpointError, LookupError):
    """A checkpoint id (given in a config, or as a parent) does not exist in the thread."""

    def __init__(self, message: str, *, thread_id: str, checkpoint_id: str) -> None:
        super().__init__(message, thread_id=thread_id)
        self.checkpoint_id = checkpoint_id


class ThreadNotFoundError(CheckpointError, LookupError):
    """The thread has no checkpoint, and the call needs one: ``stream(None, config)`` resumes a thread's run, so
    there must be a thread to resume. ``thread_id`` is the thread."""

    def __init__(self, message: str, *, thread_id: str) -> None:
        super().__init__(message, thread_id=thread_id)


class InvalidCheckpointError(CheckpointError, ValueError):
    """A ``put`` the saver contract refuses: a ``seq`` that is not the head's plus one, or an id already stored."""

    def __init__(self, message: str, *, thread_id: str, checkpoint_id: str) -> None:
        super().__init__(message, thread_id=thread_id)
        self.checkpoint_id = checkpoint_id


class CheckpointDecodeError(CheckpointError):
    """A stored checkpoint could not be read back: its row is damaged, or it holds a type this process does not know.

    Unsafe-head selection skips such a checkpoint (with a warning); reading it directly raises this error.
    ``seq`` is its place in the thread, when the saver could read that much.
    """

    def __init__(self, message: str, *, thread_id: str, checkpoint_id: str, seq: int | None = None) -> None:
        super().__init__(message, thread_id=thread_id)
        self.checkpoint_id = checkpoint_id
        self.seq = seq


class SerializationError(CheckpointError, TypeError):
    """A state value cannot be stored: its type is not one a saver can write back exactly.

    Register pydantic models with the saver's serde (``rxgraph.checkpoint.register_model(MyModel)``); other types
    have to be converted to supported ones (or wrapped in a registered model) before they go into the state. ``key``
    is the state key, ``value_type`` the type that could not be stored.
    """

    def __init__(self, message: str, *, key: str | None = None, value_type: type | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.value_type = value_type


class DecodeError(CheckpointError, ValueError):
    """A text is not an encoding rxgraph's serde wrote (damaged, or from something else)."""


class IncompatibleDatabaseError(CheckpointError, ValueError):
    """The file is not an rxgraph checkpoint database, or its schema version is one this code cannot use. ``path``
    is the file."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SaverClosedError(CheckpointError, RuntimeError):
    """The saver was closed; open a new one."""


class SaverTimeoutError(CheckpointError, TimeoutError):
    """The saver could not get its connection (other threads of this process held it) or the database's write lock
    (another connection or process held it) in time, or the database did not answer in time (a server process that
    stopped, a network that fails silently: that connection was dropped, and a write in flight may or may not have
    landed). It never answers "nothing" instead: retry, or give it a longer ``timeout``."""
