"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from ._builder import StateGraph
from ._compiled import CompiledGraph
from ._config import CancelPolicy, ErrorPolicy, MultitaskPolicy, RunnableConfig, TurnPolicy, UnsafeHeadPolicy
from ._constants import END, START
from ._edges import Send
from ._interrupt import Command, PendingInterrupt, interrupt
from ._modes import StreamMode, stream_modes
from ._outputs import (
    CustomOutput,
    InterruptOutput,
    NodeOutput,
    RunOutput,
    StateSnapshot,
    StreamingOutput,
    SubgraphEvent,
)
from ._policies import NodeRetry, RetryPolicy
from ._run_info import RunInfo
from ._state import KeyReducer, KeyStrategy

__all__ = [
    "END",
    "START",
    "CancelPolicy",
    "Command",
    "CompiledGraph",
    "CustomOutput",
    "ErrorPolicy",
    "FrozenDict",
    "FrozenList",
    "InterruptOutput",
    "KeyReducer",
    "KeyStrategy",
    "MultitaskPolicy",
    "NodeOutput",
    "NodeRetry",
    "PendingInterrupt",
    "RetryPolicy",
    "RunInfo",
    "RunOutput",
    "RunnableConfig",
    "Send",
    "StateGraph",
    "StateSnapshot",
    "StreamMode",
    "StreamingOutput",
    "SubgraphEvent",
    "TurnPolicy",
    "UnsafeHeadPolicy",
    "interrupt",
    "stream_modes",
]
