"""Graphs and agents over HTTP, with LangGraph's server API: LangGraph's official clients (``langgraph-sdk``,
``@langchain/langgraph-sdk``) work against it unmodified. Install the ``serve`` extra (Starlette, uvicorn,
sse-starlette).

``create_app(target)`` makes an ASGI app of a ``CompiledGraph`` or a ``ReactAgent`` with a checkpointer (the
assistant ``"agent"``), or of ``{name: target, ...}`` (an assistant of each name); each run streams its events as
LangGraph's server streams them. ``run_server(app)`` serves it with uvicorn, as ``rxgraph serve module:attr`` does.

A run that ends early — its client leaves its stream, it is cancelled, a newer run interrupts or rolls it back, the
server shuts down — is rewound: its thread gets its state from before the run back. ``create_app(auth=...)`` makes
each thread its creator's alone. By default the app answers only for this machine's host names, and refuses a body
that is not JSON, is too large, or was sent by a browser from another site. On a PostgreSQL database, several server
processes serve the same threads, runs and streams.

The documentation's Serving guide shows how to run it; its HTTP API page lists every route, event and error, and
what differs from LangGraph's server.
"""

from ._app import create_app
from ._server import run_server

__all__ = ["create_app", "run_server"]
