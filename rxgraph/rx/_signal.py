"""The terminal signal a ``do_finally`` callback receives (Reactor's ``SignalType`` subset)."""

from __future__ import annotations

import enum

__all__ = ["SignalType"]


class SignalType(enum.Enum):
    """How a subscription ended."""

    ON_COMPLETE = "on_complete"
    """The source completed and the completion reached the subscriber."""
    ON_ERROR = "on_error"
    """The source failed and the error reached the subscriber."""
    CANCEL = "cancel"
    """The subscriber disposed before any terminal event (``dispose()``, ``take``, ``take_until``, ``timeout``...)."""
