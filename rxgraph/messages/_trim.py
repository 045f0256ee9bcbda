"""``trim_messages``: the newest part of a history that fits a budget, cut only where a chat API accepts the cut."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._arguments import check_int
from ..errors import InvalidArgumentError, InvalidTypeError
from ._types import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

__all__ = ["trim_messages"]

_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def trim_messages(
    messages: Sequence[Message],
    *,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    token_counter: Callable[[Message], int] | None = None,
) -> list[Message]:
    """The newest messages of ``messages`` that fit the budget, cut where a chat API still accepts the history.

    The rules, in order:

    1. The leading system messages (``SystemMessage``, whatever its role: ``"system"`` or ``"developer"``) are
       always kept and count toward the budget. When they alone exceed it, they are kept anyway (with the current
       turn, rule 4).
    2. Nothing is dropped when the whole history fits.
    3. Otherwise the older messages after them are dropped, whole units at a time: an assistant message with tool
       calls goes with the tool messages that answer it, and a system message in the middle of the history (a note
       given with a user message, say) goes with the message after it. A tool block is never split.
    4. When there is a user message after the leading system messages, the kept messages after them start at a user
       message (or at the system notes right before it): the longest such run of newest messages that fits. The
       newest user message and everything after it (the current turn, tool rounds included) is always kept, even
       when it alone exceeds the budget, because a request without it would not ask the model what the user asked.
    5. A history with no user message after its leading system messages keeps the newest units that fit, so it may
       start with an assistant message, as the input already did; it never starts with a tool message. When not
       even the newest unit fits, only the leading system messages are kept.

    So the result passes ``request_violations`` whenever ``messages`` does: it starts with the same system messages,
    then with a user message (or with what the input started with), and ends as the input ends. It is always the
    leading system messages followed by a suffix of the rest, in the same order.

    The function is pure: ``messages`` is not changed, and the result holds the same message objects (not copies)
    in a new list. ``token_counter`` is called at most once per message: on the leading system messages, then on the
    others newest first, only as far back as the budget reaches.

    Args:
        messages: the history, oldest first (e.g. the system prompt followed by a thread's messages).
        max_messages: at most this many messages, the leading system messages included (>= 1).
        max_tokens: at most this many tokens as ``token_counter`` counts them, summed over the kept messages, the
            leading system messages included (>= 1).
        token_counter: the number of tokens of one message; needed with ``max_tokens``, and only used with it.
            ``rxgraph.messages.estimate_tokens`` counts every part of a message (text by its length, or by the
            tokenizer you give it, an image, audio or file by the rule it documents); a message's ``.text`` is its
            text alone, for a tokenizer of your own.

    Returns:
        The kept messages, oldest first.

    Raises:
        InvalidArgumentError: neither ``max_messages`` nor ``max_tokens`` is given, a limit is below 1,
            ``max_tokens`` is given without ``token_counter`` or ``token_counter`` without ``max_tokens``, or
            ``token_counter`` returned a negative count.
        InvalidTypeError: a limit is not an int, ``token_counter`` is not callable or returned something that is not
            an int, or an element of ``messages`` is not an rxgraph message.
    """
    _check_budget(max_messages, max_tokens, token_counter)
    history = list(messages)
    for index, message in enumerate(history):
        if not isinstance(message, _MESSAGE_TYPES):
            raise InvalidTypeError(
                f"messages[{index}]: expected an rxgraph message (SystemMessage, UserMessage, AssistantMessage or "
                f"ToolMessage), got {type(message).__name__}",
                argument="messages",
            )
    size = len(history)
    head = 0
    while head < size and isinstance(history[head], SystemMessage):
        head += 1

    # Where the kept part may begin: at the start of a unit. Every message begins one but a tool message (it goes
    # with the assistant message it answers) and the message after a mid-history system message (the note goes
    # with it).
    units = [
        i
        for i in range(head, size)
        if i == head or not (isinstance(history[i], ToolMessage) or isinstance(history[i - 1], SystemMessage))
    ]
    turns = [i for i in units if _opens_with_user(history, i)]
    if turns:
        newest = turns[-1]
        cuts = sorted({head, *turns}, reverse=True)
    else:
        newest = size
        cuts = sorted({*units, size}, reverse=True)

    chosen = newest  # kept even over the budget
    tokens = 0
    counted_from = size
    if max_tokens is not None:
        assert token_counter is not None
        tokens = sum(_count(token_counter, history[i], i) for i in range(head))
    for cut in cuts:  # newest first; every cut keeps more than the one before, so the first too costly ends it
        if max_messages is not None and head + size - cut > max_messages:
            break
        if max_tokens is not None:
            assert token_counter is not None
            while counted_from > cut and tokens <= max_tokens:
                counted_from -= 1
                tokens += _count(token_counter, history[counted_from], counted_from)
            if tokens > max_tokens:
                break
        chosen = cut
    return history[:head] + history[chosen:]


def _opens_with_user(history: list[Message], start: int) -> bool:
    """Whether the unit at ``start`` is a user message, maybe after system notes."""
    index = start
    while index < len(history) and isinstance(history[index], SystemMessage):
        index += 1
    return index < len(history) and isinstance(history[index], UserMessage)


def _count(token_counter: Callable[[Message], int], message: Message, index: int) -> int:
    tokens = token_counter(message)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise InvalidTypeError(
            f"token_counter must return an int, got {type(tokens).__name__} for messages[{index}]",
            argument="token_counter",
        )
    if tokens < 0:
        raise InvalidArgumentError(
            f"token_counter must return a count >= 0, got {tokens} for messages[{index}]", argument="token_counter"
        )
    return tokens


def _check_budget(max_messages: object, max_tokens: object, token_counter: Callable[[Message], int] | None) -> None:
    if max_messages is None and max_tokens is None:
        raise InvalidArgumentError(
            "trim_messages needs a budget: give max_messages, max_tokens (with token_counter), or both",
            argument="max_messages",
        )
    for name, limit in (("max_messages", max_messages), ("max_tokens", max_tokens)):
        if limit is None:
            continue
        check_int(limit, argument=name, least=1)
    if token_counter is not None and not callable(token_counter):
        raise InvalidTypeError(
            f"token_counter must be callable (message -> int), got {type(token_counter).__name__}",
            argument="token_counter",
        )
    if max_tokens is not None and token_counter is None:
        raise InvalidArgumentError(
            "max_tokens needs a token_counter: a function giving the number of tokens of one message "
            "(for instance with tiktoken)",
            argument="token_counter",
        )
    if max_tokens is None and token_counter is not None:
        raise InvalidArgumentError(
            "token_counter is only used with max_tokens; give max_tokens too, or leave token_counter out",
            argument="token_counter",
        )
