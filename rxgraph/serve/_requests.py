"""What a client sends to start a run: the body of ``POST /threads/{thread_id}/runs/stream``, checked with pydantic."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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


class AgentRunRequest(_RunRequest):
    """A turn for an agent: the user's text, or messages in the OpenAI Chat Completions wire format."""

    input: str | list[dict[str, Any]]


class GraphRunRequest(_RunRequest):
    """A run of a graph: the state keys the run brings, or null to resume the thread from its head's ``next``."""

    input: dict[str, Any] | None
