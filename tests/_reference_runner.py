"""A reference runner built only from reactivex operators: the run as the design states it, with no shortcut.

::

    stream  = defer(start), started in an action on the run's scheduler (or the trampoline)   cold; base read then
              .do_action(terminated)  |> raise the cancelled flag, then dispose  |> finally_action(rewind if cut)
    start   = read the base, merge the input, write the input checkpoint; steps(first superstep)
    step N  = defer(action(state)).do_action(keep).map(StreamingOutput) ++ defer(tail)      one task
    step N  = from_iterable(defer(action_i(state_i)).do_action(keep_i).map(StreamingOutput) for each task)
              .merge(max_concurrent) ++ defer(superstep tail)                                several tasks, or a Send
    tail    = merge (in task order), route, write (guarded by the cancelled flag); of(NodeOutput...) ++ defer(steps)

The machinery between steps (``concat``, ``defer``) runs on the current thread's trampoline, node streams on the
run's scheduler. ``tests/graph/test_differential.py`` checks the real runner (``rxgraph/graph/runner.py``, one
purpose-built observer per step) against this one. It shares with the runner only what is not the driving: base
selection (``choose_base``), the guarded write and the rewind (``ThreadWriter``), the merge and the routing. How a
run that never ended is recognised and undone before the next turn is written here again, from the design's words.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import reactivex as rx
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable
from reactivex.scheduler import CurrentThreadScheduler, ImmediateScheduler

from rxgraph import (
    START,
    CheckpointConflictError,
    CheckpointSaver,
    CompiledGraph,
    GraphRecursionError,
    InvalidUpdateError,
    NodeOutput,
    SaverClosedError,
    StreamingOutput,
)
from rxgraph._frozen import freeze
from rxgraph.graph._choose_base import BaseChoice, choose_base
from rxgraph.graph._edges import JoinProgress, Task, task_node
from rxgraph.graph._interrupt import names_of, pending_of, tasks_of
from rxgraph.graph._run_info import RunInfo
from rxgraph.graph._writer import ThreadWriter
from rxgraph.rx._awaitable import background_loop

__all__ = ["reference_stream"]


def reference_stream(graph: CompiledGraph, input: Mapping[str, Any] | None, config: Any) -> Observable[NodeOutput]:
    """What ``graph.stream(input, config)`` does, from reactivex operators only (no run slots: one run at a time)."""

    def per_subscription(subscribe_scheduler: abc.SchedulerBase | None) -> Observable[NodeOutput]:
        run_scheduler = config.scheduler or subscribe_scheduler
        run_config = (
            config if run_scheduler is config.scheduler else config.model_copy(update={"scheduler": run_scheduler})
        )
        spec = graph._spec  # the graph as a run sees it
        writer = ThreadWriter(config.thread_id, spec.checkpointer, spec.messages_key)
        trampoline = CurrentThreadScheduler.singleton()
        terminated = [False]
        current: list[tuple[tuple[Task, ...], JoinProgress]] = [((), {})]  # the superstep running, for a failure
        info = RunInfo(
            thread_id=config.thread_id, run_id=writer.run_id, context=config.context, loop_of=background_loop
        )

        def start(_: abc.SchedulerBase | None) -> Observable[NodeOutput]:
            base = None
            if writer.saver is not None and writer.thread_id is not None:
                if spec.policy.on_error == "rewind" and spec.policy.on_cancel == "rewind":
                    _undo_a_dead_run(writer.saver, writer.thread_id, spec.messages_key)
                choice = choose_base(
                    writer.saver,
                    writer.thread_id,
                    checkpoint_id=run_config.checkpoint_id,
                    has_input=input is not None,
                    on_unsafe_head=spec.policy.on_unsafe_head,
                )
                writer.start(choice)
                base = choice.base
            state: dict[str, Any] = dict(base.values) if base is not None else {}
            if input is None:
                tasks, joins, _ = tasks_of(base.next, base.pending) if base is not None else ((), {}, None)
                return steps(tasks, state, 0, joins)
            state = spec.schema.merge(state, input, origin="input")
            tasks, joins = spec.advance((START,), state)
            writer.commit(
                state, node=START, next_nodes=names_of(tasks), source="input", pending=pending_of(tasks, joins, None)
            )
            return steps(tasks, state, 0, joins)

        def steps(tasks: tuple[Task, ...], state: dict[str, Any], count: int, joins: JoinProgress) -> Observable[Any]:
            if not tasks:
                return rx.empty()
            if count >= run_config.recursion_limit:
                limit = run_config.recursion_limit
                name = task_node(tasks[0])
                return rx.throw(GraphRecursionError(f"reached {limit=}", limit=limit, next_node=name))
            current[0] = (tasks, joins)
            if len(tasks) == 1 and type(tasks[0]) is str:
                return rx.defer(lambda _: step(tasks[0], state, count + 1, joins))  # type: ignore[arg-type]
            return rx.defer(lambda _: superstep(tasks, state, count + 1, joins))

        def superstep(
            tasks: tuple[Task, ...], state: dict[str, Any], count: int, joins: JoinProgress
        ) -> Observable[Any]:
            view = MappingProxyType(state)
            results: list[Sequence[Any]] = [() for _ in tasks]

            def branch(index: int, task: Task) -> Observable[Any]:
                def start_branch(_: Any) -> Observable[Any]:
                    name = task_node(task)
                    node = spec.nodes[name]
                    state_of: Any = view if type(task) is str else freeze(task.arg)  # type: ignore[union-attr]
                    result = node.call(state_of, run_config, info)
                    if result is None or isinstance(result, Mapping):
                        # No chunks: the branch is done when its action returns, and frees its place at once.
                        results[index] = (result,)
                        return rx.empty(scheduler=ImmediateScheduler.singleton())
                    if not isinstance(result, abc.ObservableBase):
                        return rx.throw(TypeError(f"node {name!r} returned a {type(result).__name__}"))
                    chunks: list[Any] = []

                    def done() -> None:
                        results[index] = node.updates_from_chunks(chunks, state_of)

                    return on_run_scheduler(result).pipe(
                        ops.do_action(chunks.append),
                        ops.map(lambda c: StreamingOutput(name, state_of, c)),
                        ops.do_action(on_completed=done),
                    )

                return rx.defer(start_branch)

            branches = rx.from_iterable(
                [branch(i, task) for i, task in enumerate(tasks)], scheduler=ImmediateScheduler.singleton()
            )
            limit = spec.max_concurrency or len(tasks)
            merged = branches.pipe(ops.merge(max_concurrent=limit))
            return rx.concat(merged, rx.defer(lambda _: superstep_tail(tasks, state, results, count, joins)))

        def superstep_tail(
            tasks: tuple[Task, ...],
            state: dict[str, Any],
            results: list[Sequence[Any]],
            count: int,
            joins: JoinProgress,
        ) -> Observable[Any]:
            if writer.cancelled:
                return rx.empty()
            try:
                state = spec.schema.merge_superstep(
                    state, [(task_node(task), updates) for task, updates in zip(tasks, results, strict=True)]
                )
            except InvalidUpdateError as error:
                return rx.throw(error)
            finished = tuple(dict.fromkeys(task_node(task) for task in tasks))
            following, joins = spec.advance(finished, state, joins)
            checkpoint = writer.commit(
                state,
                node=",".join(finished),
                next_nodes=names_of(following),
                source="loop",
                pending=pending_of(following, joins, None),
            )
            if checkpoint is None and writer.saver is not None:
                return rx.empty()
            view = MappingProxyType(state)
            checkpoint_id = checkpoint.id if checkpoint else None
            outputs = [NodeOutput(task_node(task), view, checkpoint_id=checkpoint_id) for task in tasks]
            return rx.concat(
                rx.from_iterable(outputs, scheduler=ImmediateScheduler.singleton()),
                rx.defer(lambda _: steps(following, state, count, joins)),
            )

        def step(name: str, state: dict[str, Any], count: int, joins: JoinProgress) -> Observable[Any]:
            node = spec.nodes[name]
            view = MappingProxyType(state)
            result = node.call(view, run_config, info)
            chunks: list[Any] = []
            updates: Callable[[], Sequence[Any]]
            if result is None or isinstance(result, Mapping):
                stream: Observable[Any] = rx.empty()
                updates = lambda: (result,)  # noqa: E731
            elif isinstance(result, abc.ObservableBase):
                stream = on_run_scheduler(result)
                updates = lambda: node.updates_from_chunks(chunks, view)  # noqa: E731
            else:
                return rx.throw(TypeError(f"node {name!r} returned a {type(result).__name__}"))
            forwarded = stream.pipe(ops.do_action(chunks.append), ops.map(lambda c: StreamingOutput(name, view, c)))
            return rx.concat(forwarded, rx.defer(lambda _: tail(name, state, updates(), count, joins)))

        def tail(
            name: str, state: dict[str, Any], updates: Sequence[Any], count: int, joins: JoinProgress
        ) -> Observable[Any]:
            if writer.cancelled:
                return rx.empty()
            for update in updates:
                state = spec.schema.merge(state, update, origin=f"node {name!r}", node=name)
            following, joins = spec.advance((name,), state, joins)
            checkpoint = writer.commit(
                state,
                node=name,
                next_nodes=names_of(following),
                source="loop",
                pending=pending_of(following, joins, None),
            )
            if checkpoint is None and writer.saver is not None:
                return rx.empty()
            output = NodeOutput(name, MappingProxyType(state), checkpoint_id=checkpoint.id if checkpoint else None)
            return rx.concat(
                rx.return_value(output, scheduler=ImmediateScheduler.singleton()),
                rx.defer(lambda _: steps(following, state, count, joins)),
            )

        def on_run_scheduler(source: abc.ObservableBase[Any]) -> Observable[Any]:
            # The node's stream gets the run's scheduler; the concat machinery around it keeps the trampoline.
            return Observable(lambda observer, _: source.subscribe(observer, scheduler=run_scheduler))

        def machinery(observer: abc.ObserverBase[NodeOutput], _: abc.SchedulerBase | None) -> abc.DisposableBase:
            return rx.defer(start).subscribe(observer, scheduler=trampoline)

        def mark_terminated(*_: Any) -> None:
            terminated[0] = True

        def record_failure(error: Exception) -> None:
            # As the runner does: stop writing, then rewind or keep-and-record, as on_error says.
            terminated[0] = True
            writer.mark_cancelled()
            if not writer.started:
                return
            text = f"{type(error).__name__}: {error}"
            with contextlib.suppress(CheckpointConflictError, SaverClosedError):
                if spec.policy.on_error == "rewind":
                    writer.rewind(error=text)
                else:
                    tasks, joins = current[0]
                    writer.record_error(text, next_nodes=names_of(tasks), pending=pending_of(tasks, joins, None))

        def rewind_if_cut() -> None:
            if terminated[0] or spec.policy.on_cancel == "keep":
                writer.close()
                return
            # Another writer moved the head (leave it), or the process "died" (nothing of it lands any more).
            with contextlib.suppress(CheckpointConflictError, SaverClosedError):
                writer.rewind()

        def start_later(observer: abc.ObserverBase[NodeOutput], _: abc.SchedulerBase | None) -> abc.DisposableBase:
            # Start in an action on the run's scheduler (or the trampoline), and subscribe the machinery inside a
            # running trampoline, so that its work is queued until its subscription is held (subscribe_on would
            # do the first, but also dispose later, on the scheduler: not how a run stops).
            held = SerialDisposable()

            def inside(*_: Any) -> None:
                held.disposable = Observable(machinery).subscribe(observer)

            scheduled = (run_scheduler or trampoline).schedule(lambda *_: trampoline.schedule(inside))
            return CompositeDisposable(scheduled, held)

        run = Observable(start_later).pipe(ops.do_action(on_error=record_failure, on_completed=mark_terminated))
        return _flag_before_dispose(run, writer).pipe(ops.finally_action(rewind_if_cut))

    # Not rx.defer: it hands its factory an ImmediateScheduler when the subscriber gave none, and "none" matters.
    return Observable(lambda observer, scheduler: per_subscription(scheduler).subscribe(observer, scheduler=scheduler))


def _undo_a_dead_run(saver: CheckpointSaver, thread_id: str, messages_key: str | None) -> None:
    """The rule as the design states it, from the whole history: a head that names a next superstep, waits on no
    human and is a step's (or the input's) was left by a run that never ended; put back the state that run's first
    checkpoint started from."""
    history = saver.list(thread_id)
    if not history:
        return
    head = history[0]
    if head.source not in ("input", "loop") or not head.next or (head.pending or {}).get("interrupt") is not None:
        return
    by_id = {c.id: c for c in history}
    first = head
    while first.parent_id in by_id and by_id[first.parent_id].run_id == head.run_id:
        first = by_id[first.parent_id]
    base = by_id.get(first.parent_id) if first.parent_id is not None else None
    if first.parent_id is not None and base is None:
        return
    writer = ThreadWriter(thread_id, saver, messages_key, run_id=head.run_id)
    writer.start(BaseChoice(head, base, rewind_to=base))
    with contextlib.suppress(CheckpointConflictError):
        writer.rewind(error="dead")


def _flag_before_dispose(source: Observable[NodeOutput], writer: ThreadWriter) -> Observable[NodeOutput]:
    """On dispose: raise the run's cancelled flag, then dispose upstream (harmless after a terminal event)."""

    def subscribe(observer: abc.ObserverBase[NodeOutput], scheduler: abc.SchedulerBase | None) -> abc.DisposableBase:
        inner = source.subscribe(observer, scheduler=scheduler)

        def dispose() -> None:
            writer.mark_cancelled()
            inner.dispose()

        return Disposable(dispose)

    return Observable(subscribe)
