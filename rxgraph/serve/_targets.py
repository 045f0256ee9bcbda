"""``Target``: one served graph or agent — an assistant of LangGraph's API — and how a client's input becomes its
run's input."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..agent._react import ReactAgent
from ..errors import InvalidArgumentError, InvalidTypeError, MessageFormatError
from ..graph._compiled import CompiledGraph, spec_of
from ..graph._config import RunnableConfig
from ..graph._interrupt import Command
from ..graph._outputs import RunOutput
from ..messages._langchain import from_langchain
from ._api_requests import CommandBody
from ._registry import now

__all__ = ["Target", "targets_of"]


@dataclass(frozen=True)
class Target:
    """A served graph (``agent`` set when it is a ``ReactAgent``'s), by the name clients use for it: its
    ``assistant_id`` and ``graph_id``."""

    name: str
    graph: CompiledGraph
    agent: ReactAgent | None
    created_at: datetime = field(default_factory=now)

    def outputs(
        self,
        input: Any,
        command: CommandBody | None,
        config: RunnableConfig,
        *,
        interrupt_before: str | Sequence[str] | None = None,
        interrupt_after: str | Sequence[str] | None = None,
    ) -> AsyncIterator[RunOutput]:
        """The run a client asked for, not started yet; ``interrupt_before`` / ``interrupt_after`` (node names, or
        ``"*"`` for every node) stop this run there, besides where the graph stops anyway.

        Raises:
            MessageFormatError: a message in the input is not one rxgraph can hold.
            InvalidArgumentError: the input is not what the target takes, or a node to stop at is not one of the
                graph's (or the target is an agent, whose runs take no stops of their own).
        """
        run_input: Any
        if command is not None:
            update = command.update
            if isinstance(update, list):
                update = dict(update)  # LangGraph's [[key, value], ...] form
            run_input = Command(
                resume=command.resume,
                update=self.state_input(update) if update is not None else None,
                goto=command.goto if command.goto is not None else (),
            )
        elif self.agent is not None:
            run_input = self._turn(input)
        else:
            run_input = self.state_input(input) if input is not None else None
        if self.agent is not None:
            if interrupt_before is not None or interrupt_after is not None:
                raise InvalidArgumentError(
                    "an agent's run takes no interrupt_before / interrupt_after: its tools stop for approval when "
                    "made with requires_approval=True",
                    argument="interrupt_before",
                )
            return self.agent.astream(run_input, config)
        graph = self.graph
        if interrupt_before is not None or interrupt_after is not None:
            spec = spec_of(graph)
            graph = CompiledGraph(
                replace(
                    spec,
                    interrupt_before=spec.interrupt_before | self._nodes(interrupt_before, "interrupt_before"),
                    interrupt_after=spec.interrupt_after | self._nodes(interrupt_after, "interrupt_after"),
                )
            )
        return graph.astream(run_input, config)

    def _nodes(self, names: str | Sequence[str] | None, argument: str) -> frozenset[str]:
        nodes = spec_of(self.graph).nodes
        if names is None:
            return frozenset()
        if names == "*":
            return frozenset(nodes)
        unknown = [n for n in names if n not in nodes]
        if isinstance(names, str) or unknown:
            raise InvalidArgumentError(
                f"{argument} names nodes of the graph, or '*' for all; {unknown or names!r} are not among "
                f"{sorted(nodes)}",
                argument=argument,
            )
        return frozenset(names)

    def _turn(self, input: Any) -> Any:
        messages = input.get("messages") if isinstance(input, Mapping) and set(input) == {"messages"} else None
        if messages is None:
            raise InvalidArgumentError(
                f"an agent's run takes {{'messages': [...]}} (the user's turn), got {_shown(input)}", argument="input"
            )
        if isinstance(messages, str):
            return messages
        if isinstance(messages, Mapping):
            messages = [messages]
        return from_langchain(_entries(messages))

    def state_input(self, values: Any) -> dict[str, Any]:
        """State keys a client sent, its messages (LangChain or OpenAI dicts) read as rxgraph messages."""
        if not isinstance(values, Mapping):
            raise InvalidArgumentError(
                f"a run's input is an object of state keys, got {_shown(values)}", argument="input"
            )
        state = dict(values)
        messages = state.get("messages")
        if isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
            state["messages"] = from_langchain(messages)
        elif isinstance(messages, Mapping) and _is_message(messages):
            state["messages"] = from_langchain([messages])
        return state


def _is_message(entry: Any) -> bool:
    return isinstance(entry, Mapping) and (isinstance(entry.get("type"), str) or isinstance(entry.get("role"), str))


def _entries(messages: Any) -> Sequence[Mapping[str, Any]]:
    if not isinstance(messages, list):
        raise MessageFormatError(f"messages must be a list of message objects, got {_shown(messages)}", index=0)
    return messages


def _shown(value: Any) -> str:
    return type(value).__name__ if not isinstance(value, Mapping) else f"an object with keys {sorted(map(str, value))}"


def targets_of(target: CompiledGraph | ReactAgent | Mapping[str, CompiledGraph | ReactAgent]) -> dict[str, Target]:
    """The served targets by name: ``{"agent": target}`` for one, or the mapping given.

    Raises:
        InvalidTypeError: a target that is neither a ``CompiledGraph`` nor a ``ReactAgent``, or a name that is not a
            non-empty string.
        InvalidArgumentError: no target, or one without a checkpointer.
    """
    named = dict(target) if isinstance(target, Mapping) else {"agent": target}
    if not named:
        raise InvalidArgumentError("create_app needs at least one target to serve", argument="target")
    found: dict[str, Target] = {}
    for name, each in named.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidTypeError(
                f"a served target's name must be a non-empty string without '/', got {name!r}", argument="target"
            )
        if isinstance(each, ReactAgent):
            graph, agent = each.graph, each
        elif isinstance(each, CompiledGraph):
            graph, agent = each, None
        else:
            raise InvalidTypeError(
                f"create_app serves CompiledGraphs and ReactAgents, got {type(each).__name__} for {name!r}",
                argument="target",
            )
        if graph.checkpointer is None:
            raise InvalidArgumentError(
                f"target {name!r} has no checkpointer: threads are what the app serves (compile(checkpointer=...) "
                "or ReactAgent(..., checkpointer=...))",
                argument="target",
            )
        found[name] = Target(name, graph, agent)
    return found
