"""An agent's ``astream`` left at each phase of a turn — by ``break``, by closing the iterator, by cancelling the
task — with ``OpenAIChatModel`` talking to a ``ChatCompletionsServer``: the model's HTTP stream is closed when one is
open, the thread is rewound, and the next turn's request is one a strict API accepts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from _weather_api import PHASES, QUESTION, WAIT, Scenario, scenario_maker
from serve._serving import RewindWatch

from rxgraph import CheckpointSaver, MemorySaver, NodeOutput, RunnableConfig, RunOutput, StreamingOutput

HOW = ["break", "aclose", "cancel"]
CONFIG = RunnableConfig(thread_id="t")


@pytest.fixture
def scenarios() -> Iterator[Callable[[str, CheckpointSaver], Scenario]]:
    with scenario_maker() as make:
        yield make


async def _reached(scenario: Scenario, phase: str, output: RunOutput) -> bool:
    """Whether the turn is at ``phase`` once ``output`` came (waiting, off the loop, for the tool or the API)."""
    wait = asyncio.get_running_loop().run_in_executor
    if phase == "while the answer streams":
        return isinstance(output, StreamingOutput) and output.node == "model" and output.chunk.content == "Sunny"
    if phase == "while the tool runs":
        return (
            isinstance(output, NodeOutput) and output.node == "model" and await wait(None, scenario.tool_started.wait)
        )
    if phase == "between the tool and the answer" and isinstance(output, NodeOutput) and output.node == "tools":
        await wait(None, scenario.gate.wait_for_arrivals, 1, WAIT)  # the answer was asked for, and has not begun
        return True
    return False


async def _leave(scenario: Scenario, phase: str, how: str) -> None:
    """Start the weather turn with ``astream`` and leave it at ``phase``, the way ``how`` says."""
    outputs: AsyncIterator[RunOutput] = scenario.agent.astream(QUESTION, CONFIG)
    there = asyncio.Event()

    async def consume() -> None:
        async for output in outputs:
            if await _reached(scenario, phase, output):
                if how == "break":
                    break
                if how == "aclose":
                    await outputs.aclose()  # type: ignore[attr-defined]
                    break
                there.set()
                await asyncio.Event().wait()  # the task is cancelled here
        else:
            raise AssertionError("the turn ended before the phase was reached")

    task = asyncio.create_task(consume())
    if how == "cancel":
        if phase == "before the first output":
            await asyncio.get_running_loop().run_in_executor(None, scenario.gate.wait_for_arrivals, 1, WAIT)
        else:
            await asyncio.wait_for(there.wait(), WAIT)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return
    await asyncio.wait_for(task, WAIT)
    if how == "break":
        await outputs.aclose()  # type: ignore[attr-defined]  # as `break` does once the iterator is dropped


# An `async for` body can leave only once an output came: before the first one, only a cancel leaves.
CASES = [(how, phase) for phase in PHASES for how in HOW if how == "cancel" or phase != "before the first output"]


@pytest.mark.parametrize(("how", "phase"), CASES)
def test_leaving_astream_closes_the_models_stream_rewinds_and_the_next_request_is_accepted(
    how: str, phase: str, scenarios: Callable[[str, CheckpointSaver], Scenario]
) -> None:
    saver = RewindWatch(MemorySaver())
    scenario = scenarios(phase, saver)

    async def main() -> None:
        assert (await scenario.agent.ainvoke("Hi", CONFIG)).content == "Hello!"
        before = saver.get("t")
        assert before is not None

        await _leave(scenario, phase, how)

        scenario.check_left(saver, before)
        assert (await scenario.agent.ainvoke("Thanks!", CONFIG)).content == "You're welcome."
        scenario.check_next_accepted(saver)

    asyncio.run(main())
