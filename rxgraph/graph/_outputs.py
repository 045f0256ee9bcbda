"""What a run emits (``NodeOutput``, ``StreamingOutput``) and what ``get_state`` returns (``StateSnapshot``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..checkpoint._base import Checkpoint

__all__ = ["NodeOutput", "StateSnapshot", "StreamingOutput"]


class NodeOutput:
    """A node finished: its update is merged into ``state`` (read-only) and, with a checkpointer, persisted.

    ``checkpoint_id`` is the checkpoint written for this step (``None`` without a checkpointer). Outputs are
    immutable.
    """

    # Plain slots behind read-only properties rather than a frozen dataclass: a frozen dataclass's __init__ costs
    # about four times as much, and a StreamingOutput is built for every chunk a node streams.
    __slots__ = ("_checkpoint_id", "_node", "_state")
    __match_args__ = ("node", "state")

    _node: str
    _state: Mapping[str, Any]
    _checkpoint_id: str | None

    def __init__(self, node: str, state: Mapping[str, Any], *, checkpoint_id: str | None = None) -> None:
        self._node = node
        self._state = state
        self._checkpoint_id = checkpoint_id

    @property
    def node(self) -> str:
        return self._node

    @property
    def state(self) -> Mapping[str, Any]:
        return self._state

    @property
    def checkpoint_id(self) -> str | None:
        return self._checkpoint_id

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._checkpoint_id)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, NodeOutput)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # the state is a mapping: outputs are not hashable

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(node={self._node!r}, state={self._state!r}, checkpoint_id={self._checkpoint_id!r})"
        )


class StreamingOutput(NodeOutput):
    """One chunk a node streamed while it runs. ``state`` is the state the node started from; ``checkpoint_id`` is
    always None (a chunk is not checkpointed)."""

    __slots__ = ("_chunk",)
    __match_args__ = ("node", "state", "chunk")

    _chunk: Any

    def __init__(self, node: str, state: Mapping[str, Any], chunk: Any) -> None:
        # Built once per streamed chunk: three stores and nothing else (no checkpoint id to store).
        self._node = node
        self._state = state
        self._chunk = chunk

    @property
    def chunk(self) -> Any:
        return self._chunk

    @property
    def checkpoint_id(self) -> None:
        return None

    def _fields(self) -> tuple[Any, ...]:
        return (self._node, self._state, self._chunk)

    def __repr__(self) -> str:
        return f"StreamingOutput(node={self._node!r}, chunk={self._chunk!r})"


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
