"""``estimate_tokens``: a message's size in tokens, estimated without a tokenizer, content parts included."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from ..errors import InvalidTypeError
from ._parts import AudioPart, FilePart, ImagePart, RefusalPart, TextPart
from ._types import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

__all__ = ["estimate_tokens"]

MESSAGE_TOKENS = 3
"""What a message costs besides its content (its role, the separators): OpenAI counts 3."""
IMAGE_TOKENS = {"low": 85}
"""An image at ``detail="low"``: OpenAI's fixed 85 tokens."""
IMAGE_TOKENS_DEFAULT = 765
"""Any other image: OpenAI's count for a 1024x1024 image at high detail (85 + 4 tiles of 170)."""
AUDIO_TOKENS_PER_SECOND = 10
"""OpenAI's audio input: one token per 100 ms."""
FILE_ID_TOKENS = 1000
"""A file sent by id, whose size is not known here: about a page."""
_BYTES_PER_SECOND = {"wav": 32_000, "mp3": 16_000}  # 16 kHz 16-bit mono PCM; MP3 at 128 kbit/s


def _approximate(text: str) -> int:
    return -(-len(text) // 4)  # about 4 characters a token, rounded up


def estimate_tokens(message: Message, *, text_tokens: Callable[[str], int] | None = None) -> int:
    """An estimate of the tokens ``message`` takes in a request, for ``trim_messages(token_counter=...)``.

    The rule, part by part:

    - text (a string content, a text or refusal part, the ``refusal``, the ``name``, a tool call's name and
      arguments): ``text_tokens(text)``, by default ``ceil(len(text) / 4)``;
    - an image: 85 tokens at ``detail="low"``, 765 otherwise (OpenAI's count for a 1024x1024 image at high detail;
      a larger image costs more, a smaller one less);
    - audio: 10 tokens a second (OpenAI's rate), the length told from the data's size: a WAV's own header gives
      its byte rate (16 kHz 16-bit mono, 32,000 bytes a second, when it cannot be read), an MP3 is taken at
      128 kbit/s;
    - a file: one token per 4 bytes of ``file_data`` (decoded), or 1,000 for a file sent by ``file_id`` alone;
    - and 3 tokens per message (its role and separators).

    Give ``text_tokens`` a real tokenizer's count (tiktoken's ``lambda s: len(encoding.encode(s))``) for text counted
    exactly; the parts keep their estimates.

    Raises:
        InvalidTypeError: ``message`` is not an rxgraph message.
    """
    if not isinstance(message, SystemMessage | UserMessage | AssistantMessage | ToolMessage):
        raise InvalidTypeError(f"expected an rxgraph message, got {type(message).__name__}", argument="message")
    count = text_tokens or _approximate
    tokens = MESSAGE_TOKENS
    content = message.content
    if type(content) is str:
        tokens += count(content)
    elif content:
        tokens += sum(_part_tokens(part, count) for part in content)
    if message.name:
        tokens += count(message.name)
    if isinstance(message, AssistantMessage):
        if message.refusal:
            tokens += count(message.refusal)
        for call in message.tool_calls:
            tokens += count(call.name) + count(call.arguments)
    return tokens


def _part_tokens(part: object, count: Callable[[str], int]) -> int:
    kind = type(part)
    if kind is TextPart:
        assert isinstance(part, TextPart)
        return count(part.text)
    if kind is ImagePart:
        assert isinstance(part, ImagePart)
        return IMAGE_TOKENS.get(part.detail or "", IMAGE_TOKENS_DEFAULT)
    if kind is AudioPart:
        assert isinstance(part, AudioPart)
        rate = (_wav_byte_rate(part.data) if part.format == "wav" else None) or _BYTES_PER_SECOND[part.format]
        return -(-_decoded_size(part.data) * AUDIO_TOKENS_PER_SECOND // rate)
    if kind is FilePart:
        assert isinstance(part, FilePart)
        if part.file_data is None:
            return FILE_ID_TOKENS
        return -(-_decoded_size(part.file_data.partition(",")[2] or part.file_data) // 4)
    assert isinstance(part, RefusalPart)
    return count(part.refusal)


def _decoded_size(data: str) -> int:
    """The size of base64 ``data`` once decoded, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def _wav_byte_rate(data: str) -> int | None:
    """The byte rate a WAV file's header gives (the canonical 44-byte header), from its base64 text."""
    try:
        header = base64.b64decode(data[:48], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(header) < 32 or header[:4] != b"RIFF" or header[8:12] != b"WAVE":
        return None
    rate = int.from_bytes(header[28:32], "little")
    return rate or None
