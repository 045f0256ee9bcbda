"""trim_messages: the newest messages that fit a budget, cut only where a chat API still accepts the history."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxgraph.errors import InvalidArgumentError, InvalidTypeError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    request_violations,
    trim_messages,
)


def _user(content: str) -> UserMessage:
    return UserMessage(content=content)


def _answer(content: str) -> AssistantMessage:
    return AssistantMessage(content=content)


def _calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(tool_calls=tuple(ToolCall(id=i, name="lookup", arguments="{}") for i in ids))


def _result(call_id: str) -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, content=f"result of {call_id}")


SYSTEM = SystemMessage(content="Be brief.")
# Three turns: a plain answer, a tool block of two calls, and a turn still waiting for the model after its tool.
HISTORY: list[Message] = [
    SYSTEM,
    _user("u1"),
    _answer("a1"),
    _user("u2"),
    _calls("c1", "c2"),
    _result("c1"),
    _result("c2"),
    _answer("a2"),
    _user("u3"),
    _calls("c3"),
    _result("c3"),
]


def _same(kept: Sequence[Message], expected: Sequence[Message]) -> bool:
    return len(kept) == len(expected) and all(a is b for a, b in zip(kept, expected, strict=True))


@pytest.mark.parametrize(
    ("max_messages", "start"),
    [
        (11, 1),  # everything fits
        (10, 3),  # not u1's turn: the cut falls before u2, so a tool block is not split (a1 alone would fit)
        (9, 3),
        (8, 8),  # u2's turn no longer fits: only the current turn
        (4, 8),
        (1, 8),  # the current turn is kept over the budget
    ],
)
def test_keeps_the_newest_turns_that_fit_with_the_system_prompt_and_cuts_before_a_user_message(
    max_messages: int, start: int
) -> None:
    kept = trim_messages(HISTORY, max_messages=max_messages)
    assert _same(kept, [SYSTEM, *HISTORY[start:]])
    assert request_violations(kept) == []


def test_a_tool_block_goes_whole_and_the_window_never_starts_after_the_system_prompt_with_a_tool_or_assistant() -> None:
    for max_messages in range(1, len(HISTORY) + 1):
        rest = trim_messages(HISTORY, max_messages=max_messages)[1:]
        assert isinstance(rest[0], UserMessage)
        for index, message in enumerate(rest):
            if isinstance(message, AssistantMessage) and message.tool_calls:
                block = rest[index + 1 : index + 1 + len(message.tool_calls)]
                answered = {m.tool_call_id for m in block if isinstance(m, ToolMessage)}
                assert answered == {call.id for call in message.tool_calls}


def test_a_token_budget_counts_the_system_prompt_and_each_message_once_newest_first() -> None:
    counted: list[Message] = []

    def count(message: Message) -> int:
        counted.append(message)
        return 10

    # 10 for the system prompt + 30 for u3's turn + 50 for u2's: 90 fits, 89 does not.
    assert _same(trim_messages(HISTORY, max_tokens=90, token_counter=count), [SYSTEM, *HISTORY[3:]])
    assert counted[0] is SYSTEM and _same(counted[1:], HISTORY[:1:-1])  # newest first, stopped once over budget
    counted.clear()
    assert _same(trim_messages(HISTORY, max_tokens=89, token_counter=count), [SYSTEM, *HISTORY[8:]])
    assert _same(counted[1:], HISTORY[:2:-1])  # u1's turn was never counted


def test_both_limits_apply_and_the_tighter_one_decides() -> None:
    def count(message: Message) -> int:
        return len(message.content)

    # By content length: 9 for the system prompt, 14 for u3's turn, 28 for u2's, 4 for u1's: 55 in all.
    assert _same(trim_messages(HISTORY, max_messages=11, max_tokens=55, token_counter=count), HISTORY)
    assert _same(trim_messages(HISTORY, max_messages=11, max_tokens=54, token_counter=count), [SYSTEM, *HISTORY[3:]])
    assert _same(trim_messages(HISTORY, max_messages=8, max_tokens=1000, token_counter=count), [SYSTEM, *HISTORY[8:]])
    assert _same(trim_messages(HISTORY, max_messages=100, max_tokens=50, token_counter=count), [SYSTEM, *HISTORY[8:]])


def test_leading_system_and_developer_messages_are_always_kept_even_over_the_budget() -> None:
    developer = SystemMessage(role="developer", content="Answer in French.")
    history: list[Message] = [SYSTEM, developer, _user("u1"), _answer("a1"), _user("u2"), _answer("a2")]
    assert _same(trim_messages(history, max_messages=4), [SYSTEM, developer, *history[4:]])
    # The system messages alone are over the budget: they are kept, with the newest turn.
    assert _same(trim_messages(history, max_messages=1), [SYSTEM, developer, *history[4:]])
    assert _same(trim_messages(history, max_tokens=5, token_counter=lambda m: 100), [SYSTEM, developer, *history[4:]])
    assert _same(trim_messages([SYSTEM, developer], max_messages=1), [SYSTEM, developer])
    assert trim_messages([], max_messages=1) == []


def test_nothing_is_dropped_when_the_whole_history_fits_even_an_opening_assistant_greeting() -> None:
    history: list[Message] = [SYSTEM, _answer("Hello! How can I help?"), _user("u1"), _answer("a1")]
    assert _same(trim_messages(history, max_messages=4), history)
    assert _same(trim_messages(history, max_messages=3), [SYSTEM, *history[2:]])  # the cut is before the user


def test_a_system_note_in_the_middle_goes_with_the_user_message_after_it() -> None:
    note = SystemMessage(content="The user is on the mobile app.")
    history: list[Message] = [SYSTEM, _user("u1"), _answer("a1"), note, _user("u2"), _answer("a2")]
    assert _same(trim_messages(history, max_messages=4), [SYSTEM, note, *history[4:]])
    assert _same(trim_messages(history, max_messages=2), [SYSTEM, note, *history[4:]])  # the newest turn, over


def test_without_a_user_message_the_newest_units_that_fit_are_kept_never_from_a_tool_message() -> None:
    history: list[Message] = [SYSTEM, _answer("greeting"), _calls("c1"), _result("c1"), _answer("done")]
    assert _same(trim_messages(history, max_messages=4), [SYSTEM, *history[2:]])
    assert _same(trim_messages(history, max_messages=3), [SYSTEM, history[4]])  # not the tool message alone
    assert _same(trim_messages(history, max_messages=2), [SYSTEM, history[4]])
    assert _same(trim_messages(history, max_messages=1), [SYSTEM])  # not even the newest unit fits


def test_it_is_pure_and_returns_the_same_message_objects_in_a_new_list() -> None:
    history = list(HISTORY)
    kept = trim_messages(history, max_messages=100)
    assert kept == history and kept is not history and _same(kept, history)
    kept.clear()
    assert _same(history, HISTORY)
    trim_messages(tuple(HISTORY), max_messages=2)  # any sequence
    assert _same(history, HISTORY)


def _count_tokens(message: Message) -> int:
    return 1


@pytest.mark.parametrize(
    ("arguments", "error", "argument", "match"),
    [
        ({}, InvalidArgumentError, "max_messages", "needs a budget: give max_messages, max_tokens"),
        ({"max_messages": 0}, InvalidArgumentError, "max_messages", "max_messages must be at least 1, got 0"),
        ({"max_messages": -3}, InvalidArgumentError, "max_messages", "at least 1, got -3"),
        ({"max_messages": 2.5}, InvalidTypeError, "max_messages", "max_messages must be an int, got float"),
        ({"max_messages": True}, InvalidTypeError, "max_messages", "must be an int, got bool"),
        ({"max_messages": "20"}, InvalidTypeError, "max_messages", "must be an int, got str"),
        (
            {"max_tokens": 0, "token_counter": _count_tokens},
            InvalidArgumentError,
            "max_tokens",
            "max_tokens must be at least 1, got 0",
        ),
        ({"max_tokens": 1e3, "token_counter": _count_tokens}, InvalidTypeError, "max_tokens", "an int, got float"),
        ({"max_tokens": 100}, InvalidArgumentError, "token_counter", "max_tokens needs a token_counter"),
        (
            {"max_messages": 5, "token_counter": _count_tokens},
            InvalidArgumentError,
            "token_counter",
            "token_counter is only used with max_tokens",
        ),
        ({"max_tokens": 100, "token_counter": 4}, InvalidTypeError, "token_counter", "must be callable"),
        (
            {"max_tokens": 100, "token_counter": lambda m: "7"},
            InvalidTypeError,
            "token_counter",
            r"must return an int, got str for messages\[0\]",
        ),
        (
            {"max_tokens": 100, "token_counter": lambda m: -1},
            InvalidArgumentError,
            "token_counter",
            r"must return a count >= 0, got -1 for messages\[0\]",
        ),
        ({"max_tokens": 100, "token_counter": lambda m: True}, InvalidTypeError, "token_counter", "got bool"),
    ],
)
def test_bad_budgets_are_refused_with_a_message_naming_the_argument(
    arguments: dict[str, Any], error: type[Exception], argument: str, match: str
) -> None:
    with pytest.raises(error, match=match) as caught:
        trim_messages(HISTORY, **arguments)
    assert type(caught.value) is error and caught.value.argument == argument  # type: ignore[attr-defined]


def test_something_that_is_not_a_message_is_refused_by_its_index() -> None:
    with pytest.raises(InvalidTypeError, match=r"messages\[1\]: expected an rxgraph message .* got dict") as caught:
        trim_messages([SYSTEM, {"role": "user", "content": "hi"}], max_messages=5)  # type: ignore[list-item]
    assert caught.value.argument == "messages"


# -- property: on any valid history and any budget ------------------------------------------------------------


@st.composite
def _histories(draw: st.DrawFn) -> list[Message]:
    """A valid request body: leading system messages, then turns of a user message (now and then with a system note
    before it, or missing; in some histories always missing) and tool rounds, the last turn possibly still waiting
    for the model after its tools."""
    words = st.text(alphabet="ab ", max_size=12)
    history: list[Message] = [
        SystemMessage(role="developer" if developer else "system", content=draw(words))
        for developer in draw(st.lists(st.booleans(), max_size=2))
    ]
    if draw(st.integers(0, 4)) == 0:
        history.append(AssistantMessage(content=draw(words)))
    ids = iter(range(1000))
    turns = draw(st.integers(0, 6))
    users = draw(st.integers(0, 4)) > 0  # one history in five has no user message at all
    for turn in range(turns):
        if users and draw(st.integers(0, 7)) > 0:
            if draw(st.integers(0, 4)) == 0:
                history.append(SystemMessage(content=draw(words)))
            history.append(UserMessage(content=draw(words)))
        for _ in range(draw(st.integers(0, 3))):
            calls = [
                ToolCall(id=f"c{next(ids)}", name="f", arguments=draw(words)) for _ in range(draw(st.integers(1, 3)))
            ]
            history.append(AssistantMessage(content=draw(words), tool_calls=tuple(calls)))
            for call in draw(st.permutations(calls)):
                history.append(ToolMessage(tool_call_id=call.id, content=draw(words)))
        if turn < turns - 1 or not history or not isinstance(history[-1], ToolMessage) or draw(st.booleans()):
            history.append(AssistantMessage(content=draw(words)))
    assert request_violations(history) == []
    return history


def _tokens(message: Message) -> int:
    calls = message.tool_calls if isinstance(message, AssistantMessage) else ()
    return 1 + len(message.content) + sum(len(call.arguments) for call in calls)


def _fits(messages: Sequence[Message], max_messages: int | None, max_tokens: int | None) -> bool:
    return (max_messages is None or len(messages) <= max_messages) and (
        max_tokens is None or sum(map(_tokens, messages)) <= max_tokens
    )


def _turn_starts(body: Sequence[Message]) -> list[int]:
    """Where, in the messages after the leading system ones, a kept part may begin: at a user message or at the
    system notes right before it; anywhere but a tool message (or the message after a note) when there is no user
    message. Written out here independently of the function under test."""
    if any(isinstance(m, UserMessage) for m in body):
        starts = [0]
        for i, message in enumerate(body):
            if isinstance(message, UserMessage):
                first = i
                while first > 0 and isinstance(body[first - 1], SystemMessage):
                    first -= 1
                starts.append(first)
        return sorted(set(starts))
    return [
        i
        for i in range(len(body) + 1)
        if i in (0, len(body)) or not (isinstance(body[i], ToolMessage) or isinstance(body[i - 1], SystemMessage))
    ]


@settings(max_examples=400, deadline=None)
@given(
    history=_histories(),
    max_messages=st.none() | st.integers(1, 25),
    max_tokens=st.none() | st.integers(1, 120),
)
def test_on_any_valid_history_the_result_is_valid_the_system_head_plus_the_longest_suffix_that_fits(
    history: list[Message], max_messages: int | None, max_tokens: int | None
) -> None:
    if max_messages is None and max_tokens is None:
        max_messages = 1
    counter: Callable[[Message], int] | None = _tokens if max_tokens is not None else None
    kept = trim_messages(history, max_messages=max_messages, max_tokens=max_tokens, token_counter=counter)

    assert request_violations(kept) == []
    head = 0
    while head < len(history) and isinstance(history[head], SystemMessage):
        head += 1
    assert _same(kept[:head], history[:head])  # the leading system messages, always
    body, rest = history[head:], kept[head:]
    start = len(body) - len(rest)
    assert _same(rest, body[start:])  # a suffix of the rest: order kept, only older messages dropped
    assert not rest or not isinstance(rest[0], ToolMessage)

    starts = _turn_starts(body)
    assert start in starts
    users = [i for i, m in enumerate(body) if isinstance(m, UserMessage)]
    if users:
        assert start <= users[-1]  # the newest user message, always
    if not _fits(kept, max_messages, max_tokens):
        assert start == max(starts) if not users else start == max(s for s in starts if s <= users[-1])
    if start > 0:  # something was dropped: keeping the next older allowed part would not fit
        longer = max(s for s in starts if s < start)
        assert not _fits([*history[:head], *body[longer:]], max_messages, max_tokens)
