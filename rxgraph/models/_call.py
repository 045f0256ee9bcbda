"""``ModelCall``: what the model adapters keep of one subscription to a model's stream."""

from __future__ import annotations

from collections.abc import Callable

from reactivex import abc

from ..agent._model import ChatChunk

__all__ = ["ModelCall"]


class ModelCall:
    """One subscription's answer: the observer, which hears nothing once the subscription is disposed
    (``cancelled``), whether a chunk with the answer's finish reason came (``finished``), and whether the observer
    was told the end (``ended``: completed or failed; the reader has nothing left to do but close its stream, so a
    dispose then need not stop it)."""

    __slots__ = ("cancelled", "ended", "finished", "observer")

    def __init__(self, observer: abc.ObserverBase[ChatChunk]) -> None:
        self.observer = observer
        self.cancelled = False
        self.finished = False
        self.ended = False

    def emit(self, chunk: ChatChunk) -> bool:
        """Hand ``chunk`` on; False when the subscription was disposed (the reader stops)."""
        if self.cancelled:
            return False
        if chunk.finish_reason:
            self.finished = True
        self.observer.on_next(chunk)
        return True

    def end(self, cut: Callable[[], Exception] | None) -> None:
        """The stream ended cleanly: complete — unless the answer's finish reason did not come and ``cut`` is given:
        then fail with ``cut()``, the error of an answer cut short."""
        if self.finished or cut is None:
            self.complete()
        else:
            self.fail(cut())

    def complete(self) -> None:
        if not self.cancelled:
            self.ended = True
            self.observer.on_completed()

    def fail(self, error: Exception) -> None:
        if not self.cancelled:
            self.ended = True
            self.observer.on_error(error)
