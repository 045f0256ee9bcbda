"""Tool approval: a ReactAgent turn stops before gated tools run, and the human's answer — approve, edit or reject
per call — always leaves a history a chat API accepts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rxgraph import CheckpointSaver, Command, InterruptOutput, InvalidArgumentError, RunnableConfig
from rxgraph.agent import ApprovalRequest, Approve, Edit, ReactAgent, Reject, tool
from rxgraph.messages import AssistantMessage, ToolMessage, UserMessage, check_request, request_violations
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call

sent: list[str] = []


@tool(requires_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    sent.append(f"{to}: {body}")
    return f"sent to {to}"


@tool
def lookup(name: str) -> str:
    """Find an address."""
    return f"{name.lower()}@example.com"


def _agent(saver: CheckpointSaver) -> tuple[ReactAgent, ScriptedChatModel]:
    both = [
        tool_call("c1", "lookup", '{"name": "Ada"}', index=0),
        tool_call("c2", "send_email", '{"to": "ada@example.com", "body": "hi"}', index=1),
        finish("tool_calls"),
    ]
    model = ScriptedChatModel([both, [text("Done.")], [text("Anything else?")]])
    return ReactAgent(model, tools=[send_email, lookup], checkpointer=saver), model


def _stop(agent: ReactAgent, config: RunnableConfig) -> ApprovalRequest:
    outputs: list[Any] = []
    agent.stream("Email Ada hi", config).subscribe(outputs.append)
    stop = outputs[-1]
    assert isinstance(stop, InterruptOutput) and stop.node == "tools"
    assert isinstance(stop.value, ApprovalRequest)
    return stop.value


@pytest.fixture(autouse=True)
def _nothing_sent() -> None:
    sent.clear()


def test_a_gated_call_stops_the_turn_with_a_typed_request(saver_factory: Callable[[], CheckpointSaver]) -> None:
    agent, _ = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    request = _stop(agent, config)
    assert [call.id for call in request.calls] == ["c2"]  # lookup needs no approval and is not listed
    pending = agent.get_state(config).interrupt
    assert pending is not None and pending.value == request and pending.node == "tools"
    assert sent == []


def test_approved_calls_run_and_the_turn_completes(saver_factory: Callable[[], CheckpointSaver]) -> None:
    agent, model = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    request = _stop(agent, config)
    answer = agent.invoke(Command(resume=request.approve_all()), config)
    assert answer == AssistantMessage(content="Done.")
    assert sent == ["ada@example.com: hi"]
    history = agent.get_state(config).values["messages"]
    assert [m.content for m in history if isinstance(m, ToolMessage)] == ["ada@example.com", "sent to ada@example.com"]
    check_request(model.requests[-1].messages)


def test_an_edited_call_runs_with_the_new_arguments(saver_factory: Callable[[], CheckpointSaver]) -> None:
    agent, model = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    _stop(agent, config)
    agent.invoke(Command(resume={"c2": Edit({"to": "ada@example.com", "body": "Hello, Ada."})}), config)
    assert sent == ["ada@example.com: Hello, Ada."]
    check_request(model.requests[-1].messages)  # the request after the edit is one an API accepts


def test_a_rejected_call_gets_exactly_one_error_tool_message(saver_factory: Callable[[], CheckpointSaver]) -> None:
    agent, model = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    _stop(agent, config)
    agent.invoke(Command(resume={"c2": Reject(reason="not now")}), config)
    assert sent == []
    history = agent.get_state(config).values["messages"]
    answers = [m for m in history if isinstance(m, ToolMessage) and m.tool_call_id == "c2"]
    assert len(answers) == 1 and answers[0].is_error and "not now" in answers[0].content
    check_request(model.requests[-1].messages)
    assert request_violations([*history, UserMessage(content="next")]) == []
    # the next turn's request is valid too
    agent.invoke("thanks", config)
    check_request(model.requests[-1].messages)


def test_a_bad_answer_fails_the_resume_and_the_question_stays(saver_factory: Callable[[], CheckpointSaver]) -> None:
    agent, _ = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    request = _stop(agent, config)
    with pytest.raises(InvalidArgumentError, match="missing \\['c2'\\]"):
        agent.invoke(Command(resume={}), config)
    with pytest.raises(InvalidArgumentError, match="not asked \\['c9'\\]"):
        agent.invoke(Command(resume={"c2": Approve(), "c9": Approve()}), config)
    with pytest.raises(InvalidArgumentError, match="is not valid"):
        agent.invoke(Command(resume={"c2": {"decision": "maybe"}}), config)
    pending = agent.get_state(config).interrupt
    assert pending is not None and pending.value == request  # still waiting, as before
    assert agent.invoke(Command(resume={"c2": {"decision": "approve"}}), config).content == "Done."


def test_a_new_message_while_approval_is_pending_starts_from_a_valid_history(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    agent, model = _agent(saver_factory())
    config = RunnableConfig(thread_id="t")
    _stop(agent, config)
    # The pending tool call has no answer: the head cannot take a user message, so the turn starts from the newest
    # checkpoint that can (the user's message of the stopped turn).
    agent.invoke("Actually, never mind.", config)
    check_request(model.requests[-1].messages)
    assert sent == []
    assert agent.get_state(config).interrupt is None


def test_requires_approval_must_be_a_bool() -> None:
    from rxgraph import InvalidTypeError

    with pytest.raises(InvalidTypeError, match="requires_approval must be a bool"):
        tool(lambda x: x, name="f", requires_approval="yes")  # type: ignore[call-overload]
