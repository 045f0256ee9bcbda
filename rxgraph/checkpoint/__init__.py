"""Checkpoints and the savers that store them."""

from ..errors import IncompatibleDatabaseError
from .base import Checkpoint, CheckpointSaver, CheckpointSource
from .memory import MemorySaver
from .serde import Serde, default_serde
from .sqlite import SqliteSaver, SqliteSaverStats

__all__ = [
    "Checkpoint",
    "CheckpointSaver",
    "CheckpointSource",
    "IncompatibleDatabaseError",
    "MemorySaver",
    "Serde",
    "SqliteSaver",
    "SqliteSaverStats",
    "default_serde",
]
