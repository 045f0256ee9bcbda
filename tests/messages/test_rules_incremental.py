"""readiness_from: scanning only what was appended after a ready prefix gives the same verdict as a full scan."""

from __future__ import annotations

import itertools

import pytest

from rxgraph.errors import InvalidArgumentError
from rxgraph.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage, readiness_violations
from rxgraph.messages._rules import readiness_from

ALPHABET: list[Message] = [
    UserMessage(content="u"),
    AssistantMessage(content="a"),
    AssistantMessage(tool_calls=[ToolCall(id="c1", name="f", arguments="{}")]),
    AssistantMessage(
        tool_calls=[ToolCall(id="c1", name="f", arguments="{}"), ToolCall(id="c2", name="g", arguments="{}")]
    ),
    ToolMessage(tool_call_id="c1", content="r1"),
    ToolMessage(tool_call_id="c2", content="r2"),
]


def _histories(max_len: int) -> list[list[Message]]:
    return [list(h) for n in range(max_len + 1) for h in itertools.product(ALPHABET, repeat=n)]


def test_incremental_verdict_equals_the_full_scan_for_every_short_history() -> None:
    checked = 0
    for history in _histories(5):
        full = [(v.index, v.rule) for v in readiness_violations(history)]
        _, clean = readiness_from(history, 0)
        assert not readiness_violations(history[:clean])
        for start in range(clean + 1):
            if readiness_violations(history[:start]):
                continue
            incremental, _ = readiness_from(history, start)
            assert bool(incremental) == bool(full), (history, start)
            checked += 1
    assert checked > 5_000


def test_clean_prefix_is_the_longest_ready_prefix() -> None:
    for history in _histories(4):
        _, clean = readiness_from(history, 0)
        longest = max(n for n in range(len(history) + 1) if not readiness_violations(history[:n]))
        if not readiness_violations(history):
            assert clean == len(history)
        else:
            # The scan stops advancing at the first violation; the longest ready prefix before it is what it gives.
            assert clean <= longest


def test_start_outside_the_history_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="start must be within") as caught:
        readiness_from([UserMessage(content="u")], 2)
    assert caught.value.argument == "start" and isinstance(caught.value, ValueError)
