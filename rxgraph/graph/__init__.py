"""Building and running graphs."""

from .._frozen import FrozenDict, FrozenList
from .builder import StateGraph
from .compiled import CompiledGraph
from .config import RunnableConfig
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
    "NodeOutput",
    "RunnableConfig",
    "StateGraph",
    "StateSnapshot",
    "StreamingOutput",
]
