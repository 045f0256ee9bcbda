"""A run's stream writes the events that are there at once as one piece of the response's body, each encoded as
``sse_starlette``'s ``ServerSentEvent`` encodes it."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st
from sse_starlette import ServerSentEvent

from rxgraph.serve._api_runs import _sse, sse_bytes
from rxgraph.serve._runs import EventLog

# Any text, line breaks of every kind included (a run's JSON has none; a relayed or custom event might).
_TEXT = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(["a\nb", "a\r\nb", "a\rb", "\n", "", "{}"])


@given(st.integers(1, 10**6), _TEXT, _TEXT)
def test_an_event_is_encoded_as_server_sent_event_encodes_it(number: int, event: str, data: str) -> None:
    assert sse_bytes(number, event, data) == ServerSentEvent(data=data, event=event, id=str(number)).encode()


def test_events_appended_before_the_reader_runs_go_out_as_one_piece() -> None:
    async def scenario() -> list[bytes]:
        log = EventLog()
        pieces: list[bytes] = []

        async def read() -> None:
            async for piece in _sse(log.follow(0), None):
                pieces.append(piece)

        reader = asyncio.create_task(read())
        log.append("metadata", '{"run_id":"r"}')
        log.append("messages", "[1]")
        log.append("values", '{"a":1}')
        await asyncio.sleep(0)  # the reader takes the three at once
        log.append("values", '{"a":2}')
        log.end()
        await reader
        return pieces

    pieces = asyncio.run(scenario())
    assert pieces == [
        sse_bytes(1, "metadata", '{"run_id":"r"}')
        + sse_bytes(2, "messages", "[1]")
        + sse_bytes(3, "values", '{"a":1}'),
        sse_bytes(4, "values", '{"a":2}'),
    ]


def test_a_batch_keeps_only_the_modes_asked_for_and_sends_nothing_when_none_is_left() -> None:
    async def scenario() -> list[bytes]:
        log = EventLog()
        pieces: list[bytes] = []

        async def read() -> None:
            async for piece in _sse(log.follow(1), ["messages-tuple"]):
                pieces.append(piece)

        for event in ("metadata", "values", "messages", "updates", "messages|inner", "updates|inner", "error"):
            log.append(event, "{}")
        reader = asyncio.create_task(read())
        await asyncio.sleep(0)  # the reader takes the seven at once (the first is skipped: it asked after it)
        log.append("values", "{}")
        log.append("updates", "{}")
        await asyncio.sleep(0)  # a batch with nothing of the modes asked for: nothing is sent
        log.end()
        await reader
        return pieces

    assert asyncio.run(scenario()) == [
        sse_bytes(3, "messages", "{}") + sse_bytes(5, "messages|inner", "{}") + sse_bytes(7, "error", "{}")
    ]
