"""The start of a run: it reads its base (now, at start time, holding its thread) and takes up its position."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..errors import InvalidTypeError
from ._choose_base import choose_base
from ._config import RunnableConfig
from ._constants import START
from ._dead_run import is_unfinished, rewind_dead_run, rewinds_dead_runs
from ._interrupt import Command, PendingInterrupt
from ._spec import GraphSpec
from ._transition import Position, after_command, after_input, after_resume, check_resumable
from ._writer import ThreadWriter

__all__ = ["StartHost", "take_position"]


class StartHost(Protocol):
    """What the start needs of its run (``Run``): what it was given, and where it stands."""

    at: Position
    answering: Mapping[int, PendingInterrupt]

    @property
    def spec(self) -> GraphSpec: ...

    @property
    def writer(self) -> ThreadWriter: ...

    @property
    def config(self) -> RunnableConfig: ...

    @property
    def input(self) -> Mapping[str, Any] | Command[Any] | None: ...

    @property
    def resume(self) -> Command[Any] | None: ...


def take_position(run: StartHost) -> None:
    """Read the base (now, at start time) and take up its position: merge the input and route from START, or —
    resuming (no input, or a ``Command``) — the base checkpoint's pending superstep.

    Raises:
        InvalidTypeError: the input is neither a mapping, a ``Command`` nor None.
        Exception: what reading the base, resuming or writing the input checkpoint raised.
    """
    spec, writer, config, input = run.spec, run.writer, run.config, run.input
    choice = None
    if writer.saver is not None and writer.thread_id is not None:
        head = writer.saver.get(writer.thread_id)
        if head is not None and rewinds_dead_runs(spec.policy) and is_unfinished(head):
            # This run holds the thread's slot: a head left by a run that meant to go on is a dead run's, whose
            # turn is undone first, as its cancel or failure would have undone it.
            saver, thread_id = writer.saver, writer.thread_id
            rewound = rewind_dead_run(saver, thread_id, spec.messages_key, by_run=writer.run_id, head=head)
            head = rewound if rewound is not None else writer.saver.get(writer.thread_id)
        choice = choose_base(
            writer.saver,
            writer.thread_id,
            checkpoint_id=config.checkpoint_id,
            has_input=input is not None,
            on_unsafe_head=spec.policy.on_unsafe_head,
            head=head,
        )
    base = choice.base if choice is not None else None
    resumed = None
    if input is None:  # refused before the writer starts: nothing is written or recorded
        command = run.resume
        has_saver = writer.saver is not None
        if command is not None and (command.update is not None or command.goto):
            resumed = after_command(spec, base, command, has_saver=has_saver, thread_id=writer.thread_id)
        else:
            resuming = check_resumable(base, has_saver=has_saver, thread_id=writer.thread_id, command=command)
            resumed = after_resume(spec, resuming, command.resume if command is not None else None)
    if choice is not None:
        writer.start(choice)
    if resumed is not None:
        run.at, run.answering = resumed.at, resumed.answering
        if resumed.record is not None:
            node, source = resumed.record
            writer.commit_position(run.at, node=node, source=source)
        return
    if not isinstance(input, Mapping):
        raise InvalidTypeError(
            f"the input of a run must be a mapping of state keys, a Command or None, got {type(input).__name__}",
            argument="input",
        )
    # New input: the turn starts at START; an interrupt the base was waiting on is left unanswered.
    at = after_input(spec, base.values if base is not None else {}, input)
    writer.commit_position(at, node=START, source="input")
    run.at = at
