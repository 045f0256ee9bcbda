"""The transition function on its own: from a position and what a superstep did to the next position — and the
checkpoint it writes down. No run, no saver, no scheduler."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rxgraph import (
    END,
    START,
    Command,
    InvalidArgumentError,
    InvalidUpdateError,
    KeyStrategy,
    PendingInterrupt,
    Send,
    StateGraph,
    ThreadNotFoundError,
)
from rxgraph.checkpoint._base import Checkpoint, new_checkpoint
from rxgraph.graph._compiled import spec_of
from rxgraph.graph._spec import GraphSpec
from rxgraph.graph._transition import (
    Position,
    after_input,
    after_resume,
    after_superstep,
    after_update,
    check_resumable,
    position_of,
)


def _spec(**compile_options: Any) -> GraphSpec:
    """a -> (b, c) in parallel -> join d -> END; a keeps a log (APPEND), and route ``fan`` may Send to c."""
    graph = StateGraph({"log": KeyStrategy.APPEND})
    for name in "abcd":
        graph.add_node(name, lambda s: None)
    graph.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c").add_edge(["b", "c"], "d").add_edge("d", END)
    return spec_of(graph.compile(**compile_options))


def _checkpoint(values: dict[str, Any], next: tuple[str, ...] = (), pending: Any = None) -> Checkpoint:
    return new_checkpoint(
        id="c1", thread_id="t", seq=1, values=MappingProxyType(values), run_id="r", source="loop", next=next,
        pending=pending,
    )  # fmt: skip


def test_new_input_is_merged_and_routed_from_start() -> None:
    at = after_input(_spec(), {"log": ("old",), "x": 1}, {"log": "new", "x": 2})
    assert dict(at.state) == {"log": ("old", "new"), "x": 2}
    assert at.tasks == ("a",) and at.next_nodes == ("a",) and at.stop is None and at.pending() is None


def test_interrupt_before_the_first_node_stops_the_input_position() -> None:
    at = after_input(_spec(interrupt_before=["a"]), {}, {"x": 1})
    assert at.stop == PendingInterrupt("a", "before", task=0)
    assert at.pending() == {"interrupt": {"node": "a", "when": "before", "value": None, "task": 0, "resumes": []}}


def test_one_node_lands_its_updates_in_order_and_routes_on() -> None:
    at = after_superstep(_spec(), Position({"log": ()}, ("a",)), [("a", [{"log": "1"}, None, {"log": ["2", "3"]}])])
    assert dict(at.state) == {"log": ("1", "2", "3")}
    assert at.tasks == ("b", "c") and not at.joins


def test_a_parallel_superstep_merges_in_task_order_and_the_join_waits_for_all_its_sources() -> None:
    spec = _spec()
    after_b = after_superstep(spec, Position({"log": ()}, ("b",)), [("b", [{"log": "b"}])])
    assert after_b.tasks == () and dict(after_b.joins) == {0: frozenset({"b"})}
    assert after_b.pending() == {"joins": {"0": ["b"]}}
    both = after_superstep(spec, Position({"log": ()}, ("c", "b")), [("c", [{"log": "c"}]), ("b", [{"log": "b"}])])
    assert dict(both.state) == {"log": ("c", "b")}  # task order, not name order
    assert both.tasks == ("d",) and not both.joins


def test_two_tasks_writing_a_key_without_a_reducer_is_refused() -> None:
    with pytest.raises(InvalidUpdateError, match="both wrote state key 'x'"):
        after_superstep(_spec(), Position({}, ("b", "c")), [("b", [{"x": 1}]), ("c", [{"x": 2}])])


def test_interrupt_after_a_node_stops_after_its_superstep() -> None:
    at = after_superstep(_spec(interrupt_after=["a"]), Position({}, ("a",)), [("a", [None])])
    assert at.tasks == ("b", "c") and at.stop == PendingInterrupt("a", "after", task=0)


_tasks = st.lists(st.one_of(st.sampled_from("abcd"), st.builds(Send, st.sampled_from("abcd"), st.integers())))
_positions = st.builds(
    Position,
    st.just({"x": 1}),
    _tasks.map(tuple),
    st.dictionaries(st.integers(0, 3), st.frozensets(st.sampled_from("abcd"), min_size=1)).map(MappingProxyType),
    st.none()
    | st.builds(
        PendingInterrupt,
        st.sampled_from("abcd"),
        st.sampled_from(["before", "after", "inside"]),
        st.integers(),
        st.integers(0, 3),
        st.tuples(st.integers()),
    ),
    st.dictionaries(st.integers(0, 3), st.fixed_dictionaries({"values": st.just({"y": 2})})).map(MappingProxyType),
    st.dictionaries(
        st.integers(0, 3),
        st.lists(
            st.one_of(
                st.none(),
                st.fixed_dictionaries({"log": st.integers()}),
                st.builds(Command, update=st.just({"x": 2}), goto=st.sampled_from(["a", ("b", Send("c", 1))])),
            ),
            max_size=2,
        ).map(tuple),
    ).map(MappingProxyType),
    st.lists(
        st.builds(PendingInterrupt, st.sampled_from("abcd"), st.just("inside"), st.integers(), st.integers(0, 3)),
        max_size=2,
    ).map(tuple),
)


def _plain(at: Position) -> Position:
    """``at`` with each Command's goto as a list (how it reads back), for comparing."""
    done = {
        index: tuple(
            Command(update=u.update, goto=list((u.goto,) if isinstance(u.goto, str | Send) else u.goto))
            if isinstance(u, Command)
            else u
            for u in updates
        )
        for index, updates in at.done.items()
    }
    return at._replace(done=MappingProxyType(done))


@given(_positions)
def test_a_position_written_down_reads_back_the_same(at: Position) -> None:
    back = position_of(_checkpoint(dict(at.state), at.next_nodes, at.pending()))
    assert back == _plain(at)
    assert back.pending() == at.pending()


def test_a_resume_inside_a_node_answers_it_and_clears_the_stop() -> None:
    stop = PendingInterrupt("b", "inside", "ok?", task=1, resumes=("first",))
    base = _checkpoint({"x": 1}, ("c", "b"), Position({}, ("c", "b"), stop=stop).pending())
    resumed = after_resume(_spec(), base, "second")
    assert resumed.at.tasks == ("c", "b") and resumed.at.stop is None and resumed.record is None
    assert resumed.answering == {1: PendingInterrupt("b", "inside", "ok?", task=1, resumes=("first", "second"))}


def test_a_resume_after_a_node_stops_again_before_the_next_or_ends_the_run() -> None:
    spec = _spec(interrupt_after=["a", "d"], interrupt_before=["b"])
    after_a = _checkpoint({}, ("b", "c"), {"interrupt": PendingInterrupt("a", "after").to_pending()})
    resumed = after_resume(spec, after_a)
    assert resumed.at.stop == PendingInterrupt("b", "before", task=0) and resumed.record == (None, "interrupt")
    after_d = _checkpoint({}, (), {"interrupt": PendingInterrupt("d", "after").to_pending()})
    over = after_resume(spec, after_d)
    assert over.at.tasks == () and over.at.stop is None and over.record == ("d", "loop")
    assert over.at.pending() is None


def test_an_update_as_a_node_routes_from_it_and_one_without_keeps_the_next_superstep() -> None:
    spec = _spec()
    base = _checkpoint({"log": ("a",)}, ("b",), {"joins": {"0": ["c"]}})
    as_b = after_update(spec, base, {"log": "edited"}, "b")
    assert dict(as_b.state) == {"log": ("a", "edited")} and as_b.tasks == ("d",) and not as_b.joins
    kept = after_update(spec, base, {"log": "edited"}, None)
    assert kept.tasks == ("b",) and kept.pending() == {"joins": {"0": ["c"]}}


def test_a_resume_is_refused_without_a_saver_a_checkpoint_or_an_interrupt_for_a_command() -> None:
    with pytest.raises(InvalidArgumentError, match="needs a checkpointer"):
        check_resumable(None, has_saver=False, thread_id=None, command=None)
    with pytest.raises(ThreadNotFoundError):
        check_resumable(None, has_saver=True, thread_id="t", command=None)
    base = _checkpoint({}, ("b",))
    with pytest.raises(InvalidArgumentError, match="no pending interrupt"):
        check_resumable(base, has_saver=True, thread_id="t", command=Command(resume=1))
    assert check_resumable(base, has_saver=True, thread_id="t", command=None) is base


@pytest.mark.parametrize("with_join", [False, True], ids=["no-join", "join"])
def test_a_node_named_twice_by_a_route_runs_once(with_join: bool) -> None:
    graph = StateGraph()
    for name in "abcd" if with_join else "ab":
        graph.add_node(name, lambda s: None)
    graph.add_edge(START, "a").add_conditional_edges("a", lambda s: ["b", "b", Send("b", 1), Send("b", 1)])
    if with_join:  # the graph has a join: advance takes its general path
        graph.add_edge(START, "c").add_edge(["b", "c"], "d").add_edge("d", END)
    else:
        graph.add_edge("b", END)
    at = after_superstep(spec_of(graph.compile()), Position({}, ("a",)), [("a", [None])])
    assert at.tasks == ("b", Send("b", 1), Send("b", 1))  # every Send is a task of its own
