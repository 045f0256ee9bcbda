"""State schemas written as classes (TypedDict, pydantic), input and output schemas, private keys, and what a
subgraph hands its parent.

Several tests are ported from LangGraph's suite (named in each); where rxgraph differs on purpose (a key no schema
declares is refused, not dropped), the test says so.
"""

import operator
from collections.abc import Callable
from typing import Annotated, Any

import pytest
import reactivex as rx
from pydantic import BaseModel, Field, field_validator
from reactivex import operators as ops
from reactivex.testing import TestScheduler
from typing_extensions import TypedDict

from rxgraph import END, START, CheckpointSaver, Command, KeyStrategy, MemorySaver, RunnableConfig, Send, StateGraph
from rxgraph.errors import InvalidTypeError, InvalidUpdateError
from rxgraph.graph import CompiledGraph, NodeOutput, StreamingOutput
from rxgraph.testing import assert_cancellation_safe


def test_input_schema_conditional_edge() -> None:
    """Ported from LangGraph's ``test_input_schema_conditional_edge`` (tests/test_state.py): a key only one node's
    class declares is private — nodes write and read it, a route reading the state's class does not see it, nor does
    the output. (The original's node also returns an undeclared key, which LangGraph drops: rxgraph refuses it, see
    the next test.)"""

    class OverallState(TypedDict):
        foo: Annotated[int, operator.add]
        bar: str

    class PrivateState(TypedDict):
        baz: str

    seen: list[dict[str, Any]] = []

    def node_1(state: OverallState) -> dict[str, Any]:
        return {"foo": 1, "baz": "bar"}

    def node_2(state: PrivateState) -> dict[str, Any]:
        return {"foo": 1, "bar": state["baz"]}

    def node_3(state: OverallState) -> dict[str, Any]:
        return {"foo": 1}

    def router(state: OverallState) -> str:
        seen.append(dict(state))
        return "node_3" if state["foo"] == 2 else END

    graph = (
        StateGraph(OverallState)
        .add_node("node_1", node_1)
        .add_node("node_2", node_2)
        .add_node("node_3", node_3)
        .add_conditional_edges("node_2", router)
        .add_edge(START, "node_1")
        .add_edge("node_1", "node_2")
        .add_edge("node_3", END)
        .compile()
    )
    assert graph.invoke({"foo": 0}) == {"foo": 3, "bar": "bar"}
    assert seen == [{"foo": 2, "bar": "bar"}]


def test_a_key_no_schema_declares_is_refused_naming_it() -> None:
    class State(TypedDict):
        foo: int

    graph = (
        StateGraph(State)
        .add_node("node", lambda state: {"foo": 1, "something_else": "meow"})
        .add_edge(START, "node")
        .add_edge("node", END)
        .compile()
    )
    with pytest.raises(InvalidUpdateError, match="'something_else' is not in the state schema") as caught:
        graph.invoke({"foo": 0})
    assert caught.value.node == "node"
    with pytest.raises(InvalidUpdateError, match=r"\['other'\] are not in the graph's input schema"):
        graph.invoke({"foo": 0, "other": 1})


def test_private_input_schema_conditional_edge() -> None:
    """Ported from LangGraph's ``test_private_input_schema_conditional_edge``: a route reads the state as its own
    class says, a private key included."""

    class OverallState(TypedDict):
        foo: Annotated[int, operator.add]
        bar: str

    class RouterState(TypedDict):
        baz: str

    class Node2State(TypedDict):
        foo: Annotated[int, operator.add]
        baz: str

    routed: list[dict[str, Any]] = []

    def router(state: RouterState) -> str:
        routed.append(dict(state))
        return "node_2" if state["baz"] == "meow" else END

    def node_2(state: Node2State) -> dict[str, Any]:
        return {"foo": 1, "bar": state["baz"]}

    graph = (
        StateGraph(OverallState)
        .add_node("node_1", lambda state: {"foo": 1, "baz": "meow"})
        .add_node("node_2", node_2)
        .add_conditional_edges("node_1", router)
        .add_edge(START, "node_1")
        .add_edge("node_2", END)
        .compile()
    )
    assert graph.invoke({"foo": 0}) == {"foo": 2, "bar": "meow"}
    assert routed == [{"baz": "meow"}]


def test_input_and_output_schemas_and_a_private_key() -> None:
    """The shape of LangGraph's "multiple schemas" example (and its ``test_node_schemas_custom_output``): the input
    takes the input schema's keys, the outputs show the output schema's, the thread keeps every key."""

    class InputState(TypedDict):
        user_input: str

    class OutputState(TypedDict):
        graph_output: str

    class OverallState(TypedDict):
        foo: str
        user_input: str
        graph_output: str

    class PrivateState(TypedDict):
        bar: str

    def node_1(state: InputState) -> dict[str, Any]:
        return {"foo": state["user_input"] + " name"}

    def node_2(state: OverallState) -> dict[str, Any]:
        return {"bar": state["foo"] + " is"}

    def node_3(state: PrivateState) -> dict[str, Any]:
        return {"graph_output": state["bar"] + " Lance"}

    graph = (
        StateGraph(OverallState, input_schema=InputState, output_schema=OutputState)
        .add_node("node_1", node_1)
        .add_node("node_2", node_2)
        .add_node("node_3", node_3)
        .add_edge(START, "node_1")
        .add_edge("node_1", "node_2")
        .add_edge("node_2", "node_3")
        .add_edge("node_3", END)
        .compile(checkpointer=MemorySaver())
    )
    config = RunnableConfig(thread_id="t")
    assert graph.invoke({"user_input": "My"}, config) == {"graph_output": "My name is Lance"}
    other = RunnableConfig(thread_id="t2")
    shown = [dict(output.state) for output in graph.stream({"user_input": "Your"}, other).pipe(ops.to_list()).run()]
    assert shown == [{}, {}, {"graph_output": "Your name is Lance"}]
    # The thread keeps the private and internal keys (the record of the run); only the outputs leave them out.
    assert graph.get_state(other).values["bar"] == "Your name is"
    with pytest.raises(InvalidUpdateError, match="input schema"):
        graph.invoke({"user_input": "My", "foo": "x"}, config)


def test_a_reducer_function_of_a_class_key_starts_from_its_types_empty_value() -> None:
    class State(TypedDict):
        items: Annotated[list[str], operator.add]
        total: Annotated[int, operator.add]
        flags: Annotated[set[str], operator.or_]
        log: Annotated[list[str], KeyStrategy.APPEND]

    graph = (
        StateGraph(State)
        .add_node("a", lambda state: {"items": ["x"], "total": 2, "flags": {"f"}, "log": "one"})
        .add_node("b", lambda state: {"items": ["y"], "total": 3, "log": ["two", "three"]})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    assert graph.invoke({}) == {
        "items": ["x", "y"],
        "total": 5,
        "flags": frozenset({"f"}),
        "log": ["one", "two", "three"],
    }


def test_a_pydantic_state_is_validated_and_nodes_and_routes_receive_the_model() -> None:
    class State(BaseModel):
        name: str
        count: Annotated[int, Field(ge=0)] = 0
        notes: Annotated[list[str], operator.add] = []

        @field_validator("name", mode="after")
        @classmethod
        def capitalised(cls, value: str) -> str:
            if not value[:1].isupper():
                raise ValueError("a name starts with a capital letter")
            return value

    received: list[Any] = []

    def greet(state: State) -> dict[str, Any]:
        received.append(state)
        return {"notes": [f"hello {state.name}"], "count": "2"}  # "2" is coerced by the field's type

    def route(state: State) -> str:
        received.append(state)
        return END

    graph = (
        StateGraph(State)
        .add_node("greet", greet)
        .add_edge(START, "greet")
        .add_conditional_edges("greet", route)
        .compile()
    )
    assert graph.invoke({"name": "Ada"}) == {"name": "Ada", "notes": ["hello Ada"], "count": 2}
    assert [type(state) for state in received] == [State, State]
    assert received[0].count == 0 and received[1].count == 2
    with pytest.raises(InvalidUpdateError, match="state key 'count' does not fit the state schema"):
        graph.invoke({"name": "Ada", "count": -1})
    with pytest.raises(InvalidUpdateError, match="a name starts with a capital letter"):
        graph.invoke({"name": "ada"})


def test_a_pydantic_node_update_that_does_not_fit_fails_the_run_naming_the_node() -> None:
    class State(BaseModel):
        count: int = 0

    graph = (
        StateGraph(State)
        .add_node("bad", lambda state: {"count": "many"})
        .add_edge(START, "bad")
        .add_edge("bad", END)
        .compile()
    )
    with pytest.raises(InvalidUpdateError, match="node 'bad': state key 'count' does not fit") as caught:
        graph.invoke({})
    assert caught.value.node == "bad"


def test_schema_arguments_are_checked() -> None:
    with pytest.raises(InvalidTypeError, match="TypedDict or a pydantic model"):
        StateGraph(int)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="output_schema"):
        StateGraph({}, output_schema=dict)

    class Bad(TypedDict):
        items: Annotated[list[str], lambda only_one: only_one]

    with pytest.raises(InvalidTypeError, match="reducer"):
        StateGraph(Bad)


def test_the_former_schema_keyword_still_works_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"StateGraph\(schema=...\) is deprecated"):
        builder = StateGraph(schema={"items": KeyStrategy.APPEND})
    graph = builder.add_node("a", lambda s: {"items": "x"}).add_edge(START, "a").add_edge("a", END).compile()
    assert graph.invoke({"items": ["w"]}) == {"items": ["w", "x"]}


# -- subgraphs -----------------------------------------------------------------------------------------------------


def _adds_one_twice(builder: StateGraph, key: str) -> CompiledGraph:
    """A subgraph of two nodes that each add 1 to ``key`` (with the builder's strategy for it)."""
    return (
        builder.add_node("one", lambda state: {key: 1}).add_node("two", lambda state: {key: 1})
        .add_edge(START, "one").add_edge("one", "two").add_edge("two", END)
        .compile()
    )  # fmt: skip


def test_a_subgraph_hands_its_final_values_over_so_a_looping_parent_stops() -> None:
    """Issue: a parent key with no reducer kept only the subgraph's last inner update, so a parent looping on it
    never met its stop condition. Now the parent gets the subgraph's final value of each key it wrote."""

    class Inner(TypedDict):
        count: Annotated[int, operator.add]

    inner = _adds_one_twice(StateGraph(Inner), "count")
    graph = (
        StateGraph({})  # the parent's count is replaced
        .add_node("sub", inner)
        .add_edge(START, "sub")
        .add_conditional_edges("sub", lambda state: END if state["count"] >= 6 else "sub")
        .compile()
    )
    assert graph.invoke({"count": 0}) == {"count": 6}


def test_a_subgraph_output_schema_keeps_its_private_keys_and_shared_appends_are_not_doubled() -> None:
    class SubState(TypedDict):
        messages: Annotated[list[str], KeyStrategy.APPEND]
        scratch: str

    class SubOutput(TypedDict):
        messages: list[str]

    inner = (
        StateGraph(SubState, output_schema=SubOutput)
        .add_node("think", lambda state: {"scratch": "private notes", "messages": "thought"})
        .add_node("say", lambda state: {"messages": ["said", "done"]})
        .add_edge(START, "think")
        .add_edge("think", "say")
        .add_edge("say", END)
        .compile()
    )

    class Parent(TypedDict):
        messages: Annotated[list[str], KeyStrategy.APPEND]
        turns: int

    graph = (
        StateGraph(Parent)
        .add_node("sub", inner)
        .add_node("count", lambda state: {"turns": len(state["messages"])})
        .add_edge(START, "sub")
        .add_edge("sub", "count")
        .add_edge("count", END)
        .compile()
    )
    assert graph.invoke({"messages": ["hi"], "turns": 0}) == {
        "messages": ["hi", "thought", "said", "done"],
        "turns": 4,
    }


def test_a_subgraph_with_a_mapping_schema_into_a_parent_with_a_reducer_function() -> None:
    """A reducer function receives the subgraph's final value once, as LangGraph's does."""
    inner = _adds_one_twice(StateGraph({"total": lambda current, update: (current or 0) + update}), "total")
    graph = (
        StateGraph({"seen": lambda current, update: (current or 0) + update})
        .add_node("sub", inner)
        .add_node("copy", lambda state: {"seen": state["total"]})
        .add_edge(START, "sub")
        .add_edge("sub", "copy")
        .add_edge("copy", END)
        .compile()
    )
    # the subgraph starts from the parent's total (10) and adds 2: the parent's total is replaced by 12
    assert graph.invoke({"total": 10, "seen": 0}) == {"total": 12, "seen": 12}


def test_outputs_of_a_typed_graph_stream_in_virtual_time_without_private_keys() -> None:
    class State(TypedDict):
        answer: str

    class Private(TypedDict):
        draft: str

    def write(state: State) -> dict[str, Any]:
        return {"draft": "d"}

    def polish(state: Private) -> dict[str, Any]:
        return {"answer": state["draft"] + "!"}

    graph = (
        StateGraph(State)
        .add_node("write", write)
        .add_node("polish", polish)
        .add_edge(START, "write")
        .add_edge("write", "polish")
        .add_edge("polish", END)
        .compile()
    )
    clock = TestScheduler()
    outputs: list[Any] = []
    graph.stream({}, RunnableConfig(scheduler=clock)).subscribe(outputs.append)
    clock.start()
    assert [(o.node, dict(o.state)) for o in outputs if isinstance(o, NodeOutput)] == [
        ("write", {}),
        ("polish", {"answer": "d!"}),
    ]
    assert not [o for o in outputs if isinstance(o, StreamingOutput)]


# The savers' side of a cut turn does not depend on the graph's features; PostgreSQL is explored in tests/testing.
@pytest.mark.parametrize("saver_factory", ["memory", "sqlite"], indirect=True)
def test_a_typed_turn_with_a_private_key_and_a_subgraph_cut_at_any_point_is_rewound(
    saver_factory: Callable[[], CheckpointSaver],
) -> None:
    class Inner(TypedDict):
        log: Annotated[list[str], KeyStrategy.APPEND]
        scratch: str

    class InnerOut(TypedDict):
        log: list[str]

    class State(TypedDict):
        log: Annotated[list[str], KeyStrategy.APPEND]

    class Private(TypedDict):
        draft: str

    def slow(update: dict[str, Any]) -> Callable[[Any], rx.Observable[dict[str, Any]]]:
        return lambda state: rx.timer(1.0).pipe(ops.map(lambda _: update))

    def finish(state: Private) -> rx.Observable[dict[str, Any]]:
        return rx.timer(1.0).pipe(ops.map(lambda _: {"log": [state["draft"]]}))

    def make(saver: CheckpointSaver) -> Any:
        inner = (
            StateGraph(Inner, output_schema=InnerOut)
            .add_node("think", slow({"scratch": "s", "log": ["thought"]}), reduce=lambda chunks: chunks[-1])
            .add_edge(START, "think").add_edge("think", END)
            .compile()
        )  # fmt: skip
        return (
            StateGraph(State)
            .add_node("draft", slow({"draft": "drafted"}), reduce=lambda chunks: chunks[-1])
            .add_node("sub", inner)
            .add_node("finish", finish, reduce=lambda chunks: chunks[-1])
            .add_edge(START, "draft").add_edge("draft", "sub").add_edge("sub", "finish").add_edge("finish", END)
            .compile(saver, messages_key=None)
        )  # fmt: skip

    report = assert_cancellation_safe(
        make, [{"log": ["one"]}, {"log": ["two"]}], modes=("dispose", "take_until"), saver_factory=saver_factory
    )
    assert len(report.points) > 10


def test_a_pydantic_node_may_return_the_model_and_a_run_may_take_one() -> None:
    """Ported from LangGraph's ``test_pydantic_none_state_update``, ``test_pydantic_state_update_command`` and
    ``test_pydantic_state_mutation``: a model instance stands for its fields, but those left at a None default it
    was not given; a node may change its state instance and return it."""

    class Nullable(BaseModel):
        foo: str | None

    graph = (
        StateGraph(Nullable)
        .add_node("a", lambda state: Nullable(foo=None))
        .add_node("b", lambda state: Command(update=Nullable(foo=None)))
        .add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
        .compile()
    )  # fmt: skip
    assert graph.invoke({"foo": ""}) == {"foo": None}

    class State(BaseModel):
        foo: str | None = None
        bar: str | None = None

    graph = (
        StateGraph(State)
        .add_node("a", lambda state: State(foo="foo"))
        .add_node("b", lambda state: Command(update=State(bar="bar")))
        .add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
        .compile()
    )  # fmt: skip
    assert graph.invoke(State()) == {"foo": "foo", "bar": "bar"}

    class Inner(BaseModel):
        a: int = 0

    class Mutable(BaseModel):
        inner: Inner = Field(default_factory=Inner)
        outer: int = 0

    def my_node(state: Mutable) -> Mutable:
        state.inner.a = 5
        state.outer = 10
        return state

    graph = (
        StateGraph(Mutable).add_node("my_node", my_node).add_edge(START, "my_node").add_edge("my_node", END).compile()
    )
    assert graph.invoke({"outer": 1}) == {"outer": 10, "inner": Inner(a=5)}


def test_a_node_that_changes_its_pydantic_state_does_not_change_earlier_checkpoints() -> None:
    class Inner(BaseModel):
        a: int = 0

    class State(BaseModel):
        inner: Inner = Field(default_factory=Inner)
        items: list[Inner] = []

    def first(state: State) -> State:
        state.inner.a = 1
        state.items = [Inner(a=1)]
        return state

    def second(state: State) -> State:
        state.inner.a = 2  # the instance this node received, not the one the first checkpoint holds
        state.items[0].a = 2
        return state

    graph = (
        StateGraph(State)
        .add_node("first", first).add_node("second", second)
        .add_edge(START, "first").add_edge("first", "second").add_edge("second", END)
        .compile(MemorySaver())
    )  # fmt: skip
    config = RunnableConfig(thread_id="t")
    assert graph.invoke({}, config) == {"inner": Inner(a=2), "items": [Inner(a=2)]}
    after_first = next(s for s in graph.get_state_history(config) if s.checkpoint and s.checkpoint.node == "first")
    assert after_first.values["inner"] == Inner(a=1)
    assert after_first.values["items"] == [Inner(a=1)]


def test_node_schemas_custom_output() -> None:
    """Ported from LangGraph's ``test_node_schemas_custom_output``: each node reads its own class's keys (one of them,
    ``now``, declared only by node classes), the output schema decides what ``invoke`` returns. The original passes
    ``now`` in the input, which LangGraph drops as it is not an input key; rxgraph refuses it (checked last)."""

    class State(TypedDict):
        hello: str
        bye: str
        messages: Annotated[list[str], KeyStrategy.APPEND]

    class Output(TypedDict):
        messages: list[str]

    class StateForA(TypedDict):
        hello: str
        messages: Annotated[list[str], KeyStrategy.APPEND]

    class StateForB(TypedDict):
        bye: str
        now: int

    class StateForC(TypedDict):
        hello: str
        now: int

    seen: dict[str, dict[str, Any]] = {}

    def node_a(state: StateForA) -> None:
        seen["a"] = dict(state)

    def node_b(state: StateForB) -> dict[str, Any]:
        seen["b"] = dict(state)
        return {"now": 123, "hello": "again"}

    def node_c(state: StateForC) -> None:
        seen["c"] = dict(state)

    graph = (
        StateGraph(State, output_schema=Output)
        .add_node("a", node_a).add_node("b", node_b).add_node("c", node_c)
        .add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
        .compile()
    )  # fmt: skip
    assert graph.invoke({"hello": "there", "bye": "world", "messages": "hello"}) == {"messages": ["hello"]}
    assert seen == {
        "a": {"hello": "there", "messages": ["hello"]},
        "b": {"bye": "world"},
        "c": {"hello": "again", "now": 123},
    }
    with pytest.raises(InvalidUpdateError, match=r"\['now'\] are not in the graph's input schema"):
        graph.invoke({"hello": "there", "bye": "world", "messages": "hello", "now": 345})


def test_stream_modes_of_a_typed_graph_leave_private_keys_out() -> None:
    class State(BaseModel):
        answer: str = ""

    class Draft(TypedDict):
        draft: str

    def draft(state: State) -> dict[str, Any]:
        return {"draft": "d", "answer": "working"}

    def polish(state: Draft) -> dict[str, Any]:
        return {"answer": state["draft"] + "!"}

    graph = (
        StateGraph(State)
        .add_node("draft", draft).add_node("polish", polish)
        .add_edge(START, "draft").add_edge("draft", "polish").add_edge("polish", END)
        .compile()
    )  # fmt: skip
    both = graph.stream({}, mode=["updates", "values"]).pipe(ops.to_list()).run()
    assert [(mode, dict(payload)) for mode, payload in both] == [
        ("updates", {"draft": {"answer": "working"}}),
        ("values", {"answer": "working"}),
        ("updates", {"polish": {"answer": "d!"}}),
        ("values", {"answer": "d!"}),
    ]


def test_nested_graph() -> None:
    """Ported from LangGraph's ``test_nested_graph``: the subgraph takes its keys of the parent's state (a parent key
    it does not declare never reaches it), and hands back only what the parent declares (its own private key stays
    inside). rxgraph's ``values`` mode does not start with the input state, as LangGraph's does."""

    def never_called(state: Any) -> None:
        raise AssertionError("this function should never be called")

    class InnerState(TypedDict):
        my_key: str
        my_other_key: str

    def up(state: InnerState) -> dict[str, Any]:
        assert set(state) == {"my_key"}
        return {"my_key": state["my_key"] + " there", "my_other_key": state["my_key"]}

    inner = StateGraph(InnerState).add_node("up", up).add_edge(START, "up").add_edge("up", END).compile()

    class State(TypedDict):
        my_key: str
        never_called: Any

    def side(state: State) -> dict[str, Any]:
        return {"my_key": state["my_key"] + " and back again"}

    app = (
        StateGraph(State)
        .add_node("inner", inner).add_node("side", side)
        .add_edge(START, "inner").add_edge("inner", "side").add_edge("side", END)
        .compile()
    )  # fmt: skip
    given = {"my_key": "my value", "never_called": never_called}
    assert app.invoke(given) == {"my_key": "my value there and back again", "never_called": never_called}
    assert app.stream(given, mode="updates").pipe(ops.to_list()).run() == [
        {"inner": {"my_key": "my value there"}},
        {"side": {"my_key": "my value there and back again"}},
    ]
    assert app.stream(given, mode="values").pipe(ops.to_list()).run() == [
        {"my_key": "my value there", "never_called": never_called},
        {"my_key": "my value there and back again", "never_called": never_called},
    ]


def test_a_send_payload_that_is_not_a_mapping_reaches_an_annotated_node_as_it_is() -> None:
    class State(TypedDict):
        results: Annotated[list[int], operator.add]

    class Private(TypedDict):
        scratch: str

    def square(number: Private) -> dict[str, Any]:  # annotated with a class, sent a bare int
        return {"results": [int(number) ** 2]}  # type: ignore[call-overload]  (the payload is an int)

    graph = (
        StateGraph(State)
        .add_node("fan", lambda state: None).add_node("square", square)
        .add_edge(START, "fan")
        .add_conditional_edges("fan", lambda state: [Send("square", n) for n in (2, 3)])
        .add_edge("square", END)
        .compile()
    )  # fmt: skip
    assert graph.invoke({}) == {"results": [4, 9]}
