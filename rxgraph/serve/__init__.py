"""Graphs and agents over HTTP: each run streamed as server-sent events; a client that goes away cancels its run,
which is rewound. Install the ``serve`` extra (Starlette, uvicorn, sse-starlette).

``create_app(target)`` makes an ASGI app of a ``CompiledGraph`` or a ``ReactAgent`` (with a checkpointer);
``run_server(app)`` serves it with uvicorn, as ``rxgraph serve module:attr`` does.

**Start a run**: ``POST /threads/{thread_id}/runs/stream`` with a JSON body::

    {"input": ..., "context": {...}, "multitask": "enqueue" | "reject" | "interrupt"}
    {"resume": ..., "context": {...}}

``input`` is, for an agent, the user's text or a list of messages in the OpenAI Chat Completions wire format; for a
graph, an object of state keys, or ``null`` to resume the thread from its head's ``next``. ``context`` (optional)
is the run's ``RunInfo.context``, as the client sent it: never stored, never shown to the model, and not to be
trusted for what the server must vouch for (who the user is). ``multitask`` (optional) overrides the target's
policy for this run. ``resume`` (in place of ``input``) answers the thread's pending interrupt: the run is
``Command(resume=...)``; a ``ReactAgent``'s tool approval is answered with ``{call_id: {"decision": "approve"}}``,
``{"decision": "edit", "arguments": "<JSON text>"}`` or ``{"decision": "reject", "reason": "..."}`` for each call it
listed. A body that says none of this is refused with 422 and an error object (below); one sent without
``Content-Type: application/json`` with 415, one larger than ``create_app(max_body=...)`` with 413, and a browser's
request from another site (its ``Origin``, unless ``create_app(allowed_origins=...)`` lists it) with 403 — all
before anything starts.

The answer is ``text/event-stream``. Each event's ``data`` is one line of JSON:

- ``chunk``: ``{"node", "chunk"}`` — something a node streamed: a ``ChatChunk`` as its JSON (``content``,
  ``tool_calls`` deltas, ``finish_reason``), a ``ToolMessage`` in the wire format (``role`` ``"tool"``,
  ``tool_call_id``, ``content``), anything else as ``rxgraph inspect`` shows values.
- ``custom``: ``{"node", "value"}`` — something a node wrote with ``RunInfo.write`` (its value as ``rxgraph
  inspect`` shows values).
- ``node``: ``{"node", "checkpoint_id"}`` — a node finished and its checkpoint was written; for an agent, also
  ``"messages"``: what the node added to the history, in the wire format (the assistant message; the tool
  messages, in call order).
- ``interrupt``: ``{"thread_id", "node", "when", "value"}`` — the run stopped for a human (``when``: ``"before"``,
  ``"after"`` or ``"inside"`` the node); ``value`` is what it asks (a tool approval: ``{"kind": "tool_approval",
  "calls": [{"id", "name", "arguments"}, ...]}``). An ``end`` follows; answer with a ``resume`` body.
- ``end``: ``{"thread_id", "checkpoint_id"}`` — the run completed (or stopped for a human); ``checkpoint_id`` is the
  thread's head.
- ``error``: ``{"type", "message"}`` — the run failed (and an agent's turn was rewound); for a ``ModelAPIError``
  also the API's ``status_code`` and ``body``.

A stream ends with exactly one ``end`` or ``error``. Closing it early (a disconnect, a stopped ``fetch``) cancels the
run: its model request and its tools are disposed and the thread is rewound to its state before the run. When
another run holds the thread, the request follows ``multitask``: ``"enqueue"`` streams once the runs before it
have ended, ``"interrupt"`` cancels the running one (whose stream ends with an ``error`` of type
``RunInterruptedError``), and ``"reject"`` is answered ``409`` with the ``ThreadBusyError`` as an error object,
before any stream.

**Read a thread** (the saver's I/O off the event loop; a rewind in flight is waited for):

- ``GET /threads/{thread_id}/state``: ``{"thread_id", "values", "next", "interrupt", "checkpoint"}`` — the head's
  values (as ``rxgraph inspect --checkpoint`` shows them), the node(s) a resume runs, the interrupt it waits on
  (``{"node", "when", "value"}``, or ``null``), and the head's metadata (``seq``, ``id``,
  ``parent_id``, ``node``, ``source``, ``run_id``, ``created_at``, ``safe``, ``error``...); a thread with no
  checkpoint is answered 404 with an error object, on both reads.
- ``GET /threads/{thread_id}/history?limit=N``: ``{"thread_id", "checkpoints"}`` — the newest ``N`` (1 to 10,000;
  default 20) checkpoints, newest first, each its metadata and ``values``. A cancelled run's rewind is the one with
  ``"source": "rewind"``.

**Try it in a browser**: for an agent, ``GET /`` is a chat page (one HTML file, nothing loaded from elsewhere) that
streams the answer, shows tool calls and results as they happen, stops a turn with its Stop button, and shows the
thread's history, rewinds included.
"""

from ._app import create_app
from ._server import run_server

__all__ = ["create_app", "run_server"]
