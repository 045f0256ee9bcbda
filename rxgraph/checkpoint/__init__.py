"""Checkpoints and the savers that store them."""

from .base import Checkpoint, CheckpointSaver, CheckpointSource
from .memory import MemorySaver

__all__ = ["Checkpoint", "CheckpointSaver", "CheckpointSource", "MemorySaver"]
