"""``@tool`` resolves its function's type hints where the tool is made, as pydantic does: a tool defined in a
factory (or a test, or a notebook cell) may use types imported or defined there, even under postponed annotations —
which this module uses on purpose: every hint below is a string until the tool resolves it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from rxgraph.agent import Tool, tool
from rxgraph.errors import InvalidTypeError

Amount = int  # a module-level name that a factory's own ``Amount`` must win over


def _schema(made: Tool) -> dict[str, Any]:
    return made.spec.parameters


def test_a_type_imported_inside_the_factory_resolves_with_and_without_decorator_arguments() -> None:
    def make() -> list[Tool]:
        from fractions import Fraction
        from ipaddress import IPv4Address

        @tool
        def ping(host: IPv4Address) -> str:
            """Ping a host."""
            return f"pong from {host}"

        @tool(name="halve", description="Half of a fraction.")
        def half(value: Fraction) -> Fraction:
            return value / 2

        return [ping, half]

    ping, halve = make()
    assert ping.spec.name == "ping" and _schema(ping)["properties"]["host"]["format"] == "ipv4"
    assert ping(**ping.parse_arguments('{"host": "10.0.0.1"}')) == "pong from 10.0.0.1"
    assert halve.spec.name == "halve" and halve.description == "Half of a fraction."
    assert halve(**halve.parse_arguments('{"value": "3/4"}')) == Decimal("0.375")


def test_a_pydantic_model_defined_in_the_factory_resolves_and_validates() -> None:
    def make(currency: str) -> tuple[Tool, Tool]:
        class Item(BaseModel):
            name: str
            price: Decimal

        @tool
        def total(items: list[Item]) -> str:
            """The total of a basket."""
            return f"{sum(item.price for item in items)} {currency}"

        @tool(requires_approval=True)
        def buy(item: Item, quantity: int = 1) -> str:
            """Buy an item."""
            return f"bought {quantity} x {item.name}"

        return total, buy

    total, buy = make("EUR")
    assert _schema(total)["properties"]["items"]["items"] == {"$ref": "#/$defs/Item"}
    assert set(_schema(total)["$defs"]["Item"]["properties"]) == {"name", "price"}
    arguments = total.parse_arguments('{"items": [{"name": "tea", "price": "1.10"}, {"name": "jam", "price": "2"}]}')
    assert total(**arguments) == "3.10 EUR"
    assert buy.requires_approval and buy(**buy.parse_arguments('{"item": {"name": "tea", "price": 1}}')) == (
        "bought 1 x tea"
    )


def test_a_name_of_the_factory_wins_over_the_same_name_in_the_module() -> None:
    def make() -> Tool:
        class Amount(BaseModel):  # not the module's Amount = int
            value: Decimal
            currency: str

        @tool
        def pay(amount: Amount) -> str:
            """Pay an amount."""
            return f"paid {amount.value} {amount.currency}"

        return pay

    pay = make()
    assert _schema(pay)["properties"]["amount"] == {"$ref": "#/$defs/Amount"}
    assert pay(**pay.parse_arguments('{"amount": {"value": "9.5", "currency": "EUR"}}')) == "paid 9.5 EUR"


def test_a_tool_made_with_the_tool_class_inside_a_factory_resolves_there_too() -> None:
    class Wrapped(Tool):
        def __init__(self, fn: Any) -> None:
            super().__init__(fn, name="wrapped_" + fn.__name__)

    def make() -> tuple[Tool, Tool]:
        from uuid import UUID

        def find(order: UUID) -> str:
            """Find an order."""
            return order.hex

        return Tool(find), Wrapped(find)

    for made in make():
        assert _schema(made)["properties"]["order"]["format"] == "uuid"
        assert made(**made.parse_arguments('{"order": "12345678-1234-5678-1234-567812345678"}')) == (
            "12345678123456781234567812345678"
        )


def test_a_name_that_resolves_nowhere_still_says_what_to_do() -> None:
    def make() -> Tool:
        @tool
        def later(value: DefinedLater) -> str:
            """Uses a class the factory defines only after making the tool."""
            return str(value)

        class DefinedLater(BaseModel):  # too late: the hints are resolved when the tool is made
            pass

        return later

    with pytest.raises(InvalidTypeError, match="cannot resolve the type hints") as caught:
        make()
    assert caught.value.argument == "fn" and isinstance(caught.value.__cause__, NameError)
    assert "DefinedLater" in str(caught.value) and "define or import each type before the tool is made" in str(
        caught.value
    )


@tool
def convert(amount: Amount, rate: Decimal = Decimal("1.5")) -> str:
    """Convert an amount at a rate."""
    return str(amount * rate)


def test_a_plain_function_made_a_tool_at_module_level_still_resolves_from_its_module() -> None:
    assert _schema(convert)["properties"]["amount"] == {"title": "Amount", "type": "integer"}
    assert convert(**convert.parse_arguments('{"amount": 2}')) == "3.0"
