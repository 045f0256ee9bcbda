"""``to_openai`` checked against the ``openai`` package's own request types, strictly (unknown keys refused); the wire
round trip ``to_openai(from_openai(x)) == x`` for every message shape those types allow (content parts included),
and a refusal for each one rxgraph cannot keep; the SDK's own objects read; the message fields through the
checkpoint serde; and every wire shape stored on every saver (memory, SQLite, PostgreSQL) and sent back as it came."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import messages._part_strategies as parts
import pytest
from conftest import SAVER_KINDS
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageParam
from openai.types.chat.chat_completion_store_message import ChatCompletionStoreMessage
from pydantic import ConfigDict, TypeAdapter, ValidationError

from rxgraph import Checkpoint, CheckpointSaver, FrozenList, MemorySaver
from rxgraph.checkpoint import PostgresSaver, Serde, SqliteSaver
from rxgraph.errors import MessageFormatError
from rxgraph.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
    from_openai,
    to_openai,
)

_STRICT = TypeAdapter(list[ChatCompletionMessageParam], config=ConfigDict(extra="forbid"))


def _materialize(value: Any) -> Any:
    """Pydantic validates ``Iterable[...]`` fields (content parts, tool calls) lazily: walk them so their items are
    validated too."""
    if isinstance(value, Mapping):
        return {key: _materialize(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_materialize(item) for item in value]
    if isinstance(value, Iterator):
        return [_materialize(item) for item in value]
    return value


def strict_check(wire: list[dict[str, Any]]) -> None:
    """Raise ``ValidationError`` unless ``wire`` is a list of the API's request messages, with no key they lack."""
    _materialize(_STRICT.validate_python(wire))


# -- the checker itself can fail -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        {"role": "tool", "tool_call_id": "c1", "content": "x", "name": "f"},  # what to_openai used to send
        {"role": "narrator", "content": "x"},
        {"role": "user", "content": "x", "is_error": False},
        # Inside the lazily validated tool calls:
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}", "x": 1}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "a", "extra": 1}]},
    ],
)
def test_the_strict_check_refuses_what_the_types_do_not_have(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        strict_check([entry])


# -- to_openai passes it ---------------------------------------------------------------------------------------


def test_every_kind_of_message_passes_the_strict_check() -> None:
    usage = TokenUsage(prompt_tokens=9, completion_tokens=3, total_tokens=12)
    wire = to_openai(
        [
            SystemMessage(content="s", name="policy"),
            SystemMessage(role="developer", content="d"),
            UserMessage(content="u", name="alice"),
            AssistantMessage(
                tool_calls=(ToolCall(id="c1", name="f", arguments="{"),), name="helper", usage=usage, refusal=None
            ),
            ToolMessage(tool_call_id="c1", content="r", name="f", is_error=True),
            AssistantMessage(refusal="no"),
            AssistantMessage(),
        ]
    )
    strict_check(wire)
    assert wire[4] == {"role": "tool", "tool_call_id": "c1", "content": "r"}


# Text-only histories (the parts' own are in ``parts.histories``).
_texts, _names, _usages = parts.texts, parts.names, parts.usages


def _assistant(ids: Iterator[int]) -> st.SearchStrategy[AssistantMessage]:
    return parts.assistants(ids, contents=_texts)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Histories that follow the sequence rules: turns of a user message, then assistant messages whose calls are
    all answered, in any order."""
    ids = iter(range(10**6))
    history: list[Message] = []
    if draw(st.booleans()):
        history.append(
            SystemMessage(role=draw(st.sampled_from(["system", "developer"])), content=draw(_texts), name=draw(_names))
        )
    for _ in range(draw(st.integers(0, 3))):
        history.append(UserMessage(content=draw(_texts), name=draw(_names)))
        for _ in range(draw(st.integers(0, 2))):
            answer = draw(_assistant(ids))
            history.append(answer)
            calls = draw(st.permutations(answer.tool_calls))
            history.extend(
                ToolMessage(tool_call_id=call.id, content=draw(_texts), name=draw(_names), is_error=draw(st.booleans()))
                for call in calls
            )
        history.append(AssistantMessage(content=draw(_texts), usage=draw(_usages)))
    return history


def _as_read_back(message: Message) -> Message:
    """What ``from_openai(to_openai(...))`` gives back: everything but what the wire has no field for."""
    if isinstance(message, ToolMessage):
        return message.model_copy(update={"name": None, "is_error": False})
    if isinstance(message, AssistantMessage):
        return message.model_copy(update={"usage": None})
    return message


@settings(max_examples=150, deadline=None)
@given(histories())
def test_any_history_is_a_valid_request_and_reads_back(history: list[Message]) -> None:
    wire = to_openai(history)
    strict_check(wire)
    assert from_openai(wire) == [_as_read_back(message) for message in history]


# -- new fields through the checkpoint serde -------------------------------------------------------------------


def _strictly_equal(expected: Iterable[Message], actual: Iterable[Any]) -> None:
    for e, a in zip(expected, actual, strict=True):
        assert type(a) is type(e) and a == e
        if isinstance(e, AssistantMessage):
            assert type(a.usage) is type(e.usage)


@settings(max_examples=50, deadline=None)
@given(histories())
def test_every_field_reads_back_from_the_serde(history: list[Message]) -> None:
    serde = Serde()
    _strictly_equal(history, serde.loads(serde.dumps(history)))


def test_a_message_stored_before_the_new_fields_reads_back_with_their_defaults() -> None:
    serde = Serde()
    old = (
        '[{"$type":"rxgraph.SystemMessage","data":{"role":"system","content":"s"}},'
        '{"$type":"rxgraph.UserMessage","data":{"role":"user","content":"u"}},'
        '{"$type":"rxgraph.AssistantMessage","data":{"role":"assistant","content":"a","tool_calls":[]}}]'
    )
    assert list(serde.loads(old)) == [
        SystemMessage(content="s"),
        UserMessage(content="u"),
        AssistantMessage(content="a"),
    ]


# -- every wire shape round-trips exactly --------------------------------------------------------------------------

_CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
_PNG = "data:image/png;base64,iVBORw0KGgo="
_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="
_PDF = "data:application/pdf;base64,JVBERi0xLjQK"

WIRE_SHAPES: dict[str, dict[str, Any]] = {
    # string content, every role
    "system": {"role": "system", "content": "be brief"},
    "system named": {"role": "system", "content": "be brief", "name": "policy"},
    "developer": {"role": "developer", "content": "be brief", "name": "ops"},
    "user": {"role": "user", "content": "hi"},
    "user named": {"role": "user", "content": "hi", "name": "alice"},
    "user empty": {"role": "user", "content": ""},
    "assistant": {"role": "assistant", "content": "hello"},
    "assistant named": {"role": "assistant", "content": "hello", "name": "helper"},
    "assistant empty": {"role": "assistant", "content": ""},
    "tool": {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    # lists of text parts: kept as lists, not joined
    "system parts": {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    "developer parts": {"role": "developer", "content": [{"type": "text", "text": "a"}]},
    "user text parts": {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    "assistant text parts": {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
    "tool parts": {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "r"}]},
    "empty list": {"role": "user", "content": []},
    # images, audio, files
    "image by URL": {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}]},
    "image by data URL": {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _PNG}}]},
    **{
        f"image at detail {detail}": {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": _PNG, "detail": detail}},
            ],
        }
        for detail in ("auto", "low", "high", "original")
    },
    **{
        f"{format_} audio": {
            "role": "user",
            "content": [{"type": "input_audio", "input_audio": {"data": _WAV, "format": format_}}],
        }
        for format_ in ("wav", "mp3")
    },
    "file by id": {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]},
    "file by data": {"role": "user", "content": [{"type": "file", "file": {"file_data": _PDF, "filename": "a.pdf"}}]},
    "file by data, no name": {"role": "user", "content": [{"type": "file", "file": {"file_data": _PDF}}]},
    "file by id and name": {
        "role": "user",
        "content": [{"type": "file", "file": {"file_id": "file-abc", "filename": "a.pdf"}}],
    },
    "every user part": {
        "role": "user",
        "name": "alice",
        "content": [
            {"type": "text", "text": "compare"},
            {"type": "image_url", "image_url": {"url": "https://x.org/a.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": _WAV, "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-abc"}},
            {"type": "text", "text": "please"},
        ],
    },
    "cache breakpoints": {
        "role": "user",
        "content": [
            {"type": "text", "text": "long prefix", "prompt_cache_breakpoint": {"mode": "explicit"}},
            {
                "type": "image_url",
                "image_url": {"url": _PNG},
                "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"},
            },
            {
                "type": "input_audio",
                "input_audio": {"data": _WAV, "format": "mp3"},
                "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"},
            },
            {"type": "file", "file": {"file_id": "f"}, "prompt_cache_breakpoint": {"mode": "explicit"}},
        ],
    },
    # refusals, tool calls, null content
    "refusal alone": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    "refusal with text": {"role": "assistant", "content": "Partly.", "refusal": "no more"},
    "refusal parts": {
        "role": "assistant",
        "content": [{"type": "text", "text": "Partly:"}, {"type": "refusal", "refusal": "no more"}],
    },
    "null content": {"role": "assistant", "content": None},
    "tool calls": {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    "tool calls with text": {"role": "assistant", "content": "Checking.", "tool_calls": [_CALL]},
    "tool calls with parts": {
        "role": "assistant",
        "content": [{"type": "text", "text": "Checking."}],
        "tool_calls": [_CALL, {**_CALL, "id": "call_2", "function": {"name": "time", "arguments": "{"}}],
        "name": "helper",
    },
}


def test_every_wire_shape_passes_the_strict_check() -> None:
    strict_check(list(WIRE_SHAPES.values()))


@pytest.mark.parametrize("shape", list(WIRE_SHAPES))
def test_every_wire_shape_round_trips_exactly(shape: str) -> None:
    entry = WIRE_SHAPES[shape]
    messages = from_openai([entry])
    assert to_openai(messages) == [entry]
    # Through the checkpoint serde too, the message comes back the same.
    serde = Serde()
    assert list(serde.loads(serde.dumps(messages))) == messages


# What the wire says two ways and rxgraph one: converted, as the module's table says.
CONVERTED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "no content key": (
        {"role": "assistant", "tool_calls": [_CALL]},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    ),
    "empty text with calls": (
        {"role": "assistant", "content": "", "tool_calls": [_CALL]},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    ),
    "null optional keys": (
        {"role": "assistant", "content": "hi", "refusal": None, "audio": None, "function_call": None},
        {"role": "assistant", "content": "hi"},
    ),
    "no tool calls": (
        {"role": "assistant", "content": "hi", "tool_calls": []},
        {"role": "assistant", "content": "hi"},
    ),
}


@pytest.mark.parametrize("case", list(CONVERTED))
def test_what_the_wire_says_two_ways_is_sent_one_way(case: str) -> None:
    entry, sent = CONVERTED[case]
    strict_check([entry, sent])
    assert to_openai(from_openai([entry])) == [sent]


def test_parts_and_tool_calls_in_any_iterable_the_types_allow_are_read_and_sent_as_lists() -> None:
    # The request types declare both Iterable: a typed dict may hold a tuple, or a generator the SDK would read once.
    text, image = {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": _PNG}}
    second = {**_CALL, "id": "call_2"}
    entries: list[Any] = [
        {"role": "user", "content": (text, image)},
        {"role": "assistant", "content": None, "tool_calls": (_CALL, second)},
        {"role": "tool", "tool_call_id": "call_1", "content": iter([text])},
        {"role": "tool", "tool_call_id": "call_2", "content": "r"},
        {"role": "assistant", "content": (part for part in [text]), "tool_calls": (call for call in [_CALL])},
    ]
    sent = [
        {"role": "user", "content": [text, image]},
        {"role": "assistant", "content": None, "tool_calls": [_CALL, second]},
        {"role": "tool", "tool_call_id": "call_1", "content": [text]},
        {"role": "tool", "tool_call_id": "call_2", "content": "r"},
        {"role": "assistant", "content": [text], "tool_calls": [_CALL]},
    ]
    strict_check([*entries[:2], *sent])
    assert to_openai(from_openai(entries)) == sent
    # What is not a list of them is still refused, by what it is.
    for entry, match in [
        ({"role": "assistant", "content": None, "tool_calls": "call_1"}, "'tool_calls' must be a list, got str"),
        ({"role": "assistant", "content": None, "tool_calls": _CALL}, "'tool_calls' must be a list, got dict"),
        ({"role": "user", "content": b"hi"}, "'content' must be a string, a list of parts or null, got bytes"),
        ({"role": "user", "content": 7}, "got int"),
    ]:
        with pytest.raises(MessageFormatError, match=match):
            from_openai([entry])


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "legacy function role": ({"role": "function", "name": "f", "content": "x"}, "'function' role"),
    "legacy function_call": (
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        "'function_call' cannot be kept",
    ),
    "assistant audio answer": ({"role": "assistant", "content": None, "audio": {"id": "audio_1"}}, "'audio'"),
    "custom tool call": (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}],
        },
        "type 'custom'",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_rxgraph_cannot_keep_is_refused_not_dropped(case: str) -> None:
    entry, match = REFUSED[case]
    strict_check([entry])  # a shape the wire types allow
    with pytest.raises(MessageFormatError, match=r"^message 1: .*" + match.replace("(", r"\(")) as caught:
        from_openai([{"role": "user", "content": "hi"}, entry])
    assert caught.value.index == 1


# Parts another role cannot hold: the API's types refuse them, and so does from_openai, naming the part.
@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": _PNG}}]},
            "content part 0 is an image",
        ),
        (
            {
                "role": "developer",
                "content": [{"type": "text", "text": "a"}, {"type": "file", "file": {"file_id": "f"}}],
            },
            "content part 1 is a file",
        ),
        (
            {
                "role": "tool",
                "tool_call_id": "c",
                "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}],
            },
            "content part 0 is audio",
        ),
        (
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": _PNG}}]},
            "content part 0 is an image",
        ),
        ({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}, "content part 0 is a refusal"),
    ],
)
def test_a_part_its_role_cannot_hold_is_refused_as_the_api_refuses_it(entry: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError):
        strict_check([entry])
    with pytest.raises(MessageFormatError, match=match) as caught:
        from_openai([entry])
    assert caught.value.index == 0


# -- the SDK's own objects ---------------------------------------------------------------------------------------


def test_the_sdks_response_message_is_read_as_its_json() -> None:
    completion = ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "refusal": None,
                        "annotations": [],
                        "tool_calls": [_CALL],
                    },
                }
            ],
        }
    )
    message = completion.choices[0].message
    assert isinstance(message, ChatCompletionMessage)
    [read] = from_openai([message])
    assert read == AssistantMessage(tool_calls=(ToolCall(id="call_1", name="weather", arguments='{"city": "Paris"}'),))
    assert to_openai([read]) == [{"role": "assistant", "content": None, "tool_calls": [_CALL]}]
    # Built in code, with only some fields set; mixed with dicts and rxgraph messages.
    built = ChatCompletionMessage(role="assistant", content="hi")
    user = UserMessage(content="hello")
    assert from_openai([{"role": "user", "content": "hello"}, built, user]) == [
        user,
        AssistantMessage(content="hi"),
        user,
    ]


def test_a_stored_completions_message_keeps_the_parts_it_was_sent_with() -> None:
    # What the SDK gives for the messages of a stored completion (client.chat.completions.messages.list): its content
    # is the text alone, content_parts the parts, image included, as they were sent.
    sent = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": _PNG, "detail": "low"}},
    ]
    stored = ChatCompletionStoreMessage.construct(id="m1", role="user", content="What is this?", content_parts=sent)
    plain = ChatCompletionStoreMessage.construct(id="m2", role="assistant", content="A pixel.", content_parts=None)
    assert from_openai([stored, plain]) == [
        UserMessage(content=(TextPart(text="What is this?"), ImagePart(url=_PNG, detail="low"))),
        AssistantMessage(content="A pixel."),
    ]
    assert to_openai(from_openai([stored]))[0]["content"] == sent


def test_the_sdks_audio_answer_is_refused() -> None:
    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "audio": {"id": "audio_1", "data": "", "expires_at": 0, "transcript": "hi"},
        }
    )
    with pytest.raises(MessageFormatError, match="'audio'"):
        from_openai([message])


# -- histories with parts ----------------------------------------------------------------------------------------


def _as_sent(message: Message) -> Message:
    """What ``from_openai(to_openai(...))`` gives back: what the wire has a field for."""
    message = _as_read_back(message)
    if isinstance(message, AssistantMessage) and message.content is None and message.tool_calls:
        return message.model_copy(update={"content": ""})
    return message


@settings(max_examples=150, deadline=None)
@given(parts.histories())
def test_any_history_with_parts_is_a_valid_request_and_reads_back(history: list[Message]) -> None:
    wire = to_openai(history)
    strict_check(wire)
    assert from_openai(wire) == [_as_sent(message) for message in history]
    assert to_openai(from_openai(wire)) == wire


@settings(max_examples=50, deadline=None)
@given(parts.histories())
def test_parts_read_back_from_the_serde(history: list[Message]) -> None:
    serde = Serde()
    _strictly_equal(history, serde.loads(serde.dumps(history)))


# -- every wire shape, stored on every saver -------------------------------------------------------------------------


@pytest.fixture(params=SAVER_KINDS)
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], CheckpointSaver]]:
    """Opens a saver on one store each time it is called: the same ``MemorySaver``, or a new saver on the same
    SQLite file or PostgreSQL schema (nothing cached); closes them all when the test ends."""
    opened: list[Any] = []
    memory = MemorySaver()

    def open_saver() -> CheckpointSaver:
        if request.param == "memory":
            return memory
        if request.param == "sqlite":
            opened.append(SqliteSaver(tmp_path / "wire.db"))
        else:
            dsn, schema = request.getfixturevalue("postgres_server"), request.getfixturevalue("postgres_schema")
            opened.append(PostgresSaver(dsn, schema=schema, max_connections=2))
        saver: CheckpointSaver = opened[-1]
        return saver

    yield open_saver
    for saver in opened:
        saver.close()


def test_every_wire_shape_round_trips_exactly_through_every_saver(reopen: Callable[[], CheckpointSaver]) -> None:
    wire = [*WIRE_SHAPES.values(), *(entry for entry, _ in CONVERTED.values())]
    sent = [*WIRE_SHAPES.values(), *(converted for _, converted in CONVERTED.values())]
    values = {"messages": FrozenList(from_openai(wire))}
    reopen().put(
        Checkpoint(id="c1", thread_id="t", seq=1, parent_id=None, values=values, run_id="r", source="input"),
        expected_head=None,
    )
    stored = reopen().get("t")
    assert stored is not None
    assert to_openai(list(stored.values["messages"])) == sent
