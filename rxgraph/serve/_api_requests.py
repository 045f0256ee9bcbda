"""The bodies clients send to LangGraph's server API, checked with pydantic: each names every field the official
clients send; a field rxgraph does not implement is refused when it is set, never ignored."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = [
    "STREAM_MODES",
    "AssistantSearch",
    "CheckpointRef",
    "CommandBody",
    "HistoryQuery",
    "RunCreate",
    "StateQuery",
    "StateUpdate",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadSearch",
]

STREAM_MODES = ("values", "updates", "messages-tuple", "custom")
"""The stream modes a run streams (LangGraph's ``messages``, ``events``, ``debug``, ``tasks`` and ``checkpoints``
are not served)."""

MultitaskStrategy = Literal["reject", "rollback", "interrupt", "enqueue"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    NOT_SERVED: ClassVar[tuple[str, ...]] = ()
    """Fields the clients send that this server does not implement: refused when set."""

    @field_validator("*")
    @classmethod
    def _refuse_what_is_not_served(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.field_name in cls.NOT_SERVED:
            raise ValueError(f"{info.field_name} is not supported by this server")
        return value


class CheckpointRef(BaseModel):
    """A checkpoint, as clients name one (``checkpoint_id``; the rest is accepted and not used)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    checkpoint_id: str | None = None
    thread_id: str | None = None
    checkpoint_ns: str | None = ""


class CommandBody(_Body):
    """``command``: a resume, an update and a goto, as ``Command`` takes them."""

    resume: Any = None
    update: dict[str, Any] | list[Any] | None = None
    goto: str | list[str] | None = None


class RunCreate(_Body):
    """A run: ``POST /threads/{thread_id}/runs[/stream|/wait]`` and ``POST /runs[/stream|/wait]``."""

    assistant_id: str = Field(min_length=1)
    input: Any = None
    command: CommandBody | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    multitask_strategy: MultitaskStrategy = "enqueue"
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] | None = None
    on_completion: Literal["delete", "keep"] = "delete"
    # Sent by the clients, not implemented: refused when set to anything but their defaults.
    webhook: str | None = None
    feedback_keys: list[str] | None = None
    after_seconds: float | None = None
    checkpoint_during: bool | None = None
    durability: str | None = None

    NOT_SERVED: ClassVar[tuple[str, ...]] = (
        "webhook",
        "feedback_keys",
        "after_seconds",
    )

    @field_validator("stream_mode")
    @classmethod
    def _modes(cls, value: str | list[str]) -> str | list[str]:
        for mode in [value] if isinstance(value, str) else value:
            if mode not in STREAM_MODES:
                raise ValueError(f"stream mode {mode!r} is not served; the modes are {', '.join(STREAM_MODES)}")
        return value

    @model_validator(mode="after")
    def _input_or_command(self) -> RunCreate:
        if self.input is not None and self.command is not None:
            raise ValueError("give input or command, not both")
        return self

    @property
    def modes(self) -> tuple[str, ...]:
        """The stream modes, each once (``values`` when none is given)."""
        names = [self.stream_mode] if isinstance(self.stream_mode, str) else self.stream_mode
        return tuple(dict.fromkeys(names or ["values"]))

    @property
    def start_from(self) -> str | None:
        """The checkpoint the run starts from (``checkpoint``, ``checkpoint_id`` or ``config.configurable``)."""
        if self.checkpoint is not None and self.checkpoint.checkpoint_id:
            return self.checkpoint.checkpoint_id
        configurable = self.config.get("configurable")
        if self.checkpoint_id is None and isinstance(configurable, dict):
            found = configurable.get("checkpoint_id")
            return found if isinstance(found, str) and found else None
        return self.checkpoint_id


class ThreadCreate(_Body):
    thread_id: str | None = Field(default=None, min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    graph_id: str | None = None
    supersteps: list[Any] | None = None
    ttl: Any = None

    NOT_SERVED: ClassVar[tuple[str, ...]] = (
        "supersteps",
        "ttl",
    )


class ThreadPatch(_Body):
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl: Any = None

    NOT_SERVED: ClassVar[tuple[str, ...]] = ("ttl",)


class ThreadSearch(_Body):
    ids: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, Any] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: Any = None

    NOT_SERVED: ClassVar[tuple[str, ...]] = ("extract",)


class StateUpdate(_Body):
    values: dict[str, Any] | None = None
    as_node: str | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None

    @model_validator(mode="after")
    def _head_only(self) -> StateUpdate:
        if self.checkpoint_id is not None or (self.checkpoint is not None and self.checkpoint.checkpoint_id):
            raise ValueError("an update is written on the thread's head; updating an older checkpoint is not served")
        return self


class StateQuery(_Body):
    checkpoint: CheckpointRef
    subgraphs: bool = False


class HistoryQuery(_Body):
    limit: int = Field(default=10, ge=1, le=10_000)
    before: CheckpointRef | str | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None


class AssistantSearch(_Body):
    metadata: dict[str, Any] = Field(default_factory=dict)
    graph_id: str | None = None
    name: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: str | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
