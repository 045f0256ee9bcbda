"""What a saver stores reads back exactly after a reopen (nothing cached), or is refused with a typed error when it
is written: values in a registered model's open fields (``Any``, ``dict[str, Any]``, extra fields), ints too long
for decimal text, the deepest value allowed and one level more; and ``list`` limits no SQL engine can take."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from rxgraph import (
    END,
    START,
    Checkpoint,
    CheckpointSaver,
    FrozenDict,
    FrozenList,
    MemorySaver,
    RunnableConfig,
    StateGraph,
)
from rxgraph._frozen import MAX_DEPTH, freeze
from rxgraph.checkpoint import PostgresSaver, Serde, SqliteSaver
from rxgraph.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from rxgraph.messages import (
    AssistantMessage,
    AudioPart,
    CacheBreakpoint,
    FilePart,
    ImagePart,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)


class Inner(BaseModel):
    model_config = ConfigDict(frozen=True)

    x: int


class Box(BaseModel):
    """A model with a field whose type says nothing about its value."""

    model_config = ConfigDict(frozen=True)

    value: Any = None


class Point(BaseModel):
    """Not registered: it is stored inside a registered model's typed field."""

    x: int


class Note(BaseModel):
    """Not registered either; its field typed Any makes a field typed ``Point | Note`` open."""

    text: Any = None


class Wide(BaseModel):
    """Not registered; validates from any dump of a ``Point`` too (its extra field has a default)."""

    x: int
    y: int = 0


class Either(BaseModel):
    """A union that JSON cannot tell apart: a ``Point``'s dump validates as a ``Wide`` first."""

    model_config = ConfigDict(frozen=True)

    shape: Wide | Point


@dataclasses.dataclass(frozen=True)
class Pair:
    left: Any
    right: Any = None


class Record(BaseModel):
    """Typed fields (pydantic's JSON restores them) beside open ones (it does not)."""

    model_config = ConfigDict(frozen=True)

    when: datetime
    pair: tuple[int, int]
    payload: dict[str, Any] = {}
    items: tuple[Any, ...] = ()
    either: int | str | bytes = 0
    choice: Point | Note | None = None
    both: Pair | None = None


class Loose(BaseModel):
    """Extra fields are typed by nothing."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str


class Counter(BaseModel):
    model_config = ConfigDict(frozen=True)

    n: int


def _serde() -> Serde:
    serde = Serde()
    for model_cls in (Inner, Box, Record, Loose, Counter, Either):
        serde.register(model_cls, f"tests.exact.{model_cls.__name__}")
    return serde


SERDE = _serde()

_WHEN = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
BIG = 10**5000 + 7  # 5,001 decimal digits: more than Python turns into text or back (4,300 by default)

# Values a field typed Any can hold that pydantic's JSON dump turns into something else (nan -> None, tuple ->
# list, bytes -> str, a model -> dict, int keys -> str keys, ...), each with a name for the test's id.
OPEN_VALUES = {
    "nan": math.nan,
    "inf": -math.inf,
    "tuple": (1, (2, "x")),
    "bytes": b"\x00\xff",
    "registered model": Inner(x=1),
    "model in a list": [Inner(x=2), {"m": Box(value=(3,))}],
    "int keys": {1: "a", 2: (3, 4)},
    "tuple keys": {(1, "a"): None},
    "set": {1, 2},
    "frozenset": frozenset({"a", (1, 2)}),
    "frozen list": FrozenList([1, [2]]),
    "frozen dict": FrozenDict({"k": FrozenList([1])}),
    "keys that look like tags": {"$type": "tests.exact.Inner", "data": {"x": 1}, "$tuple": [1], "$$x": (2,)},
    "big int": [BIG, -BIG],
    "mixed list": [1, 2.5, -0.0, True, None, "s", (1,), b"b"],
}


def canonical(value: Any) -> Any:
    """``value`` as type-tagged data: equal for two values exactly when they have the same types at every level and
    the same contents (floats by bits, nan equal to nan; mappings in order; models by class, fields and extras)."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return [kind.__name__, value]
    if kind is int:
        return ["int", hex(value)]
    if kind is float:
        return ["float", "nan" if math.isnan(value) else value.hex()]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind is datetime:
        return ["datetime", value.isoformat()]
    if dataclasses.is_dataclass(value):
        return [kind.__qualname__, [[f.name, canonical(getattr(value, f.name))] for f in dataclasses.fields(value)]]
    if kind in (list, tuple, FrozenList):
        return [kind.__name__, [canonical(item) for item in value]]
    if kind in (dict, FrozenDict):
        return [kind.__name__, [[canonical(k), canonical(v)] for k, v in value.items()]]
    if kind in (set, frozenset):
        return [kind.__name__, sorted(repr(canonical(item)) for item in value)]
    if isinstance(value, BaseModel):
        fields = [[name, canonical(getattr(value, name))] for name in type(value).model_fields]
        return [kind.__qualname__, fields, canonical(dict(value.__pydantic_extra__ or {}))]
    return ["unexpected", kind.__qualname__, repr(value)]


def assert_exact(expected: Any, actual: Any) -> None:
    assert canonical(actual) == canonical(expected)


# -- savers that can be reopened ---------------------------------------------------------------------------------


class Store:
    """A saver kind whose storage outlives the saver: ``open()`` gives a new saver on the same file (or PostgreSQL
    schema), with nothing cached; every saver opened is closed when the test ends."""

    def __init__(self, open_saver: Callable[[], CheckpointSaver]) -> None:
        self._open = open_saver
        self.opened: list[CheckpointSaver] = []

    def open(self) -> CheckpointSaver:
        self.opened.append(self._open())
        return self.opened[-1]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """SQLite and PostgreSQL: a ``MemorySaver`` keeps the very objects it is given, so there is nothing to read back."""
    if request.param == "sqlite":
        made = Store(lambda: SqliteSaver(tmp_path / "exact.db", serde=SERDE))
    else:
        dsn, schema = request.getfixturevalue("postgres_server"), request.getfixturevalue("postgres_schema")
        made = Store(lambda: PostgresSaver(dsn, schema=schema, serde=SERDE, max_connections=2))
    yield made
    for saver in made.opened:
        saver.close()  # type: ignore[attr-defined]


def _checkpoint(values: dict[str, Any], seq: int = 1, parent: str | None = None) -> Checkpoint:
    return Checkpoint(id=f"c{seq}", thread_id="t", seq=seq, parent_id=parent, values=values, run_id="r", source="input")


def _read_back(store: Store, values: dict[str, Any]) -> tuple[Checkpoint, dict[str, Any]]:
    """Put ``values`` on one saver; read them back on another, by id and by list."""
    written = _checkpoint(values)
    store.open().put(written, expected_head=None)
    reader = store.open()
    by_id = reader.get("t", "c1")
    listed = reader.list("t")
    assert by_id is not None and [c.id for c in listed] == ["c1"]
    assert_exact(dict(by_id.values), dict(listed[0].values))
    return written, dict(by_id.values)


# -- registered models ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(OPEN_VALUES))
def test_a_models_field_typed_any_reads_back_with_the_same_types_after_a_reopen(store: Store, name: str) -> None:
    box = Box(value=OPEN_VALUES[name])
    # A state value, and an item of a list key (stored one row per item).
    written, back = _read_back(store, {"box": box, "boxes": [box]})
    assert_exact(written.values["box"], back["box"])
    assert_exact(written.values["boxes"], back["boxes"])


def test_typed_and_open_fields_extra_fields_and_nested_models_read_back_exactly(store: Store) -> None:
    record = Record(
        when=_WHEN,
        pair=(1, 2),
        payload={"ids": (1, 2), "raw": b"\x01", "nested": Box(value=Inner(x=3)), "n": math.nan},
        items=("a", [1.5, None], {7: "seven"}),
        either=b"bytes, not text",
        # Open fields that hold what the serde has no encoding for, but pydantic's JSON gives back as it is.
        choice=Point(x=1),
        both=Pair(left=1, right={"a": [None]}),
    )
    loose = Loose(name="x", shape=(2, 3), note="plain", scores={"a": math.inf})
    nested = Box(value=Box(value=Box(value=(Record(when=_WHEN, pair=(3, 4)),))))
    either = Either(shape=Wide(x=1))  # the union's first member: pydantic's JSON gives it back
    written, back = _read_back(store, {"record": record, "loose": loose, "nested": nested, "either": either})
    for key in ("record", "loose", "nested", "either"):
        assert_exact(written.values[key], back[key])
    assert back["loose"].__pydantic_extra__ == {"shape": (2, 3), "note": "plain", "scores": {"a": math.inf}}
    assert list(back["loose"].__pydantic_extra__) == ["shape", "note", "scores"]


def test_messages_keep_their_stored_bytes_and_old_rows_read_as_they_always_did() -> None:
    call = ToolCall(id="c1", name="f", arguments="{}")
    assert SERDE.dumps(AssistantMessage(content="hi", tool_calls=[call])) == (
        '{"$type":"rxgraph.AssistantMessage","data":{"role":"assistant","content":"hi","tool_calls":[{"id":"c1",'
        '"name":"f","arguments":"{}"}],"refusal":null,"name":null,"usage":null}}'
    )
    # A field typed Any that holds what JSON carries as it is is still written the way it always was.
    plain = Box(value={"a": [1, 2.5, None, "s", True]})
    assert SERDE.dumps(plain) == '{"$type":"tests.exact.Box","data":{"value":{"a":[1,2.5,null,"s",true]}}}'
    assert_exact(plain, SERDE.loads(SERDE.dumps(plain)))
    # Rows written before exact storage: a tuple that was stored as a list still reads as the list it was stored as.
    assert SERDE.loads('{"$type":"tests.exact.Box","data":{"value":[1,2]}}') == Box(value=[1, 2])
    assert SERDE.loads('{"$type":"rxgraph.UserMessage","data":{"role":"user","content":"x"}}') == UserMessage(
        content="x"
    )
    # What pydantic's JSON would change is now stored under a tag of its own, and reads back exactly.
    tuple_box = Box(value=(1, 2))
    assert SERDE.dumps(tuple_box) == '{"$model":"tests.exact.Box","data":{},"values":{"value":{"$tuple":[1,2]}}}'
    assert_exact(tuple_box, SERDE.loads(SERDE.dumps(tuple_box)))


def test_what_a_model_field_cannot_hold_exactly_is_refused_at_write_naming_the_key_and_the_field(
    store: Store,
) -> None:
    saver = store.open()
    cases: list[tuple[Any, str, type]] = [
        (
            Box(value=datetime(2024, 1, 1, tzinfo=UTC)),
            r"state key 'k' at \.value: a value of type datetime\.",
            datetime,
        ),
        (Box(value={"a": object()}), r"state key 'k' at \.value\['a'\]: a value of type builtins\.object", object),
        (
            Record(when=_WHEN, pair=(1, 2), both=Pair(left=(1, 2))),
            r"state key 'k' at \.both: a value of type .*Pair",
            Pair,
        ),
        (Either(shape=Point(x=1)), r"state key 'k' at \.shape: the pydantic model .*Point is not registered", Point),
        (
            Counter(n=BIG),
            r"state key 'k': the model tests\.exact\.Counter holds an int of more than 4300 digits at \['n'\]",
            Counter,
        ),
    ]
    for value, match, value_type in cases:
        with pytest.raises(SerializationError, match=match) as caught:
            saver.put(_checkpoint({"k": value}), expected_head=None)
        assert caught.value.key == "k" and caught.value.value_type is value_type
    assert saver.get("t") is None  # nothing was stored


# -- ints too long for decimal text ----------------------------------------------------------------------------


def test_an_int_too_long_for_decimal_text_is_stored_exactly(store: Store) -> None:
    values = {
        "big": BIG,
        "negative": -BIG,
        "largest plain": 10**4300 - 1,  # 4,300 digits: still plain JSON
        "in a list": [1, BIG, (BIG, {"k": -BIG})],
    }
    written, back = _read_back(store, values)
    assert_exact(dict(written.values), back)
    assert SERDE.dumps(10**4300 - 1) == "9" * 4300  # the format of ints that always round-tripped is unchanged


# -- depth -----------------------------------------------------------------------------------------------------------


def _nested(levels: int, leaf: Any = 0) -> Any:
    """``levels`` containers, one inside the other: lists, tuples and dicts in turn."""
    value = leaf
    for level in range(levels):
        value = [value] if level % 3 == 0 else (value,) if level % 3 == 1 else {"k": value}
    return value


def _boxes(levels: int) -> Any:
    """``levels`` registered models, one inside the other."""
    value: Any = "leaf"
    for _ in range(levels):
        value = Box(value=value)
    return value


def test_the_deepest_value_allowed_round_trips_and_one_level_more_is_refused_before_anything_is_stored(
    store: Store,
) -> None:
    deepest = {"lists": _nested(MAX_DEPTH), "in a model": Box(value=_nested(MAX_DEPTH - 1)), "models": _boxes(100)}
    written, back = _read_back(store, deepest)
    assert_exact(dict(written.values), back)

    saver = store.open()
    for too_deep in (_nested(MAX_DEPTH + 1), Box(value=_nested(MAX_DEPTH)), _boxes(MAX_DEPTH + 1)):
        with pytest.raises(SerializationError, match=f"more than {MAX_DEPTH} levels deep") as caught:
            saver.put(_checkpoint({"ok": 1, "deep": too_deep}, seq=2, parent="c1"), expected_head="c1")
        assert caught.value.key == "deep"
    head = saver.get("t")
    assert head is not None and head.id == "c1"


def test_a_graph_input_nested_deeper_than_the_limit_is_refused_before_the_run_starts() -> None:
    saver = MemorySaver()
    graph = StateGraph().add_node("echo", lambda state: {}).add_edge(START, "echo").add_edge("echo", END)
    app = graph.compile(checkpointer=saver)
    deepest = _nested(MAX_DEPTH)
    assert_exact(freeze(deepest), app.invoke({"v": deepest}, RunnableConfig(thread_id="t"))["v"])
    with pytest.raises(InvalidArgumentError, match=f"more than {MAX_DEPTH} levels deep"):
        app.invoke({"v": _nested(MAX_DEPTH + 1)}, RunnableConfig(thread_id="u"))
    assert saver.threads() == ["t"]


# -- list limits -----------------------------------------------------------------------------------------------------


def test_list_refuses_a_limit_no_sql_engine_can_take(saver_factory: Callable[[], CheckpointSaver]) -> None:
    saver = saver_factory()
    saver.put(_checkpoint({"a": 1}), expected_head=None)
    assert [c.id for c in saver.list("t", limit=2**63 - 1)] == ["c1"]
    for absurd in (2**63, 10**30, BIG):
        with pytest.raises(InvalidArgumentError, match="at most 2\\*\\*63 - 1") as caught:
            saver.list("t", limit=absurd)
        assert caught.value.argument == "limit"
    for wrong in (1.5, True, "2"):
        with pytest.raises(InvalidTypeError, match="limit must be None or an int") as wrong_type:
            saver.list("t", limit=wrong)  # type: ignore[arg-type]
        assert wrong_type.value.argument == "limit"


# -- messages with content parts -------------------------------------------------------------------------------------

_PARTS_HISTORY = [
    SystemMessage(role="developer", content=(TextPart(text="be brief", prompt_cache_breakpoint=CacheBreakpoint()),)),
    UserMessage(
        content=(
            TextPart(text="what is on these?"),
            ImagePart(url="https://example.com/a.png", detail="low"),
            ImagePart.from_bytes(b"\x89PNG\r\n", detail="high"),
            AudioPart.from_bytes(b"RIFF....WAVE", "wav"),
            FilePart(file_id="file-1"),
            FilePart.from_bytes(b"%PDF-1.4", "a.pdf"),
            FilePart(file_id="file-2", filename="b.pdf", prompt_cache_breakpoint=CacheBreakpoint(ttl="12h")),
        ),
        name="alice",
    ),
    AssistantMessage(
        content=(TextPart(text="Let me look."),), tool_calls=(ToolCall(id="c1", name="f", arguments="{"),)
    ),
    ToolMessage(tool_call_id="c1", content=(TextPart(text="a"), TextPart(text="b")), name="f"),
    AssistantMessage(content=(TextPart(text="Partly:"), RefusalPart(refusal="no more"))),
    UserMessage(content=()),
    AssistantMessage(content=None, refusal="no"),
]


def test_messages_with_content_parts_read_back_exactly(store: Store) -> None:
    history = FrozenList(_PARTS_HISTORY)
    written, back = _read_back(store, {"messages": history, "last": _PARTS_HISTORY[1]})
    for key in ("messages", "last"):
        assert_exact(written.values[key], back[key])
    assert list(back["messages"]) == _PARTS_HISTORY and back["last"] == _PARTS_HISTORY[1]
    # The memory saver keeps the very objects.
    memory = MemorySaver()
    memory.put(_checkpoint({"messages": history}), expected_head=None)
    got = memory.get("t", "c1")
    assert got is not None and list(got.values["messages"]) == _PARTS_HISTORY


def test_a_part_is_stored_as_its_fields_and_a_text_message_as_before() -> None:
    assert SERDE.dumps(UserMessage(content=(ImagePart(url="u", detail="low"),))) == (
        '{"$type":"rxgraph.UserMessage","data":{"role":"user","content":[{"type":"image","url":"u","detail":"low",'
        '"prompt_cache_breakpoint":null}],"name":null}}'
    )
    assert (
        SERDE.dumps(UserMessage(content="x"))
        == '{"$type":"rxgraph.UserMessage","data":{"role":"user","content":"x","name":null}}'
    )
    # A part is a registered model of its own, too: a state may hold one.
    assert SERDE.loads(SERDE.dumps(ImagePart(url="u"))) == ImagePart(url="u")
