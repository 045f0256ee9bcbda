"""``ReactAgent``: a streaming model and its tools in a loop, as a real ``StateGraph`` with atomic turns."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import reactivex as rx
from pydantic import BaseModel
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.scheduler import ImmediateScheduler

from .._arguments import check_int, check_scheduler
from ..checkpoint._base import CheckpointSaver
from ..errors import (
    InvalidArgumentError,
    InvalidTypeError,
    MaxIterationsError,
    NodeInterrupt,
    ToolInputError,
    UnsafeHistoryError,
)
from ..graph._builder import StateGraph
from ..graph._compiled import CompiledGraph
from ..graph._config import (
    CancelPolicy,
    ErrorPolicy,
    MultitaskPolicy,
    RunnableConfig,
    TurnPolicy,
    UnsafeHeadPolicy,
)
from ..graph._constants import END, START
from ..graph._interrupt import Command, interrupt
from ..graph._outputs import RunOutput, StateSnapshot
from ..graph._run_info import RunInfo
from ..graph._state import KeyStrategy
from ..messages._rules import request_violations
from ..messages._types import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from ..otel._active import telemetry
from ..rx._at_once import at_once
from ._approval import ApprovalRequest, Approve, Edit, Reject, decisions_for
from ._model import ChatChunk, ChatModel, merge_chunks
from ._tools import Tool, tool

__all__ = ["AgentInput", "ReactAgent"]

AgentInput = str | Message | Sequence[Message] | Command[Any]
"""A user turn: its text, one message, or several messages (e.g. a system note and the user's question) — or a
``Command(resume=...)`` answering the turn's pending tool approval."""

_NO_RESULT = object()

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..otel._telemetry import Telemetry

    _Traced = tuple[Telemetry, Context]
    """Where a tool call's span goes: the telemetry, and the context of the node that runs it."""


class ReactAgent:
    """A ReAct agent: the model answers or calls tools; tool results go back to the model; repeat.

    The graph (``agent.graph``) has two nodes: ``model`` streams the model's ``ChatChunk``s to the subscriber and
    merges them into one ``AssistantMessage``; ``tools`` runs every call of that message and appends exactly one
    ``ToolMessage`` per call — an error message (``is_error=True``) for an unknown tool, arguments that are not JSON
    or do not match the tool's schema, or a tool that raised (or whose Observable or coroutine failed). A tool whose
    result is a ``ToolMessage`` gives the message its ``content`` and ``is_error`` itself (a LangChain tool's handled
    ``ToolException``, say); the call's id and the tool's name are the agent's. The loop ends when the model answers
    without tool calls. Its ``max_iterations``-th call in one turn offers the model no tools, so it must answer.

    The calls of one message run concurrently, at most ``max_parallel_tools`` at a time (started in call order).
    Each ``ToolMessage`` reaches the subscriber (as a ``StreamingOutput`` of ``tools``) as soon as its tool has
    finished, so in the order they finish; the history always holds them in call order. A blocking tool is called
    on its own ``scheduler`` or the agent's ``tool_scheduler``; an ``async def`` tool is awaited on the run's event
    loop; a tool with a ``RunInfo`` parameter receives the run's (``context``, ``cancelled``...). Cancelling the
    turn disposes every tool still running, sets ``RunInfo.cancelled``, and cancels awaited coroutines. A turn with no
    scheduler of its own goes on from the thread a tool's result arrived on (a pool thread, say); to keep a turn's
    events on an asyncio server's loop, give it ``RunnableConfig(scheduler=AsyncIOThreadSafeScheduler(loop))``.

    With a checkpointer, a turn is atomic: a cancelled turn is rewound (``on_cancel="rewind"``), and a new turn
    starts from the newest history that can take a user message (``on_unsafe_head="rollback"``). One turn runs per
    thread at a time; ``multitask`` says what a turn does when another one is running (see ``StateGraph.compile``).
    """

    def __init__(
        self,
        model: ChatModel,
        tools: Sequence[Tool | Any] = (),
        *,
        checkpointer: CheckpointSaver | None = None,
        system_prompt: str | None = None,
        max_iterations: int = 10,
        max_parallel_tools: int = 4,
        tool_scheduler: abc.SchedulerBase | None = None,
        policy: TurnPolicy | None = None,
        on_cancel: CancelPolicy | None = None,
        on_unsafe_head: UnsafeHeadPolicy | None = None,
        multitask: MultitaskPolicy | None = None,
        on_error: ErrorPolicy | None = None,
        trim: Callable[[list[Message]], Sequence[Message]] | None = None,
    ) -> None:
        """Build the agent and compile its graph.

        Args:
            model: the chat model: anything with ``stream(messages, tools)`` (see ``ChatModel``).
            tools: ``Tool``s; typed functions, which are made tools with ``tool``; LangChain tools (a
                ``langchain_core`` ``BaseTool``), made tools with ``rxgraph.tools.langchain.from_langchain_tool``.
            checkpointer: where the thread's turns are stored; without one, a turn sees only its own input.
            system_prompt: sent first in every request to the model; never stored in the history.
            max_iterations: model calls per turn; the last one is offered no tools.
            max_parallel_tools: how many tool calls of one assistant message run at the same time (default 4);
                1 runs them one after the other, in call order.
            tool_scheduler: where the functions of tools without a ``scheduler`` of their own are called, e.g. a
                ``ThreadPoolScheduler`` when they block (default None: on the thread that runs the turn).
            policy: how turns begin and end (``TurnPolicy``; when None, its defaults but ``on_error="rewind"``:
                a failed turn is undone like a cancelled one); the keywords below override single fields of it.
            on_cancel: what a cancelled turn leaves behind.
            on_unsafe_head: where a turn starts when the thread's head cannot take a user message.
            multitask: what a turn does when another one holds the thread.
            on_error: what a failed turn leaves behind (``"rewind"`` unless ``policy`` says otherwise).
            trim: what the model sees of a long thread, e.g. ``lambda m: trim_messages(m, max_messages=20)``
                (``rxgraph.messages.trim_messages``). Called before each model call with the request: the system
                prompt first, then the whole history; what it returns is sent instead (the stored history stays
                whole). A budget it applies counts the system prompt, which is never dropped: when the result does
                not start with it, it is put back in front. The result must end with the history's newest message
                and pass ``request_violations``; otherwise the turn fails (``InvalidArgumentError`` or
                ``UnsafeHistoryError``, before the model is called). Default None: the whole history is sent.

        Raises:
            InvalidTypeError: ``model`` has no ``stream`` method, a function's signature cannot be described
                to a model, ``max_parallel_tools`` is not an int, ``tool_scheduler`` is not a reactivex
                scheduler, or ``trim`` is not callable.
            InvalidArgumentError: ``max_iterations`` or ``max_parallel_tools`` < 1, a tool name is not allowed or
                used twice, or a policy is not one of its choices.
        """
        if not hasattr(model, "stream"):
            raise InvalidTypeError(
                f"model must have a stream(messages, tools) method, got {type(model).__name__}", argument="model"
            )
        if max_iterations < 1:
            raise InvalidArgumentError(
                f"max_iterations must be at least 1, got {max_iterations}", argument="max_iterations"
            )
        check_int(max_parallel_tools, argument="max_parallel_tools", least=1)
        check_scheduler(tool_scheduler, argument="tool_scheduler")
        if trim is not None and not callable(trim):
            raise InvalidTypeError(
                f"trim must be callable (messages -> messages), got {type(trim).__name__}", argument="trim"
            )
        self.model = model
        self.tools: Mapping[str, Tool] = {}
        registry: dict[str, Tool] = {}
        for item in tools:
            wrapped = _as_tool(item)
            if wrapped.name in registry:
                raise InvalidArgumentError(
                    f"two tools are named {wrapped.name!r}; tool names must be unique", argument="tools"
                )
            registry[wrapped.name] = wrapped
        self.tools = registry
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.max_parallel_tools = max_parallel_tools
        self.tool_scheduler = tool_scheduler
        self.trim = trim
        self._specs = tuple(t.spec for t in registry.values())
        self.graph: CompiledGraph = (
            StateGraph({"messages": KeyStrategy.APPEND})
            .add_node("model", self._call_model, reduce=_model_update)
            .add_node("tools", self._call_tools, reduce=_tools_update)
            .add_edge(START, "model")
            .add_conditional_edges("model", _after_model, {"tools": "tools", "end": END})
            .add_edge("tools", "model")
            .compile(
                checkpointer=checkpointer,
                policy=policy or TurnPolicy(on_error="rewind"),
                on_cancel=on_cancel,
                on_unsafe_head=on_unsafe_head,
                multitask=multitask,
                on_error=on_error,
            )
        )

    # -- running -----------------------------------------------------------------------------------------------

    def stream(self, input: AgentInput, config: RunnableConfig | None = None) -> Observable[RunOutput]:
        """A cold Observable of one turn: ``StreamingOutput``s with the model's ``ChatChunk``s and the tools'
        ``ToolMessage``s as they come (a message's tool calls run concurrently: their ``ToolMessage``s come in the
        order the tools finish; the ``NodeOutput`` of ``tools`` and the history have them in call order), and a
        ``NodeOutput`` after each node.

        A turn that fails reaches the subscriber's ``on_error``: ``MaxIterationsError`` when the model asks for
        tools after its last allowed call, ``ThreadBusyError`` or ``RunInterruptedError`` (see ``multitask``),
        ``UnsafeHistoryError`` (with ``on_unsafe_head="error"``), ``CheckpointConflictError``, or the model's own
        error. A tool's failure does not fail the turn: it becomes an error ``ToolMessage`` the model reads.

        A turn whose model calls a tool made with ``requires_approval=True`` stops before the tools run: its last
        output is an ``InterruptOutput`` whose ``value`` is an ``ApprovalRequest``, and ``get_state(config).interrupt``
        says so until a ``Command(resume={call_id: Approve() | Edit(...) | Reject(...)})`` turn answers it.

        Args:
            input: the user's turn: its text, one message, or several messages — or a ``Command`` answering the
                thread's pending tool approval.
            config: the thread, scheduler and limits of the turn (the recursion limit is raised to fit
                ``max_iterations``).

        Raises:
            InvalidArgumentError: ``input`` holds no message, or the agent has a checkpointer and ``config`` names
                no thread.
            InvalidTypeError: ``input`` holds something that is not a message, or ``config`` is not a
                ``RunnableConfig``.
            UnsafeHistoryError: ``input``'s messages are not a valid request after a history that can take user
                input (an orphan tool message, an assistant message whose calls are not all answered): raised at
                once, before anything is read or stored.
        """
        return self.graph.stream(_turn_input(input), self._config(config))

    def invoke(self, input: AgentInput, config: RunnableConfig | None = None) -> AssistantMessage:
        """Run one turn to the end and return the model's final answer. Blocks until the turn ends. A turn that
        stopped for a tool approval returns the assistant message whose calls wait (its ``tool_calls``); the request
        is ``get_state(config).interrupt.value``.

        Args:
            input: as for ``stream``.
            config: as for ``stream``.

        Raises:
            InvalidArgumentError: as for ``stream``.
            InvalidTypeError: as for ``stream``.
            UnsafeHistoryError: as for ``stream``.
            DeadlockError: called on the event loop the turn's scheduler uses.
            Exception: whatever the turn failed with (see ``stream``): ``MaxIterationsError``, the model's error...
        """
        final = self.graph.invoke(_turn_input(input), self._config(config))
        answer = final["messages"][-1]
        assert isinstance(answer, AssistantMessage)
        return answer

    def astream(self, input: AgentInput, config: RunnableConfig | None = None) -> AsyncIterator[RunOutput]:
        """``stream`` for asyncio code: the turn's outputs as an async iterator, its work kept off the event loop
        (see ``CompiledGraph.astream``). Leaving the ``async for`` or cancelling the task cancels (and rewinds) the
        turn.

        Raises:
            InvalidArgumentError: as for ``stream``.
            InvalidTypeError: as for ``stream``.
            UnsafeHistoryError: as for ``stream``.
        """
        return self.graph.astream(_turn_input(input), self._config(config))

    async def ainvoke(self, input: AgentInput, config: RunnableConfig | None = None) -> AssistantMessage:
        """``invoke`` for asyncio code: await one turn, off the event loop, and return the model's final answer.
        Cancelling the awaiting task cancels (and rewinds) the turn.

        Raises:
            Exception: whatever the turn failed with (see ``stream``).
        """
        final = await self.graph.ainvoke(_turn_input(input), self._config(config))
        answer = final["messages"][-1]
        assert isinstance(answer, AssistantMessage)
        return answer

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's state; ``values["messages"]`` is its history.

        Args:
            config: names the thread (and, with ``checkpoint_id``, one of its checkpoints).

        Raises:
            InvalidArgumentError: the agent has no checkpointer, or ``config`` names no thread.
            CheckpointNotFoundError: ``config.checkpoint_id`` is not a checkpoint of the thread.
        """
        return self.graph.get_state(config)

    def _config(self, config: RunnableConfig | None) -> RunnableConfig:
        # A turn takes up to two steps per model call; make sure the recursion limit allows a full turn.
        if config is None:
            config = RunnableConfig()
        elif not isinstance(config, RunnableConfig):
            # Checked here, before reading its recursion limit, so the caller gets the graph's error, not an
            # AttributeError.
            raise InvalidTypeError(f"config must be a RunnableConfig, got {type(config).__name__}", argument="config")
        needed = 2 * self.max_iterations + 1
        return config if config.recursion_limit >= needed else config.model_copy(update={"recursion_limit": needed})

    # -- nodes -------------------------------------------------------------------------------------------------

    def _call_model(self, state: Mapping[str, Any], config: RunnableConfig) -> Observable[ChatChunk]:
        # The config, not RunInfo: a node that declares RunInfo may write, so its chunks take a lock each, and this
        # one streams every token.
        history: Sequence[Message] = state.get("messages", ())
        calls = _model_calls_this_turn(history)
        if calls >= self.max_iterations:
            raise MaxIterationsError(
                f"the model asked for tools again after its last allowed call (max_iterations={self.max_iterations})",
                max_iterations=self.max_iterations,
            )
        request: list[Message] = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        request.extend(history)
        if self.trim is not None:
            request = _trimmed(self.trim, request, prompted=bool(self.system_prompt), thread_id=config.thread_id)
        tools = self._specs if calls + 1 < self.max_iterations else ()
        stream = self.model.stream(request, tools)
        reporting = telemetry()
        if reporting is not None:  # a chat span per call (a model that traces its own calls is left as it is)
            stream = reporting.chat(stream, model=_model_name(self.model), messages=request)
        return stream

    def _call_tools(self, state: Mapping[str, Any], run: RunInfo) -> Observable[ToolMessage]:
        last = state["messages"][-1]
        assert isinstance(last, AssistantMessage) and last.tool_calls
        gated = tuple(
            call for call in last.tool_calls if (known := self.tools.get(call.name)) and known.requires_approval
        )
        decisions: Mapping[str, Approve | Edit | Reject] = {}
        reporting = telemetry()
        if gated:
            # The turn stops here until a human answers; resumed, this node runs again and gets the answer.
            request = ApprovalRequest(calls=gated)
            try:
                answer = interrupt(request)
            except NodeInterrupt:
                if reporting is not None:  # the wait shows on the node's span (the run ends "interrupted")
                    reporting.event("rxgraph.approval.requested", {"gen_ai.tool.call.id": [c.id for c in gated]})
                raise
            decisions = decisions_for(request, answer)
            if reporting is not None:
                answers = {
                    "gen_ai.tool.call.id": list(decisions),
                    "rxgraph.approval": [d.decision for d in decisions.values()],
                }
                reporting.event("rxgraph.approval.answered", answers)
        # Every call gets exactly one message, errors included; they are started in call order, at most
        # max_parallel_tools at a time, and emitted as they finish (_tools_update puts them back in call order).
        # The calls are handed to merge at once, not on the run's scheduler: a TestScheduler would add a tick.
        traced = (reporting, reporting.current_context()) if reporting is not None else None
        calls = rx.from_iterable(
            [self._decided(call, decisions.get(call.id), run, traced) for call in last.tool_calls],
            scheduler=ImmediateScheduler.singleton(),
        )
        return calls.pipe(ops.merge(max_concurrent=self.max_parallel_tools))

    def _decided(
        self, call: ToolCall, decision: Approve | Edit | Reject | None, run: RunInfo, traced: _Traced | None
    ) -> Observable[ToolMessage]:
        if isinstance(decision, Reject):
            reason = f"tool {call.name!r} was not run: {decision.reason}"
            _not_run(traced, call, "reject", "rejected", reason)
            return at_once(ToolMessage(tool_call_id=call.id, name=call.name, content=reason, is_error=True))
        approval = decision.decision if decision is not None else None
        if isinstance(decision, Edit):
            return self._run_tool(call.model_copy(update={"arguments": decision.arguments}), run, traced, approval)
        return self._run_tool(call, run, traced, approval)

    def _run_tool(
        self, call: ToolCall, run: RunInfo, traced: _Traced | None = None, approval: str | None = None
    ) -> Observable[ToolMessage]:
        def error(reason: str) -> ToolMessage:
            return ToolMessage(tool_call_id=call.id, name=call.name, content=reason, is_error=True)

        chosen = self.tools.get(call.name)
        if chosen is None:
            known = ", ".join(sorted(self.tools)) or "none"
            reason = f"unknown tool {call.name!r}; the tools are: {known}"
            _not_run(traced, call, approval, "unknown_tool", reason)
            return at_once(error(reason))
        try:
            arguments = chosen.parse_arguments(call.arguments)
        except ToolInputError as problem:
            reason = f"tool {call.name!r} was not run: {problem}"
            _not_run(traced, call, approval, type(problem).__qualname__, reason)
            return at_once(error(reason))

        def to_message(value: Any) -> ToolMessage:
            if value is _NO_RESULT:
                return error(f"tool {call.name!r} completed without a result")
            if isinstance(value, ToolMessage):  # a tool that says itself whether it failed (a LangChain tool's answer)
                return ToolMessage(tool_call_id=call.id, name=call.name, content=value.content, is_error=value.is_error)
            return ToolMessage(tool_call_id=call.id, name=call.name, content=_as_text(value))

        def failed(exception: Exception, _: Observable[ToolMessage]) -> Observable[ToolMessage]:
            return at_once(error(f"tool {call.name!r} failed: {type(exception).__name__}: {exception}"))

        result = chosen.run(run, self.tool_scheduler, **arguments)
        if traced is not None:  # a span per call, a child of the tools node's, whatever thread runs the tool
            reporting, parent = traced
            result = reporting.tool(
                result, name=call.name, call_id=call.id, arguments=call.arguments, parent=parent, approval=approval
            )
        return result.pipe(ops.default_if_empty(_NO_RESULT), ops.map(to_message), ops.catch(failed))


def _not_run(traced: _Traced | None, call: ToolCall, approval: str | None, error_type: str, reason: str) -> None:
    """A call that is not run still shows in the trace (when traced), as a span that ends at once with the error."""
    if traced is not None:
        reporting, parent = traced
        reporting.tool_not_run(
            name=call.name,
            call_id=call.id,
            arguments=call.arguments,
            parent=parent,
            approval=approval,
            error_type=error_type,
            reason=reason,
        )


def _as_tool(item: Any) -> Tool:
    """``item`` as a ``Tool``: itself, a LangChain tool converted, or a function made one with ``tool``."""
    if isinstance(item, Tool):
        return item
    # A LangChain tool can only exist once langchain_core is imported: rxgraph never imports it for this check.
    langchain_tools = sys.modules.get("langchain_core.tools")
    if langchain_tools is not None and isinstance(item, langchain_tools.BaseTool):
        from ..tools.langchain import from_langchain_tool

        return from_langchain_tool(item)
    return tool(item)


def _model_name(model: ChatModel) -> str:
    """What a chat span calls a model: its ``model`` (or ``model_name``) when that is a string, else its type."""
    for attribute in ("model", "model_name"):
        name = getattr(model, attribute, None)
        if isinstance(name, str) and name:
            return name
    return type(model).__name__


def _trimmed(
    trim: Callable[[list[Message]], Sequence[Message]],
    request: list[Message],
    *,
    prompted: bool,
    thread_id: str | None,
) -> list[Message]:
    """What ``trim`` leaves of ``request`` (the system prompt first when ``prompted``, then the history), with the
    system prompt put back first if it was dropped, checked before it is sent."""
    result = trim(list(request))  # a copy: the trim may change its list, never the history
    if isinstance(result, str) or not isinstance(result, Sequence):
        raise InvalidTypeError(f"trim must return a list of messages, got {type(result).__name__}", argument="trim")
    trimmed = list(result)
    for index, message in enumerate(trimmed):
        if not isinstance(message, UserMessage | SystemMessage | AssistantMessage | ToolMessage):
            raise InvalidTypeError(
                f"trim returned something that is not an rxgraph message at index {index}: {type(message).__name__}",
                argument="trim",
            )
    if prompted and (not trimmed or trimmed[0] != request[0]):
        trimmed.insert(0, request[0])
    if request and (not trimmed or trimmed[-1] != request[-1]):
        raise InvalidArgumentError(
            f"trim dropped the newest message of the history (a {request[-1].role} message); the model would not "
            "see what it has to answer",
            argument="trim",
        )
    violations = request_violations(trimmed)
    if violations:
        lines = "\n".join(str(v) for v in violations)
        raise UnsafeHistoryError(
            f"the request that trim returned is not a valid request body, so it was not sent "
            f"(thread {thread_id!r}):\n{lines}",
            violations=violations,
            thread_id=thread_id,
        )
    return trimmed


def _model_update(chunks: Sequence[ChatChunk]) -> dict[str, Any]:
    return {"messages": merge_chunks(chunks)}


def _tools_update(chunks: Sequence[ToolMessage], state: Mapping[str, Any]) -> dict[str, Any]:
    """The tool messages in the order of the calls they answer (they arrive in the order the tools finished)."""
    last = state["messages"][-1]
    by_call = {message.tool_call_id: message for message in chunks}  # call ids are unique within a message
    ordered = [by_call.pop(call.id) for call in last.tool_calls if call.id in by_call]
    return {"messages": [*ordered, *by_call.values()]}


def _after_model(state: Mapping[str, Any]) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AssistantMessage) and last.tool_calls else "end"


def _model_calls_this_turn(history: Sequence[Message]) -> int:
    calls = 0
    for message in reversed(history):
        if isinstance(message, UserMessage):
            break
        if isinstance(message, AssistantMessage):
            calls += 1
    return calls


def _turn_input(input: AgentInput) -> Mapping[str, Any] | Command[Any]:
    return input if isinstance(input, Command) else {"messages": _user_messages(input)}


def _user_messages(input: str | Message | Sequence[Message]) -> list[Message]:
    if isinstance(input, str):
        return [UserMessage(content=input)]
    messages: list[Any]
    if isinstance(input, UserMessage | SystemMessage | AssistantMessage | ToolMessage):
        messages = [input]
    else:
        messages = list(input)
    for index, message in enumerate(messages):
        if not isinstance(message, UserMessage | SystemMessage | AssistantMessage | ToolMessage):
            raise InvalidTypeError(
                f"agent input #{index}: expected an rxgraph message, got {type(message).__name__}", argument="input"
            )
    if not messages:
        raise InvalidArgumentError("an agent turn needs at least one message", argument="input")
    # Checked before anything reads the thread: the turn's messages follow a safe history, so they must make a valid
    # request on their own. An orphan tool message or unanswered calls would be stored and, once a model accepted
    # them, leave no checkpoint of the thread that could take another turn.
    violations = request_violations(messages)
    if violations:
        lines = "\n".join(str(violation) for violation in violations)
        raise UnsafeHistoryError(
            f"agent input breaks the chat-API sequence rules; nothing was stored or sent:\n{lines}\n"
            "A turn's messages are appended to a history that can take user input: start them with a user or "
            "system message, and answer each tool call of an assistant message with one tool message right after it",
            violations=violations,
        )
    return messages


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if value is None:
        return ""
    return json.dumps(value, default=str, ensure_ascii=False)
