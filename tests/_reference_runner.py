"""A reference runner built only from reactivex operators: the run as the design states it, with no shortcut.

::

    stream  = defer(start), started in an action on the run's scheduler (or the trampoline)   cold; base read then
              .do_action(terminated)  |> raise the cancelled flag, then dispose  |> finally_action(rewind if cut)
    start   = read the base, merge the input, write the input checkpoint; steps(first node)
    step N  = defer(action(state)).do_action(keep).map(StreamingOutput) ++ defer(tail)
    tail    = merge, route, write (guarded by the cancelled flag); of(NodeOutput) ++ defer(step next)

The machinery between steps (``concat``, ``defer``) runs on the current thread's trampoline, node streams on the
run's scheduler. ``tests/graph/test_differential.py`` checks the real runner (``rxgraph/graph/runner.py``, one
purpose-built observer per step) against this one. It shares with the runner only what is not the driving: base
selection (``choose_base``), the guarded write and the rewind (``ThreadWriter``), the merge and the routing.
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

from rxgraph import END, START, CheckpointConflictError, CompiledGraph, GraphRecursionError, NodeOutput, StreamingOutput
from rxgraph.graph._choose_base import choose_base
from rxgraph.graph._run_info import RunInfo
from rxgraph.graph._writer import ThreadWriter
from rxgraph.rx._awaitable import background_loop

__all__ = ["reference_stream"]


def _route(spec: Any, source: str, state: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The node after ``source`` in a graph with one way out of each node, and the checkpoint's ``next``."""
    tasks, _ = spec.advance((source,), state)
    return (tasks[0] if tasks else END), tuple(tasks)


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
        failed_node: list[str | None] = [None]
        info = RunInfo(
            thread_id=config.thread_id, run_id=writer.run_id, context=config.context, loop_of=background_loop
        )

        def start(_: abc.SchedulerBase | None) -> Observable[NodeOutput]:
            base = None
            if writer.saver is not None and writer.thread_id is not None:
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
                return steps(base.next[0] if base is not None and base.next else END, state, 0)
            state = spec.schema.merge(state, input, origin="input")
            first, next_nodes = _route(spec, START, state)
            writer.commit(state, node=START, next_nodes=next_nodes, source="input")
            return steps(first, state, 0)

        def steps(name: str, state: dict[str, Any], count: int) -> Observable[NodeOutput]:
            if name == END:
                return rx.empty()
            if count >= run_config.recursion_limit:
                limit = run_config.recursion_limit
                return rx.throw(GraphRecursionError(f"reached {limit=}", limit=limit, next_node=name))
            return rx.defer(lambda _: step(name, state, count + 1))

        def step(name: str, state: dict[str, Any], count: int) -> Observable[NodeOutput]:
            node = spec.nodes[name]
            view = MappingProxyType(state)
            failed_node[0] = name
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
            return rx.concat(forwarded, rx.defer(lambda _: tail(name, state, updates(), count)))

        def tail(name: str, state: dict[str, Any], updates: Sequence[Any], count: int) -> Observable[NodeOutput]:
            if writer.cancelled:
                return rx.empty()
            for update in updates:
                state = spec.schema.merge(state, update, origin=f"node {name!r}", node=name)
            following, next_nodes = _route(spec, name, state)
            checkpoint = writer.commit(state, node=name, next_nodes=next_nodes, source="loop")
            if checkpoint is None and writer.saver is not None:
                return rx.empty()
            output = NodeOutput(name, MappingProxyType(state), checkpoint_id=checkpoint.id if checkpoint else None)
            return rx.concat(
                rx.return_value(output, scheduler=ImmediateScheduler.singleton()),
                rx.defer(lambda _: steps(following, state, count)),
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
            with contextlib.suppress(CheckpointConflictError):
                if spec.policy.on_error == "rewind":
                    writer.rewind(error=text)
                else:
                    writer.record_error(text, next_nodes=(failed_node[0],) if failed_node[0] else ())

        def rewind_if_cut() -> None:
            if terminated[0] or spec.policy.on_cancel == "keep":
                writer.close()
                return
            with contextlib.suppress(CheckpointConflictError):  # another writer moved the head: leave it
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


def _flag_before_dispose(source: Observable[NodeOutput], writer: ThreadWriter) -> Observable[NodeOutput]:
    """On dispose: raise the run's cancelled flag, then dispose upstream (harmless after a terminal event)."""

    def subscribe(observer: abc.ObserverBase[NodeOutput], scheduler: abc.SchedulerBase | None) -> abc.DisposableBase:
        inner = source.subscribe(observer, scheduler=scheduler)

        def dispose() -> None:
            writer.mark_cancelled()
            inner.dispose()

        return Disposable(dispose)

    return Observable(subscribe)
