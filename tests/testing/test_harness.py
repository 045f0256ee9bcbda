"""The cancel-at-tick harness and the marble timelines it draws."""

from __future__ import annotations

from _weather_turn import weather_agent

from rxgraph.rx import SignalType
from rxgraph.testing import (
    CancellationHarness,
    after_checkpoint,
    after_output,
    dispose_at,
    dispose_when,
    render_timeline,
    take_until_at,
    timeout_after,
)


def _harness(**kwargs: object) -> CancellationHarness:
    return CancellationHarness(lambda saver: weather_agent(saver, first_turn=True, **kwargs)[0], thread_id="h")


def test_an_uncancelled_turn_records_outputs_and_writes_with_their_ticks() -> None:
    record = _harness().run_turn("weather?")
    assert record.completed and not record.cancelled
    assert [(t - record.start, c.node) for t, c in record.writes] == [
        (0.0, "__start__"),
        (4.0, "model"),
        (7.0, "tools"),
        (12.0, "model"),
    ]
    assert [t - record.start for t, o in record.outputs] == [1.0, 3.0, 4.0, 7.0, 7.0, 9.0, 11.0, 12.0]
    assert record.head is not None and record.head.next == ()


def test_dispose_at_a_tick_cancels_there_and_the_rewind_is_the_last_write() -> None:
    record = _harness().run_turn("weather?", dispose_at(5))
    assert record.cancelled and record.cancelled_at == record.start + 5
    assert [c.source for _, c in record.writes] == ["input", "loop", "rewind"]
    assert record.head is not None and record.head.values == {}


def test_dispose_at_a_tick_before_or_after_that_ticks_events() -> None:
    early = _harness().run_turn("weather?", dispose_at(4))
    late = _harness().run_turn("weather?", dispose_at(4, late=True))
    assert [c.node for _, c in early.writes] == ["__start__", None]  # the model's completion at t+4 never ran
    assert [c.node for _, c in late.writes] == ["__start__", "model", None]


def test_dispose_when_an_event_is_seen() -> None:
    record = _harness().run_turn("weather?", dispose_when(after_checkpoint("tools")))
    assert record.cancelled_at == record.start + 7
    assert [c.node for _, c in record.writes] == ["__start__", "model", "tools", None]
    chunk = _harness().run_turn("weather?", dispose_when(after_output("model", chunks=1)))
    assert chunk.cancelled_at == chunk.start + 1


def test_timeout_and_take_until_cancel_from_downstream() -> None:
    timed_out = _harness().run_turn("weather?", timeout_after(2.5))  # the tool's 3-tick silence exceeds it
    assert timed_out.cancelled and str(timed_out.subscriber_error) == "Timeout"
    assert timed_out.cancelled_at == timed_out.start + 6.5
    stopped = _harness().run_turn("weather?", take_until_at(10))
    assert stopped.cancelled and stopped.cancelled_at == stopped.start + 10
    assert stopped.signal is SignalType.CANCEL and stopped.subscriber_error is None


def test_the_timeline_of_a_turn_cancelled_in_its_second_model_stream() -> None:
    record = _harness().run_turn("weather?", dispose_at(10))
    assert record.timeline() == "\n".join(
        [
            "model  -a-b|",
            "tools      ---(c|)",
            "model         -----dX",
            "saver  S---S--S-----R",
            "chunks:",
            '  a = tool_call(#0 call-1 get_weather \'{"city": "Paris"}\')',
            "  b = finish('tool_calls')",
            "  c = tool(call-1: 'Sunny in Paris')",
            "  d = text('Sunny ')",
        ]
    )


def test_render_timeline_without_legend_and_with_an_unknown_lane() -> None:
    record = _harness().run_turn("weather?", dispose_when(after_checkpoint("tools")))
    assert render_timeline(record.events, start=record.start, legend=False).splitlines() == [
        "model  -a-b|",
        "tools      ---(c|)",
        "model         X",
        "saver  S---S--(SR)",
    ]
