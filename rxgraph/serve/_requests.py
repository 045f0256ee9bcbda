"""What a client sends to start a run: the body of ``POST /threads/{thread_id}/runs/stream``, checked with pydantic."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..graph._config import MultitaskPolicy

__all__ = ["AgentRunRequest", "GraphRunRequest"]


class _RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    context: dict[str, Any] = Field(
        default_factory=dict, description="the run's context (RunInfo.context): never stored, never shown to a model"
    )
    multitask: MultitaskPolicy | None = Field(
        default=None, description="what the run does when another run holds the thread; None: the target's policy"
    )
    resume: Any = Field(
        default=None,
        description="the answer to the thread's pending interrupt (in place of input): the run is "
        "Command(resume=...); a tool approval's answer is {call_id: {'decision': 'approve' | 'edit' | 'reject', ...}}",
    )

    @property
    def resumes(self) -> bool:
        """Whether the body answers an interrupt (it has a ``resume`` key, ``null`` included)."""
        return "resume" in self.model_fields_set


class AgentRunRequest(_RunRequest):
    """A turn for an agent: the user's text, or messages in the OpenAI Chat Completions wire format."""

    input: str | list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _input_or_resume(self) -> AgentRunRequest:
        if (self.input is None) == (not self.resumes):
            raise ValueError("give exactly one of input (a user turn) and resume (the answer to its interrupt)")
        return self


class GraphRunRequest(_RunRequest):
    """A run of a graph: the state keys the run brings, or null to resume the thread from its head's ``next``."""

    input: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _input_or_resume(self) -> GraphRunRequest:
        if self.resumes and self.input is not None:
            raise ValueError("give input or resume, not both")
        if not self.resumes and "input" not in self.model_fields_set:
            raise ValueError("give input (an object of state keys, or null to resume from the head's next) or resume")
        return self
