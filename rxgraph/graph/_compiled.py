"""``CompiledGraph``: run a graph (``stream``, ``invoke``) and read its threads (``get_state``...)."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, get_args

from reactivex import Observable, abc
from reactivex.scheduler import VirtualTimeScheduler

from .._frozen import freeze
from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..errors import CheckpointNotFoundError, DeadlockError, GraphValidationError, UnsafeHistoryError
from ..rx import SignalType, do_finally, do_on_cancel
from ..rx._subscribe import subscribe_source
from ._config import MultitaskPolicy, RunnableConfig
from ._constants import END
from ._edges import Branch
from ._node import NodeSpec
from ._outputs import NodeOutput, StateSnapshot
from ._run_context import RunContext
from ._runner import Run
from ._safety import HistorySafety
from ._slots import slots_for
from ._state import StateSchema

if TYPE_CHECKING:
    from ._builder import CancelPolicy, UnsafeHeadPolicy

__all__ = ["CompiledGraph"]

_log = logging.getLogger("rxgraph")


class CompiledGraph:
    """A validated graph, ready to run. Build one with ``StateGraph(...).compile()``.

    ``stream`` is cold: it returns an Observable, and each subscription is an independent run that reads the thread's
    head when it subscribes.
    """

    def __init__(
        self,
        *,
        schema: StateSchema,
        nodes: Mapping[str, NodeSpec],
        branches: Mapping[str, Branch],
        checkpointer: CheckpointSaver | None,
        on_unsafe_head: UnsafeHeadPolicy = "rollback",
        on_cancel: CancelPolicy = "rewind",
        messages_key: str | None = "messages",
        multitask: MultitaskPolicy = "enqueue",
    ) -> None:
        if checkpointer is not None and not isinstance(checkpointer, CheckpointSaver):
            raise TypeError(f"checkpointer must be a CheckpointSaver, got {type(checkpointer).__name__}")
        if on_unsafe_head not in ("rollback", "error", "ignore"):
            raise ValueError(f"on_unsafe_head must be 'rollback', 'error' or 'ignore', got {on_unsafe_head!r}")
        if messages_key is not None and not (isinstance(messages_key, str) and messages_key):
            raise ValueError(f"messages_key must be a non-empty string or None, got {messages_key!r}")
        if on_cancel not in ("rewind", "keep"):
            raise ValueError(f"on_cancel must be 'rewind' or 'keep', got {on_cancel!r}")
        if multitask not in get_args(MultitaskPolicy):
            raise ValueError(f"multitask must be 'enqueue', 'reject' or 'interrupt', got {multitask!r}")
        self.multitask: MultitaskPolicy = multitask
        self.on_unsafe_head: UnsafeHeadPolicy = on_unsafe_head
        self.on_cancel: CancelPolicy = on_cancel
        self.messages_key = messages_key
        self.schema = schema
        self.nodes: Mapping[str, NodeSpec] = MappingProxyType(dict(nodes))
        self.branches: Mapping[str, Branch] = MappingProxyType(dict(branches))
        self.checkpointer = checkpointer

    # -- running -----------------------------------------------------------------------------------------------

    def stream(
        self, input: Mapping[str, Any] | None = None, config: RunnableConfig | None = None
    ) -> Observable[NodeOutput]:
        """A cold Observable of the run's outputs: a ``StreamingOutput`` per chunk a node streams, a ``NodeOutput``
        per node that finished. Nothing runs and nothing is read until it is subscribed.

        ``input`` is merged into the thread's state with the key strategies and the run starts at ``START``; with
        ``None`` the run continues from the checkpoint's ``next`` node (resuming a run that stopped early).
        """
        return self._stream(input, config, None)

    def invoke(self, input: Mapping[str, Any] | None = None, config: RunnableConfig | None = None) -> dict[str, Any]:
        """Run to the end and return the final state's values. Blocks the calling thread until the run ends (also
        when nodes run on other threads); with a virtual-time scheduler in the config, advances it until then."""
        config = self._check_config(config)
        _refuse_blocking_on_own_loop(config.scheduler)
        final: list[Mapping[str, Any]] = []
        errors: list[Exception] = []
        done = threading.Event()

        def _on_error(error: Exception) -> None:
            errors.append(error)
            done.set()

        self._stream(input, config, final.append).subscribe(on_error=_on_error, on_completed=done.set)
        scheduler = config.scheduler
        if not done.is_set() and isinstance(scheduler, VirtualTimeScheduler):
            VirtualTimeScheduler.start(scheduler)
            if not done.is_set():
                raise RuntimeError(
                    "invoke() could not finish the run on its virtual-time scheduler (it is already running, or the "
                    "run waits for something that is never scheduled); subscribe to stream() instead"
                )
        done.wait()
        if errors:
            raise errors[0]
        return dict(final[0])

    def _stream(
        self,
        input: Mapping[str, Any] | None,
        config: RunnableConfig | None,
        on_final_state: Callable[[Mapping[str, Any]], None] | None,
    ) -> Observable[NodeOutput]:
        config = self._check_config(config)
        # Snapshot the input now: a caller mutating its dict after assembly must not change what a later
        # subscription runs with.
        frozen_input = None if input is None else dict(freeze(dict(input))) if isinstance(input, Mapping) else input

        def _subscribe(
            observer: abc.ObserverBase[NodeOutput], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            # Everything per subscription starts here: a fresh context, the base read now.
            run_scheduler = config.scheduler or scheduler
            run_config = (
                config if run_scheduler is config.scheduler else config.model_copy(update={"scheduler": run_scheduler})
            )
            ctx = RunContext(config.thread_id, self.checkpointer, HistorySafety(self.messages_key))
            run = Run(
                self, ctx, frozen_input, run_config, run_scheduler, on_final_state, config.multitask or self.multitask
            )

            def _finally(signal: SignalType) -> None:
                if signal is SignalType.CANCEL:
                    run.cancelled()

            # do_on_cancel stops the run before it is disposed; do_finally sits last so that the rewind runs after
            # the whole upstream was disposed.
            pipeline = Observable(run.subscribe).pipe(do_on_cancel(run.cancel), do_finally(_finally))
            # `observer` is already the auto-detaching observer of this subscription; subscribing the pipeline with
            # subscribe() would wrap it once more, one more call per streamed chunk for nothing.
            return subscribe_source(pipeline, observer.on_next, observer.on_error, observer.on_completed, scheduler)

        return Observable(_subscribe)

    def _check_config(self, config: RunnableConfig | None) -> RunnableConfig:
        if config is None:
            config = RunnableConfig()
        elif not isinstance(config, RunnableConfig):
            raise TypeError(f"config must be a RunnableConfig, got {type(config).__name__}")
        if self.checkpointer is not None and config.thread_id is None:
            raise ValueError("this graph has a checkpointer: give the run a thread, RunnableConfig(thread_id=...)")
        return config

    def _load_base(self, ctx: RunContext, config: RunnableConfig, has_input: bool) -> Checkpoint | None:
        """Read the thread's head and choose the base of a run (called at subscribe time)."""
        saver = self.checkpointer
        if saver is None or config.thread_id is None:
            return None
        head = saver.get(config.thread_id)
        base = self._choose_base(saver, config, head, has_input)
        skipped = None
        if head is not None and base is not None and base.id != head.id and config.checkpoint_id is None:
            skipped = head.id
            _log.warning(
                "thread %r: head checkpoint %s (seq %d) is not safe for new input (%s); the run starts from "
                "checkpoint %s (seq %d)",
                config.thread_id,
                head.id,
                head.seq,
                head.unsafe_reason,
                base.id,
                base.seq,
            )
        # A cancelled run puts back what the thread looked like to a new turn: the base it chose, or, for a run from
        # an explicit checkpoint (a replay), the head it found.
        rewind_to = head if config.checkpoint_id is not None else base
        ctx.start_from(head, base, rewind_to=rewind_to, rolled_back_from=skipped)
        return base

    def _choose_base(
        self, saver: CheckpointSaver, config: RunnableConfig, head: Checkpoint | None, has_input: bool
    ) -> Checkpoint | None:
        thread_id = config.thread_id
        assert thread_id is not None
        if config.checkpoint_id is not None:
            # An explicit checkpoint is a replay or a fork: the caller chose the base, no selection.
            base = saver.get(thread_id, config.checkpoint_id)
            if base is None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {config.checkpoint_id!r}",
                    thread_id=thread_id,
                    checkpoint_id=config.checkpoint_id,
                )
            return base
        if head is None or head.safe or not has_input or self.on_unsafe_head == "ignore":
            # Without input the run resumes the head's own turn, which is allowed to be half done.
            return head
        if self.on_unsafe_head == "error":
            raise UnsafeHistoryError(
                f"thread {thread_id!r}: the head checkpoint {head.id!r} (seq {head.seq}) cannot take new input: "
                f"{head.unsafe_reason}. Compile with on_unsafe_head='rollback' to start from the newest safe "
                "checkpoint instead."
            )
        base = saver.latest_safe(thread_id, before_seq=head.seq)
        if base is None:
            raise UnsafeHistoryError(
                f"thread {thread_id!r}: no checkpoint has a history that can take new input (the head "
                f"{head.id!r} has: {head.unsafe_reason}); start a new thread, or run from a chosen "
                "checkpoint with RunnableConfig(checkpoint_id=...)"
            )
        return base

    def update_state(
        self, config: RunnableConfig, values: Mapping[str, Any] | None, *, as_node: str | None = None
    ) -> StateSnapshot:
        """Write ``values`` into the thread from outside a run, merged with the key strategies, as a new head
        (source ``update``), and return it.

        The base is the head, or ``config.checkpoint_id`` to fork from an older checkpoint. With ``as_node`` the
        update counts as that node's output: the graph's edge out of ``as_node`` decides the checkpoint's ``next``
        (what a later ``stream(None, config)`` runs); without it, ``next`` stays the base's. The write is a
        compare-and-set on the head (``CheckpointConflictError`` if a run moved it meanwhile), and the new
        checkpoint records whether its history is safe, like any other.
        """
        saver, thread_id = self._saver_for(config)
        if as_node is not None and as_node not in self.nodes:
            raise GraphValidationError(f"as_node={as_node!r} is not a node of the graph; nodes: {sorted(self.nodes)}")
        slots, writer = slots_for(saver), _Writer()
        claim = slots.claim(thread_id, writer, "reject")  # a live run: ThreadBusyError; one ending: wait for it
        try:
            if claim.outcome != "granted":
                writer.wait()
            return self._update(saver, thread_id, config, values, as_node)
        finally:
            slots.release(thread_id, writer)

    def _update(
        self,
        saver: CheckpointSaver,
        thread_id: str,
        config: RunnableConfig,
        values: Mapping[str, Any] | None,
        as_node: str | None,
    ) -> StateSnapshot:
        head = saver.get(thread_id)
        base = head
        if config.checkpoint_id is not None:
            base = saver.get(thread_id, config.checkpoint_id)
            if base is None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {config.checkpoint_id!r}",
                    thread_id=thread_id,
                    checkpoint_id=config.checkpoint_id,
                )
        state = self.schema.merge(base.values if base is not None else {}, values, origin="update_state")
        if as_node is not None:
            following = self.branches[as_node].next_node(MappingProxyType(state), self.nodes)
            next_nodes: tuple[str, ...] = (following,) if following != END else ()
        else:
            next_nodes = base.next if base is not None else ()
        ctx = RunContext(thread_id, saver, HistorySafety(self.messages_key))
        ctx.start_from(head, base, rewind_to=None)
        written = ctx.commit(state, node=as_node, next_nodes=next_nodes, source="update")
        assert written is not None  # a fresh context is never cancelled
        return _snapshot(written)

    def get_base_state(self, config: RunnableConfig) -> StateSnapshot:
        """The state a run with new input on this thread would start from now (see ``on_unsafe_head``): the head
        when it is safe, else the newest safe checkpoint. Raises ``UnsafeHistoryError`` where such a run would."""
        saver, thread_id = self._saver_for(config)
        slots_for(saver).wait_settled(thread_id)
        head = saver.get(thread_id)
        base = self._choose_base(saver, config, head, True)
        return _snapshot(base) if base is not None else StateSnapshot(values=MappingProxyType({}))

    # -- reading threads ---------------------------------------------------------------------------------------

    def _saver_for(self, config: RunnableConfig) -> tuple[CheckpointSaver, str]:
        if self.checkpointer is None:
            raise ValueError("this graph has no checkpointer: compile(checkpointer=...) to keep state between runs")
        if not isinstance(config, RunnableConfig) or config.thread_id is None:
            raise ValueError("reading state needs a thread: RunnableConfig(thread_id=...)")
        return self.checkpointer, config.thread_id

    def _settled_saver_for(self, config: RunnableConfig) -> tuple[CheckpointSaver, str]:
        """The saver and thread to read, once a run that is rewinding the thread has landed its rewind."""
        saver, thread_id = self._saver_for(config)
        slots_for(saver).wait_settled(thread_id)
        return saver, thread_id

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's state at its head (or at ``config.checkpoint_id``). Empty values for an unknown thread.

        If a cancelled run is rewinding the thread right now, this waits until its rewind has landed."""
        saver, thread_id = self._settled_saver_for(config)
        checkpoint = saver.get(thread_id, config.checkpoint_id)
        if checkpoint is None:
            if config.checkpoint_id is not None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {config.checkpoint_id!r}",
                    thread_id=thread_id,
                    checkpoint_id=config.checkpoint_id,
                )
            return StateSnapshot(values=MappingProxyType({}))
        return _snapshot(checkpoint)

    def get_state_history(self, config: RunnableConfig, *, limit: int | None = None) -> list[StateSnapshot]:
        """Every state of the thread, newest first (including those of cancelled or failed runs)."""
        saver, thread_id = self._settled_saver_for(config)
        return [_snapshot(checkpoint) for checkpoint in saver.list(thread_id, limit=limit)]


class _Writer:
    """Holds a thread's slot for ``update_state``: a write from outside a run waits for a rewinding run, and runs,
    reads and other updates that arrive meanwhile wait for it, as for a run that is ending (it is one short write,
    so an interrupting run waits too)."""

    ending = True

    def __init__(self) -> None:
        self.run_id = f"update-{uuid.uuid4().hex}"
        self.ending_thread = threading.get_ident()
        self._granted = threading.Event()

    def granted(self) -> None:
        self._granted.set()

    def wait(self) -> None:
        self._granted.wait()

    def interrupt(self, by_run: str) -> None:
        pass


def _refuse_blocking_on_own_loop(scheduler: abc.SchedulerBase | None) -> None:
    """``invoke`` blocks its thread until the run ends: on the loop its run is scheduled on, it would wait forever."""
    # AsyncIOScheduler and AsyncIOThreadSafeScheduler keep their loop in `_loop` (tests/rx/test_reactivex_contract.py).
    loop = getattr(scheduler, "_loop", None)
    if not isinstance(loop, asyncio.AbstractEventLoop):
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is loop:
        raise DeadlockError(
            "invoke() was called on the event loop that its run's scheduler runs on: it would block the loop while "
            "waiting for a run that needs that loop to make progress. Subscribe to stream() from the coroutine "
            "instead, or call invoke() from another thread (e.g. `await loop.run_in_executor(None, ...)`)"
        )


def _snapshot(checkpoint: Checkpoint) -> StateSnapshot:
    return StateSnapshot(values=checkpoint.values, next=checkpoint.next, checkpoint=checkpoint)
