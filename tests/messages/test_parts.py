"""Content parts: which role holds which, ``.text``, the helpers that build parts, what ``estimate_tokens`` counts,
and that the sequence rules, ``trim_messages`` and ``message_ids`` take messages with parts."""

from __future__ import annotations

import base64
import io
import wave

import messages._part_strategies as strategies
import pydantic
import pytest
from hypothesis import given, settings

from rxgraph.errors import InvalidTypeError
from rxgraph.messages import (
    AssistantMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    check_request,
    estimate_tokens,
    is_ready_for_user_input,
    message_ids,
    to_langchain,
    trim_messages,
)

IMAGE = ImagePart(url="https://example.com/cat.png", detail="low")


def test_a_list_of_parts_is_stored_as_a_tuple_and_dicts_are_read_as_parts() -> None:
    message = UserMessage(content=[{"type": "text", "text": "look"}, IMAGE])  # type: ignore[list-item]
    assert message.content == (TextPart(text="look"), IMAGE)
    assert hash(message) == hash(UserMessage(content=(TextPart(text="look"), IMAGE)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: SystemMessage(content=[IMAGE]),
        lambda: ToolMessage(tool_call_id="c1", content=[IMAGE]),
        lambda: AssistantMessage(content=[IMAGE]),
        lambda: UserMessage(content=[RefusalPart(refusal="no")]),
        lambda: SystemMessage(content=[RefusalPart(refusal="no")]),
        lambda: UserMessage(content=None),
        lambda: FilePart(filename="a.pdf"),
        lambda: AudioPart(data="", format="ogg"),
        lambda: ImagePart(url="x", detail="max"),
        lambda: TextPart(text="x", extra=1),
    ],
)
def test_a_part_its_role_cannot_hold_or_a_malformed_part_is_refused(make: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        make()  # type: ignore[operator]


def test_text_is_the_text_of_any_content() -> None:
    assert UserMessage(content="hi").text == "hi"
    assert UserMessage(content=(TextPart(text="a"), IMAGE, TextPart(text="b"))).text == "a\nb"
    assert AssistantMessage(content=(TextPart(text="a"), RefusalPart(refusal="no"))).text == "a"
    assert AssistantMessage(content=None).text == "" and AssistantMessage().text == ""
    assert ToolMessage(tool_call_id="c", content=(TextPart(text="r"),)).text == "r"
    assert SystemMessage(content=()).text == ""


def test_the_helpers_make_data_urls_and_base64() -> None:
    image = ImagePart.from_bytes(b"\x89PNG", "image/png", detail="high")
    assert image.url == "data:image/png;base64," + base64.b64encode(b"\x89PNG").decode() and image.detail == "high"
    audio = AudioPart.from_bytes(b"RIFF", "wav")
    assert base64.b64decode(audio.data) == b"RIFF" and audio.format == "wav"
    pdf = FilePart.from_bytes(b"%PDF", "a.pdf")
    assert pdf.file_data == "data:application/pdf;base64,JVBERg==" and pdf.filename == "a.pdf" and pdf.file_id is None


def _wav(seconds: float, rate: int = 24_000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(rate * seconds))
    return buffer.getvalue()


def test_estimate_tokens_counts_every_part_by_its_rule() -> None:
    assert estimate_tokens(UserMessage(content="12345678")) == 3 + 2
    assert estimate_tokens(UserMessage(content=(TextPart(text="12345678"),))) == 3 + 2
    assert estimate_tokens(UserMessage(content=(ImagePart(url="x", detail="low"),))) == 3 + 85
    for detail in (None, "auto", "high", "original"):
        assert estimate_tokens(UserMessage(content=(ImagePart(url="x", detail=detail),))) == 3 + 765
    # Ten tokens a second: the length from the WAV's own byte rate (48,000 bytes a second here), MP3 at 128 kbit/s.
    assert estimate_tokens(UserMessage(content=(AudioPart.from_bytes(_wav(2.0), "wav"),))) == 3 + 21
    assert estimate_tokens(UserMessage(content=(AudioPart.from_bytes(b"\0" * 32_000, "mp3"),))) == 3 + 20
    assert estimate_tokens(UserMessage(content=(FilePart.from_bytes(b"x" * 400, "a.pdf"),))) == 3 + 100
    assert estimate_tokens(UserMessage(content=(FilePart(file_id="f"),))) == 3 + 1000
    calls = (ToolCall(id="c", name="abcd", arguments="12345678"),)
    assert (
        estimate_tokens(AssistantMessage(content=None, tool_calls=calls, refusal="1234", name="ab"))
        == 3 + 1 + 1 + 1 + 2
    )
    # A tokenizer of one's own counts the text; the parts keep their estimates.
    assert (
        estimate_tokens(UserMessage(content=(TextPart(text="a b c"), IMAGE)), text_tokens=lambda s: len(s.split()))
        == 3 + 3 + 85
    )
    with pytest.raises(InvalidTypeError):
        estimate_tokens({"role": "user", "content": "x"})  # type: ignore[arg-type]


def test_trim_messages_counts_parts_with_estimate_tokens() -> None:
    big = UserMessage(content=(TextPart(text="old"), ImagePart(url="x")))  # 3 + 1 + 765
    history: list[Message] = [
        SystemMessage(content=(TextPart(text="be brief"),)),  # 3 + 2
        big,
        AssistantMessage(content="ok"),  # 3 + 1
        UserMessage(content=(TextPart(text="now"), IMAGE)),  # 3 + 1 + 85
    ]
    assert trim_messages(history, max_tokens=94, token_counter=estimate_tokens) == [history[0], history[3]]
    assert trim_messages(history, max_tokens=5 + 769 + 4 + 89, token_counter=estimate_tokens) == history


@settings(max_examples=50, deadline=None)
@given(strategies.histories())
def test_histories_with_parts_follow_the_sequence_rules_and_get_ids(history: list[Message]) -> None:
    check_request(history)
    assert is_ready_for_user_input(history)
    ids = message_ids(history)
    assert len(ids) == len(history) and ids == [entry["id"] for entry in to_langchain(history)]


def test_a_message_id_tells_parts_apart() -> None:
    def last_id(message: Message) -> str:
        return message_ids([message])[0]

    text_only = last_id(UserMessage(content="look"))
    assert text_only == last_id(UserMessage(content="look"))
    with_image = last_id(UserMessage(content=(TextPart(text="look"), IMAGE)))
    other_image = last_id(UserMessage(content=(TextPart(text="look"), ImagePart(url=IMAGE.url))))
    assert len({text_only, with_image, other_image}) == 3
    # An answer with a text part is not its twin with a refusal part: what follows them has other ids.
    after = UserMessage(content="and?")
    text_answer = AssistantMessage(content=(TextPart(text="x"),))
    refusal_answer = AssistantMessage(content=(RefusalPart(refusal="x"),))
    assert message_ids([text_answer, after])[1] != message_ids([refusal_answer, after])[1]
