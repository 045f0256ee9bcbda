"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from ._builder import StateGraph
from ._compiled import CompiledGraph
from ._config import CancelPolicy, ErrorPolicy, MultitaskPolicy, RunnableConfig, TurnPolicy, UnsafeHeadPolicy
from ._constants import END, START
from ._outputs import NodeOutput, RunOutput, StateSnapshot, StreamingOutput
from ._policies import NodeRetry, RetryPolicy
from ._run_info import RunInfo
from ._state import KeyReducer, KeyStrategy

__all__ = [
    "END",
    "START",
    "CancelPolicy",
    "CompiledGraph",
    "ErrorPolicy",
    "FrozenDict",
    "FrozenList",
    "KeyReducer",
    "KeyStrategy",
    "MultitaskPolicy",
    "NodeOutput",
    "NodeRetry",
    "RetryPolicy",
    "RunInfo",
    "RunOutput",
    "RunnableConfig",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "TurnPolicy",
    "UnsafeHeadPolicy",
]
