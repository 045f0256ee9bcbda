"""What a run emits (``NodeOutput``, ``StreamingOutput``) and what ``get_state`` returns (``StateSnapshot``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..checkpoint.base import Checkpoint

__all__ = ["NodeOutput", "StateSnapshot", "StreamingOutput"]


@dataclass(frozen=True, slots=True)
class NodeOutput:
    """A node finished: its update is merged into ``state`` (read-only) and, with a checkpointer, persisted.

    ``checkpoint_id`` is the checkpoint written for this step (``None`` without a checkpointer).
    """

    node: str
    state: Mapping[str, Any]
    checkpoint_id: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class StreamingOutput(NodeOutput):
    """One chunk a node streamed while it runs. ``state`` is the state the node started from."""

    chunk: Any


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A thread's state at one checkpoint. For a thread with no checkpoint, ``values`` is empty and the rest None."""

    values: Mapping[str, Any]
    next: tuple[str, ...] = ()
    checkpoint: Checkpoint | None = None

    @property
    def checkpoint_id(self) -> str | None:
        return self.checkpoint.id if self.checkpoint is not None else None

    @property
    def parent_id(self) -> str | None:
        return self.checkpoint.parent_id if self.checkpoint is not None else None
