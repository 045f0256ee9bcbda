"""The official ``openai`` clients, of both kinds, for tests against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from rxgraph.rx._awaitable import background_loop

__all__ = ["Client", "make_client"]

Client = openai.OpenAI | openai.AsyncOpenAI


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Callable[..., Client]]:
    """Makes clients of one kind (the test runs once per kind), without retries; closes them when the test ends."""
    made: list[Client] = []

    def make(base_url: str, **options: Any) -> Client:
        options.setdefault("max_retries", 0)
        client: Client
        if request.param == "sync":
            client = openai.OpenAI(base_url=base_url, api_key="test", **options)
        else:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="test", **options)
        made.append(client)
        return client

    yield make
    for client in made:
        if isinstance(client, openai.OpenAI):
            client.close()
        else:  # its connections belong to the loop its requests ran on: rxgraph's background loop here
            asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(5)
