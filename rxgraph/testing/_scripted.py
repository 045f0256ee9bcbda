"""``ScriptedChatModel``: a chat model whose answers are marble diagrams played on the run's scheduler."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import reactivex as rx
from reactivex import Observable

from ..agent._model import ChatChunk, ToolSpec
from ..errors import InvalidArgumentError, InvalidTypeError, RxGraphError
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
    """A marble diagram and what its names stand for (see ``marbles``, which documents the syntax).

    The diagram is checked when the script is built, so a diagram that reactivex would refuse, or read differently
    from how it looks, fails the test that builds it rather than play something else.

    Raises:
        InvalidArgumentError: the diagram is malformed or uses a name without a value (``argument="diagram"``); a
            value's name is one no diagram can use (``argument`` is that name); ``timespan`` is negative or not
            finite (``argument="timespan"``).
    """

    diagram: str
    values: Mapping[str, Any] = field(default_factory=dict)
    error: Exception | None = None
    timespan: float = 1.0
    _frames: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timespan) and self.timespan >= 0):
            raise InvalidArgumentError(
                f"a marble frame's timespan must be a finite number >= 0, got {self.timespan!r}", argument="timespan"
            )
        for name in self.values:
            problem = _name_problem(name)
            if problem is not None:
                raise InvalidArgumentError(f"marble value {name!r} {problem}", argument=name)
        object.__setattr__(self, "_frames", _count_frames(self.diagram, self.values))

    def observable(self) -> Observable[Any]:
        """A cold Observable playing the diagram on the scheduler it is subscribed with (one frame = ``timespan``)."""
        lookup: dict[str | float, Any] = {}
        lookup.update(self.values)
        return rx.from_marbles(self.diagram, timespan=self.timespan, lookup=lookup, error=self.error)

    @property
    def duration(self) -> float:
        """Virtual time from subscription to the end of the diagram's last frame: its frames (every character but
        spaces; a group takes one per character, parentheses and commas included) times ``timespan``. Every event
        of the script happens before it."""
        return self._frames * self.timespan


def marbles(diagram: str, *, error: Exception | None = None, timespan: float = 1.0, **values: Any) -> Script:
    """A script: ``marbles("-a-b-|", a=text("Hi"), b=finish())``, played with ``reactivex.from_marbles``.

    The syntax is reactivex's. Every character but a space is one frame of ``timespan`` virtual time (ticks on a
    ``TestScheduler``); frame 0 starts when the script is subscribed (it is a cold Observable), so ``-a`` emits
    ``a`` one ``timespan`` after the model's answer (or the tool's result) is subscribed.

    - ``-``: a frame in which nothing happens.
    - a name (``a``, ``r``, ``hi``): emits the value given for it, in the frame of its first character. A run of
      characters is one name, taking a frame per character: ``-ab-`` emits ``ab``'s value, not ``a``'s then
      ``b``'s (write ``-a-b-``, or ``-(a,b)-``). Every name needs a value; reactivex would read a number (``1``,
      ``2.5``, ``inf``) as that number, so names are not numbers.
    - ``(a,b,c)``: a group, emitting its elements in order in the frame of its ``(``. It takes a frame per
      character, parentheses and commas included: ``(a,b)-c|`` emits ``a`` and ``b`` at frame 0, ``c`` at 6 and
      completes at 7. An element may be ``|`` or ``#``: ``(a,|)`` emits and completes in one frame.
    - ``|``: completes. ``#``: fails with ``error`` (a ``RuntimeError`` by default). Only frames and spaces may
      follow either; a diagram with neither never ends by itself.
    - spaces: nothing and no time; they line diagrams up in a test. (Other whitespace is not allowed.)

    There are no subscription markers (``^``, ``!``): a script starts when it is subscribed, and stops when it is
    disposed.

    Args:
        diagram: the marble diagram.
        error: what ``#`` fails with.
        timespan: the virtual time of one frame.
        **values: what each name emits, by name.

    Raises:
        InvalidArgumentError: when the script is built (``argument="diagram"``, the message naming the element and
            showing the diagram), for a name that has no value, and for what reactivex would refuse or read
            differently from how it looks: an unclosed, stray or nested parenthesis, an empty element in a group
            (``(a,,b)``, ``()``), a comma outside a group, ``-`` inside a group, anything but frames after ``|`` or
            ``#``, names separated by spaces alone (reactivex removes spaces and reads ``a b`` as ``ab``), a tab or
            a line break, a number. A value's name no diagram can use (empty, or holding ``-,()#|`` or whitespace,
            or a number): ``argument`` is that name. A negative ``timespan``: ``argument="timespan"``.
    """
    return Script(diagram, values, error if error is not None else RuntimeError("scripted failure"), timespan)


# -- the diagram, read as reactivex reads it (reactivex/observable/marbles.py) --------------------------------------

_SPECIAL = "-,()#|"
_ENDS = ("|", "#")


def _number(name: str) -> float | None:
    """What reactivex turns ``name`` into instead of looking it up: a number, when ``int`` or ``float`` reads one."""
    try:
        return int(name)
    except ValueError:
        try:
            return float(name)
        except ValueError:
            return None


def _name_problem(name: str) -> str | None:
    """Why no diagram can use ``name`` as a value's name (to follow ``marble value 'x'``), or None."""
    if not name:
        return "has an empty name, which no diagram can spell"
    if any(c in _SPECIAL or c.isspace() for c in name):
        return f"has a name no diagram can spell: names hold no whitespace and none of {_SPECIAL!r}"
    number = _number(name)
    if number is not None:
        return f"has a name reactivex reads in a diagram as the number {number!r}, which it emits as it is"
    return None


def _count_frames(diagram: str, values: Mapping[str, Any]) -> int:
    """Check ``diagram`` against reactivex's marble syntax and ``values``; return how many frames it takes.

    reactivex drops every space, then reads groups, runs of ``-``, commas, ``|``, ``#`` and names, and silently
    skips what is none of them (a stray parenthesis). Everything it would refuse, skip or read differently from
    how it looks raises here, pointing at the place.
    """

    def fail(at: int, problem: str) -> InvalidArgumentError:
        message = f"marble diagram {diagram!r}: {problem}"
        if diagram.isprintable():
            message += f"\n  {diagram}\n  {' ' * at}^"
        return InvalidArgumentError(message, argument="diagram")

    ended: str | None = None  # "|" or "#", once the diagram has ended

    def element(at: int, text: str, in_group: bool) -> None:
        """One element (``|``, ``#`` or a name) starting at ``at``; ``text`` may hold spaces, none at its ends."""
        nonlocal ended
        if ended is not None:
            raise fail(at, f"{text!r} comes after {ended!r}: only '-' and spaces may follow the end of a diagram")
        if text in _ENDS:
            ended = text
            return
        name = text.replace(" ", "")
        for offset, c in enumerate(text):
            if c.isspace() and c != " ":
                raise fail(at + offset, f"{text!r} holds {c!r}: only spaces may line a diagram up")
            if in_group and c in "-|#":
                what = "frames go outside a group" if c == "-" else f"{c!r} is an element of its own, as in (a,{c})"
                raise fail(at + offset, f"{text!r} in a group: {what}; reactivex would emit {text!r} as a name")
        if " " in text:
            raise fail(
                at,
                f"{text!r}: spaces do not separate names, reactivex removes them and reads {name!r}; put '-' (a "
                "frame) between them, or group them as (a,b)",
            )
        number = _number(name)
        if number is not None:
            raise fail(at, f"{name!r} is a number to reactivex, which would emit {number!r}: names are not numbers")
        if name not in values:
            given = ", ".join(repr(k) for k in values) or "none"
            hint = f"give it one: marbles(..., {name}=...)" if name.isidentifier() else "give it one"
            if len(name) > 1 and all(c in values for c in name):
                hint = (
                    f"a run of characters is one name; to emit {', '.join(name)} one after the other, write "
                    f"'{'-'.join(name)}' (a frame apart) or '({','.join(name)})' (in one frame)"
                )
            elif any(c in "^!" for c in name):
                hint = "there are no subscription markers: a script starts when it is subscribed"
            raise fail(at, f"{name!r} has no value (values given: {given}); {hint}")

    frames = 0
    i, end = 0, len(diagram)
    while i < end:
        c = diagram[i]
        if c == " ":
            i += 1
        elif c == "-":
            frames += 1
            i += 1
        elif c in _ENDS:
            element(i, c, in_group=False)
            frames += 1
            i += 1
        elif c == ",":
            raise fail(i, "',' outside a group: commas separate the elements of a group, as in (a,b)")
        elif c == ")":
            raise fail(i, "')' closes no group")
        elif c == "(":
            close = diagram.find(")", i + 1)
            if close < 0:
                raise fail(i, "'(' opens a group that is never closed")
            nested = diagram.find("(", i + 1, close)
            if nested >= 0:
                raise fail(nested, "groups cannot be nested")
            start = i + 1
            for piece in diagram[i + 1 : close].split(","):
                text = piece.strip(" ")
                at = start + len(piece) - len(piece.lstrip(" "))
                if not text:
                    raise fail(
                        start if start < close else start - 1 if start > i + 1 else i,
                        "a group has an empty element (two commas in a row, a comma at an end, or '()'); reactivex "
                        "would skip it",
                    )
                element(at, text, in_group=True)
                start += len(piece) + 1
            frames += sum(1 for c in diagram[i : close + 1] if c != " ")
            i = close + 1
        else:
            stop = i
            while stop < end and diagram[stop] not in _SPECIAL:
                stop += 1
            text = diagram[i:stop].rstrip(" ")
            element(i, text, in_group=False)
            frames += len(text.replace(" ", ""))
            i += len(text)
    return frames


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
        InvalidTypeError: a script is a plain string (``argument="scripts"``): a diagram needs its values, so it is
            given as ``marbles(diagram, ...)``.
        ScriptExhaustedError: from ``stream``, when it is called more often than there are scripts (``call`` is
            the call's number).
    """

    def __init__(self, scripts: Sequence[Script | Sequence[ChatChunk]]) -> None:
        _no_bare_diagrams(scripts)
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


def _no_bare_diagrams(scripts: object) -> None:
    """Refuse a diagram given as a string where a script is expected: its letters would play as chunks or fail."""
    if isinstance(scripts, str) or (isinstance(scripts, Sequence) and any(isinstance(s, str) for s in scripts)):
        raise InvalidTypeError(
            "scripts are marbles(diagram, **values) (or, for a model, lists of chunks), not diagram strings: "
            f"got {scripts!r}",
            argument="scripts",
        )


def _immediate(chunks: Sequence[ChatChunk]) -> Script:
    return _Immediate("|", chunks=tuple(chunks))
