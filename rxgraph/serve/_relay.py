"""``Relay``: how server processes that share a database reach each other's runs.

A run executes in the process that was asked for it, and its events live in that process's memory (``EventLog``).
A client of another process may still follow it (``join_stream``, a reconnect with ``Last-Event-ID``) or cancel it.
The relay carries three things between processes:

- *follow*: a process asks for a run's events; the process executing it publishes them from then on (all of them,
  from the first), until the run ends;
- *events*: what is published, readable by number (``read(run_id, after)``), with a wake-up for readers;
- *cancel*: a process asks the one executing a run to cancel it.

Events cross only when someone asks for them, so a run nobody follows from elsewhere costs nothing more.
``LocalRelay`` is the relay of a server alone with its storage (memory, SQLite): there is no other process.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from typing import Literal

__all__ = ["CancelAction", "LocalRelay", "Relay", "RelayHandlers"]

CancelAction = Literal["interrupt", "rollback"]


class RelayHandlers(abc.ABC):
    """What a relay tells its process (on the process's event loop)."""

    @abc.abstractmethod
    def follow_requested(self, run_id: str) -> None:
        """Another process follows ``run_id``: publish its events, if it executes here."""

    @abc.abstractmethod
    def cancel_requested(self, run_id: str, action: CancelAction) -> None:
        """Another process asks to cancel ``run_id``, if it executes here."""


class Relay(abc.ABC):
    """The channel between server processes sharing a database; see the module docstring. Every method returns at
    once but ``read`` (blocking: call it off the event loop)."""

    @abc.abstractmethod
    def open(self, loop: asyncio.AbstractEventLoop, handlers: RelayHandlers) -> None:
        """Start; ``handlers`` are called on ``loop``."""

    @abc.abstractmethod
    def publish(self, run_id: str, events: Sequence[tuple[int, str, str]], *, ended: bool) -> None:
        """Make a run's events readable elsewhere (``(number, event, data)``, in order); ``ended``: no more will
        come."""

    @abc.abstractmethod
    def request_follow(self, run_id: str) -> None:
        """Ask the process executing ``run_id`` to publish its events."""

    @abc.abstractmethod
    def request_cancel(self, run_id: str, action: CancelAction) -> None:
        """Ask the process executing ``run_id`` to cancel it."""

    @abc.abstractmethod
    def read(self, run_id: str, after: int) -> tuple[list[tuple[int, str, str]], bool]:
        """The published events of ``run_id`` numbered above ``after``, in order, and whether the run has ended
        (all its events are among them then)."""

    @abc.abstractmethod
    def changed(self, run_id: str) -> asyncio.Event:
        """An event set when more of ``run_id``'s events may have been published (a new one for each wait)."""

    @property
    @abc.abstractmethod
    def shared(self) -> bool:
        """Whether other processes may execute runs of the same threads."""

    def close(self) -> None:  # noqa: B027 - a local relay holds nothing
        """Stop; nothing is published or heard afterwards."""


class LocalRelay(Relay):
    """The relay of a server that shares its storage with no other server process."""

    def open(self, loop: asyncio.AbstractEventLoop, handlers: RelayHandlers) -> None:
        pass

    def publish(self, run_id: str, events: Sequence[tuple[int, str, str]], *, ended: bool) -> None:
        pass

    def request_follow(self, run_id: str) -> None:
        pass

    def request_cancel(self, run_id: str, action: CancelAction) -> None:
        pass

    def read(self, run_id: str, after: int) -> tuple[list[tuple[int, str, str]], bool]:
        return [], True

    def changed(self, run_id: str) -> asyncio.Event:
        return asyncio.Event()

    @property
    def shared(self) -> bool:
        return False
