"""Checkpoints and the savers that store them.

For people writing a saver, the contract's checks are in :mod:`rxgraph.checkpoint.contract`.
"""

import typing

from .._deprecated import deprecated_names as _deprecated_names
from . import contract
from ._base import Checkpoint, CheckpointSaver, CheckpointSource
from ._memory import MemorySaver
from ._postgres import PostgresSaver, PostgresSaverStats
from ._serde import Serde, default_serde, register_model
from ._sqlite import SqliteSaver, SqliteSaverStats

__all__ = [
    "Checkpoint",
    "CheckpointSaver",
    "CheckpointSource",
    "MemorySaver",
    "PostgresSaver",
    "PostgresSaverStats",
    "Serde",
    "SqliteSaver",
    "SqliteSaverStats",
    "default_serde",
    "register_model",
]

# Old names, kept for one release: they work, with a DeprecationWarning; type checkers see only the new ones.
if not typing.TYPE_CHECKING:
    __getattr__ = _deprecated_names(
        __name__,
        {
            "register": ("rxgraph.checkpoint.register_model", lambda: register_model),
            "check_limit": ("rxgraph.checkpoint.contract.check_limit", lambda: contract.check_limit),
            "check_prune": ("rxgraph.checkpoint.contract.check_prune", lambda: contract.check_prune),
            "check_put": ("rxgraph.checkpoint.contract.check_put", lambda: contract.check_put),
            "duplicate_id": ("rxgraph.checkpoint.contract.duplicate_id", lambda: contract.duplicate_id),
            "select_pruned": ("rxgraph.checkpoint.contract.select_pruned", lambda: contract.select_pruned),
        },
    )
