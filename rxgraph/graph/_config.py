"""``RunnableConfig``: what a run needs to know besides its input."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from reactivex import abc

__all__ = ["MultitaskPolicy", "RunnableConfig"]

MultitaskPolicy = Literal["enqueue", "reject", "interrupt"]
"""What a run does when another run holds its thread: wait for it to end, fail with ``ThreadBusyError``, or cancel
it (it is rewound) and start once it has ended. A run that is only finishing its rewind is always waited for."""


class RunnableConfig(BaseModel):
    """Per-run settings. Immutable; derive a changed copy with ``config.model_copy(update={...})``.

    - ``thread_id``: the conversation the run belongs to; required when the graph has a checkpointer.
    - ``checkpoint_id``: start from this checkpoint of the thread instead of its head (replay or fork).
    - ``scheduler``: the reactivex scheduler for everything time-related in the run (chunk streams, timers, models,
      tools). With none, the scheduler given to ``subscribe`` is used, and with neither the run is synchronous on the
      subscribing thread. Put a ``TestScheduler`` here to run a whole graph in virtual time.
    - ``recursion_limit``: the most node executions one run may take before it fails with ``GraphRecursionError``.
    - ``multitask``: what this run does when another run holds its thread (``"enqueue"``, ``"reject"`` or
      ``"interrupt"``, see ``MultitaskPolicy``); ``None`` takes the graph's policy (``compile(multitask=...)``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    thread_id: str | None = None
    checkpoint_id: str | None = None
    scheduler: abc.SchedulerBase | None = None
    recursion_limit: int = Field(default=25, ge=1)
    multitask: MultitaskPolicy | None = None

    @field_validator("thread_id", "checkpoint_id")
    @classmethod
    def _non_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a non-empty string when given")
        return value

    def __repr_args__(self) -> Any:
        # Leave unset optional fields out of the repr: configs show up in error messages and logs.
        return [(k, v) for k, v in super().__repr_args__() if v is not None or k == "thread_id"]
