"""OpenTelemetry traces, metrics and logs of runs (the ``otel`` extra: ``pip install 'rxgraph[otel]'``).

Call ``instrument()`` once, where the application configures its OpenTelemetry providers; from then on every run
reports, through ``opentelemetry-api``, to those providers (rxgraph has no exporter of its own):

- a span ``rxgraph.run`` per run (``rxgraph.thread_id``, ``rxgraph.run_id``, ``rxgraph.outcome``: ``completed``,
  ``cancelled``, ``failed`` or ``interrupted``), a child of the span current where the run was started; a failed run
  has status ERROR and its exception; a rewound run has an event ``rxgraph.rewind`` (``rxgraph.checkpoint_id``: the
  checkpoint the thread went back to; the head it left; the rewind's duration);
- a span ``rxgraph.node`` per node call (``rxgraph.node``, ``rxgraph.step``, ``rxgraph.checkpoint_id`` it wrote), a
  subgraph's run inside its node's;
- ``chat {model}`` spans for model calls and ``execute_tool {tool}`` spans for tool calls, as the GenAI semantic
  conventions name them (message contents only when asked for: see ``instrument``), a call that was never run (an
  unknown tool, arguments that do not fit, a call a human rejected) included, with status ERROR and ``error.type``;
- the metrics ``rxgraph.runs`` (by ``rxgraph.outcome``), ``rxgraph.run.duration``, ``rxgraph.rewind.duration`` (s),
  ``rxgraph.runs.active`` (runs holding their thread) and ``rxgraph.runs.waiting`` (runs in line for it).

Whether or not it is instrumented, a run that is cancelled and rewound, or that fails, logs one INFO record on the
``rxgraph`` logger saying where its thread now stands.
"""

from ._setup import CAPTURE_MESSAGE_CONTENT, instrument, is_instrumented, uninstrument

__all__ = ["CAPTURE_MESSAGE_CONTENT", "instrument", "is_instrumented", "uninstrument"]
