"""Content parts: what a message holds besides plain text (images, audio, files), as the Chat Completions API has them.

A message's ``content`` is a string or a tuple of parts. Which parts a message may hold follows the API's request
types: a user message any of ``TextPart``, ``ImagePart``, ``AudioPart``, ``FilePart``; a system (or developer) or
tool message ``TextPart`` only; an assistant message ``TextPart`` and ``RefusalPart``. The parts are frozen pydantic
models, like the messages, and validate from dicts of their own fields, so ``UserMessage(content=[{"type": "text",
"text": "hi"}])`` works too (a tuple is stored). The wire form (``{"type": "image_url", "image_url": {...}}``) is
``to_openai``'s and ``from_openai``'s business.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AssistantPart",
    "AudioPart",
    "CacheBreakpoint",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "RefusalPart",
    "TextPart",
    "UserPart",
    "parts_text",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CacheBreakpoint(BaseModel):
    """The API's ``prompt_cache_breakpoint`` of a part: the exact end of a reusable prompt prefix. ``ttl`` is the
    least time the prefix is kept (``"30m"`` or ``"12h"``), or None for the request's own."""

    model_config = _FROZEN

    mode: Literal["explicit"] = "explicit"
    ttl: Literal["30m", "12h"] | None = None


class TextPart(BaseModel):
    """A piece of text. ``TextPart(text="hi")`` is ``{"type": "text", "text": "hi"}`` on the wire."""

    model_config = _FROZEN

    type: Literal["text"] = "text"
    text: str
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class RefusalPart(BaseModel):
    """A model's refusal, inside an assistant message's content: ``{"type": "refusal", "refusal": "..."}``."""

    model_config = _FROZEN

    type: Literal["refusal"] = "refusal"
    refusal: str


class ImagePart(BaseModel):
    """An image in a user message: ``url`` is an ``https:`` URL the provider fetches, or a ``data:`` URL that holds
    the image (``ImagePart.from_bytes`` makes one). ``detail`` is how closely the model looks at it (``"low"``,
    ``"high"``, ``"auto"``, ``"original"``), or None to leave it to the API; on the wire, ``{"type": "image_url",
    "image_url": {"url": ..., "detail": ...}}``."""

    model_config = _FROZEN

    type: Literal["image"] = "image"
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        media_type: str = "image/png",
        *,
        detail: Literal["auto", "low", "high", "original"] | None = None,
    ) -> ImagePart:
        """The image ``data`` (PNG, JPEG, GIF or WebP bytes) as a ``data:`` URL part."""
        return cls(url=f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}", detail=detail)


class AudioPart(BaseModel):
    """Audio in a user message: ``data`` is the recording in base64, ``format`` ``"wav"`` or ``"mp3"``; on the wire,
    ``{"type": "input_audio", "input_audio": {"data": ..., "format": ...}}``."""

    model_config = _FROZEN

    type: Literal["audio"] = "audio"
    data: str
    format: Literal["wav", "mp3"]
    prompt_cache_breakpoint: CacheBreakpoint | None = None

    @classmethod
    def from_bytes(cls, data: bytes, format: Literal["wav", "mp3"]) -> AudioPart:
        """The recording ``data`` (WAV or MP3 bytes) as a part."""
        return cls(data=base64.b64encode(data).decode("ascii"), format=format)


class FilePart(BaseModel):
    """A file in a user message (a PDF, say): by ``file_id`` (a file uploaded to the provider), or by ``file_data``
    (the file itself, as the API takes it: a ``data:`` URL such as ``data:application/pdf;base64,...``) with its
    ``filename``. At least one of ``file_id`` and ``file_data`` is needed. On the wire, ``{"type": "file", "file":
    {...}}`` with the fields that are set."""

    model_config = _FROZEN

    type: Literal["file"] = "file"
    file_id: str | None = None
    file_data: str | None = None
    filename: str | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None

    @model_validator(mode="after")
    def _names_a_file(self) -> FilePart:
        if self.file_id is None and self.file_data is None:
            raise ValueError("a file part needs a file_id or file_data")
        return self

    @classmethod
    def from_bytes(cls, data: bytes, filename: str, media_type: str = "application/pdf") -> FilePart:
        """The file ``data`` as a part that carries it, named ``filename``."""
        encoded = base64.b64encode(data).decode("ascii")
        return cls(file_data=f"data:{media_type};base64,{encoded}", filename=filename)


UserPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
"""A part of a user message's content."""

AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]
"""A part of an assistant message's content."""

ContentPart = Annotated[TextPart | RefusalPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
"""Any content part; validating a dict picks the class from its ``type`` key."""


def parts_text(content: str | tuple[BaseModel, ...] | None) -> str:
    """The text of a message's content: itself when it is a string, its text parts joined with ``"\\n"`` when it
    is parts (images, audio, files and refusals have none), ``""`` when there is none."""
    if type(content) is str:
        return content
    if not content:
        return ""
    return "\n".join(part.text for part in content if type(part) is TextPart)
