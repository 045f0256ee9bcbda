"""What a run is told besides its input: ``RunnableConfig`` per run, and the graph's ``TurnPolicy``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from reactivex import abc

from ..errors import InvalidArgumentError, InvalidConfigError

__all__ = ["CancelPolicy", "ErrorPolicy", "MultitaskPolicy", "RunnableConfig", "TurnPolicy", "UnsafeHeadPolicy"]

UnsafeHeadPolicy = Literal["rollback", "error", "ignore"]
"""What a run with new input does when the thread's head cannot take a new user message: start from the newest safe
checkpoint, fail with ``UnsafeHistoryError``, or start from the head anyway."""

CancelPolicy = Literal["rewind", "keep"]
"""What a cancelled run leaves behind: the thread rewound to its state before the run, or what the run wrote."""

MultitaskPolicy = Literal["enqueue", "reject", "interrupt"]
"""What a run does when another run holds its thread: wait for it to end, fail with ``ThreadBusyError``, or cancel
it (it is rewound) and start once it has ended. A run that is only finishing its rewind is always waited for."""

ErrorPolicy = Literal["keep", "rewind"]
"""What a failed run leaves behind: what it had written, so a workflow can resume from the failed node (``"keep"``),
or the thread rewound to its state before the run, so a failed turn is as atomic as a cancelled one (``"rewind"``).
Either way the error reaches the subscriber and the history records it (``Checkpoint.error``)."""


@dataclass(frozen=True, slots=True)
class TurnPolicy:
    """How a graph's turns begin and end — the defaults live here, and only here.

    - ``on_unsafe_head`` (``"rollback"``): what a run with new input does when the thread's head holds a history
      that cannot take a new user message (a half turn left by a crash, an error, or an older version):
      ``"rollback"`` starts from the newest safe checkpoint, ``"error"`` fails the run with ``UnsafeHistoryError``,
      ``"ignore"`` starts from the head anyway.
    - ``on_cancel`` (``"rewind"``): what happens to the thread when a run is cancelled (dispose, ``take``,
      ``take_until``, ``timeout``, a failing subscriber, an interrupt): ``"rewind"`` writes a new head equal to the
      state before the run, so the turn is as if it never happened; ``"keep"`` leaves what the run had written.
    - ``multitask`` (``"enqueue"``): what a run does when another run holds its thread, see ``MultitaskPolicy``.
    - ``on_error`` (``"keep"``; an agent's is ``"rewind"``): what a failed run leaves behind, see ``ErrorPolicy``.

    Raises:
        InvalidArgumentError: a policy that is not one of its choices.
    """

    on_unsafe_head: UnsafeHeadPolicy = "rollback"
    on_cancel: CancelPolicy = "rewind"
    multitask: MultitaskPolicy = "enqueue"
    on_error: ErrorPolicy = "keep"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("on_unsafe_head", UnsafeHeadPolicy),
            ("on_cancel", CancelPolicy),
            ("multitask", MultitaskPolicy),
            ("on_error", ErrorPolicy),
        ):
            choices = get_args(allowed)
            value = getattr(self, name)
            if value not in choices:
                listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
                raise InvalidArgumentError(f"{name} must be {listed}, got {value!r}", argument=name)

    def with_overrides(
        self,
        *,
        on_unsafe_head: UnsafeHeadPolicy | None = None,
        on_cancel: CancelPolicy | None = None,
        multitask: MultitaskPolicy | None = None,
        on_error: ErrorPolicy | None = None,
    ) -> TurnPolicy:
        """This policy with the given fields replaced (``None`` keeps a field)."""
        return TurnPolicy(
            on_unsafe_head=self.on_unsafe_head if on_unsafe_head is None else on_unsafe_head,
            on_cancel=self.on_cancel if on_cancel is None else on_cancel,
            multitask=self.multitask if multitask is None else multitask,
            on_error=self.on_error if on_error is None else on_error,
        )


class RunnableConfig(BaseModel):
    """Per-run settings. Immutable; derive a changed copy with ``config.model_copy(update={...})``.

    - ``thread_id``: the conversation the run belongs to; required when the graph has a checkpointer.
    - ``checkpoint_id``: start from this checkpoint of the thread instead of its head (replay or fork); ``START``
      for the thread's beginning (a fork from the empty state: a first message edited).
    - ``scheduler``: the reactivex scheduler for everything time-related in the run (chunk streams, timers, models,
      tools). With none, the scheduler given to ``subscribe`` is used, and with neither the run is synchronous on the
      subscribing thread. Put a ``TestScheduler`` here to run a whole graph in virtual time.
    - ``recursion_limit``: the most node executions one run may take before it fails with ``GraphRecursionError``.
    - ``multitask``: what this run does when another run holds its thread (``"enqueue"``, ``"reject"`` or
      ``"interrupt"``, see ``MultitaskPolicy``); ``None`` takes the graph's policy (``compile(multitask=...)``).
    - ``run_id``: this run's id (its checkpoints' ``run_id``, ``RunInfo.run_id``); ``None`` for a new one. Give
      each run its own (a server passes the id its clients know the run by).
    - ``context``: whatever this run's nodes and tools need that is not state — the user's id, a token, a client
      (a read-only mapping). Never stored in a checkpoint. Nodes read it as ``config.context``, nodes and tools as
      ``run.context`` of the ``RunInfo`` they declare.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    thread_id: str | None = None
    checkpoint_id: str | None = None
    scheduler: abc.SchedulerBase | None = None
    recursion_limit: int = Field(default=25, ge=1)
    multitask: MultitaskPolicy | None = None
    run_id: str | None = None
    context: Mapping[str, Any] = Field(default_factory=lambda: MappingProxyType({}))

    def __init__(self, **fields: Any) -> None:
        """Raises:
        InvalidConfigError: a field the config does not have, or a value its field cannot take.
        """
        try:
            super().__init__(**fields)
        except ValidationError as error:
            raise _invalid(error) from error

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> RunnableConfig:
        """A config from a mapping of its fields (or a config), validated as the constructor does.

        Raises:
            InvalidConfigError: a field the config does not have, or a value its field cannot take.
        """
        if isinstance(obj, Mapping) and not options:
            return cls(**obj)
        return super().model_validate(obj, **options)

    @field_validator("context", mode="after")
    @classmethod
    def _read_only(cls, context: Mapping[str, Any]) -> Mapping[str, Any]:
        return context if isinstance(context, MappingProxyType) else MappingProxyType(dict(context))

    @field_validator("thread_id", "checkpoint_id", "run_id")
    @classmethod
    def _non_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a non-empty string when given")
        return value

    def __repr_args__(self) -> Any:
        # Configs show up in error messages and logs: leave unset fields out, and show the context's keys only (it
        # may hold tokens).
        for key, value in super().__repr_args__():
            if key == "context":
                if value:
                    yield key, f"<keys {sorted(value)}>"
            elif value is not None or key == "thread_id":
                yield key, value


def _invalid(error: ValidationError) -> InvalidConfigError:
    problems = error.errors(include_url=False)
    said = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in problems)
    first = problems[0]["loc"] if problems else ()
    return InvalidConfigError(
        f"invalid RunnableConfig: {said}", errors=problems, argument=str(first[0]) if first else "config"
    )
