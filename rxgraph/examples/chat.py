"""A chat agent to serve: ``rxgraph serve rxgraph.examples.chat:make`` (then open http://127.0.0.1:8000/).

Its tool, ``get_weather``, blocks on a thread pool for a second and a half: long enough to press Stop while it runs
and watch the turn be rewound. Its model is scripted, so it runs anywhere without a key: it streams its answers a
word at a time, and asked about the weather it says so, then calls ``get_weather``; each answer is a marble script
(``rxgraph.testing.Script``) chosen from the conversation's last message and played in real time. With
``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (and the ``openai`` extra installed), it talks to that Chat Completions
API instead (``rxgraph.models.openai.OpenAIChatModel``; the model is ``RXGRAPH_CHAT_MODEL``, default
``gpt-4o-mini``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

from reactivex import Observable, abc
from reactivex.scheduler import EventLoopScheduler, ThreadPoolScheduler

from ..agent import ChatChunk, ChatModel, ReactAgent, ToolCallDelta, ToolSpec, tool
from ..checkpoint import CheckpointSaver, MemorySaver
from ..graph import RunInfo
from ..messages import Message, ToolMessage, UserMessage
from ..testing import Script, finish, text

__all__ = ["ScriptedChat", "make", "make_approving"]

_POOL = ThreadPoolScheduler(4)


def make(
    checkpointer: CheckpointSaver | None = None,
    *,
    model: ChatModel | None = None,
    tool_seconds: float = 1.5,
    approve_tools: bool = False,
) -> ReactAgent:
    """The demo agent, its threads kept in ``checkpointer`` (a new ``MemorySaver`` when None).

    Args:
        checkpointer: where the threads are stored; ``rxgraph serve --db FILE`` passes a ``SqliteSaver``.
        model: the chat model; by default the API the environment names (see the module), else ``ScriptedChat()``.
        tool_seconds: how long ``get_weather`` takes (it returns early, with nothing written, when the turn is
            cancelled).
        approve_tools: ``get_weather`` needs approval: the turn stops and the chat page asks before it runs.
    """

    @tool(scheduler=_POOL, requires_approval=approve_tools)
    def get_weather(city: str, run: RunInfo) -> str:
        """Current weather for a city."""
        if run.cancelled.wait(tool_seconds):  # blocking work that looks up from time to time
            return "cancelled"
        return f"{_FORECASTS[sum(map(ord, city)) % len(_FORECASTS)]} in {city}"

    return ReactAgent(
        model if model is not None else _api_model() or ScriptedChat(),
        tools=[get_weather],
        checkpointer=checkpointer if checkpointer is not None else MemorySaver(),
        system_prompt="You are a friendly assistant. Use get_weather for questions about the weather.",
    )


_FORECASTS = ("Sunny, 21 °C", "Light rain, 14 °C", "Cloudy, 17 °C", "Clear skies, 24 °C")


def _api_model() -> ChatModel | None:
    """The Chat Completions API the environment names, if it names one and the ``openai`` extra is installed."""
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        return None
    try:
        import openai

        from ..models.openai import OpenAIChatModel
    except ImportError:
        return None
    # The client reads OPENAI_BASE_URL itself; a local server without keys still wants one, of any value.
    client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "none")
    return OpenAIChatModel(client, os.environ.get("RXGRAPH_CHAT_MODEL") or "gpt-4o-mini")


class ScriptedChat:
    """A scripted ``ChatModel`` that answers from the last message, in real time: a tool result is summed up, a
    question about the weather gets a word and a ``get_weather`` call, anything else a short greeting. ``pace`` is
    the seconds between two streamed words. Every request it received is in ``requests``."""

    def __init__(self, pace: float = 0.06) -> None:
        self.pace = pace
        self.requests: list[tuple[Message, ...]] = []
        # One thread plays every answer, in order: on a pool, each value of a script would be timed on a thread of
        # its own, and two due close together could be delivered out of order.
        self._clock = EventLoopScheduler(exit_if_empty=True)

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        self.requests.append(tuple(messages))
        script = self._script(messages[-1] if messages else None, tools)

        def _subscribe(observer: abc.ObserverBase[ChatChunk], _: abc.SchedulerBase | None = None) -> abc.DisposableBase:
            return script.observable().subscribe(observer, scheduler=self._clock)

        return Observable(_subscribe)

    def _script(self, last: Message | None, tools: Sequence[ToolSpec]) -> Script:
        if isinstance(last, ToolMessage):
            return self._play(_words(f"Here is the weather: {last.text}. Anything else?"), [finish("stop")])
        if isinstance(last, UserMessage) and "weather" in last.text.lower() and tools:
            city = _city(last.text)
            arguments = json.dumps({"city": city})
            call = ChatChunk(
                tool_calls=(
                    ToolCallDelta(index=0, id=f"call-{len(self.requests)}", name="get_weather", arguments=arguments),
                )
            )
            return self._play(_words(f"Let me check the weather in {city}."), [call, finish("tool_calls")])
        greeting = (
            "Hello! I am a scripted model. Ask me about the weather in a city, and press Stop while I look it up."
        )
        return self._play(_words(greeting), [finish("stop")])

    def _play(self, pieces: Sequence[ChatChunk], last: Sequence[ChatChunk]) -> Script:
        """``pieces`` one every ``pace`` seconds, then ``last`` right after, and the end: ``-c000-c001-...|``."""
        chunks = [*pieces, *last]
        names = [f"c{i:03d}" for i in range(len(chunks))]  # "-c000": five frames a chunk
        diagram = "".join(f"-{name}" for name in names) + "|"
        return Script(diagram, dict(zip(names, chunks, strict=True)), timespan=self.pace / 5)


def _words(sentence: str) -> list[ChatChunk]:
    return [text(word) for word in re.findall(r"\S+\s*", sentence)]


def _city(question: str) -> str:
    """The city a weather question is about: the capitalised word after "in" (Paris if there is none)."""
    found = re.search(r"\bin\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", question)
    return found.group(1) if found else "Paris"


def make_approving(checkpointer: CheckpointSaver | None = None) -> ReactAgent:
    """The demo agent that asks before it looks up the weather: ``rxgraph serve rxgraph.examples.chat:make_approving``
    shows the approval in the chat page."""
    return make(checkpointer, approve_tools=True)
