"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from ._builder import StateGraph
from ._compiled import CompiledGraph
from ._config import CancelPolicy, MultitaskPolicy, RunnableConfig, TurnPolicy, UnsafeHeadPolicy
from ._constants import END, START
from ._outputs import NodeOutput, RunOutput, StateSnapshot, StreamingOutput
from ._state import KeyStrategy

__all__ = [
    "END",
    "START",
    "CancelPolicy",
    "CompiledGraph",
    "FrozenDict",
    "FrozenList",
    "KeyStrategy",
    "MultitaskPolicy",
    "NodeOutput",
    "RunOutput",
    "RunnableConfig",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
    "TurnPolicy",
    "UnsafeHeadPolicy",
]
