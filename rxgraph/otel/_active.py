"""Whether rxgraph emits telemetry, read by the engine once per run (and once per model or tool call).

This module imports nothing of OpenTelemetry: until ``instrument`` is called, a run asks ``telemetry()`` once, gets
None, and carries no trace; its direct steps check nothing more, and a node call that is not one checks its
``None`` trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._telemetry import Telemetry

__all__ = ["set_telemetry", "telemetry"]

_current: Telemetry | None = None


def telemetry() -> Telemetry | None:
    """The telemetry runs report to now, or None when rxgraph is not instrumented."""
    return _current


def set_telemetry(value: Telemetry | None) -> None:
    """Report to ``value`` from the next run on (None: stop reporting)."""
    global _current
    _current = value
