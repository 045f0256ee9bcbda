"""The official ``openai`` clients, of both kinds, for tests against a local OpenAI-compatible server; each kind also
with its ``chat.completions.create`` wrapped, as instrumentation wraps it (``OpenAIChatModel`` then sends every
request through the wrapper, and reads the chunks the client typed, instead of posting the request itself)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from rxgraph.rx._awaitable import background_loop

__all__ = ["Client", "make_client", "wrap_create"]

Client = openai.OpenAI | openai.AsyncOpenAI


def wrap_create(client: Client) -> list[dict[str, Any]]:
    """Wrap ``client.chat.completions.create`` as instrumentation does (a function of its own on the instance, which
    calls the original); the list it returns gets the keyword arguments of every call."""
    completions = client.chat.completions
    create = completions.create
    calls: list[dict[str, Any]] = []

    @functools.wraps(create)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return create(*args, **kwargs)

    completions.create = wrapped  # type: ignore[method-assign]
    return calls


@pytest.fixture(params=["sync", "async", "sync, wrapped create", "async, wrapped create"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Callable[..., Client]]:
    """Makes clients of one kind (the test runs once per kind), without retries; closes them when the test ends."""
    made: list[Client] = []

    def make(base_url: str, **options: Any) -> Client:
        options.setdefault("max_retries", 0)
        client: Client
        if request.param.startswith("sync"):
            client = openai.OpenAI(base_url=base_url, api_key="test", **options)
        else:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="test", **options)
        if request.param.endswith("wrapped create"):
            wrap_create(client)
        made.append(client)
        return client

    yield make
    for client in made:
        if isinstance(client, openai.OpenAI):
            client.close()
        else:  # its connections belong to the loop its requests ran on: rxgraph's background loop here
            asyncio.run_coroutine_threadsafe(client.close(), background_loop()).result(5)
