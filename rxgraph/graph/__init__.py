"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from ._builder import StateGraph
from ._compiled import CompiledGraph
from ._config import MultitaskPolicy, RunnableConfig
from ._constants import END, START
from ._outputs import NodeOutput, StateSnapshot, StreamingOutput
from ._state import KeyStrategy

__all__ = [
    "END",
    "START",
    "CompiledGraph",
    "FrozenDict",
    "FrozenList",
    "KeyStrategy",
    "MultitaskPolicy",
    "NodeOutput",
    "RunnableConfig",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
]
