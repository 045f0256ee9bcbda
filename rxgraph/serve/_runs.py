"""``RunManager``: the runs this server process executes, each an asyncio task that turns the run's outputs into
events and keeps them in an ``EventLog`` that any number of clients follow (the stream that started it, ``join``,
``join_stream``, a reconnect with ``Last-Event-ID``).

A thread's runs take turns here, in the order they were asked for, by ``multitask_strategy``: ``reject`` refuses a
run while another is pending or running on its thread; ``enqueue`` waits for those; ``interrupt`` and ``rollback``
cancel them (each cancelled run is rewound, as every cancelled rxgraph run is) and wait for their rewinds first —
``rollback`` also deletes their records. The graph's own run slots still exclude a run of another process or one
started outside the server.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool

from .._json import to_json
from .._log import log
from ..agent._model import ChatChunk
from ..errors import ModelAPIError, RunInterruptedError, ThreadBusyError
from ..graph._config import MultitaskPolicy, RunnableConfig
from ..graph._outputs import CustomOutput, InterruptOutput, NodeOutput, RunOutput, StreamingOutput, SubgraphEvent
from ..messages._langchain import HistoryWriter, to_langchain
from ..messages._types import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from ._api_requests import RunCreate
from ._outputs import RunOutputs
from ._registry import HEARTBEAT, Registry, RunRecord, RunStatus, live, now
from ._relay import CancelAction, Relay, RelayHandlers
from ._targets import Target
from ._wire import chunk_text, interrupt_json, wire, wire_update, wire_values

_T = TypeVar("_T")

__all__ = ["ActiveRun", "EventLog", "RunEncoder", "RunManager"]

_POLICIES: dict[str, MultitaskPolicy] = {
    "reject": "reject",
    "enqueue": "enqueue",
    "interrupt": "interrupt",
    "rollback": "interrupt",
}
"""The graph's multitask policy for each strategy (a rollback interrupts, then deletes the run it interrupted)."""

_KEPT_LOGS = 256
"""Ended runs whose events stay in memory, for a client that joins or reconnects after the end."""


_MESSAGE_TYPES = (AssistantMessage, SystemMessage, ToolMessage, UserMessage)


def _text(payload: Any) -> str:
    # ASCII JSON: a streamed text may hold half of a surrogate pair, which UTF-8 cannot encode but JSON can escape.
    return json.dumps(payload, allow_nan=False, separators=(",", ":"))


class EventLog:
    """One run's events in order, numbered from 1, and whether the run has ended. Used on the event loop only."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.ended = False
        self._changed = asyncio.Event()
        self.tap: Callable[[Sequence[tuple[int, str, str]], bool], None] | None = None
        """Told every event from now on (and the end), once the run is followed from another process."""

    def append(self, event: str, data: str) -> None:
        self.events.append((event, data))
        if self.tap is not None:
            self.tap([(len(self.events), event, data)], False)
        self._wake()

    def end(self) -> None:
        self.ended = True
        if self.tap is not None:
            self.tap((), True)
        self._wake()

    def tap_from_start(self, tap: Callable[[Sequence[tuple[int, str, str]], bool], None]) -> None:
        """Tell ``tap`` every event so far (and whether the run has ended), then every later one."""
        if self.tap is None:
            tap([(i + 1, event, data) for i, (event, data) in enumerate(self.events)], self.ended)
            self.tap = tap

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self, after: int) -> AsyncIterator[list[tuple[int, str, str]]]:
        """The events numbered above ``after`` (``(number, event, data)``), as they come, until the run ends: each
        time, all those there are (a batch, never empty), so that a reader can send them together."""
        index = max(after, 0)
        while True:
            events = self.events
            if index < len(events):
                batch = [(number, *events[number - 1]) for number in range(index + 1, len(events) + 1)]
                index = len(events)
                yield batch
                continue  # more may have come while the batch was being sent
            if self.ended:
                return
            await self._changed.wait()


class RunEncoder:
    """Turns a run's outputs into the events of LangGraph's stream modes (each ``(event, JSON text)``): ``values``
    once per superstep, after its ``updates`` (``flush`` sends them when no more outputs wait; at a stop for a human
    they come again, with ``__interrupt__``), ``updates`` per node, ``messages`` for
    every model chunk and streamed message (``[message, metadata]``: the ``messages-tuple`` mode), ``custom``; inner
    nodes of subgraphs as ``mode|namespace`` events when ``subgraphs``."""

    def __init__(
        self,
        modes: tuple[str, ...],
        *,
        subgraphs: bool,
        run_id: str,
        thread_id: str,
        messages_key: str | None = "messages",
    ) -> None:
        self._messages_key = messages_key
        self._values = "values" in modes
        self._updates = "updates" in modes
        self._messages = "messages-tuple" in modes
        self._custom = "custom" in modes
        self._subgraphs = subgraphs
        self._run_id = run_id
        self._thread_id = thread_id
        self._pending: Mapping[str, Any] | None = None
        self._flushed: Mapping[str, Any] | None = None  # the state whose values went out last
        self.last_values: Any = None
        self._interrupts: list[InterruptOutput] = []
        self._streaming: dict[tuple[str, ...], str] = {}
        self._metadata: dict[tuple[str, ...], str] = {}
        self._history = HistoryWriter()  # the run's history as it grows: each state writes only its new messages
        self._streams = 0

    def take(self, output: RunOutput) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        if self._pending is not None and not (type(output) is NodeOutput and output.state is self._pending):
            events += self.flush()
        if isinstance(output, NodeOutput):
            self._streaming.pop((output.node,), None)
            if self._updates:
                update = wire_update(output.update, output.state, self._history)
                events.append(("updates", _text({output.node: update})))
            self._pending = output.state
        elif isinstance(output, StreamingOutput):
            chunk = output.chunk
            if isinstance(chunk, SubgraphEvent):
                events += self._inner(chunk)
            elif self._messages:
                events += self._message(chunk, output.state, (output.node,), "messages")
        elif isinstance(output, CustomOutput):
            if self._custom:
                events.append(("custom", _text(wire(output.value))))
        elif isinstance(output, InterruptOutput):
            self._interrupts.append(output)
        return events

    def finish(self) -> list[tuple[str, str]]:
        """The events after the last output: the last superstep's values; for a stop, the interrupts."""
        events = self.flush()
        if self._interrupts:
            pending = [interrupt_json(i.interrupt) for i in self._interrupts]
            state = self._interrupts[-1].state
            self.last_values = {**wire_values(state, self._messages_key, self._history), "__interrupt__": pending}
            if self._values:
                events.append(("values", _text(self.last_values)))
            if self._updates:
                events.append(("updates", _text({"__interrupt__": pending})))
        return events

    def flush(self) -> list[tuple[str, str]]:
        """The values of the superstep whose outputs came last (once: a later output of the same superstep adds
        none)."""
        state, self._pending = self._pending, None
        if state is None or state is self._flushed:
            return []
        self._flushed = state
        self.last_values = wire_values(state, self._messages_key, self._history)
        return [("values", _text(self.last_values))] if self._values else []

    def _message(
        self, chunk: Any, state: Mapping[str, Any], path: tuple[str, ...], event: str
    ) -> list[tuple[str, str]]:
        """A streamed message event: the chunk (or message), with the id the message has once it is in the history
        (``next_message_id`` of the history it follows, ``state``'s), and where it comes from."""
        if isinstance(chunk, ChatChunk):
            message = self._streaming.get(path)
            if message is None:
                message = self._streaming[path] = self._next_id(state)
            return [(event, f"[{chunk_text(chunk, message)},{self._metadata_text(path)}]")]
        if isinstance(chunk, ToolMessage):
            data = to_langchain([chunk], ids=[self._next_id(state, chunk.tool_call_id)])[0]
            return [(event, f"[{_text(data)},{self._metadata_text(path)}]")]
        return []

    def _metadata_text(self, path: tuple[str, ...]) -> str:
        """The JSON text of a message event's metadata (the same for every chunk a node streams: made once)."""
        text = self._metadata.get(path)
        if text is None:
            text = self._metadata[path] = _text(
                {
                    "langgraph_node": path[-1],
                    "langgraph_path": list(path),
                    "langgraph_checkpoint_ns": "|".join(path[:-1]),
                    "run_id": self._run_id,
                    "thread_id": self._thread_id,
                }
            )
        return text

    def _next_id(self, state: Mapping[str, Any], tool_call_id: str | None = None) -> str:
        history = state.get(self._messages_key) if self._messages_key is not None else None
        if isinstance(history, Sequence) and all(isinstance(m, _MESSAGE_TYPES) for m in history):
            return self._history.next_id(history, tool_call_id=tool_call_id)
        self._streams += 1  # a message in no history the graph keeps: an id of the run's own
        return f"run-{self._run_id}-{self._streams}"

    def _inner(self, event: SubgraphEvent) -> list[tuple[str, str]]:
        inner = event.innermost
        path = event.path
        suffix = "|" + "|".join(path[:-1]) if self._subgraphs else ""
        if isinstance(inner, StreamingOutput):
            return self._message(inner.chunk, inner.state, path, "messages" + suffix) if self._messages else []
        if isinstance(inner, CustomOutput):
            return [("custom" + suffix, _text(wire(inner.value)))] if self._custom else []
        if isinstance(inner, NodeOutput) and self._subgraphs:
            self._streaming.pop(path, None)
            events = []
            if self._updates:
                events.append(("updates" + suffix, _text({inner.node: wire_update(inner.update, inner.state)})))
            if self._values:
                events.append(("values" + suffix, _text(wire(dict(inner.state)))))
            return events
        return []


class ActiveRun:
    """A run this process executes: its record, its events, its task, and what it ended with."""

    def __init__(self, record: RunRecord, log: EventLog, temporary: bool) -> None:
        self.record = record
        self.log = log
        self.temporary = temporary
        self.task: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()
        self.values: Any = None
        self.error: dict[str, Any] | None = None
        self.cancel_action: CancelAction | None = None

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def thread_id(self) -> str:
        return self.record.thread_id


class RunManager(RelayHandlers):
    """Starts, follows and cancels this process's runs; see the module docstring.

    Args:
        registry: where run records are kept (their status is written as it changes).
        delete_thread: removes a temporary thread (a stateless run's) once its run has ended.
        relay: how other server processes follow and cancel this one's runs.
    """

    def __init__(self, registry: Registry, delete_thread: Callable[[str], Any], relay: Relay) -> None:
        self._registry = registry
        self._delete_thread = delete_thread
        self._relay = relay
        self._heartbeat: asyncio.Task[None] | None = None
        self._runs: dict[str, ActiveRun] = {}
        self._by_thread: dict[str, list[ActiveRun]] = {}
        self._ended: OrderedDict[str, ActiveRun] = OrderedDict()
        self._lanes: asyncio.Semaphore | None = None
        self._records_pool: ThreadPoolExecutor | None = None

    async def records(self, call: Callable[..., _T], *args: object) -> _T:
        """``call(*args)``, a blocking call of the registry's, on a thread of the records' own pool: at most
        ``registry.lanes`` at once. The others wait their turn on the event loop, not each in a thread of its own
        queued on the registry's lock. A cancel of the caller waits for the call to finish, so what it wrote is
        known; the call's lane is given back only then."""
        if self._lanes is None:  # made on the running loop (the app's lifespan may run more than once)
            self._lanes = asyncio.Semaphore(self._registry.lanes)
        # The call is a task of its own, never cancelled: it is awaited through any number of cancels of the
        # caller's task (RunManager.cancel, a client gone), then the cancel goes on.
        work = asyncio.ensure_future(self._in_lane(self._lanes, call, args))
        cancel: asyncio.CancelledError | None = None
        with anyio.CancelScope(shield=True):
            while not work.done():
                try:
                    await asyncio.shield(work)
                except asyncio.CancelledError as error:
                    cancel = cancel or error
                except Exception:  # (work's own error, raised below)
                    break
        if cancel is not None:
            raise cancel
        return work.result()

    async def _in_lane(self, lanes: asyncio.Semaphore, call: Callable[..., _T], args: tuple[object, ...]) -> _T:
        # A plain executor, not anyio's to_thread: about half the cost per call, which every run pays twice.
        if self._records_pool is None:
            self._records_pool = ThreadPoolExecutor(self._registry.lanes, thread_name_prefix="rxgraph-records")
        pool = self._records_pool
        async with lanes:
            # (the caller's context vars, as anyio's to_thread would pass them)
            job = functools.partial(contextvars.copy_context().run, call, *args)
            return await asyncio.get_running_loop().run_in_executor(pool, job)

    def get(self, run_id: str) -> ActiveRun | None:
        """A run this process executes, or executed recently."""
        return self._runs.get(run_id) or self._ended.get(run_id)

    def follow_requested(self, run_id: str) -> None:
        run = self.get(run_id)
        if run is not None:
            run.log.tap_from_start(lambda events, ended: self._relay.publish(run_id, events, ended=ended))

    def cancel_requested(self, run_id: str, action: CancelAction) -> None:
        run = self._runs.get(run_id)
        if run is not None:
            self.cancel(run, action)

    def forget(self, run_id: str) -> None:
        """Drop an ended run (its record was deleted): it is found no more."""
        self._ended.pop(run_id, None)

    def busy(self, thread_id: str) -> bool:
        return bool(self._by_thread.get(thread_id))

    def running_on(self, thread_id: str) -> list[ActiveRun]:
        """The thread's pending and running runs here, oldest first."""
        return list(self._by_thread.get(thread_id, ()))

    async def start(
        self,
        target: Target,
        thread_id: str,
        body: RunCreate,
        owner: str | None,
        *,
        temporary: bool = False,
        prepare: Callable[[], object] | None = None,
    ) -> ActiveRun:
        """Record a run and start it (it waits for its turn on the thread). ``prepare`` (blocking: finding or making
        the run's thread, say) is called first, in the same trip off the event loop as the record's write; what it
        raises refuses the run.

        Raises:
            ThreadBusyError: ``reject`` and the thread has a pending or running run here.
            MessageFormatError, InvalidArgumentError, InvalidTypeError, InvalidConfigError: the request's input or
                config is not one the target takes; nothing was recorded or started.
        """
        run_id = str(uuid.uuid4())
        config = RunnableConfig(
            thread_id=thread_id,
            run_id=run_id,  # its checkpoints say which run wrote them, by the id clients know it by
            checkpoint_id=body.start_from,
            context={**_configurable(body.config), **body.context},
            # The graph's own slots hold the thread against a run elsewhere (another process): as the strategy says.
            multitask=_POLICIES[body.multitask_strategy],
            **({"recursion_limit": body.config["recursion_limit"]} if "recursion_limit" in body.config else {}),
        )
        source = target.outputs(  # cold: nothing runs until it is iterated
            body.input,
            body.command,
            config,
            interrupt_before=body.interrupt_before,
            interrupt_after=body.interrupt_after,
        )
        queue = self._by_thread.setdefault(thread_id, [])
        strategy = body.multitask_strategy
        # Only the thread's owner hears that it is busy: another caller's run is refused by ``prepare`` (404).
        if strategy == "reject" and queue and queue[-1].record.owner == owner:
            raise ThreadBusyError(
                f"thread {thread_id!r} is busy with run {queue[-1].run_id!r} (multitask_strategy='reject')",
                thread_id=thread_id,
                run_id=queue[-1].run_id,
            )
        record = RunRecord(
            run_id=run_id,
            thread_id=thread_id,
            assistant_id=target.name,
            owner=owner,
            status="pending" if queue else "running",  # it waits only for this process's runs before it
            # The run's context may hold what must not be kept (a user's token): the record leaves it out.
            kwargs=body.model_dump(mode="json", exclude_defaults=True, exclude={"context"}),
            metadata=body.metadata,
            multitask_strategy=strategy,
        )
        before = list(queue)
        run = ActiveRun(record, EventLog(), temporary)
        queue.append(run)  # in line before the first await: a run started meanwhile sees it
        self._runs[run.run_id] = run
        try:
            await self.records(self._record, record, prepare)
        except BaseException:
            queue.remove(run)
            del self._runs[run.run_id]
            if not queue:
                self._by_thread.pop(thread_id, None)
            raise
        if strategy in ("interrupt", "rollback"):
            for earlier in before:
                self.cancel(earlier, "rollback" if strategy == "rollback" else "interrupt")
        if body.stream_resumable and self._relay.shared:  # its stream is read from any process, from the start
            self.follow_requested(run.run_id)
        run.task = asyncio.create_task(self._execute(run, source, body, before, target.graph.messages_key))
        return run

    def _record(self, record: RunRecord, prepare: Callable[[], object] | None) -> None:
        if prepare is not None:
            prepare()
        if record.multitask_strategy == "reject" and self._relay.shared:
            # A run of another process on the thread: its record says so (this process's own were seen already).
            busy = next((r for r in self._registry.runs(record.thread_id) if live(r)), None)
            if busy is not None:
                raise ThreadBusyError(
                    f"thread {record.thread_id!r} is busy with run {busy.run_id!r} (multitask_strategy='reject')",
                    thread_id=record.thread_id,
                    run_id=busy.run_id,
                )
        self._registry.put_run(record)

    def cancel(self, run: ActiveRun, action: CancelAction = "interrupt") -> None:
        """Cancel a run (it is rewound); ``rollback`` also deletes its record once it has ended."""
        if run.ended.is_set() or run.task is None:
            return
        if run.cancel_action is None:
            run.cancel_action = action
            run.task.cancel()  # once: a second cancel would cut short the rewind or the end the first one waits for
        elif action == "rollback":
            run.cancel_action = action  # asked again, for more: its record goes too

    async def wait(self, run: ActiveRun) -> None:
        """Return once the run has ended and its rewind (if cancelled) has landed; a cancel of the caller does not
        cut this wait short."""
        with anyio.CancelScope(shield=True):
            await run.ended.wait()

    def open(self) -> None:
        """Start touching the records of this process's runs every ``HEARTBEAT`` seconds (on the running loop)."""
        self._lanes = None
        self._heartbeat = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            if self._runs:
                for run in self._runs.values():
                    run.record = replace(run.record, updated_at=now())
                try:
                    await self.records(self._registry.touch_runs, list(self._runs))
                except Exception:  # the next beat tries again; a run's record outlives a missed one (LEASE)
                    log.exception("rxgraph.serve: touching the records of this process's runs failed")

    async def close(self) -> None:
        """Cancel every run still going, and wait for their rewinds; then let the records' threads go."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        running = list(self._runs.values())
        for run in running:
            self.cancel(run)
        for run in running:
            await self.wait(run)
        # Its threads end once what was handed to them ran; a later call (a lifespan run again) makes a new pool.
        pool, self._records_pool = self._records_pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    async def _execute(
        self,
        run: ActiveRun,
        source: AsyncIterator[RunOutput],
        body: RunCreate,
        before: list[ActiveRun],
        messages_key: str | None,
    ) -> None:
        status: RunStatus = "error"
        encoder = RunEncoder(
            body.modes,
            subgraphs=body.stream_subgraphs,
            run_id=run.run_id,
            thread_id=run.thread_id,
            messages_key=messages_key,
        )
        run.log.append("metadata", _text({"run_id": run.run_id, "attempt": 1}))
        try:
            for earlier in before:
                await earlier.ended.wait()
            status = await self._run(run, source, encoder)
        except asyncio.CancelledError:
            status = "interrupted"
        except Exception as error:  # a bad request found only when the run starts
            run.error = _error(error)
            run.log.append("error", _text(run.error))
        finally:
            await self._ended_as(run, status)

    async def _run(self, run: ActiveRun, source: AsyncIterator[RunOutput], encoder: RunEncoder) -> RunStatus:
        if run.record.status == "pending":  # it waited for the runs before it on the thread: it runs now
            run.record = replace(run.record, status="running", updated_at=now())
            await self.records(self._registry.put_run, run.record)
        outputs = RunOutputs(source)
        try:
            while True:
                item = await outputs.next()
                if item is None:
                    break
                if isinstance(item, Exception):
                    for event, data in encoder.finish():
                        run.log.append(event, data)
                    run.values = encoder.last_values
                    run.error = _error(item)
                    run.log.append("error", _text(run.error))
                    # Cancelled for a newer run on the thread (in another process: in this one, it is cancelled).
                    return "interrupted" if isinstance(item, RunInterruptedError) else "error"
                for event, data in encoder.take(item):
                    run.log.append(event, data)
                if not outputs.waiting():  # nothing more of this superstep yet: its values go out now
                    for event, data in encoder.flush():
                        run.log.append(event, data)
            for event, data in encoder.finish():
                run.log.append(event, data)
            run.values = encoder.last_values
            return "success"
        finally:
            await outputs.close()  # a cancel lands here: the run is torn down and rewound before it counts as ended

    async def _ended_as(self, run: ActiveRun, status: RunStatus) -> None:
        with anyio.CancelScope(shield=True):
            try:
                if run.cancel_action == "rollback" or run.temporary:
                    await self.records(self._registry.delete_run, run.run_id)
                else:
                    await self.records(self._registry.set_status, run.run_id, status)
                if run.temporary:
                    await run_in_threadpool(self._delete_thread, run.thread_id)
            except Exception:
                log.exception("rxgraph.serve: recording the end of run %s failed", run.run_id)
            run.record = replace(run.record, status=status, updated_at=now())
            _log_end(run, status)
            queue = self._by_thread.get(run.thread_id, [])
            if run in queue:
                queue.remove(run)
            if not queue:
                self._by_thread.pop(run.thread_id, None)
            self._runs.pop(run.run_id, None)
            if run.cancel_action != "rollback":  # a rolled back run is gone, as its record is
                self._ended[run.run_id] = run
            while len(self._ended) > _KEPT_LOGS:
                self._ended.popitem(last=False)
            run.log.end()
            run.ended.set()


def _log_end(run: ActiveRun, status: RunStatus) -> None:
    """One INFO line per run's end: its outcome, thread and run (and a failure's error). Where the thread of a run
    cut short now stands is the engine's line, logged as its rewind lands, just before this one."""
    if not log.isEnabledFor(logging.INFO):
        return
    outcome = {"success": "completed", "error": "failed", "interrupted": "cancelled"}.get(status, status)
    detail = f" ({run.error['error']}: {run.error['message']})" if status == "error" and run.error else ""
    log.info("run %s on thread %s %s%s", run.run_id, run.thread_id, outcome, detail)


def _configurable(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config.configurable`` without the keys that name the thread or the checkpoint (the request says those)."""
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping):
        return {}
    return {
        str(k): v
        for k, v in configurable.items()
        if k not in ("thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map")
    }


def _error(error: BaseException) -> dict[str, Any]:
    """An error as LangGraph's stream shows one: ``error`` (its type) and ``message``; a ``ModelAPIError`` adds the
    API's ``status_code`` and ``body``."""
    document: dict[str, Any] = {"error": type(error).__name__, "message": str(error)}
    if isinstance(error, ModelAPIError):
        document["status_code"] = error.status_code
        document["body"] = to_json(error.body)
    return document
