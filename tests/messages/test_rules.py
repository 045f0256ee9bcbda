import itertools
from collections.abc import Sequence

import pytest

import rxgraph.errors
import rxgraph.messages
from rxgraph.errors import InvalidTypeError, RxGraphError, UnsafeHistoryError
from rxgraph.messages import (
    AssistantMessage,
    Message,
    SequenceViolation,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    check_ready_for_user_input,
    check_request,
    is_ready_for_user_input,
    readiness_violations,
    request_violations,
    sequence_violations,
)


def user(text: str = "question") -> Message:
    return UserMessage(content=text)


def calls(*ids: str) -> Message:
    return AssistantMessage(tool_calls=tuple(ToolCall(id=i, name="lookup", arguments="{}") for i in ids))


def reply(text: str = "answer") -> Message:
    return AssistantMessage(content=text)


def tool(call_id: str) -> Message:
    return ToolMessage(tool_call_id=call_id, content=f"result of {call_id}")


def rules_of(violations: Sequence[SequenceViolation]) -> list[tuple[int, int]]:
    return [(v.index, v.rule) for v in violations]


def test_empty_history_is_a_valid_request_and_ready() -> None:
    assert sequence_violations([]) == []
    assert readiness_violations([]) == []
    assert is_ready_for_user_input([])
    check_request([])
    check_ready_for_user_input([])


def test_plain_conversation_is_valid_and_ready() -> None:
    history = [SystemMessage(content="be brief"), user(), reply(), user(), reply()]
    assert sequence_violations(history) == []
    assert is_ready_for_user_input(history)


def test_history_ending_with_a_user_message_is_ready() -> None:
    assert is_ready_for_user_input([user()])


def test_fully_closed_chain_is_accepted() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), tool("c2"), reply()]
    assert sequence_violations(history) == []
    assert readiness_violations(history) == []
    assert is_ready_for_user_input(history)


def test_two_closed_chains_back_to_back_are_accepted() -> None:
    history = [user(), calls("c1"), tool("c1"), calls("c2", "c3"), tool("c3"), tool("c2"), reply(), user()]
    assert sequence_violations(history) == []
    assert is_ready_for_user_input([*history, reply()])


def test_call_ids_may_be_reused_by_a_later_assistant_message() -> None:
    history = [user(), calls("c1"), tool("c1"), reply(), user(), calls("c1"), tool("c1"), reply()]
    assert is_ready_for_user_input(history)


def test_responses_in_any_order_are_accepted() -> None:
    history = [user(), calls("c1", "c2", "c3"), tool("c3"), tool("c1"), tool("c2"), reply()]
    assert readiness_violations(history) == []


def test_assistant_tool_calls_without_responses_are_neither_a_valid_request_nor_ready() -> None:
    history = [user(), calls("c1", "c2")]
    assert sequence_violations(history) == []  # rules 1-3 look only at what is present
    assert not is_ready_for_user_input(history)
    violations = readiness_violations(history)
    assert rules_of(violations) == [(1, 4)]
    assert "'c1'" in violations[0].reason
    assert "'c2'" in violations[0].reason
    assert request_violations(history) == violations


def test_partial_responses_at_the_end_are_neither_a_valid_request_nor_ready() -> None:
    history = [user(), calls("c1", "c2", "c3"), tool("c2")]
    assert sequence_violations(history) == []
    violations = readiness_violations(history)
    assert rules_of(violations) == [(1, 4)]
    assert "['c1', 'c3']" in violations[0].reason
    assert "'c2'" not in violations[0].reason
    assert request_violations(history) == violations


def test_history_ending_with_tool_messages_is_a_valid_request_but_not_ready() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), tool("c2")]
    assert sequence_violations(history) == []
    assert request_violations(history) == []
    check_request(history)
    violations = readiness_violations(history)
    assert rules_of(violations) == [(3, 4)]
    assert "ends with a tool message" in violations[0].reason
    with pytest.raises(UnsafeHistoryError):
        check_ready_for_user_input(history)


def test_partial_responses_followed_by_an_assistant_message_are_rejected() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(3, 1)]
    assert violations[0].reason.startswith("assistant message at index 1 has call ids ['c2']")
    assert "before index 3" in violations[0].reason


def test_user_message_while_calls_are_pending_is_rejected() -> None:
    violations = sequence_violations([user(), calls("c1"), user("never mind")])
    assert rules_of(violations) == [(2, 1)]
    assert "['c1']" in violations[0].reason


def test_tool_response_followed_by_user_is_rejected() -> None:
    history = [user(), calls("c1"), tool("c1"), user("and then?")]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(3, 3)]
    assert "user message follows the tool responses" in violations[0].reason


def test_tool_response_followed_by_system_is_rejected() -> None:
    history = [user(), calls("c1"), tool("c1"), SystemMessage(content="new rules"), reply()]
    assert rules_of(sequence_violations(history)) == [(3, 3)]


def test_orphan_tool_message_after_user_is_rejected() -> None:
    violations = sequence_violations([user(), tool("c9")])
    assert rules_of(violations) == [(1, 2)]
    assert "'c9'" in violations[0].reason
    assert "user message" in violations[0].reason


def test_tool_message_as_first_message_is_an_orphan() -> None:
    violations = sequence_violations([tool("c1"), reply()])
    assert rules_of(violations) == [(0, 2)]
    assert "'c1'" in violations[0].reason


def test_tool_message_after_assistant_without_calls_is_an_orphan() -> None:
    violations = sequence_violations([user(), reply(), tool("c1")])
    assert rules_of(violations) == [(2, 2)]
    assert "without tool calls" in violations[0].reason


def test_tool_message_for_a_call_the_assistant_did_not_make_is_an_orphan() -> None:
    history = [user(), calls("c1"), tool("c1"), tool("c9"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(3, 2)]
    assert violations[0].reason == (
        "tool message answers call id 'c9', which the preceding assistant message (index 1) did not make"
    )


def test_orphan_among_pending_responses_does_not_hide_the_missing_one() -> None:
    history = [user(), calls("c1", "c2"), tool("c9"), tool("c1"), reply()]
    assert rules_of(sequence_violations(history)) == [(2, 2), (4, 1)]


def test_duplicate_response_is_rejected() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), tool("c1"), tool("c2"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(3, 2)]
    assert "'c1' again" in violations[0].reason
    assert "index 2" in violations[0].reason


def test_duplicate_response_after_all_calls_answered_is_rejected() -> None:
    history = [user(), calls("c1"), tool("c1"), tool("c1"), reply()]
    assert rules_of(sequence_violations(history)) == [(3, 2)]


def test_responses_interleaved_with_another_message_report_both_violations() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), user("hurry"), tool("c2"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(3, 1), (4, 2)]
    assert "['c2']" in violations[0].reason
    assert "'c2'" in violations[1].reason
    assert "index 1" in violations[1].reason


def test_later_orphans_after_an_interruption_are_all_reported() -> None:
    history = [user(), calls("c1", "c2"), user(), tool("c1"), tool("c2"), reply()]
    assert rules_of(sequence_violations(history)) == [(2, 1), (3, 2), (4, 2)]


def test_assistant_with_new_calls_while_calls_pending_is_rejected_and_starts_its_own_chain() -> None:
    history = [user(), calls("c1"), calls("c2"), tool("c2"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(2, 1)]
    assert "['c1']" in violations[0].reason


def test_late_response_after_a_new_assistant_chain_is_an_orphan_of_that_chain() -> None:
    history = [user(), calls("c1"), calls("c2"), tool("c1"), tool("c2"), reply()]
    violations = sequence_violations(history)
    assert rules_of(violations) == [(2, 1), (3, 2)]
    assert "(index 2) did not make" in violations[1].reason


def test_readiness_lists_sequence_violations_then_rule_four() -> None:
    history = [user(), tool("c0"), calls("c1", "c2"), tool("c1")]
    violations = readiness_violations(history)
    assert rules_of(violations) == [(1, 2), (2, 4)]
    assert "['c2']" in violations[1].reason


def test_history_ending_with_an_orphan_tool_message_is_not_ready() -> None:
    violations = readiness_violations([user(), tool("c1")])
    assert rules_of(violations) == [(1, 2), (1, 4)]


def test_violation_str_names_index_reason_and_rule() -> None:
    violation = SequenceViolation(index=4, rule=2, reason="something is off")
    assert str(violation) == "message 4: something is off (rule 2)"


def test_check_request_raises_with_every_violation_one_per_line() -> None:
    history = [
        user(),
        calls("c1", "c2"),
        tool("c1"),
        user("hurry"),
        tool("c2"),
        calls("c3"),
        tool("c3"),
        user(),
    ]
    expected = [str(v) for v in sequence_violations(history)]
    assert [line.rsplit(" ", 1)[-1] for line in expected] == ["1)", "2)", "3)"]
    with pytest.raises(UnsafeHistoryError) as caught:
        check_request(history)
    lines = str(caught.value).splitlines()
    assert lines[1:] == expected
    assert "3 violations" in lines[0]


def test_unsafe_history_error_carries_the_violations_it_lists() -> None:
    history = [user(), calls("c1", "c2"), tool("c1"), user("hurry"), tool("c2")]
    with pytest.raises(UnsafeHistoryError) as request:
        check_request(history)
    assert list(request.value.violations) == request_violations(history) == sequence_violations(history)
    assert [(v.index, v.rule) for v in request.value.violations] == [(3, 1), (4, 2)]
    with pytest.raises(UnsafeHistoryError) as ready:
        check_ready_for_user_input([user(), calls("c1")])
    assert [(v.index, v.rule) for v in ready.value.violations] == [(1, 4)]
    assert ready.value.thread_id is None  # a plain list is no stored thread


def test_check_request_rejects_a_request_that_ends_with_unanswered_calls() -> None:
    # OpenAI: "An assistant message with 'tool_calls' must be followed by tool messages responding to each
    # 'tool_call_id'". The request names the assistant message and the calls nobody answered.
    with pytest.raises(UnsafeHistoryError) as caught:
        check_request([SystemMessage(content="be brief"), user(), calls("c1")])
    assert rules_of(caught.value.violations) == [(2, 4)]
    assert str(caught.value).splitlines() == [
        "message history is not a valid request body (1 violation):",
        "message 2: history ends with call ids ['c1'] of the assistant message at index 2 still pending: each call "
        "needs a tool message answering it (rule 4)",
    ]
    with pytest.raises(UnsafeHistoryError, match=r"\['c2'\] of the assistant message at index 1 still pending"):
        check_request([user(), calls("c1", "c2"), tool("c1")])


def test_check_request_lists_the_pending_calls_after_the_other_violations() -> None:
    history = [user(), tool("c0"), calls("c1", "c2"), tool("c1")]
    with pytest.raises(UnsafeHistoryError, match="2 violations") as caught:
        check_request(history)
    assert rules_of(caught.value.violations) == [(1, 2), (2, 4)]


def test_check_request_still_accepts_a_request_that_ends_with_the_tool_responses() -> None:
    check_request([user(), calls("c1", "c2"), tool("c2"), tool("c1")])
    check_request([user(), calls("c1"), tool("c1"), calls("c2"), tool("c2")])
    # An orphan at the end breaks rule 2, not the end-of-request rule.
    assert rules_of(request_violations([user(), tool("c1")])) == [(1, 2)]


def test_a_request_breaks_exactly_what_readiness_does_except_ending_with_a_tool_message() -> None:
    alphabet = [user(), reply(), calls("c1"), calls("c1", "c2"), tool("c1"), tool("c2")]
    checked = 0
    for n in range(6):
        for history in itertools.product(alphabet, repeat=n):
            ready = readiness_violations(history)
            ends_with_tool = [v for v in ready if v.rule == 4 and v.reason.startswith("history ends with a tool")]
            assert request_violations(history) == [v for v in ready if v not in ends_with_tool], history
            checked += 1
    assert checked > 9_000


def test_check_ready_for_user_input_includes_rule_four() -> None:
    with pytest.raises(UnsafeHistoryError, match=r"\(rule 4\)"):
        check_ready_for_user_input([user(), calls("c1")])


def test_unsafe_history_error_is_a_value_error_and_an_rxgraph_error() -> None:
    with pytest.raises(UnsafeHistoryError) as caught:
        check_request([tool("c1")])
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, RxGraphError)


def test_non_message_elements_raise_type_error_naming_the_index() -> None:
    history: list[object] = [user(), {"role": "user", "content": "hi"}]
    with pytest.raises(InvalidTypeError, match="message 1") as caught:
        sequence_violations(history)  # type: ignore[arg-type]
    assert caught.value.argument == "messages" and isinstance(caught.value, TypeError)


def test_long_closed_chain_history_has_no_violations() -> None:
    history: list[Message] = []
    turn = 0
    while len(history) < 10_000:
        ids = [f"t{turn}-{k}" for k in range(3)]
        history += [user(), calls(*ids), *(tool(i) for i in reversed(ids)), reply()]
        turn += 1
    assert sequence_violations(history) == []
    assert is_ready_for_user_input(history)


def test_long_run_of_tool_responses_to_one_assistant_message_has_no_violations() -> None:
    ids = [f"c{k}" for k in range(10_000)]
    history: list[Message] = [user(), calls(*ids), *(tool(i) for i in ids), reply()]
    assert readiness_violations(history) == []


def test_the_messages_package_leaves_its_errors_to_rxgraph_errors() -> None:
    errors = {getattr(rxgraph.errors, name) for name in rxgraph.errors.__all__}
    assert [name for name in rxgraph.messages.__all__ if getattr(rxgraph.messages, name) in errors] == []
    assert not hasattr(rxgraph.messages, "UnsafeHistoryError")
