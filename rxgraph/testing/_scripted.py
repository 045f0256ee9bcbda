"""``ScriptedChatModel``: a chat model whose answers are marble diagrams played on the run's scheduler."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import reactivex as rx
from reactivex import Observable

from ..agent._model import ChatChunk, ToolSpec
from ..errors import InvalidArgumentError, RxGraphError
from ..messages._types import Message

__all__ = ["ModelRequest", "Script", "ScriptExhaustedError", "ScriptedChatModel", "marbles"]


class ScriptExhaustedError(RxGraphError, AssertionError):
    """A scripted model (or tool) was called more times than it has scripts: the test's script is too short, or the
    code under test calls the model (or tool) more often than the test expects.

    ``call`` is the number of the call that found no script (1 for the first), ``scripts`` how many it was given.
    An ``AssertionError`` too, so a test framework reports it as a failed expectation.
    """

    def __init__(self, message: str, *, call: int, scripts: int) -> None:
        super().__init__(message)
        self.call = call
        self.scripts = scripts


@dataclass(frozen=True)
class Script:
    """A marble diagram and what its letters stand for (see ``marbles``)."""

    diagram: str
    values: Mapping[str, Any] = field(default_factory=dict)
    error: Exception | None = None
    timespan: float = 1.0

    def observable(self) -> Observable[Any]:
        """A cold Observable playing the diagram on the scheduler it is subscribed with (one frame = ``timespan``)."""
        lookup: dict[str | float, Any] = {}
        lookup.update(self.values)
        return rx.from_marbles(self.diagram, timespan=self.timespan, lookup=lookup, error=self.error)

    @property
    def duration(self) -> float:
        """Virtual time from subscription to the last frame."""
        return sum(1 for c in self.diagram if c not in " ()") * self.timespan


def marbles(diagram: str, *, error: Exception | None = None, timespan: float = 1.0, **values: Any) -> Script:
    """A script: ``marbles("-a-b-|", a=text("Hi"), b=finish())``.

    Each ``-`` is one frame of ``timespan`` virtual time (ticks on a ``TestScheduler``), a letter emits its value,
    ``|`` completes, ``#`` fails with ``error`` (a ``RuntimeError`` by default) and ``(ab)`` emits several values
    in one frame. The script starts when the model's answer is subscribed.

    Args:
        diagram: the marble diagram.
        error: what ``#`` fails with.
        timespan: the virtual time of one frame.
        **values: what each letter emits, by letter.

    Raises:
        InvalidArgumentError: a value's name is not a single letter (``argument`` is that name).
    """
    for letter in values:
        if len(letter) != 1:
            raise InvalidArgumentError(f"marble values are single letters, got {letter!r}", argument=letter)
    return Script(diagram, values, error if error is not None else RuntimeError("scripted failure"), timespan)


@dataclass(frozen=True)
class ModelRequest:
    """What a scripted model received in one call."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


class ScriptedChatModel:
    """A ``ChatModel`` whose successive calls play successive scripts.

    Every call is recorded in ``requests`` (messages and tools), so a test can check what the model was sent —
    for example that the next turn's request passes ``check_request``. Scripts play on the scheduler the answer is
    subscribed with, which for an agent is the run's: give the run a ``TestScheduler`` and the whole turn runs in
    virtual time.

    Args:
        scripts: one per call, each a ``marbles(...)`` script or a plain list of chunks (emitted at once, no
            scheduler needed).

    Raises:
        ScriptExhaustedError: from ``stream``, when it is called more often than there are scripts (``call`` is
            the call's number).
    """

    def __init__(self, scripts: Sequence[Script | Sequence[ChatChunk]]) -> None:
        self._scripts = [s if isinstance(s, Script) else _immediate(s) for s in scripts]
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        """How many times ``stream`` was called."""
        return len(self.requests)

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        """Record the request and return the next script's answer (see ``ChatModel.stream``).

        Raises:
            ScriptExhaustedError: every script was played already.
        """
        with self._lock:
            number = len(self.requests) + 1
            if number > len(self._scripts):
                raise ScriptExhaustedError(
                    f"ScriptedChatModel has no script for call #{number}: it was given {len(self._scripts)}",
                    call=number,
                    scripts=len(self._scripts),
                )
            self.requests.append(ModelRequest(tuple(messages), tuple(tools)))
            return self._scripts[number - 1].observable()


@dataclass(frozen=True)
class _Immediate(Script):
    """All chunks at once when subscribed, then complete: for tests that do not care about timing. Plays
    synchronously without a scheduler (a marble diagram would need one, or real time)."""

    chunks: tuple[Any, ...] = ()

    def observable(self) -> Observable[Any]:
        return rx.from_iterable(self.chunks)

    @property
    def duration(self) -> float:
        return 0.0


def _immediate(chunks: Sequence[ChatChunk]) -> Script:
    return _Immediate("|", chunks=tuple(chunks))
