"""Tool approval: what an agent asks a human before running gated tool calls, and the answers it takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..errors import InvalidArgumentError
from ..messages._types import ToolCall

__all__ = ["ApprovalRequest", "Approve", "Edit", "Reject", "ToolDecision", "decisions_for"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ApprovalRequest(BaseModel):
    """The interrupt value of a ``ReactAgent`` turn that stopped before running tools that require approval:
    ``calls`` are the calls waiting for a decision, in the order the model made them (calls of other tools in the
    same message are not listed; they run without asking).

    Answer with ``Command(resume={call.id: Approve() | Edit(arguments=...) | Reject(reason=...)})`` — one
    decision per listed call — or with ``request.approve_all()``.
    """

    model_config = _FROZEN

    kind: Literal["tool_approval"] = "tool_approval"
    calls: tuple[ToolCall, ...]

    def approve_all(self) -> dict[str, ToolDecision]:
        """A resume value approving every listed call."""
        return {call.id: Approve() for call in self.calls}


class Approve(BaseModel):
    """Run the call as the model made it."""

    model_config = _FROZEN
    decision: Literal["approve"] = "approve"


class Edit(BaseModel):
    """Run the call with these arguments instead (a JSON object, as text or as a mapping). The history keeps the
    model's original call; its tool message is the edited call's result."""

    model_config = _FROZEN
    decision: Literal["edit"] = "edit"
    arguments: str

    def __init__(self, arguments: str | Mapping[str, Any], **data: Any) -> None:
        if isinstance(arguments, Mapping):
            arguments = TypeAdapter(dict[str, Any]).dump_json(dict(arguments)).decode()
        super().__init__(arguments=arguments, **data)


class Reject(BaseModel):
    """Do not run the call: its tool message (an error message, so the history stays valid) tells the model why."""

    model_config = _FROZEN
    decision: Literal["reject"] = "reject"
    reason: str = "the user rejected this call"


ToolDecision: TypeAlias = Annotated[Approve | Edit | Reject, Field(discriminator="decision")]
"""One call's decision: ``Approve()``, ``Edit(arguments=...)`` or ``Reject(reason=...)``."""

_DECISIONS = TypeAdapter(dict[str, ToolDecision])


def decisions_for(request: ApprovalRequest, answer: Any) -> dict[str, Approve | Edit | Reject]:
    """Check a resume value against the request: one decision for each listed call, nothing else.

    Decisions may be given as the models or as their dumps (``{"decision": "reject", "reason": ...}``).

    Raises:
        InvalidArgumentError: the answer is not a mapping of call ids to decisions, misses a listed call, or names
            a call that was not listed.
    """
    if not isinstance(answer, Mapping):
        raise InvalidArgumentError(
            f"a tool approval is answered with {{call id: Approve() | Edit(...) | Reject(...)}}, got "
            f"{type(answer).__name__}",
            argument="resume",
        )
    raw = {key: value.model_dump() if isinstance(value, BaseModel) else dict(value) for key, value in answer.items()}
    try:
        decisions = _DECISIONS.validate_python(raw)
    except (ValidationError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"the tool approval answer is not valid: {error}", argument="resume") from None
    listed = [call.id for call in request.calls]
    missing = [call_id for call_id in listed if call_id not in decisions]
    unknown = sorted(set(decisions) - set(listed))
    if missing or unknown:
        raise InvalidArgumentError(
            f"the tool approval answer must decide exactly the calls {listed}; missing {missing}, not asked {unknown}",
            argument="resume",
        )
    return decisions
