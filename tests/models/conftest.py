"""Fixtures of the model tests: the official ``openai`` clients, of both kinds, on a local server."""

from _openai_clients import Client, make_client

__all__ = ["Client", "make_client"]
