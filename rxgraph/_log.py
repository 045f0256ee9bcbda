"""The package's loggers. A library does not configure logging: the top package adds a ``NullHandler``."""

from __future__ import annotations

import logging

__all__ = ["log", "rx_log"]

log = logging.getLogger("rxgraph")
"""Runs, rewinds, base selection and savers."""

rx_log = logging.getLogger("rxgraph.rx")
"""The reactive operators and the subscriptions to node streams (teardown errors, failing callbacks)."""
