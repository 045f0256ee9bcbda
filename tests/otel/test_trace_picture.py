"""The picture of a trace the docs show is drawn from recorded spans (``_waterfall.py``): one row per span, nested
under its parent, and the rewind said under the chart."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from otel._recording import Recorded
from otel._waterfall import draw_waterfall
from reactivex.testing import TestScheduler

from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent
from rxgraph.testing import ScriptedChatModel, ScriptedTool, finish, marbles, text, tool_call


def test_a_cancelled_turns_spans_are_drawn_as_a_waterfall(otel: Recorded) -> None:
    model = ScriptedChatModel(
        [[text("Hello."), finish("stop")], [tool_call("c0", "weather", "{}"), finish("tool_calls")]]
    )
    agent = ReactAgent(
        model, tools=[ScriptedTool("weather", marbles("-----r|", r="sunny"))], checkpointer=MemorySaver()
    )
    clock = TestScheduler()
    config = RunnableConfig(thread_id="t", scheduler=clock)
    agent.stream("Hi", config).subscribe()
    clock.advance_by(10)
    otel.exporter.clear()
    turn = agent.stream("Weather?", config).subscribe()
    clock.advance_by(2)  # the tool runs
    turn.dispose()

    picture = draw_waterfall(otel.spans(), "A cancelled turn")
    root = ElementTree.fromstring(picture)  # well-formed SVG
    texts = [element.text or "" for element in root.iter("{http://www.w3.org/2000/svg}text")]
    assert [t for t in texts if t.startswith(("rxgraph.", "chat ", "execute_tool "))][:6] == [
        "rxgraph.run  cancelled",
        "rxgraph.node  model",
        "chat ScriptedChatModel",
        "rxgraph.node  tools",
        "execute_tool weather",
        "rxgraph.rewind at " + texts[-1].split("rxgraph.rewind at ")[1],
    ]
    rewound_to = agent.get_state(config).checkpoint.parent_id  # type: ignore[union-attr]
    assert f"went back to checkpoint {str(rewound_to)[:8]}…" in texts[-1]
