"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from .builder import StateGraph
from .compiled import CompiledGraph
from .config import MultitaskPolicy, RunnableConfig
from .constants import END, START
from .outputs import NodeOutput, StateSnapshot, StreamingOutput
from .state import KeyStrategy

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
