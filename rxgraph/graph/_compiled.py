"""``CompiledGraph``: start runs (``stream``, ``invoke``) and read or update threads (``get_state``...).

A run's life is ``_run.py``'s; here it is only wired: ``Observable(run.subscribe)`` with
``do_on_cancel(run.end.cancel)`` (which stops the run before its upstream is disposed) and
``do_finally(run.end.finished)`` (which rewinds a cancelled run once the whole upstream was torn down).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeAlias, cast, overload

from reactivex import Observable, abc
from reactivex.scheduler import CurrentThreadScheduler, VirtualTimeScheduler

from .._frozen import freeze
from ..checkpoint._base import Checkpoint, CheckpointSaver
from ..errors import (
    CheckpointNotFoundError,
    DeadlockError,
    GraphValidationError,
    InvalidArgumentError,
    InvalidTypeError,
)
from ..rx import do_finally, do_on_cancel
from ..rx._async_iterator import to_async_iterator
from ..rx._awaitable import loop_of_scheduler, running_loop, worker_pool
from ..rx._subscribe import subscribe_source
from ._admission import UpdateHolder
from ._choose_base import BaseChoice, choose_base
from ._config import RunnableConfig, TurnPolicy
from ._constants import END
from ._dead_run import find_dead_run, rewinds_dead_runs
from ._draw import draw_mermaid
from ._interrupt import Command, PendingInterrupt, in_node_call, interrupt
from ._modes import StreamMode, stream_modes
from ._outputs import InterruptOutput, RunOutput, StateSnapshot
from ._run import Run
from ._slots import slots_for
from ._spec import GraphSpec
from ._state import as_update
from ._transition import after_update
from ._writer import ThreadWriter

_SAME = object()  # _stream's default: its nodes are told the run's own thread

_Input: TypeAlias = Mapping[str, Any] | Command[Any] | None
_Modes: TypeAlias = StreamMode | Sequence[StreamMode]

__all__ = ["CompiledGraph", "inner_stream", "spec_of"]


class CompiledGraph:
    """A validated graph, ready to run. Build one with ``StateGraph(...).compile()``.

    ``stream`` is cold: it returns an Observable, and each subscription is an independent run that reads the thread's
    head when it starts.
    """

    def __init__(self, spec: GraphSpec) -> None:
        self._spec = spec

    @property
    def checkpointer(self) -> CheckpointSaver | None:
        """Where the graph's threads are stored (None: runs keep nothing)."""
        return self._spec.checkpointer

    @property
    def policy(self) -> TurnPolicy:
        """How the graph's turns begin and end (``on_unsafe_head``, ``on_cancel``, ``multitask``)."""
        return self._spec.policy

    @property
    def messages_key(self) -> str | None:
        """The state key whose chat history the sequence rules apply to (None: no rules)."""
        return self._spec.messages_key

    def draw_mermaid(self) -> str:
        """The graph as a Mermaid flowchart, to paste where Mermaid renders (a Markdown file, mermaid.live).

        Node ids are ``n0``, ``n1``... in the order the nodes were added (names only appear, escaped, in labels);
        a route's edges are dotted and labelled, a route without a path map leads to a note naming it, a join is a
        point its sources go into, and interrupts and node policies are on the nodes' labels. The same graph
        always gives the same text. ``rxgraph draw MODULE:ATTR`` prints it from the command line.
        """
        return draw_mermaid(self._spec)

    # -- running -----------------------------------------------------------------------------------------------

    @overload
    def stream(self, input: _Input = None, config: RunnableConfig | None = None) -> Observable[RunOutput]: ...
    @overload
    def stream(
        self, input: _Input = None, config: RunnableConfig | None = None, *, mode: _Modes
    ) -> Observable[Any]: ...
    def stream(
        self, input: _Input = None, config: RunnableConfig | None = None, *, mode: _Modes | None = None
    ) -> Observable[Any]:
        """A cold Observable of one run's outputs; nothing runs and nothing is read until it is subscribed.

        Each subscription is a run: it holds the thread (see ``multitask``), reads its base when it starts, merges
        ``input`` into the state with the key strategies and starts at ``START`` — or, with ``input=None`` or a
        ``Command``, continues from the base checkpoint's ``next`` superstep (resuming a run that stopped early, or
        answering its pending interrupt). It emits a ``StreamingOutput`` per chunk a node streams, a ``NodeOutput``
        per node that finished, a ``CustomOutput`` per ``RunInfo.write`` of a node, and, when the run stops for a
        human, an ``InterruptOutput`` last. With ``mode``, it emits stream modes' payloads instead (``stream_modes``):
        a mode's name gives its bare payloads, a list of names ``(mode, payload)`` tuples, as LangGraph's
        ``stream_mode`` does.

        Args:
            input: the state keys this turn brings (a mapping), a ``Command(resume=...)`` answering the thread's
                pending interrupt, or None to resume.
            config: the thread, scheduler and limits of the run.
            mode: ``"values"``, ``"updates"``, ``"messages"``, ``"custom"`` or a list of them; None for the outputs.

        Raises:
            InvalidTypeError: ``config`` is not a ``RunnableConfig``, or ``mode`` not a name or a list of them.
            InvalidArgumentError: the graph has a checkpointer and ``config`` names no thread, or ``mode`` names an
                unknown mode (or is an empty list).
        """
        outputs = self._stream(input, config, None)
        return outputs if mode is None else outputs.pipe(stream_modes(mode))

    def invoke(
        self, input: Mapping[str, Any] | Command[Any] | None = None, config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """Run to the end and return the final state's values.

        Blocks the calling thread until the run ends (also when nodes run on other threads); with a virtual-time
        scheduler in the config, advances it until then.

        A run that stopped for a human returns the state it keeps for the resume, with the stop under
        ``"__interrupt__"``: a tuple of its ``PendingInterrupt``s (one per node that asked; each ``value`` is what was
        asked). Resume with ``invoke(Command(resume=answer), config)``, or, for several,
        ``Command(resume={interrupt.id: answer, ...})``.

        Called from a node of another run (a node that runs a graph of its own), it works as anywhere else: the
        inner run starts on a worker thread when the node runs inside a run's trampoline, which this call would
        otherwise block. If the inner run stops for a human, the question goes up: the node itself is interrupted
        with the inner run's ``value``, and when the outer run is resumed, the node's call of ``invoke`` passes the
        answer to the inner thread as ``Command(resume=answer)``. That needs the inner graph to keep its thread (a
        checkpointer and ``config.thread_id``); without one, the stop is only in the returned ``"__interrupt__"``.

        Args:
            input: as for ``stream``.
            config: as for ``stream``.

        Returns:
            The final state, as a plain dict of its (frozen) values (plus ``"__interrupt__"`` for a stopped run).

        Raises:
            DeadlockError: called on the event loop its run's scheduler uses, or the run cannot finish on its
                virtual-time scheduler.
            NodeInterrupt: called from a node, the inner run (with a thread) stopped for a human: the node stops.
            Exception: whatever the run failed with (a node's own exception, ``GraphRecursionError``, ...).
        """
        config = self._check_config(config)
        _refuse_blocking_on_own_loop(config.scheduler)
        resumable = in_node_call() and self._spec.checkpointer is not None and config.thread_id is not None
        if resumable and isinstance(input, Mapping | None) and self._waits_on_interrupt(config):
            answer = interrupt(None)  # the outer run was resumed with the answer to this thread's question
            input = Command(resume=answer)
        values, stops = self._run_to_end(input, config)
        while stops and resumable:
            # The questions go up to the outer run (NodeInterrupt); on its resume the answers come back here.
            if len(stops) == 1:
                answer = Command(resume=interrupt(stops[0].value))
            else:
                answers = interrupt({stop.id: stop.value for stop in stops})
                answer = Command(resume=answers)
            values, stops = self._run_to_end(answer, config)
        if stops:
            values["__interrupt__"] = stops
        return values

    def _waits_on_interrupt(self, config: RunnableConfig) -> bool:
        saver = self._spec.checkpointer
        assert saver is not None and config.thread_id is not None
        head = saver.get(config.thread_id)
        return head is not None and bool(head.pending) and "interrupt" in (head.pending or {})

    def _run_to_end(
        self, input: Mapping[str, Any] | Command[Any] | None, config: RunnableConfig
    ) -> tuple[dict[str, Any], tuple[PendingInterrupt, ...]]:
        """Run, block until the run ended, and return its final values and the stops it ended on, if any."""
        final: list[Mapping[str, Any]] = []
        errors: list[Exception] = []
        stops: list[PendingInterrupt] = []
        done = _Ended()

        def _on_next(output: RunOutput) -> None:
            if isinstance(output, InterruptOutput):
                stops.append(output.interrupt)

        def _on_error(error: Exception) -> None:
            errors.append(error)
            done.set()

        # invoke() blocks this thread: coroutines of the run must not be awaited on a loop running here.
        # Quiet: invoke hears the stops and the final state, not a NodeOutput per step.
        run = self._stream(input, config, final.append, await_here=False, quiet=True)
        scheduler = config.scheduler
        if scheduler is None and not CurrentThreadScheduler.singleton().schedule_required():
            # A trampoline runs on this thread (this is a node of another run, or an operator's callback): the run
            # would be queued on it behind the very action that now blocks waiting for it. Start it on a worker.
            context = contextvars.copy_context()  # subscribed there in the caller's context (its span, say)
            worker_pool().schedule(lambda *_: context.run(run.subscribe, _on_next, _on_error, done.set) and None)
        else:
            run.subscribe(_on_next, on_error=_on_error, on_completed=done.set)
        if not done.is_set() and isinstance(scheduler, VirtualTimeScheduler):
            VirtualTimeScheduler.start(scheduler)
            if not done.is_set():
                raise DeadlockError(
                    "invoke() could not finish the run on its virtual-time scheduler (it is already running, or the "
                    "run waits for something that is never scheduled); subscribe to stream() instead"
                )
        done.wait()
        if errors:
            raise errors[0]
        return dict(final[0]), tuple(stops)

    @overload
    def astream(self, input: _Input = None, config: RunnableConfig | None = None) -> AsyncIterator[RunOutput]: ...
    @overload
    def astream(
        self, input: _Input = None, config: RunnableConfig | None = None, *, mode: _Modes
    ) -> AsyncIterator[Any]: ...
    def astream(
        self, input: _Input = None, config: RunnableConfig | None = None, *, mode: _Modes | None = None
    ) -> AsyncIterator[Any]:
        """The run's outputs as an async iterator, for asyncio code: ``async for output in graph.astream(...)``.

        The same run as ``stream`` (one per iteration), kept off the event loop: without a scheduler in the config,
        its work — sync nodes and tools, saver I/O — runs on a pool of worker threads, and only the outputs come to
        the loop (queued, unbounded: a slow consumer loses nothing). ``async def`` nodes and tools are awaited on the
        caller's loop. Leaving the ``async for``, closing the iterator or cancelling the task that iterates cancels
        the run; the iterator's cleanup returns once the run has been torn down (and rewound). Reading items from
        tasks of their own (``asyncio.wait_for`` per item, ``asyncio.create_task(it.__anext__())``) does not, but a
        per-item timeout that fires does: it cancels the ``__anext__``. See ``rxgraph.rx.to_async_iterator`` for
        exactly what cancels the run. ``mode`` picks stream modes' payloads, as for ``stream``.

        Raises:
            InvalidTypeError: ``config`` is not a ``RunnableConfig``, or ``mode`` not a mode's name or a list of them.
            InvalidArgumentError: the graph has a checkpointer and ``config`` names no thread, or an unknown ``mode``.
            Exception: whatever the run fails with, from the ``async for``.
        """
        outputs = self._stream(input, self._off_the_loop(config), None)
        return to_async_iterator(outputs if mode is None else outputs.pipe(stream_modes(mode)))

    async def ainvoke(
        self, input: Mapping[str, Any] | Command[Any] | None = None, config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """``invoke`` for asyncio code: await the run's end, off the event loop (see ``astream``), and return the
        final state's values. Cancelling the awaiting task cancels (and rewinds) the run.

        Raises:
            Exception: whatever the run failed with.
        """
        final: list[Mapping[str, Any]] = []
        async for _ in to_async_iterator(self._stream(input, self._off_the_loop(config), final.append, quiet=True)):
            pass
        return dict(final[0])

    def _off_the_loop(self, config: RunnableConfig | None) -> RunnableConfig:
        config = self._check_config(config)
        if config.scheduler is None:
            config = config.model_copy(update={"scheduler": worker_pool()})
        return config

    def _stream(
        self,
        input: Mapping[str, Any] | Command[Any] | None,
        config: RunnableConfig | None,
        on_final_state: Callable[[Mapping[str, Any]], None] | None,
        *,
        await_here: bool = True,
        on_updates: Callable[[tuple[Any, ...]], None] | None = None,
        shown_thread: object = _SAME,
        quiet: bool = False,
    ) -> Observable[RunOutput]:
        config = self._check_config(config)
        # Snapshot the input now: a caller mutating its dict after assembly must not change what a later
        # subscription runs with.
        input = as_update(input)  # a pydantic state's instance stands for its fields
        frozen_input = (
            None
            if input is None
            else dict(freeze(dict(input)))
            if isinstance(input, Mapping)
            else input  # a Command (kept as it is), or something the run refuses with InvalidTypeError
        )
        spec = self._spec

        def _subscribe(
            observer: abc.ObserverBase[RunOutput], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            # Everything per subscription starts here: a fresh run, on the config's scheduler or the subscriber's.
            run_config = config
            if config.scheduler is None and scheduler is not None:
                run_config = config.model_copy(update={"scheduler": scheduler})
            loop = running_loop() if await_here else None
            run_config = _serving(run_config, loop)
            run = Run(spec, frozen_input, run_config, on_final_state, loop, on_updates, quiet=quiet)
            if shown_thread is not _SAME:  # a subgraph's run: its nodes work for the parent's thread
                run.info.thread_id = cast("str | None", shown_thread)
            # do_on_cancel stops the run before it is disposed; do_finally sits last so that the rewind runs after
            # the whole upstream was disposed. (The operators applied as pipe() would, without its composition.)
            pipeline = do_finally(run.end.finished)(do_on_cancel(run.end.cancel)(Observable(run.subscribe)))
            # `observer` is already the auto-detaching observer of this subscription: forward to it directly.
            return subscribe_source(pipeline, observer.on_next, observer.on_error, observer.on_completed, scheduler)

        return Observable(_subscribe)

    def _check_config(self, config: RunnableConfig | None) -> RunnableConfig:
        if config is None:
            config = RunnableConfig()
        elif not isinstance(config, RunnableConfig):
            raise InvalidTypeError(f"config must be a RunnableConfig, got {type(config).__name__}", argument="config")
        if self._spec.checkpointer is not None and config.thread_id is None:
            raise InvalidArgumentError(
                "this graph has a checkpointer: give the run a thread, RunnableConfig(thread_id=...)",
                argument="config",
            )
        return config

    # -- reading and updating threads --------------------------------------------------------------------------

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's state at its head (or at ``config.checkpoint_id``); empty values for an unknown thread.

        If a cancelled run is rewinding the thread right now, this waits until its rewind has landed.

        Raises:
            InvalidArgumentError: the graph has no checkpointer, or ``config`` names no thread.
            CheckpointNotFoundError: ``config.checkpoint_id`` is not a checkpoint of the thread.
        """
        saver, thread_id = self._settled_thread(config)
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
        """Every state of the thread, newest first (including those of cancelled or failed runs), at most
        ``limit`` of them. Waits for a rewind in flight, like ``get_state``.

        Raises:
            InvalidArgumentError: the graph has no checkpointer, ``config`` names no thread, or ``limit`` is negative
                or above ``MAX_LIST_LIMIT``.
            InvalidTypeError: ``limit`` is not an int.
        """
        saver, thread_id = self._settled_thread(config)
        return [_snapshot(checkpoint) for checkpoint in saver.list(thread_id, limit=limit)]

    def get_base_state(self, config: RunnableConfig) -> StateSnapshot:
        """The state a run with new input on this thread would start from now (see ``on_unsafe_head``): the head
        when it is safe, else the newest safe checkpoint — or, under ``on_error="rewind"``, the state a dead run
        (one that left the head unfinished, with no run of this process holding the thread) started from.

        Raises:
            InvalidArgumentError: the graph has no checkpointer, or ``config`` names no thread.
            UnsafeHistoryError: where such a run would fail with it.
        """
        saver, thread_id = self._settled_thread(config)
        if (
            config.checkpoint_id is None
            and rewinds_dead_runs(self._spec.policy)
            and slots_for(saver).holder(thread_id) is None
        ):
            # No run of this process holds the thread: a head left unfinished is a dead run's, which the next run
            # rewinds before it reads (with PostgresSaver, a run of another process may hold it still).
            dead = find_dead_run(saver, thread_id)
            if dead is not None:
                return _snapshot(dead.base) if dead.base is not None else StateSnapshot(values=MappingProxyType({}))
        base = choose_base(
            saver,
            thread_id,
            checkpoint_id=config.checkpoint_id,
            has_input=True,
            on_unsafe_head=self._spec.policy.on_unsafe_head,
        ).base
        return _snapshot(base) if base is not None else StateSnapshot(values=MappingProxyType({}))

    def update_state(
        self, config: RunnableConfig, values: Mapping[str, Any] | None, *, as_node: str | None = None
    ) -> StateSnapshot:
        """Write ``values`` into the thread from outside a run, merged with the key strategies, as a new head
        (source ``update``), and return it.

        The base is the head, or ``config.checkpoint_id`` to fork from an older checkpoint. With ``as_node`` the
        update counts as that node's output: the graph's edge out of ``as_node`` decides the checkpoint's ``next``
        (``as_node=END`` ends the thread's run: nothing is next, and an interrupt it waited on is dropped)
        (what a later ``stream(None, config)`` runs); without it, ``next`` stays the base's, and so does an interrupt it
        waits on (edit the state, then resume with ``Command``). The new checkpoint
        records whether its history is safe, like any other.

        Args:
            config: the thread (and optionally the checkpoint to fork from).
            values: the update, merged with the key strategies.
            as_node: the node the update stands in for, or ``END``.

        Raises:
            ThreadBusyError: a run is live on the thread (one that is rewinding is waited for).
            GraphValidationError: ``as_node`` is neither a node of the graph nor ``END``.
            CheckpointNotFoundError: ``config.checkpoint_id`` is not a checkpoint of the thread.
            CheckpointConflictError: another process moved the head meanwhile.
        """
        saver, thread_id = self._thread(config)
        spec = self._spec
        if as_node is not None and as_node != END and as_node not in spec.nodes:
            raise GraphValidationError(
                f"as_node={as_node!r} is neither a node of the graph nor END; nodes: {sorted(spec.nodes)}", node=as_node
            )
        slots, holder = slots_for(saver), UpdateHolder()
        claim = slots.claim(thread_id, holder, "reject", wait=True)  # a live run: ThreadBusyError; ending: wait
        try:
            if claim.outcome != "granted":
                holder.wait()
            writer = ThreadWriter(thread_id, saver, spec.messages_key, run_id=holder.run_id)
            choice = choose_base(
                saver, thread_id, checkpoint_id=config.checkpoint_id, has_input=False, on_unsafe_head="ignore"
            )
            writer.start(BaseChoice(choice.head, choice.base, rewind_to=None))
            at = after_update(spec, choice.base, values, as_node)
            written = writer.commit_position(at, node=as_node, source="update")
            assert written is not None  # a fresh writer is never cancelled
            return _snapshot(written)
        finally:
            slots.release(thread_id, holder)

    def _thread(self, config: RunnableConfig) -> tuple[CheckpointSaver, str]:
        saver = self._spec.checkpointer
        if saver is None:
            raise InvalidArgumentError(
                "this graph has no checkpointer: compile(checkpointer=...) to keep state between runs",
                argument="checkpointer",
            )
        if not isinstance(config, RunnableConfig) or config.thread_id is None:
            raise InvalidArgumentError("reading state needs a thread: RunnableConfig(thread_id=...)", argument="config")
        return saver, config.thread_id

    def _settled_thread(self, config: RunnableConfig) -> tuple[CheckpointSaver, str]:
        """The saver and thread to read, once a run that is rewinding the thread has landed its rewind."""
        saver, thread_id = self._thread(config)
        slots_for(saver).wait_settled(thread_id)
        return saver, thread_id


def spec_of(graph: CompiledGraph) -> GraphSpec:
    """What ``graph`` runs (its nodes, edges and policies), for the modules that look inside a graph."""
    return graph._spec


def inner_stream(
    graph: CompiledGraph,
    saver: CheckpointSaver,
    input: Mapping[str, Any] | Command[Any],
    config: RunnableConfig,
    on_updates: Callable[[tuple[Any, ...]], None],
    *,
    shown_thread: str | None,
) -> Observable[RunOutput]:
    """A run of ``graph`` on ``saver`` instead of its own checkpointer, telling ``on_updates`` each step's updates
    before its outputs, and its nodes that they work for ``shown_thread`` (the parent's): how a subgraph node runs
    its graph."""
    inner = CompiledGraph(replace(graph._spec, checkpointer=saver))
    return inner._stream(input, config, None, await_here=False, on_updates=on_updates, shown_thread=shown_thread)


def _serving(config: RunnableConfig, loop: asyncio.AbstractEventLoop | None) -> RunnableConfig:
    """A run of asyncio code on ``loop`` kept off it (``astream``, ``ainvoke``): the worker threads, serving that loop,
    where what the run awaits (an async model client's requests) is awaited, as its async nodes and tools are."""
    if loop is None or config.scheduler is not worker_pool():
        return config
    return config.model_copy(update={"scheduler": worker_pool().serving(loop)})


def _refuse_blocking_on_own_loop(scheduler: abc.SchedulerBase | None) -> None:
    """``invoke`` blocks its thread until the run ends: on the loop its run is scheduled on, it would wait forever."""
    loop = loop_of_scheduler(scheduler)
    if loop is not None and running_loop() is loop:
        raise DeadlockError(
            "invoke() was called on the event loop that its run's scheduler runs on: it would block the loop while "
            "waiting for a run that needs that loop to make progress. Subscribe to stream() from the coroutine "
            "instead, or call invoke() from another thread (e.g. `await loop.run_in_executor(None, ...)`)"
        )


def _snapshot(checkpoint: Checkpoint) -> StateSnapshot:
    return StateSnapshot(values=checkpoint.values, next=checkpoint.next, checkpoint=checkpoint)


class _Ended:
    """Set once, from any thread, when a run ended (its one terminal event); ``wait()`` blocks until then. What a
    ``threading.Event`` does for ``invoke``, at a lock's price: an Event makes a ``Condition``, and ``invoke`` makes
    one per run."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def wait(self) -> None:
        with self._lock:
            pass
