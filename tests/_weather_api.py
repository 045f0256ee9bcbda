"""The weather turn against a local OpenAI-compatible API, held at each phase of a turn: shared by the tests that
leave a turn over HTTP (``serve``) and from asyncio (``astream``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import openai
from reactivex.scheduler import ThreadPoolScheduler
from serve._serving import RewindWatch

from rxgraph import Checkpoint, CheckpointSaver, RunInfo
from rxgraph.agent import ReactAgent, tool
from rxgraph.models.openai import OpenAIChatModel
from rxgraph.testing import ChatCompletionsServer, Gate, Reply, StreamedCall

WAIT = 10.0
"""Seconds any wait for a server, a tool or a rewind may take before the test fails."""

POOL = ThreadPoolScheduler(4)
QUESTION = "Weather in Paris?"
PHASES = [
    "before the first output",
    "while the answer streams",
    "while the tool runs",
    "between the tool and the answer",
]


class Scenario:
    """The fake API's script for one phase (a greeting turn, the weather turn the client leaves, the next turn) and
    the agent in front of it, with a tool that can be held until the turn is cancelled."""

    def __init__(self, phase: str, saver: CheckpointSaver) -> None:
        self.phase = phase
        self.weather_requests = 1 if phase in ("before the first output", "while the tool runs") else 2
        self.gate = Gate()  # never opened: an answer held at it is one the model is still generating
        call = Reply(StreamedCall("c1", "get_weather", '{"city": "Paris"}'))
        weather_turn = {
            "before the first output": [Reply(self.gate, "Sunny")],
            "while the answer streams": [call, Reply("Sunny", self.gate, " today.")],
            "while the tool runs": [call],
            "between the tool and the answer": [call, Reply(self.gate, "Sunny")],
        }[phase]
        self.api = ChatCompletionsServer([Reply("Hello!"), *weather_turn, Reply("You're welcome.")])
        self.tool_started = threading.Event()
        self.tool_saw_cancel = threading.Event()
        hold = phase == "while the tool runs"

        @tool(scheduler=POOL)
        def get_weather(city: str, run: RunInfo) -> str:
            """Current weather for a city."""
            self.tool_started.set()
            if hold and run.cancelled.wait(WAIT):
                self.tool_saw_cancel.set()
            return f"Sunny in {city}"

        self.api.start()
        self.client = openai.OpenAI(base_url=self.api.base_url, api_key="test", max_retries=0, timeout=WAIT)
        self.agent = ReactAgent(OpenAIChatModel(self.client, "test-model"), tools=[get_weather], checkpointer=saver)

    def check_left(self, saver: RewindWatch, before: Checkpoint) -> None:
        """After the client left the weather turn: the model's HTTP stream was closed if one was open (else the
        tool saw the cancel), and the thread was rewound to ``before``."""
        last = self.api.request(self.weather_requests, WAIT)  # the weather turn's last request to the model
        if self.phase == "while the tool runs":
            assert self.tool_saw_cancel.wait(WAIT)
            assert last.wait(WAIT) == "completed"  # no model stream was open: the tool was running
        else:
            assert last.wait(WAIT) == "aborted"  # the model's HTTP stream was closed while it was still answering
        rewind = saver.wait_for_rewind()
        assert rewind.parent_id == before.id and rewind.values == before.values

    def check_next_accepted(self, saver: RewindWatch) -> None:
        """After the "Thanks!" turn: its request was one a strict API takes, holding nothing of the cut turn."""
        following = self.api.request(self.weather_requests + 1, WAIT)
        assert (following.status, following.wait(WAIT)) == (200, "completed")  # a strict API took it (not a 400)
        assert [(m["role"], m["content"]) for m in following.messages] == [
            ("user", "Hi"),
            ("assistant", "Hello!"),
            ("user", "Thanks!"),
        ]
        assert len(self.api.requests) == self.weather_requests + 2 and len(saver.rewinds) == 1

    def close(self) -> None:
        self.client.close()
        self.api.stop()


@contextmanager
def scenario_maker() -> Iterator[Callable[[str, CheckpointSaver], Scenario]]:
    """Makes scenarios, and stops their servers at the end of the block (a test module's fixture wraps it)."""
    made: list[Scenario] = []

    def make(phase: str, saver: CheckpointSaver) -> Scenario:
        made.append(Scenario(phase, saver))
        return made[-1]

    try:
        yield make
    finally:
        for scenario in made:
            scenario.close()
