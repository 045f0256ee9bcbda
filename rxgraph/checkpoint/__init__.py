"""Checkpoints and the savers that store them."""

from ._base import (
    Checkpoint,
    CheckpointSaver,
    CheckpointSource,
    check_limit,
    check_prune,
    check_put,
    duplicate_id,
    select_pruned,
)
from ._memory import MemorySaver
from ._postgres import PostgresSaver, PostgresSaverStats
from ._serde import Serde, default_serde, register
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
    "check_limit",
    "check_prune",
    "check_put",
    "default_serde",
    "duplicate_id",
    "register",
    "select_pruned",
]
