"""The cancellation explorer: cancel a scenario at every point where something happens, and check the invariants.

A scenario is a sequence of turns on one thread. The explorer runs it once to learn when things happen in the turn
under test (chunks, node outputs, checkpoint writes, completion), then runs it again, from scratch, once per cancel
point: at each of those ticks (before and after the tick's own events) and between them. After each run it checks:

1. after the cancelled turn, the head is the pre-turn state, or the state of the turn completed (or stopped for a
   human, its interrupt pending); after a crash (``modes=["crash"]``: the turn's process dies, and nothing more of it
   is written), the next turn of a graph with ``on_error="rewind"`` starts from the pre-turn state;
2. every later turn's request, and the request a next user message would make, pass ``check_request``;
3. no committed turn was lost: each completed turn's messages are a prefix of the final history;
4. the cancelled run wrote nothing after it was cancelled, except its rewind, and nothing after the rewind.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..checkpoint._memory import MemorySaver
from ..errors import InvalidArgumentError, UnsafeHistoryError
from ..graph._config import RunnableConfig
from ..messages._rules import check_request
from ..messages._types import UserMessage
from ._harness import (
    CancellationHarness,
    CancelSpec,
    Streamable,
    TurnRecord,
    crash_at,
    dispose_at,
    take_until_at,
    timeout_after,
)

__all__ = ["ExplorationReport", "NextTurn", "Violation", "assert_cancellation_safe", "explore_cancellations"]

CancelMode = Literal["dispose", "timeout", "take_until", "crash"]
NextTurn = Literal["after_end", "from_callback"]
"""When the scenario's next turn is subscribed: once the previous one has ended, or from its terminal callback
(``on_completed`` / ``on_error`` as its subscriber sees them, or right after its ``dispose()``), as a server does that
answers the client and then takes its next message."""


@dataclass(frozen=True)
class Violation:
    """One broken invariant at one cancel point, with the picture of the cancelled turn and the thread's history."""

    turn: int
    cancel: str
    invariant: str
    detail: str
    timeline: str
    history: str

    def __str__(self) -> str:
        return (
            f"turn {self.turn + 1}, {self.cancel}: {self.invariant}\n  {self.detail}\n"
            f"timeline of turn {self.turn + 1} (t = ticks since it started):\n{_indent(self.timeline)}\n"
            f"thread history, newest first:\n{_indent(self.history)}"
        )


@dataclass
class ExplorationReport:
    """Every cancel point tried (turn index, description) and the violations found."""

    points: list[tuple[int, str]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` describing every violation (with its timeline), if there is any."""
        if self.violations:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        head = f"{len(self.points)} cancel points tried, {len(self.violations)} violation(s)"
        if not self.violations:
            return head
        shown = "\n\n".join(str(v) for v in self.violations[:5])
        more = f"\n\n... and {len(self.violations) - 5} more" if len(self.violations) > 5 else ""
        return f"{head}\n\n{shown}{more}"


def explore_cancellations(
    make: Callable[[CheckpointSaver], Streamable],
    inputs: Sequence[Any],
    config: RunnableConfig | None = None,
    *,
    turns: Sequence[int] | None = None,
    modes: Sequence[CancelMode] = ("dispose",),
    probe: str = "Are you still there?",
    saver_factory: Callable[[], CheckpointSaver] = MemorySaver,
    next_turn: Sequence[NextTurn] = ("after_end", "from_callback"),
) -> ExplorationReport:
    """Run the scenario ``inputs`` (one input per turn) with a cancellation at every point of each turn in
    ``turns`` (all by default), and report the invariants broken.

    Each cancel point is tried once per ``next_turn`` way of starting the next turn: after the cancelled one has
    ended, and from its terminal callback (the pattern that catches a next turn reading a cut turn's head before
    its rewind).

    ``make(saver)`` must build a *fresh* graph or agent (with fresh scripted models) on the saver it is given: the
    explorer calls it once per run. The scenario's thread is ``config.thread_id`` (``"explore"`` by default); its
    scheduler is replaced by a ``TestScheduler`` per run. ``probe`` is the user message used to check the request a
    next turn would make.
    """
    if not inputs:
        raise InvalidArgumentError("a scenario needs at least one turn", argument="inputs")
    thread_id = config.thread_id if config is not None and config.thread_id else "explore"
    report = ExplorationReport()
    targets = range(len(inputs)) if turns is None else turns
    for way in next_turn:
        if way not in ("after_end", "from_callback"):
            raise InvalidArgumentError(
                f"unknown next_turn {way!r}; use 'after_end' or 'from_callback'", argument="next_turn"
            )
    for turn in targets:
        if not 0 <= turn < len(inputs):
            raise InvalidArgumentError(f"turn {turn} is not in the scenario (0..{len(inputs) - 1})", argument="turns")
        baseline = _Run(make, inputs, thread_id, saver_factory, turn, None, probe, "after_end")
        report.points.append((turn, "no cancellation"))
        report.violations.extend(baseline.violations())
        for spec in _cancel_points(baseline.records[turn], modes):
            for way in next_turn:
                if way == "from_callback" and turn == len(inputs) - 1:
                    continue  # no next turn to start
                run = _Run(make, inputs, thread_id, saver_factory, turn, spec, probe, way)
                report.points.append((turn, run.description))
                report.violations.extend(run.violations())
    return report


def assert_cancellation_safe(
    make: Callable[[CheckpointSaver], Streamable],
    inputs: Sequence[Any],
    config: RunnableConfig | None = None,
    **options: Any,
) -> ExplorationReport:
    """``explore_cancellations(...)`` and fail with every violation's picture if any invariant broke."""
    report = explore_cancellations(make, inputs, config, **options)
    report.assert_ok()
    return report


def _cancel_points(record: TurnRecord, modes: Sequence[CancelMode]) -> list[CancelSpec]:
    ticks = sorted({round(e.tick - record.start, 6) for e in record.events} | {0.0})
    between = [(a + b) / 2 for a, b in itertools.pairwise(ticks)]
    points: list[CancelSpec] = []
    for mode in modes:
        if mode == "dispose":
            points += [dispose_at(t) for t in ticks] + [dispose_at(t, late=True) for t in ticks]
            points += [dispose_at(t) for t in between] + [dispose_at(ticks[-1] + 1)]
        elif mode == "crash":
            points += [crash_at(t) for t in ticks] + [crash_at(t, late=True) for t in ticks]
            points += [crash_at(t) for t in between]
        elif mode == "take_until":
            points += [take_until_at(t) for t in sorted({*ticks, *between}) if t > 0]
        elif mode == "timeout":
            # reactivex's timeout is an idle timeout: it fires when a gap between outputs is longer than it.
            outputs = sorted(
                {0.0} | {round(e.tick - record.start, 6) for e in record.events if e.kind in ("chunk", "node")}
            )
            gaps = sorted({b - a for a, b in itertools.pairwise(outputs) if b > a})
            points += [timeout_after(g / 2) for g in gaps]
        else:
            raise InvalidArgumentError(
                f"unknown cancel mode {mode!r}; use 'dispose', 'timeout', 'take_until' or 'crash'", argument="modes"
            )
    return points


class _Run:
    """One run of the scenario, with an optional cancellation in one turn, and its invariant checks."""

    def __init__(
        self,
        make: Callable[[CheckpointSaver], Streamable],
        inputs: Sequence[Any],
        thread_id: str,
        saver_factory: Callable[[], CheckpointSaver],
        turn: int,
        cancel: CancelSpec | None,
        probe: str,
        next_turn: NextTurn,
    ) -> None:
        self.harness = CancellationHarness(make, thread_id=thread_id, saver_factory=saver_factory)
        self.turn = turn
        self.cancel = cancel
        self.probe = probe
        self.description = cancel.describe() if cancel else "no cancellation"
        if next_turn == "from_callback":
            self.description += ", next turn started from its terminal callback"
            self.records = self.harness.run_chained(inputs, {turn: cancel} if cancel else {})
        else:
            self.records = [
                self.harness.run_turn(item, cancel if index == turn else None) for index, item in enumerate(inputs)
            ]

    def violations(self) -> list[Violation]:
        found: list[tuple[str, str]] = []
        key = self.harness.graph.messages_key
        record = self.records[self.turn]
        found += self._head_after_the_turn(record)
        found += self._no_late_writes(record)
        for index, later in enumerate(self.records):
            if later.error is not None:
                found.append(("a turn failed", f"turn {index + 1} failed: {type(later.error).__name__}: {later.error}"))
        if key is not None:
            found += self._requests_are_valid(key)
            found += self._nothing_committed_was_lost(key)
        timeline = record.timeline()
        history = _history(self.harness.saver.list(self.harness.thread_id), key)
        return [Violation(self.turn, self.description, what, detail, timeline, history) for what, detail in found]

    def _head_after_the_turn(self, record: TurnRecord) -> list[tuple[str, str]]:
        head = record.head
        if record.completed:
            # A completed turn's head is its own and has nothing left to run — unless the turn stopped for a human,
            # when the interrupted superstep is what it runs next.
            waits = head is not None and bool(head.pending) and "interrupt" in (head.pending or {})
            if head is None or head.run_id not in record.run_ids or (head.next and not waits):
                return [("the head is not the completed turn", f"head after the turn: {_describe(head)}")]
            return []
        if record.cancelled and record.cancel is not None and record.cancel.mode == "crash":
            return self._dead_turn_is_undone(record)
        if record.cancelled:
            # The pre-turn state whole: its values, what it would run next and the work it had pending (a cut
            # resume leaves the interrupt it answered pending again).
            before = _resumable(record.pre_turn)
            if (head is None and record.pre_turn is not None) or _resumable(head) != before:
                return [
                    (
                        "the head is neither the pre-turn state nor a completed turn",
                        f"head after the cancel: {_describe(head)}; pre-turn head: {_describe(record.pre_turn)}",
                    )
                ]
        return []

    def _dead_turn_is_undone(self, record: TurnRecord) -> list[tuple[str, str]]:
        """A crash leaves the head as it was; under ``on_error="rewind"`` the next turn must start from the state
        before the dead one (a workflow keeps its progress: only the requests' validity is checked for it)."""
        graph = self.harness.graph
        if graph.policy.on_error != "rewind" or graph.policy.on_cancel != "rewind":
            return []
        later = self.records[self.turn + 1] if self.turn + 1 < len(self.records) else None
        if later is not None:
            first = next((c for _, c in later.writes if c.source == "input"), None)
            base = self.harness.saver.get(self.harness.thread_id, first.parent_id) if first is not None else None
            where = f"the next turn started from {_describe(base)}"
        else:
            base = graph.get_base_state(self.harness.config).checkpoint
            where = f"a next turn would start from {_describe(base)}"
        if _resumable(base)[0] != _resumable(record.pre_turn)[0]:
            return [
                (
                    "the next turn does not start from the state before the dead turn",
                    f"{where}; pre-turn head: {_describe(record.pre_turn)}",
                )
            ]
        return []

    def _no_late_writes(self, record: TurnRecord) -> list[tuple[str, str]]:
        if not record.cancelled:
            return []
        problems = []
        cancelled_at = next(e.order for e in record.events if e.kind == "cancel")
        rewound_at: int | None = None
        for event in record.events:
            if event.kind not in ("write", "rewind") or event.order < cancelled_at:
                continue
            if event.kind == "rewind" and rewound_at is None:
                rewound_at = event.order
                continue
            where = "after its rewind" if rewound_at is not None else "after it was cancelled"
            problems.append(("a write landed after the cancel", f"{_describe(event.value)} was written {where}"))
        return problems

    def _requests_are_valid(self, key: str) -> list[tuple[str, str]]:
        problems = []
        for index in range(self.turn + 1, len(self.records)):
            first = next((c for _, c in self.records[index].writes if c.source == "input"), None)
            if first is None:
                continue
            try:
                check_request(first.values.get(key, ()))
            except UnsafeHistoryError as error:
                problems.append(("a later turn's request is invalid", f"turn {index + 1}: {error}"))
        try:
            base = self.harness.graph.get_base_state(self.harness.config)
            check_request([*base.values.get(key, ()), UserMessage(content=self.probe)])
        except UnsafeHistoryError as error:
            problems.append(("the next turn's request is invalid", str(error)))
        return problems

    def _nothing_committed_was_lost(self, key: str) -> list[tuple[str, str]]:
        head = self.harness.head()
        final = list(head.values.get(key, ())) if head is not None else []
        problems = []
        for index, record in enumerate(self.records):
            if not record.completed or record.head is None:
                continue
            committed = list(record.head.values.get(key, ()))
            if final[: len(committed)] != committed:
                problems.append(
                    (
                        "a committed turn was lost",
                        f"turn {index + 1} completed with {len(committed)} messages, which the final history "
                        f"({len(final)} messages) does not start with",
                    )
                )
        return problems


def _resumable(checkpoint: Checkpoint | None) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
    if checkpoint is None:
        return {}, (), {}
    return dict(checkpoint.values), checkpoint.next, dict(checkpoint.pending or {})


def _describe(checkpoint: Checkpoint | None) -> str:
    if checkpoint is None:
        return "none"
    return f"seq {checkpoint.seq} ({checkpoint.source}, node {checkpoint.node}, run {checkpoint.run_id[:8]})"


def _history(checkpoints: Sequence[Checkpoint], key: str | None) -> str:
    lines = []
    for c in checkpoints:
        roles = ""
        if key is not None:
            messages = c.values.get(key, ())
            roles = " ".join(getattr(m, "role", type(m).__name__) for m in messages)
        safe = "safe" if c.safe else "UNSAFE"
        lines.append(f"seq {c.seq:<3} {c.source:<6} node={c.node!s:<10} run={c.run_id[:8]} {safe:<6} [{roles}]")
    return "\n".join(lines) or "(empty)"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
