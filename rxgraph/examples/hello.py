"""A first look at rxgraph: a streaming node, checkpoints, and a cancelled run that is rewound.

Run it with ``python -m rxgraph.examples.hello``. Everything happens in virtual time on a ``TestScheduler``, so the
output is the same on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import reactivex as rx
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxgraph import END, START, KeyStrategy, MemorySaver, RunnableConfig, RunOutput, StateGraph, StreamingOutput


def build(saver: MemorySaver) -> Any:
    def greet(state: Any, config: RunnableConfig) -> rx.Observable[str]:
        # A "model" that streams one word every 10 ticks on the run's scheduler.
        words: list[str] = ["Hello", ", ", str(state["name"]), "!"]

        def word(tick: int) -> str:
            return words[tick]

        return rx.interval(10.0).pipe(ops.take(len(words)), ops.map(word))

    def reduce(chunks: Sequence[str]) -> dict[str, Any]:
        return {"messages": "".join(chunks)}

    return (
        StateGraph({"messages": KeyStrategy.APPEND})
        .add_node("greet", greet, reduce=reduce)
        .add_node("count", lambda state: {"turns": state.get("turns", 0) + 1})
        .add_edge(START, "greet")
        .add_edge("greet", "count")
        .add_edge("count", END)
        .compile(checkpointer=saver)
    )


def _show(output: RunOutput, scheduler: TestScheduler) -> None:
    if isinstance(output, StreamingOutput):
        print(f"  t={scheduler.clock:>5.0f}  {output.node:<6} chunk {output.chunk!r}")
    else:
        print(f"  t={scheduler.clock:>5.0f}  {output.node:<6} done  -> {dict(output.state)}")


def main() -> None:
    saver = MemorySaver()
    app = build(saver)
    scheduler = TestScheduler()
    config = RunnableConfig(thread_id="demo", scheduler=scheduler)

    print("turn 1: runs to the end")
    app.stream({"name": "Ada"}, config).subscribe(lambda o: _show(o, scheduler))
    scheduler.advance_to(100.0)

    print("turn 2: starts at t=100; the subscriber goes away at t=125, in the middle of the stream")
    subscription = app.stream({"name": "Grace"}, config).subscribe(lambda o: _show(o, scheduler))
    scheduler.schedule_absolute(125.0, lambda *_: subscription.dispose())
    scheduler.advance_to(200.0)

    print("checkpoints of thread 'demo', newest first:")
    for snapshot in app.get_state_history(config):
        checkpoint = snapshot.checkpoint
        assert checkpoint is not None
        print(f"  seq {checkpoint.seq}  {checkpoint.source:<6} node={checkpoint.node!s:<10} {dict(snapshot.values)}")
    print(
        "turn 2 wrote only its input checkpoint (its streaming node was cancelled before its tail ran), then the\n"
        "cancel rewound the thread: the head (seq 5) is again the state after turn 1."
    )


if __name__ == "__main__":
    main()
