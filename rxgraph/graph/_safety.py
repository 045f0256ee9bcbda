"""Whether a state's message history can take a new user turn, tracked incrementally across a run's writes.

Each checkpoint records ``safe`` when it is written, so choosing the base of a new turn never re-validates a
history. To keep that O(new messages) per write, a run remembers how long the ready ("clean") prefix of its
history is, and scans only what was appended since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._frozen import FrozenList
from ..messages._rules import readiness_from
from ..messages._types import AssistantMessage, SystemMessage, ToolMessage, UserMessage

__all__ = ["HistorySafety"]

_MESSAGE_TYPES = (AssistantMessage, ToolMessage, UserMessage, SystemMessage)


class HistorySafety:
    """Judges the ``key`` of successive states of one run (not thread-safe: a run writes one step at a time)."""

    __slots__ = ("_clean", "_history", "key")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self._history: Sequence[Any] | None = None  # the history the clean length refers to
        self._clean = 0

    def seed(self, values: Mapping[str, Any], safe: bool) -> None:
        """Start from a base state: a safe base's whole history is the clean prefix, so it is never scanned again."""
        history = values.get(self.key) if self.key is not None else None
        if safe and isinstance(history, Sequence) and not isinstance(history, str):
            self._history, self._clean = history, len(history)
        else:
            self._history, self._clean = None, 0

    def assess(self, values: Mapping[str, Any]) -> tuple[bool, str | None]:
        """``(safe, reason)`` for a state: safe when it has no history, or its history is ready for user input.

        A history holding anything but rxgraph messages is not a chat history these rules know: it counts as safe.
        """
        if self.key is None:
            return True, None
        history = values.get(self.key)
        if not history or not isinstance(history, Sequence) or isinstance(history, str):
            self._history, self._clean = None, 0
            return True, None
        start = self._clean if self._extends_known(history) else 0
        for index in range(start, len(history)):
            if not isinstance(history[index], _MESSAGE_TYPES):
                self._history, self._clean = None, 0
                return True, None
        violations, clean = readiness_from(history, start)
        self._history, self._clean = history, clean
        if not violations:
            return True, None
        return False, "; ".join(str(v) for v in violations)

    def _extends_known(self, history: Sequence[Any]) -> bool:
        known = self._history
        if known is None:
            return False
        if history is known:
            return True
        return isinstance(history, FrozenList) and isinstance(known, FrozenList) and history.shares_prefix_with(known)
