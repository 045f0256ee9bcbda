"""``LangChainChatModel``: a ``ChatModel`` on any LangChain chat model (``langchain_core``'s ``BaseChatModel``), so
on every provider LangChain has — OpenAI, Anthropic, Gemini, Bedrock, Mistral, Ollama... Needs the ``langchain``
extra (and the provider's own package, ``langchain-openai`` say)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, messages_from_dict
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from ..agent._model import ChatChunk, ToolCallDelta, ToolSpec
from ..errors import InvalidTypeError, ModelAPIError
from ..messages._langchain import to_langchain
from ..messages._types import Message, TokenUsage
from ..otel._active import telemetry
from ..rx._awaitable import background_loop
from ._call import ModelCall

__all__ = ["LangChainChatModel", "to_langchain_messages"]

_FINISH_KEYS = ("finish_reason", "stop_reason", "done_reason", "stopReason")
"""Where providers put why the model stopped, in a chunk's ``response_metadata``: OpenAI, Gemini and Mistral say
``finish_reason``, Anthropic ``stop_reason``, Ollama ``done_reason``, Bedrock's Converse API ``stopReason``."""


class LangChainChatModel:
    """A ``ChatModel`` that streams its answers from a LangChain chat model.

    ::

        from langchain_anthropic import ChatAnthropic

        agent = ReactAgent(LangChainChatModel(ChatAnthropic(model="claude-sonnet-4-5")), tools=[get_weather])

    Each call to the model converts the history to LangChain messages (``to_langchain_messages``), binds the tools
    offered (``model.bind_tools``, with each ``ToolSpec`` in OpenAI's tool format, which every LangChain provider
    reads; a request without tools binds none) and streams the answer with ``astream``. Each message chunk becomes a
    ``ChatChunk``: its text (``chunk.text``: the text blocks of a list content; reasoning and other blocks are not
    kept), its ``tool_call_chunks`` as ``ToolCallDelta``s (index, id, name, arguments text), its refusal
    (``additional_kwargs["refusal"]``, where langchain-openai puts it), the reason the model stopped when the
    provider's ``response_metadata`` says it (see ``_FINISH_KEYS``), and the token usage (``usage_metadata``).
    LangChain adds up the usage of a stream's chunks (Anthropic reports the prompt's tokens first and the answer's
    last), so each chunk that reports some carries the total so far, and the ``AssistantMessage`` gets the whole
    call's. A model that does not stream answers in one piece, which becomes one ``ChatChunk``.

    The Observable is cold: nothing is sent until it is subscribed. The stream runs as a task on rxgraph's background
    event loop, whatever the scheduler or the thread it is subscribed on, and its chunks arrive on that loop's
    thread: LangChain's providers keep their async HTTP clients bound to the loop they were first used on, and share
    them between models (langchain-openai keeps one per ``base_url``), so a model must always stream on the same loop.
    **Disposing the subscription cancels the task**: the provider's call sees ``CancelledError`` where it waits, and
    closes its HTTP stream (for ``ChatOpenAI``, the server sees the client go away while it is still generating). A
    model with no async streaming of its own runs LangChain's default, its sync ``stream`` read on a thread of the
    loop's executor: disposing stops it at its next chunk.

    A failed call fails the Observable with ``ModelAPIError``: ``status_code`` and ``body`` when the provider's
    exception carries them (the ``openai`` and ``anthropic`` clients' do), ``provider``, and the exception as its
    ``__cause__``. The provider's own retries (``max_retries`` on the LangChain model) happen before that.

    An answer cut short by the server (its stream ended early, without an error) cannot be told from a whole one
    unless the provider reports a finish reason: with ``require_finish_reason=True`` a stream that ended without one
    fails with ``ModelAPIError`` instead of completing, so half an answer is never taken for a whole one (what
    ``OpenAIChatModel`` always does). Every major provider reports one; LangChain's fake models do not.

    Tools offered to a model whose ``bind_tools`` LangChain does not implement fail the stream with
    ``InvalidTypeError`` (``argument="model"``).

    Args:
        model: the LangChain chat model, configured as you want it (its model name, key, temperature, retries;
            ``ChatOpenAI(stream_usage=True)`` to have token usage from an OpenAI-compatible server).
        provider: the provider's name in errors and telemetry (``ModelAPIError.provider``, ``gen_ai.provider.name``);
            default: the model's package without its ``langchain_`` prefix (``openai`` for ``langchain_openai``).
        require_finish_reason: fail a stream that ends without a finish reason (see above); default False.
        **tool_options: passed to ``model.bind_tools`` with the tools: ``tool_choice``, ``parallel_tool_calls``,
            ``strict``... as the provider's ``bind_tools`` takes them (never used for a request without tools).

    Raises:
        InvalidTypeError: ``model`` is not a LangChain ``BaseChatModel``, or ``require_finish_reason`` not a bool.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        provider: str | None = None,
        require_finish_reason: bool = False,
        **tool_options: Any,
    ) -> None:
        if not isinstance(model, BaseChatModel):
            raise InvalidTypeError(
                f"model must be a LangChain chat model (langchain_core's BaseChatModel), got {type(model).__name__}",
                argument="model",
            )
        if type(require_finish_reason) is not bool:
            raise InvalidTypeError(
                f"require_finish_reason must be a bool, got {require_finish_reason!r}", argument="require_finish_reason"
            )
        self.model = model
        self.provider = provider or _package_of(model)
        self.require_finish_reason = require_finish_reason
        self.tool_options: Mapping[str, Any] = dict(tool_options)

    @property
    def model_name(self) -> str:
        """The name of the model the provider runs (``model_name``, ``model`` or ``model_id`` of the LangChain
        model), else the LangChain model's class name."""
        for attribute in ("model_name", "model", "model_id"):
            name = getattr(self.model, attribute, None)
            if isinstance(name, str) and name:
                return name
        return type(self.model).__name__

    def __repr__(self) -> str:
        return f"LangChainChatModel({type(self.model).__name__}, {self.model_name!r}, provider={self.provider!r})"

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Observable[ChatChunk]:
        """A cold Observable of the answer's chunks for one request (see the class)."""
        messages = list(messages)
        tools = list(tools)

        def subscribe(observer: abc.ObserverBase[ChatChunk], scheduler: abc.SchedulerBase | None = None) -> Any:
            reading = _Reading(observer)
            future = asyncio.run_coroutine_threadsafe(self._read(reading, messages, tools), background_loop())
            return Disposable(lambda: reading.cancel(future))

        reporting = telemetry()
        if reporting is None:
            return Observable(subscribe)
        # A chat span per subscription (rxgraph.otel.instrument), named for the provider's model.
        return reporting.chat(Observable(subscribe), model=self.model_name, messages=messages, provider=self.provider)

    async def _read(self, reading: _Reading, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        try:
            request = to_langchain_messages(messages)
            runnable: Any = self.model
            if tools:
                try:
                    runnable = self.model.bind_tools([spec.to_openai() for spec in tools], **self.tool_options)
                except NotImplementedError:
                    raise InvalidTypeError(
                        f"{type(self.model).__name__} cannot take tools: LangChain does not implement bind_tools for "
                        "it; use a chat model that supports tool calling, or an agent without tools",
                        argument="model",
                    ) from None
        except Exception as error:
            reading.fail(error)
            return
        pieces = runnable.astream(request).__aiter__()
        try:
            while True:
                try:
                    piece = await pieces.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as error:
                    reading.fail(self._error(error))
                    return
                try:
                    chunk = reading.chunk(piece)
                except Exception as error:
                    reading.fail(error)
                    return
                if chunk is not None and not reading.emit(chunk):
                    return
            reading.end(self._cut if self.require_finish_reason else None)
        finally:
            close = getattr(pieces, "aclose", None)
            if close is not None:
                await close()

    def _cut(self) -> ModelAPIError:
        return ModelAPIError(
            f"the {self.provider} chat model's stream ended without a finish reason, so the answer is incomplete; "
            "retry the request (or make the model with require_finish_reason=False if its provider reports none)",
            status_code=None,
            provider=self.provider,
        )

    def _error(self, error: Exception) -> ModelAPIError:
        """The provider's exception as a ``ModelAPIError`` (the exception is its cause)."""
        status = getattr(error, "status_code", None)
        failure = ModelAPIError(
            f"the {self.provider} chat model's call failed: {type(error).__name__}: {error}",
            status_code=status if isinstance(status, int) and not isinstance(status, bool) else None,
            body=getattr(error, "body", None),
            provider=self.provider,
        )
        failure.__cause__ = error
        return failure


def to_langchain_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """rxgraph messages as LangChain message objects (``HumanMessage``, ``AIMessage``...): what ``to_langchain``
    writes as dicts, built into the classes those dicts are the dumps of.

    Raises:
        InvalidTypeError: an element is not an rxgraph message.
    """
    return messages_from_dict([{"type": entry["type"], "data": entry} for entry in to_langchain(messages)])


class _Reading(ModelCall):
    """One subscription's stream: a ``ModelCall`` with what the chunks so far said (the usage added up, the tool
    calls' indexes)."""

    __slots__ = ("indexes", "usage")

    def __init__(self, observer: abc.ObserverBase[ChatChunk]) -> None:
        super().__init__(observer)
        self.usage: TokenUsage | None = None
        self.indexes: set[int] = set()

    def cancel(self, future: Any) -> None:
        self.cancelled = True  # first: a chunk read meanwhile is not emitted
        future.cancel()

    def chunk(self, piece: Any) -> ChatChunk | None:
        """A streamed ``AIMessageChunk`` — or the whole ``AIMessage`` of a model that does not stream — as a
        ``ChatChunk`` (None when it says nothing)."""
        if isinstance(piece, AIMessageChunk):
            content = str(piece.text)
            calls = tuple(self._delta(call) for call in piece.tool_call_chunks)
        elif isinstance(piece, AIMessage):  # a model that does not stream: its calls are whole
            content = str(piece.text)
            whole = [*piece.tool_calls, *piece.invalid_tool_calls]
            calls = tuple(self._delta({**call, "index": None}) for call in whole)
        else:
            raise InvalidTypeError(
                f"a LangChain chat model streamed a {type(piece).__name__}, not an AIMessageChunk", argument="model"
            )
        refusal = piece.additional_kwargs.get("refusal")
        finish_reason = _finish_reason(piece.response_metadata)
        usage = self._add_usage(piece.usage_metadata)
        if not (content or refusal or calls or finish_reason or usage):
            return None
        return ChatChunk(
            content=content,
            refusal=refusal if isinstance(refusal, str) else "",
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=usage,
        )

    def _delta(self, call: Mapping[str, Any]) -> ToolCallDelta:
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            # LangChain merges only the pieces that share an index: one without is a call of its own.
            index = max(self.indexes, default=-1) + 1
        self.indexes.add(index)
        arguments = call.get("args")
        if isinstance(arguments, Mapping):  # parsed already (a provider's whole call)
            arguments = json.dumps(dict(arguments), ensure_ascii=False)
        return ToolCallDelta(
            index=index, id=call.get("id") or None, name=call.get("name") or None, arguments=arguments or ""
        )

    def _add_usage(self, reported: Mapping[str, Any] | None) -> TokenUsage | None:
        """The usage so far, once this chunk's is added (None when this chunk reports none)."""
        if not reported:
            return None
        before = self.usage or TokenUsage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
        self.usage = TokenUsage(
            prompt_tokens=before.prompt_tokens + (reported.get("input_tokens") or 0),
            completion_tokens=before.completion_tokens + (reported.get("output_tokens") or 0),
            total_tokens=before.total_tokens + (reported.get("total_tokens") or 0),
        )
        return self.usage


def _finish_reason(metadata: Mapping[str, Any]) -> str | None:
    for key in _FINISH_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _package_of(model: BaseChatModel) -> str:
    """``openai`` for a ``langchain_openai`` model, ``anthropic`` for ``langchain_anthropic``'s... (``langchain`` for
    LangChain's own, another package's name as it is)."""
    package = type(model).__module__.partition(".")[0]
    if package in ("langchain_core", "langchain", "langchain_community"):
        return "langchain"
    return package.removeprefix("langchain_")
