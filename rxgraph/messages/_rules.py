"""The sequence rules a chat history must follow.

1. Every assistant message with tool calls is followed immediately by exactly one tool message per call id
   (in any order among them), with nothing else between.
2. No tool message answers a call id that is not pending from the immediately preceding assistant message
   (no orphans, no duplicates).
3. Once all calls of an assistant message are answered, the next message, if any, is an assistant message.
4. The history does not end with pending tool calls or with a tool message.

Rules 1-3 are checked only on what is present. A valid request body satisfies them and does not end with calls
still pending (the first half of rule 4): a chat API refuses an assistant message with tool calls that no tool
messages answer. A request may end with the tool responses, though: that is how tool results reach the model, and
exactly the request a model receives right after its tools ran. All of rule 4 is what makes a stored history ready
for another user turn.

``check_request`` / ``request_violations`` check a request body; ``check_ready_for_user_input`` /
``readiness_violations`` a history about to take a user message; ``sequence_violations`` rules 1-3 alone.

The checks are a single pass with plain attribute access, because they run on every checkpoint write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rxgraph.errors import InvalidArgumentError, InvalidTypeError, UnsafeHistoryError
from rxgraph.messages._types import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

__all__ = [
    "SequenceViolation",
    "check_ready_for_user_input",
    "check_request",
    "is_ready_for_user_input",
    "readiness_from",
    "readiness_violations",
    "request_violations",
    "sequence_violations",
]


@dataclass(frozen=True, slots=True)
class SequenceViolation:
    """One broken rule: the index of the offending message, the rule number (1-4) and what is wrong."""

    index: int
    rule: int
    reason: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.reason} (rule {self.rule})"


_NON_TOOL_TYPES = (AssistantMessage, UserMessage, SystemMessage)


@dataclass(frozen=True, slots=True)
class _EndState:
    # Index of the assistant message whose tool block is still open at the end, if any.
    open_index: int | None
    # Its call ids that never got a response, in the order the assistant made them.
    pending: tuple[str, ...]
    ends_with_tool: bool
    last_index: int


def _describe(message: Message) -> str:
    if isinstance(message, ToolMessage):
        # A tool message only leaves no block open when it answered nothing pending.
        return "a tool message that answers no pending call"
    if isinstance(message, AssistantMessage):
        return "an assistant message without tool calls"
    return f"a {message.role} message"


def _scan(messages: Sequence[Message], start: int = 0) -> tuple[list[SequenceViolation], _EndState, int]:
    """Check ``messages[start:]``, given that ``messages[:start]`` is ready for user input (clean).

    Returns the violations, the state at the end, and the length of the longest clean prefix: the largest ``n``
    such that ``messages[:n]`` is violation-free and ends outside a tool block (ready for user input).
    """
    violations: list[SequenceViolation] = []
    clean_end = start

    # The open tool block: the assistant message that made the calls, the ids still waiting for a response
    # (a dict, so reasons list them in the assistant's order) and, for each answered id, where it was answered.
    open_index: int | None = None
    pending: dict[str, None] = {}
    answered: dict[str, int] = {}

    # A block just cut short by a non-tool message, remembered only to explain late responses right after it.
    interrupted_index = -1
    interrupted_by = -1
    interrupted_ids: frozenset[str] = frozenset()

    for i in range(start, len(messages)):
        message = messages[i]
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if open_index is not None:
                if call_id in pending:
                    del pending[call_id]
                    answered[call_id] = i
                elif call_id in answered:
                    violations.append(
                        SequenceViolation(
                            i,
                            2,
                            f"tool message answers call id {call_id!r} again; the tool message at index "
                            f"{answered[call_id]} already answered it for the assistant message at index "
                            f"{open_index}",
                        )
                    )
                else:
                    violations.append(
                        SequenceViolation(
                            i,
                            2,
                            f"tool message answers call id {call_id!r}, which the preceding assistant "
                            f"message (index {open_index}) did not make",
                        )
                    )
            elif call_id in interrupted_ids:
                violations.append(
                    SequenceViolation(
                        i,
                        2,
                        f"tool message answers call id {call_id!r} of the assistant message at index "
                        f"{interrupted_index}, but the {messages[interrupted_by].role} message at index "
                        f"{interrupted_by} already cut that assistant's tool responses short",
                    )
                )
            elif i == 0:
                violations.append(
                    SequenceViolation(
                        i,
                        2,
                        f"tool message answers call id {call_id!r}, but it is the first message; "
                        "no assistant message made that call",
                    )
                )
            else:
                violations.append(
                    SequenceViolation(
                        i,
                        2,
                        f"tool message answers call id {call_id!r}, but no tool calls are pending here: "
                        f"the preceding message (index {i - 1}) is {_describe(messages[i - 1])}",
                    )
                )
            continue

        if not isinstance(message, _NON_TOOL_TYPES):
            raise InvalidTypeError(
                f"message {i}: expected an rxgraph message (SystemMessage, UserMessage, AssistantMessage or "
                f"ToolMessage), got {type(message).__name__}",
                argument="messages",
            )

        interrupted_ids = frozenset()
        if open_index is not None:
            if pending:
                ids = list(pending)
                violations.append(
                    SequenceViolation(
                        i,
                        1,
                        f"assistant message at index {open_index} has call ids {ids} with no tool response "
                        f"before index {i} (a {message.role} message cannot come before every call is "
                        "answered)",
                    )
                )
                interrupted_index, interrupted_by, interrupted_ids = open_index, i, frozenset(ids)
            elif not isinstance(message, AssistantMessage):
                violations.append(
                    SequenceViolation(
                        i,
                        3,
                        f"{message.role} message follows the tool responses to the assistant message at "
                        f"index {open_index}; the message after tool responses must be an assistant message",
                    )
                )

        if isinstance(message, AssistantMessage) and message.tool_calls:
            open_index = i
            pending = dict.fromkeys(call.id for call in message.tool_calls)
            answered = {}
        else:
            open_index = None
            if not violations:
                clean_end = i + 1

    last_index = len(messages) - 1
    end = _EndState(
        open_index=open_index,
        pending=tuple(pending) if open_index is not None else (),
        ends_with_tool=last_index >= 0 and isinstance(messages[last_index], ToolMessage),
        last_index=last_index,
    )
    return violations, end, clean_end


def sequence_violations(messages: Sequence[Message]) -> list[SequenceViolation]:
    """Every violation of rules 1-3, in message order, checked on what is present.

    An empty list does not make a valid request body on its own: a request must not end with calls still pending
    either (``request_violations`` checks both).

    Args:
        messages: the history, oldest first.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    violations, _, _ = _scan(messages)
    return violations


def request_violations(messages: Sequence[Message]) -> list[SequenceViolation]:
    """Every reason a chat API would refuse ``messages`` as a request body: the violations of rules 1-3 in message
    order, then a rule-4 one if the request ends with calls still pending. An empty list means a valid request.

    A request may end with tool messages (that is how tool results reach the model), but not with an assistant
    message whose calls are not all answered: OpenAI refuses it ("An assistant message with 'tool_calls' must be
    followed by tool messages responding to each 'tool_call_id'"). The rule-4 violation points at that assistant
    message and lists the call ids without a response.

    Args:
        messages: the request's messages, oldest first.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    violations, end, _ = _scan(messages)
    if end.pending:
        violations.append(_pending_at_end(end))
    return violations


def readiness_violations(messages: Sequence[Message]) -> list[SequenceViolation]:
    """Every violation of rules 1-4: those of rules 1-3 in message order, then the rule-4 one, if any.

    A rule-4 violation points at the assistant message whose calls are still pending, or else at the final
    tool message.

    Args:
        messages: the history, oldest first.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    return _readiness(messages, 0)[0]


def readiness_from(messages: Sequence[Message], start: int) -> tuple[list[SequenceViolation], int]:
    """Rules 1-4 on ``messages`` when ``messages[:start]`` is already known to be ready: only the rest is scanned.

    Returns the violations and the length of the longest ready prefix, the ``start`` to use next time the same
    history has grown. This is what lets a checkpoint record its safety in O(new messages), not O(history).
    """
    if not 0 <= start <= len(messages):
        raise InvalidArgumentError(
            f"start must be within the history (0..{len(messages)}), got {start}", argument="start"
        )
    return _readiness(messages, start)


def _pending_at_end(end: _EndState) -> SequenceViolation:
    """The rule-4 violation of a history that ends with calls still pending: neither a valid request nor ready."""
    assert end.open_index is not None
    return SequenceViolation(
        end.open_index,
        4,
        f"history ends with call ids {list(end.pending)} of the assistant message at index {end.open_index} still "
        "pending: each call needs a tool message answering it",
    )


def _readiness(messages: Sequence[Message], start: int) -> tuple[list[SequenceViolation], int]:
    violations, end, clean_end = _scan(messages, start)
    if end.pending:
        violations.append(_pending_at_end(end))
    elif end.ends_with_tool:
        violations.append(
            SequenceViolation(
                end.last_index,
                4,
                "history ends with a tool message; an assistant message must follow the tool responses "
                "before the next user turn",
            )
        )
    return violations, clean_end


def is_ready_for_user_input(messages: Sequence[Message]) -> bool:
    """Whether rules 1-4 hold, so a new user message may be appended.

    Args:
        messages: the history, oldest first.

    Raises:
        InvalidTypeError: an element is not an rxgraph message (the message names its index).
    """
    return not readiness_violations(messages)


def _raise(violations: list[SequenceViolation], what: str) -> None:
    if violations:
        count = len(violations)
        lines = "\n".join(str(v) for v in violations)
        noun = "violation" if count == 1 else "violations"
        raise UnsafeHistoryError(f"message history is not {what} ({count} {noun}):\n{lines}", violations=violations)


def check_request(messages: Sequence[Message]) -> None:
    """Check that ``messages`` is a valid request body: rules 1-3, and no calls still pending at its end.

    Call this before sending a request to a chat API, which would otherwise reject the request (or, with some
    providers, silently answer a garbled conversation). A request may end with tool messages, the way tool results
    reach the model, but not with an assistant message whose calls are not all answered (a rule-4 violation); see
    ``request_violations``.

    Args:
        messages: the request's messages, oldest first.

    Raises:
        UnsafeHistoryError: a rule is broken; ``violations`` holds every ``SequenceViolation`` found, and the
            message lists them one per line.
        InvalidTypeError: an element is not an rxgraph message.
    """
    _raise(request_violations(messages), "a valid request body")


def check_ready_for_user_input(messages: Sequence[Message]) -> None:
    """Check that ``messages`` may take a new user message (rules 1-4).

    Args:
        messages: the history, oldest first.

    Raises:
        UnsafeHistoryError: a rule is broken; ``violations`` holds every ``SequenceViolation`` found, and the
            message lists them one per line.
        InvalidTypeError: an element is not an rxgraph message.
    """
    _raise(readiness_violations(messages), "ready for user input")
