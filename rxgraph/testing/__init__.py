"""Testing tools for rxgraph users: reproduce any cancellation timing exactly, in virtual time.

- scripted models and tools whose timing is a marble diagram (``ScriptedChatModel``, ``ScriptedTool``,
  ``marbles``, ``text``, ``tool_call``, ``finish``);
- a harness that runs a turn on a ``TestScheduler`` and cancels it at a tick, on an event, by ``timeout`` or by
  ``take_until``, or kills its process there (``crash_at``) (``CancellationHarness``), with a marble picture of what
  happened (``render_timeline``);
- the explorer, which cancels a scenario at every point where something happens and checks that turns stay atomic
  (``explore_cancellations``, ``assert_cancellation_safe``);
- the ``CheckpointSaver`` contract as a test suite to subclass, for your own saver (``SaverContract``);
- a local OpenAI-compatible Chat Completions server that answers from a script and records how each answer ended
  (``ChatCompletionsServer``, with ``Reply``, ``StreamedCall``, ``Refusal``, ``Pause``, ``Gate``, ``Cut``,
  ``ErrorReply``, ``ServedRequest``; needs the ``serve`` and ``openai`` extras).
"""

from ._chat_server import (
    ChatCompletionsServer,
    Cut,
    ErrorReply,
    Gate,
    Pause,
    Refusal,
    Reply,
    ServedRequest,
    StreamedCall,
)
from ._chunks import finish, text, tool_call
from ._explorer import ExplorationReport, Violation, assert_cancellation_safe, explore_cancellations
from ._harness import (
    CancellationHarness,
    CancelSpec,
    Streamable,
    TurnRecord,
    after_checkpoint,
    after_output,
    crash_at,
    dispose_at,
    dispose_when,
    take_until_at,
    timeout_after,
)
from ._recording import DelegatingSaver, Event, RecordingSaver
from ._saver_contract import SaverContract
from ._scripted import ModelRequest, Script, ScriptedChatModel, ScriptExhaustedError, marbles
from ._timeline import render_timeline
from ._tools import ScriptedTool

__all__ = [
    "CancelSpec",
    "CancellationHarness",
    "ChatCompletionsServer",
    "Cut",
    "DelegatingSaver",
    "ErrorReply",
    "Event",
    "ExplorationReport",
    "Gate",
    "ModelRequest",
    "Pause",
    "RecordingSaver",
    "Refusal",
    "Reply",
    "SaverContract",
    "Script",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "ScriptedTool",
    "ServedRequest",
    "Streamable",
    "StreamedCall",
    "TurnRecord",
    "Violation",
    "after_checkpoint",
    "after_output",
    "assert_cancellation_safe",
    "crash_at",
    "dispose_at",
    "dispose_when",
    "explore_cancellations",
    "finish",
    "marbles",
    "render_timeline",
    "take_until_at",
    "text",
    "timeout_after",
    "tool_call",
]
