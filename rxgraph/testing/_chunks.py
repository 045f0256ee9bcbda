"""Helpers that build ``ChatChunk``s for scripted models."""

from __future__ import annotations

from ..agent._model import ChatChunk, ToolCallDelta
from ..errors import InvalidArgumentError

__all__ = ["finish", "text", "tool_call"]


def text(content: str) -> ChatChunk:
    """A chunk of answer text."""
    return ChatChunk(content=content)


def finish(reason: str = "stop") -> ChatChunk:
    """The last chunk of an answer: no content, only why the model stopped (``"stop"``, ``"tool_calls"``...)."""
    return ChatChunk(finish_reason=reason)


def tool_call(
    call_id: str, name: str, arguments: str = "{}", *, index: int = 0, split: int = 1
) -> ChatChunk | tuple[ChatChunk, ...]:
    """A tool call as a model streams it.

    With ``split=1`` (the default) one chunk carries the whole call. With ``split=n`` the call comes as ``n`` chunks
    the way OpenAI-compatible APIs stream it: the first carries ``index``, ``id`` and ``name`` and the first piece of
    the arguments, the others only more pieces — map them to successive marble letters.
    """
    if split < 1:
        raise InvalidArgumentError(f"split must be at least 1, got {split}", argument="split")
    if split == 1:
        return ChatChunk(tool_calls=(ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments),))
    size = -(-len(arguments) // split) if arguments else 0
    pieces = [arguments[i * size : (i + 1) * size] for i in range(split)] if size else [""] * split
    first = ToolCallDelta(index=index, id=call_id, name=name, arguments=pieces[0])
    rest = [ToolCallDelta(index=index, arguments=piece) for piece in pieces[1:]]
    return tuple(ChatChunk(tool_calls=(delta,)) for delta in [first, *rest])
