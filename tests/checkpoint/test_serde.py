"""Serde: JSON with an explicit registry of types; frozen results; clear refusals; no pickle anywhere."""

from __future__ import annotations

import ast
import enum
import json
import math
from collections import namedtuple
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import rxgraph
from rxgraph import FrozenDict, FrozenList
from rxgraph.checkpoint import Serde, default_serde, register_model
from rxgraph.checkpoint._serde import json_text, parse_json_text
from rxgraph.errors import DecodeError, InvalidArgumentError, InvalidTypeError, RxGraphError, SerializationError
from rxgraph.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage


class Weather(BaseModel):
    model_config = ConfigDict(frozen=True)

    city: str
    celsius: float
    tags: tuple[str, ...] = ()


class Aliased(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    user_name: str = Field(alias="userName")


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

    at: datetime
    pair: tuple[int, int]
    raw: bytes


class Color(enum.IntEnum):
    RED = 1


def _round_trip(value: Any, serde: Serde = default_serde) -> Any:
    text = serde.dumps(value)
    json.loads(text)  # standard JSON: no NaN/Infinity tokens, nothing Python-specific
    return serde.loads(text)


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**70, 1.5, -0.0, "", "héllo ☃", "$not-a-tag", 1e300],
)
def test_scalars_round_trip_with_their_types(value: Any) -> None:
    back = _round_trip(value)
    assert back == value and type(back) is type(value)


def test_non_finite_floats_are_tagged_and_come_back() -> None:
    assert _round_trip(math.inf) == math.inf
    assert _round_trip(-math.inf) == -math.inf
    assert math.isnan(_round_trip(math.nan))
    assert json.loads(default_serde.dumps([math.inf])) == [{"$float": "inf"}]


def test_messages_round_trip() -> None:
    messages = [
        SystemMessage(content="be brief"),
        UserMessage(content="weather?"),
        AssistantMessage(content="", tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"city": "Oslo"')]),
        ToolMessage(tool_call_id="c1", content="rain", name="lookup", is_error=True),
        AssistantMessage(content="It rains."),
    ]
    back = _round_trip(messages)
    assert isinstance(back, FrozenList) and back == messages
    assert [type(m) for m in back] == [type(m) for m in messages]
    assert back[2].tool_calls[0].arguments == '{"city": "Oslo"'  # kept byte for byte, even when not valid JSON


def test_containers_come_back_frozen() -> None:
    value = {
        "list": [1, [2, 3], {"k": [4]}],
        "tuple": (1, (2, "x"), [3]),
        "frozen": FrozenDict({"a": FrozenList([1])}),
        "proxy": MappingProxyType({"p": 1}),
        "set": {1, 2, 3},
        "frozenset": frozenset({"a"}),
        "bytes": b"\x00\xff",
        "empty": ([], {}, ()),
    }
    back = _round_trip(value)
    assert back == value
    assert isinstance(back, FrozenDict)
    assert isinstance(back["list"], FrozenList) and isinstance(back["list"][1], FrozenList)
    assert isinstance(back["list"][2], FrozenDict) and isinstance(back["list"][2]["k"], FrozenList)
    assert type(back["tuple"]) is tuple and type(back["tuple"][1]) is tuple and isinstance(back["tuple"][2], FrozenList)
    assert isinstance(back["proxy"], FrozenDict)
    assert back["set"] == frozenset({1, 2, 3}) and type(back["set"]) is frozenset
    assert back["bytes"] == b"\x00\xff"
    hash(back)  # frozen all the way down


def test_user_keys_that_look_like_tags_are_escaped() -> None:
    value = {
        "$type": "rxgraph.UserMessage",
        "data": {"role": "user", "content": "not a message"},
        "$tuple": [1],
        "$$already": 1,
        "$": 2,
        "plain": {"$set": [1]},
    }
    back = _round_trip(value)
    assert back == value and isinstance(back, FrozenDict)
    assert isinstance(back["data"], FrozenDict)  # not turned into a UserMessage


def test_unregistered_model_is_refused_naming_the_type_the_key_and_the_fix() -> None:
    with pytest.raises(SerializationError) as caught:
        default_serde.dumps({"forecast": [Weather(city="Oslo", celsius=3.0)]}, key="state")
    message = str(caught.value)
    assert "Weather" in message and "'state'" in message and "['forecast'][0]" in message
    assert "register" in message
    assert caught.value.value_type is Weather and caught.value.key == "state"
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, RxGraphError)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (object(), "object"),
        (Color.RED, "Color"),
        (namedtuple("Point", "x y")(1, 2), "Point"),
        ({1: "a"}, "int key"),
        ({("a",): 1}, "tuple key"),
        ([1, {2.5: "x"}], "float key"),
    ],
)
def test_other_types_and_non_str_keys_are_refused(value: Any, named: str) -> None:
    with pytest.raises(SerializationError, match=named):
        default_serde.dumps(value, key="k")


def test_a_user_registered_model_round_trips() -> None:
    serde = Serde()
    serde.register(Weather)
    value = {"now": Weather(city="Oslo", celsius=-2.5, tags=("snow",)), "history": [Weather(city="Rome", celsius=20)]}
    back = _round_trip(value, serde)
    assert back == value and isinstance(back["now"], Weather) and back["now"].tags == ("snow",)
    assert serde.registered[f"{Weather.__module__}.Weather"] is Weather
    # The default registry is a different one: it does not know Weather.
    with pytest.raises(SerializationError):
        default_serde.dumps(Weather(city="x", celsius=0))


def test_a_strict_model_with_non_json_field_types_round_trips() -> None:
    value = Strict(at=datetime(2024, 5, 1, 12, 30, tzinfo=UTC), pair=(1, 2), raw=b"abc")
    assert _round_trip(value, Serde([Strict])) == value


def test_register_is_a_decorator_with_stable_names_and_refuses_clashes() -> None:
    serde = Serde()

    @serde.register
    class Note(BaseModel):
        model_config = ConfigDict(frozen=True)
        text: str

    serde.register(Note)  # the same again is fine
    serde.register(Aliased, "app.Aliased")
    back = _round_trip([Note(text="hi"), Aliased(userName="ada")], serde)
    assert back == [Note(text="hi"), Aliased(userName="ada")]
    with pytest.raises(InvalidArgumentError, match="already registered") as name_taken:
        serde.register(Weather, "app.Aliased")
    with pytest.raises(InvalidArgumentError, match=r"already registered as 'app\.Aliased'") as class_taken:
        serde.register(Aliased, "app.Other")
    with pytest.raises(InvalidArgumentError, match="non-empty string") as empty:
        serde.register(Weather, "")
    for caught in (name_taken, class_taken, empty):
        assert caught.value.argument == "name" and isinstance(caught.value, ValueError)
    with pytest.raises(InvalidTypeError, match="only pydantic models") as not_a_model:
        serde.register(dict)  # type: ignore[type-var]
    assert not_a_model.value.argument == "model_cls" and isinstance(not_a_model.value, TypeError)
    assert "app.Other" not in serde.registered and f"{Weather.__module__}.Weather" not in serde.registered


def test_the_module_level_registry_serves_every_saver_by_default() -> None:
    class Ping(BaseModel):
        model_config = ConfigDict(frozen=True)
        n: int

    name = "tests.checkpoint.Ping"
    assert register_model(Ping, name) is Ping
    assert default_serde.registered[name] is Ping
    assert default_serde.loads(default_serde.dumps(Ping(n=1))) == Ping(n=1)


def test_non_finite_floats_inside_a_model_are_refused() -> None:
    serde = Serde([Weather])
    with pytest.raises(SerializationError, match=r"non-finite float at \['celsius'\]"):
        serde.dumps({"w": Weather(city="Oslo", celsius=math.nan)}, key="x")


def test_a_subclass_of_a_registered_model_is_not_taken_for_it() -> None:
    class LoudUserMessage(UserMessage):
        pass

    with pytest.raises(SerializationError, match="LoudUserMessage"):
        default_serde.dumps(LoudUserMessage(content="HI"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"$type": "nobody.Knows", "data": {}}', "not registered"),
        ('{"$pickle": "gASV"}', "not an rxgraph value encoding"),
        ('{"$tuple": 1}', "must hold an array"),
        ('{"$float": "huge"}', "must be one of"),
        ('{"$type": "rxgraph.UserMessage"}', "not an rxgraph value encoding"),
        ('{"$bytes": "not base64!"}', "base64"),
        ("[1, 2", "delimiter"),
        (b"\xff\xfe[", "not an rxgraph value encoding"),
    ],
)
def test_text_that_does_not_decode_raises_decode_error(text: str | bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as caught:
        default_serde.loads(text)
    assert isinstance(caught.value, ValueError)


def test_model_data_that_no_longer_validates_raises_pydantics_validation_error() -> None:
    with pytest.raises(ValidationError, match="content"):
        default_serde.loads('{"$type": "rxgraph.UserMessage", "data": {"role": "user"}}')


def test_decoding_many_texts_at_once_refuses_a_text_that_would_shift_the_others() -> None:
    texts = [default_serde.dumps(UserMessage(content="a")), "1, 2", default_serde.dumps(None)]
    with pytest.raises(DecodeError, match="expected 3 encoded values"):
        default_serde.loads_many(texts)
    assert default_serde.loads_many(texts[::2]) == [UserMessage(content="a"), None]


_FORBIDDEN = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "copyreg", "jsonpickle"}


def test_no_pickle_like_module_is_imported_anywhere_in_the_package() -> None:
    package = Path(rxgraph.__file__).parent
    offenders: list[str] = []
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 10
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                # __import__("pickle") / importlib.import_module("pickle")
                func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if func in {"__import__", "import_module"} and node.args and isinstance(node.args[0], ast.Constant):
                    names = [str(node.args[0].value)]
            offenders += [f"{path.relative_to(package)}: {n}" for n in names if n.split(".")[0] in _FORBIDDEN]
    assert offenders == []


# -- strings that are not valid Unicode text on their own --------------------------------------------------------

_HALVES = "\ud83d" + "\ude00"  # an emoji split across two streamed deltas, joined back: two code points, not one

_SURROGATE_VALUES: list[Any] = [
    "\ud83d",
    "\ude00",
    _HALVES,
    "ok \ud83d then \ude00 and 😀",
    {"delta": "\ud83d", "\udc80key": _HALVES, "$\ud800": 1},
    ["plain", "\udfff", ("\ud800", b"\xed\xa0\x80")],
    frozenset({"\ud83d", _HALVES}),
    AssistantMessage(content=_HALVES),
    AssistantMessage(content="", tool_calls=[ToolCall(id="c1", name="f", arguments='{"q": "\ude00"}')]),
    [UserMessage(content="\ud83d"), ToolMessage(tool_call_id="c", content=_HALVES)],
]


def _code_points(value: Any) -> Any:
    if isinstance(value, str):
        return [ord(c) for c in value]
    if isinstance(value, BaseModel):
        return [type(value).__name__, {k: _code_points(v) for k, v in value}]
    if isinstance(value, dict | FrozenDict):
        return [[_code_points(k), _code_points(v)] for k, v in value.items()]
    if isinstance(value, list | tuple | FrozenList):  # a list comes back as a FrozenList, a tuple as a tuple
        return ["tuple" if type(value) is tuple else "list", [_code_points(v) for v in value]]
    if isinstance(value, frozenset):
        return sorted(json.dumps(_code_points(v)) for v in value)
    return value


@pytest.mark.parametrize("value", _SURROGATE_VALUES)
def test_lone_surrogates_round_trip_exactly_as_text_that_encodes_to_utf8(value: Any) -> None:
    text = default_serde.dumps(value)
    text.encode("utf-8")  # what SQLite (or any UTF-8 store) is given
    back = default_serde.loads(text)
    assert back == value
    assert _code_points(back) == _code_points(value)
    assert default_serde.loads(text.encode("utf-8")) == value
    assert default_serde.loads_many([text, default_serde.dumps("x"), text]) == [value, "x", value]


def test_the_surrogate_pair_of_two_code_points_is_not_turned_into_the_emoji() -> None:
    back = default_serde.loads(default_serde.dumps(_HALVES))
    assert back == _HALVES and back != "😀" and len(back) == 2
    emoji = default_serde.loads(default_serde.dumps("😀"))
    assert emoji == "😀" and len(emoji) == 1


def test_valid_text_is_stored_as_plain_json() -> None:
    # Only text that UTF-8 cannot carry is wrapped; everything else stays readable JSON.
    assert default_serde.dumps("héllo 😀") == '"héllo 😀"'
    assert default_serde.dumps({"a": ["b"]}) == '{"a":["b"]}'
    assert json.loads(default_serde.dumps("\ud83d")).keys() == {"$wtf8"}


@pytest.mark.parametrize("text", ['{"$wtf8": 1}', '{"$wtf8": "not base64!"}', '{"$wtf8": "/w=="}'])
def test_a_damaged_wrapped_text_raises_decode_error(text: str) -> None:
    with pytest.raises(DecodeError, match=r"\$wtf8"):
        default_serde.loads(text)


def test_a_set_of_distinct_nan_objects_keeps_its_size() -> None:
    # Two nan objects are two members of a set (nan != nan); decoding both as one shared nan made them collapse.
    for value in [frozenset({float("nan"), float("nan")}), frozenset({(float("nan"),), (float("nan"),), 1})]:
        back = default_serde.loads(default_serde.dumps(value))
        assert type(back) is frozenset and len(back) == len(value)
    first, second = default_serde.loads(default_serde.dumps([math.nan, math.nan]))
    assert math.isnan(first) and math.isnan(second) and first is not second


def test_dumps_names_the_list_item_it_was_given() -> None:
    with pytest.raises(SerializationError, match=r"state key 'messages' at \[3\]\['w'\]: .*Weather") as caught:
        default_serde.dumps({"w": Weather(city="Oslo", celsius=1.0)}, key="messages", index=3)
    assert caught.value.key == "messages" and caught.value.value_type is Weather
    assert default_serde.dumps("x", key="messages", index=3) == default_serde.dumps("x") == '"x"'


@pytest.mark.parametrize(
    "obj",
    [
        {"a": 1, "b": [None, 2]},
        {"\ud83d\ude00": 1, "😀": 2, "\ud83d": [3, 4]},  # surrogates, which UTF-8 cannot carry as they are
        {"$wtf8": "x"},  # looks like the wrapper
        {"$wtf8": "\ud800"},
        {"$wtf8": 7},
        "\udc80",
        [],
    ],
)
def test_json_text_is_read_back_exactly_by_parse_json_text(obj: Any) -> None:
    text = json_text(obj)
    text.encode("utf-8")  # always storable as UTF-8
    back = parse_json_text(text)
    assert back == obj and type(back) is type(obj)
    if isinstance(obj, dict):
        assert [[ord(c) for c in key] for key in back] == [[ord(c) for c in key] for key in obj]
    assert parse_json_text(text.encode("utf-8")) == obj


def test_json_text_is_plain_json_when_it_can_be() -> None:
    assert json_text({"key": [1, None], "ü": 2}) == '{"key":[1,null],"ü":2}'
