"""Schema compatibility: which changes each mode accepts, and which field an error names."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from eventplatform.events import IncompatibleSchemaError
from eventplatform.events.compatibility import (
    Compatibility,
    check_compatible,
    differing_field,
    find_incompatibility,
)


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Plain(Payload):
    id: str


class WithOptionalReferrer(Payload):
    id: str
    referrer: str | None = None


class WithRequiredReferrer(Payload):
    id: str
    referrer: str


class WithDefaultedReferrer(Payload):
    id: str
    referrer: str = ""


class WithNullableReferrer(Payload):
    id: str
    referrer: str | None


class IntAmount(Payload):
    amount: int


class FloatAmount(Payload):
    amount: float


class StrAmount(Payload):
    amount: str


class IntOrStrAmount(Payload):
    amount: int | str


class Address(Payload):
    city: str


class AddressWithIntCity(Payload):
    city: int


class AddressWithZip(Payload):
    city: str
    zip: str


class Location(Payload):
    """The same fields as Address under another class name."""

    city: str


class Shipping(Payload):
    address: Address


class ShippingToLocation(Payload):
    address: Location


class ShippingWithIntCity(Payload):
    address: AddressWithIntCity


class ShippingWithZip(Payload):
    address: AddressWithZip


class MaybeShipping(Payload):
    address: Address | None = None


class MaybeShippingWithIntCity(Payload):
    address: AddressWithIntCity | None = None


class ShippingAsDict(Payload):
    address: dict[str, str]


class Line(Payload):
    sku: str
    quantity: int


class LineWithIntSku(Payload):
    sku: int
    quantity: int


class Order(Payload):
    lines: list[Line]


class OrderWithIntSkus(Payload):
    lines: list[LineWithIntSku]


class IntTags(Payload):
    tags: list[int] = []


class StrTags(Payload):
    tags: list[str] = []


class IntAttributes(Payload):
    attributes: dict[str, int] = {}


class StrAttributes(Payload):
    attributes: dict[str, str] = {}


class IntStrPair(Payload):
    pair: tuple[int, str]


class IntIntPair(Payload):
    pair: tuple[int, int]


class Status(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class StatusWithPending(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    PENDING = "pending"


class Ticket(Payload):
    status: Status


class TicketWithPending(Payload):
    status: StatusWithPending


class TwoChannels(Payload):
    channel: Literal["web", "mobile"]


class ThreeChannels(Payload):
    channel: Literal["web", "mobile", "email"]


class LongName(Payload):
    name: Annotated[str, Field(max_length=100)]


class ShortName(Payload):
    name: Annotated[str, Field(max_length=20)]


class NonNegative(Payload):
    count: Annotated[int, Field(ge=0)]


class Positive(Payload):
    count: Annotated[int, Field(gt=0)]


class StrId(Payload):
    id: str


class UuidId(Payload):
    id: uuid.UUID


class Node(Payload):
    children: list[Node] = []
    name: str


class NodeWithIntName(Payload):
    children: list[NodeWithIntName] = []
    name: int


class Tree(Payload):
    root: Node


class TreeWithIntNames(Payload):
    root: NodeWithIntName


class StrTitle(Payload):
    """A field named like a JSON-schema keyword."""

    id: str
    title: str


class IntTitle(Payload):
    id: str
    title: int


class Documented(Payload):
    """Some words that end up as the schema's description."""

    id: str = Field(description="the entity id", title="Identifier")


@dataclass(frozen=True)
class Case:
    """``previous`` → ``new``, and the field each direction names (``None``: compatible)."""

    name: str
    previous: type[BaseModel]
    new: type[BaseModel]
    backward: str | None
    forward: str | None

    def expected(self, mode: Compatibility) -> str | None:
        if mode is Compatibility.BACKWARD:
            return self.backward
        if mode is Compatibility.FORWARD:
            return self.forward
        if mode is Compatibility.FULL:
            return self.backward if self.backward is not None else self.forward
        return None


CASES = [
    Case("unchanged", Plain, Plain, None, None),
    Case("add a field with a default", Plain, WithOptionalReferrer, None, None),
    Case("add a required field", Plain, WithRequiredReferrer, "referrer", None),
    Case("remove a required field", WithRequiredReferrer, Plain, None, "referrer"),
    Case("remove a field with a default", WithDefaultedReferrer, Plain, None, None),
    Case("make an optional field required", WithDefaultedReferrer, WithRequiredReferrer,
         "referrer", None),
    Case("make a required field optional", WithRequiredReferrer, WithDefaultedReferrer,
         None, "referrer"),
    Case("T to T | None", WithRequiredReferrer, WithNullableReferrer, None, "referrer"),
    Case("int to float", IntAmount, FloatAmount, None, "amount"),
    Case("float to int", FloatAmount, IntAmount, "amount", None),
    Case("int to str", IntAmount, StrAmount, "amount", "amount"),
    Case("add a union member", IntAmount, IntOrStrAmount, None, "amount"),
    Case("nested field changes type", Shipping, ShippingWithIntCity,
         "address.city", "address.city"),
    Case("nested required field added", Shipping, ShippingWithZip, "address.zip", None),
    Case("nested model renamed", Shipping, ShippingToLocation, None, None),
    Case("optional nested field changes type", MaybeShipping, MaybeShippingWithIntCity,
         "address.city", "address.city"),
    Case("model to dict", Shipping, ShippingAsDict, "address", "address"),
    Case("list item model field changes type", Order, OrderWithIntSkus,
         "lines[].sku", "lines[].sku"),
    Case("list item type changes", IntTags, StrTags, "tags[]", "tags[]"),
    Case("dict value type changes", IntAttributes, StrAttributes,
         "attributes.*", "attributes.*"),
    Case("tuple position changes type", IntStrPair, IntIntPair, "pair[1]", "pair[1]"),
    Case("add an enum value", Ticket, TicketWithPending, None, "status"),
    Case("remove an enum value", TicketWithPending, Ticket, "status", None),
    Case("add a literal value", TwoChannels, ThreeChannels, None, "channel"),
    Case("remove a literal value", ThreeChannels, TwoChannels, "channel", None),
    Case("tighten max_length", LongName, ShortName, "name", None),
    Case("loosen max_length", ShortName, LongName, None, "name"),
    Case("ge=0 to gt=0", NonNegative, Positive, "count", None),
    Case("gt=0 to ge=0", Positive, NonNegative, None, "count"),
    Case("str to UUID (a format)", StrId, UuidId, "id", None),
    Case("recursive model unchanged", Tree, Tree, None, None),
    Case("recursive model field changes type", Tree, TreeWithIntNames,
         "root.name", "root.name"),
    Case("a field named 'title' changes type", StrTitle, IntTitle, "title", "title"),
    Case("a field named 'title' is added", Plain, StrTitle, "title", None),
    Case("only documentation changes", Plain, Documented, None, None),
]  # fmt: skip


def problem_field(case: Case, mode: Compatibility) -> str | None:
    problem = find_incompatibility(
        previous_schema=case.previous.model_json_schema(),
        new_schema=case.new.model_json_schema(),
        mode=mode,
        previous_version=1,
        new_version=2,
    )
    return None if problem is None else problem.field


@pytest.mark.parametrize("mode", list(Compatibility), ids=lambda mode: mode.value)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_mode_accepts_or_names_the_breaking_field(case: Case, mode: Compatibility) -> None:
    assert problem_field(case, mode) == case.expected(mode)


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case.backward is not None or case.forward is not None],
    ids=lambda case: case.name,
)
def test_the_error_names_type_versions_mode_and_field(case: Case) -> None:
    mode = Compatibility.BACKWARD if case.backward is not None else Compatibility.FORWARD
    with pytest.raises(IncompatibleSchemaError) as raised:
        check_compatible(
            "shop.order_placed",
            previous_schema=case.previous.model_json_schema(),
            new_schema=case.new.model_json_schema(),
            mode=mode,
            previous_version=2,
            new_version=3,
        )
    field = case.expected(mode)
    assert raised.value.field == field
    assert raised.value.event_type == "shop.order_placed"
    message = str(raised.value)
    assert message.startswith(f"shop.order_placed v3 is not {mode.value} compatible with v2: ")
    assert f"field {field!r}" in message


def test_a_new_required_field_reads_as_required_without_default() -> None:
    with pytest.raises(IncompatibleSchemaError) as raised:
        check_compatible(
            "activity.page_viewed",
            previous_schema=Plain.model_json_schema(),
            new_schema=WithRequiredReferrer.model_json_schema(),
            previous_version=2,
            new_version=3,
        )
    assert str(raised.value).startswith(
        "activity.page_viewed v3 is not BACKWARD compatible with v2: "
        "field 'referrer' is required and has no default"
    )


def test_a_removed_enum_value_is_named_in_the_message() -> None:
    with pytest.raises(IncompatibleSchemaError, match="'pending'"):
        check_compatible(
            "support.ticket_opened",
            previous_schema=TicketWithPending.model_json_schema(),
            new_schema=Ticket.model_json_schema(),
            mode=Compatibility.BACKWARD,
            previous_version=1,
            new_version=2,
        )


def test_full_reports_itself_as_the_mode() -> None:
    with pytest.raises(IncompatibleSchemaError, match="is not FULL compatible"):
        check_compatible(
            "shop.order_placed",
            previous_schema=WithRequiredReferrer.model_json_schema(),
            new_schema=Plain.model_json_schema(),
            mode=Compatibility.FULL,
            previous_version=1,
            new_version=2,
        )


def test_unmodelled_keywords_must_stay_the_same() -> None:
    previous = {"type": "object", "properties": {"x": {"not": {"type": "string"}}}}
    changed = {"type": "object", "properties": {"x": {"not": {"type": "integer"}}}}
    assert (
        find_incompatibility(
            previous_schema=previous,
            new_schema=previous,
            mode=Compatibility.FULL,
            previous_version=1,
            new_version=2,
        )
        is None
    )
    problem = find_incompatibility(
        previous_schema=previous,
        new_schema=changed,
        mode=Compatibility.BACKWARD,
        previous_version=1,
        new_version=2,
    )
    assert problem is not None
    assert problem.field == "x"


def schema_of(model: type[BaseModel]) -> dict[str, object]:
    return model.model_json_schema()


def test_differing_field_finds_the_top_level_field_of_a_nested_change() -> None:
    assert differing_field(schema_of(Shipping), schema_of(ShippingWithZip)) == "address"
    assert differing_field(schema_of(Plain), schema_of(WithOptionalReferrer)) == "referrer"
    assert differing_field(schema_of(WithDefaultedReferrer), schema_of(WithRequiredReferrer)) == (
        "referrer"
    )


def test_differing_field_ignores_documentation_and_model_names() -> None:
    assert differing_field(schema_of(Plain), schema_of(Documented)) == ""
    assert differing_field(schema_of(Shipping), schema_of(ShippingToLocation)) == ""
