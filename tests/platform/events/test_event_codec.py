"""The envelope's record form: encode, decode, headers, corrections, upcasting, bad records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from eventplatform.events import (
    TYPE_HEADER,
    VERSION_HEADER,
    Correction,
    DecodeError,
    Envelope,
    Event,
    EventCatalog,
    EventRef,
    EventValidationError,
    Position,
    UnknownEventTypeError,
    UpcastError,
    encode,
    upcaster,
    uuid7,
)
from eventplatform.events.codec import header_type

OCCURRED_AT = datetime(2024, 5, 17, 9, 30, 15, 250_000, tzinfo=UTC)


class PageViewed(Event, type="activity.page_viewed", key="user_id"):
    user_id: str
    url: str
    duration_ms: int = 0


# Three versions of one type, as three releases of an app would declare it.
class CartUpdatedV1(Event, type="shop.cart_updated", version=1, key="cart_id"):
    cart_id: str
    item: str


class CartUpdatedV2(Event, type="shop.cart_updated", version=2, key="cart_id"):
    cart_id: str
    items: list[str]


class CartUpdated(Event, type="shop.cart_updated", version=3, key="cart_id"):
    cart_id: str
    items: list[str]
    currency: str


@upcaster(CartUpdated, 1)
def _cart_items_from_item(data: dict[str, Any]) -> dict[str, Any]:
    return {"cart_id": data["cart_id"], "items": [data["item"]]}


@upcaster(CartUpdated, 2)
def _cart_currency_defaults_to_eur(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "currency": "EUR"}


class CartUpdatedWithoutFirstStep(Event, type="shop.cart_updated", version=3, key="cart_id"):
    cart_id: str
    items: list[str]
    currency: str


@upcaster(CartUpdatedWithoutFirstStep, 2)
def _only_second_step(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "currency": "EUR"}


class CartUpdatedWithFailingStep(Event, type="shop.cart_updated", version=2, key="cart_id"):
    cart_id: str
    items: list[str]


@upcaster(CartUpdatedWithFailingStep, 1)
def _failing_step(data: dict[str, Any]) -> dict[str, Any]:
    return {"cart_id": data["cart_id"], "items": data["no_such_field"]}


def envelope_value(**overrides: Any) -> bytes:
    """A well-formed record value for PageViewed, with some fields replaced."""
    value = {
        "id": str(uuid7()),
        "type": "activity.page_viewed",
        "version": 1,
        "occurred_at": OCCURRED_AT.isoformat(),
        "key": "u1",
        "correlation_id": None,
        "causation_id": None,
        "data": {"user_id": "u1", "url": "/"},
    }
    value.update(overrides)
    return orjson.dumps(value)


def test_encode_places_an_event_on_its_topic_with_key_headers_and_time() -> None:
    envelope = Envelope(
        PageViewed(user_id="u1", url="/pricing", duration_ms=1200), occurred_at=OCCURRED_AT
    )
    record = encode(envelope)
    assert record.topic == "activity"
    assert record.partition is None
    assert record.key == b"u1"
    assert record.headers == [(TYPE_HEADER, b"activity.page_viewed"), (VERSION_HEADER, b"1")]
    assert record.timestamp_ms == int(OCCURRED_AT.timestamp() * 1000)
    assert orjson.loads(record.value) == {
        "id": str(envelope.event_id),
        "type": "activity.page_viewed",
        "version": 1,
        "occurred_at": "2024-05-17T09:30:15.250000+00:00",
        "key": "u1",
        "correlation_id": None,
        "causation_id": None,
        "data": {"user_id": "u1", "url": "/pricing", "duration_ms": 1200},
    }


def test_decode_gives_back_the_envelope_with_its_position() -> None:
    parent = Envelope(PageViewed(user_id="u1", url="/"))
    envelope = parent.caused(PageViewed(user_id="u1", url="/next"), occurred_at=OCCURRED_AT)
    position = Position("activity", 1, 99)
    decoded = EventCatalog([PageViewed]).decode(encode(envelope).value, position)
    assert decoded.event == envelope.event
    assert decoded.event_id == envelope.event_id
    assert decoded.occurred_at == OCCURRED_AT
    assert decoded.key == "u1"
    assert decoded.correlation_id == parent.event_id
    assert decoded.causation_id == parent.event_id
    assert decoded.position == position
    assert decoded.ref() == EventRef(envelope.event_id, "u1", position)


def test_a_reader_routes_on_the_type_header_without_parsing_the_value() -> None:
    record = encode(Envelope(PageViewed(user_id="u1", url="/")))
    assert header_type(record.headers) == "activity.page_viewed"
    assert header_type([("other", b"x"), (TYPE_HEADER, None)]) is None
    assert header_type(None) is None


def test_a_correction_goes_to_the_original_topic_and_partition() -> None:
    original = EventRef(uuid7(), "u1", Position("activity", 5, 1234))
    correction = Correction(of=original, replacement=PageViewed(user_id="u1", url="/fixed"))
    record = encode(Envelope(correction))
    assert (record.topic, record.partition) == ("activity", 5)
    assert record.key == b"u1"
    assert header_type(record.headers) == "eventplatform.correction"


def test_every_catalog_reads_corrections() -> None:
    original = EventRef(uuid7(), "u1", Position("activity", 0, 7))
    correction = Correction(of=original, retract=True, reason="duplicate")
    decoded = EventCatalog().decode(encode(Envelope(correction)).value)
    assert decoded.event == correction
    assert isinstance(decoded.event, Correction)
    assert decoded.event.of.position == original.position


def test_an_event_that_skipped_validation_is_refused_by_encode() -> None:
    wrong_type = PageViewed.model_construct(user_id="u1", url=42)
    with pytest.raises(EventValidationError, match="url"):
        encode(Envelope(wrong_type, key="u1"))
    missing_field = PageViewed.model_construct(user_id="u1")
    with pytest.raises(EventValidationError, match="url"):
        encode(Envelope(missing_field, key="u1"))


def test_old_versions_are_upcast_through_the_whole_chain() -> None:
    catalog = EventCatalog([CartUpdated])
    first = encode(Envelope(CartUpdatedV1(cart_id="c1", item="apple"))).value
    second = encode(Envelope(CartUpdatedV2(cart_id="c1", items=["apple", "pear"]))).value
    third = encode(Envelope(CartUpdated(cart_id="c1", items=[], currency="USD"))).value
    assert [catalog.decode(value).event for value in (first, second, third)] == [
        CartUpdated(cart_id="c1", items=["apple"], currency="EUR"),
        CartUpdated(cart_id="c1", items=["apple", "pear"], currency="EUR"),
        CartUpdated(cart_id="c1", items=[], currency="USD"),
    ]


def test_a_missing_upcaster_step_is_an_error() -> None:
    catalog = EventCatalog([CartUpdatedWithoutFirstStep])
    value = encode(Envelope(CartUpdatedV1(cart_id="c1", item="apple"))).value
    with pytest.raises(UpcastError, match="no upcaster from v1 to v2"):
        catalog.decode(value)


def test_a_failing_upcaster_is_an_upcast_error() -> None:
    catalog = EventCatalog([CartUpdatedWithFailingStep])
    value = encode(Envelope(CartUpdatedV1(cart_id="c1", item="apple"))).value
    with pytest.raises(UpcastError, match="upcaster from v1 failed"):
        catalog.decode(value)


def test_a_version_newer_than_the_reader_is_refused() -> None:
    catalog = EventCatalog([CartUpdatedV2])
    value = encode(Envelope(CartUpdated(cart_id="c1", items=[], currency="EUR"))).value
    with pytest.raises(UnknownEventTypeError, match="v3 is newer than this reader's v2"):
        catalog.decode(value)


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(UnknownEventTypeError, match=r"activity\.page_viewed"):
        EventCatalog([CartUpdated]).decode(envelope_value())


def test_a_payload_that_does_not_validate_is_a_validation_error() -> None:
    value = envelope_value(data={"user_id": "u1", "url": ["not", "a", "string"]})
    with pytest.raises(EventValidationError, match="does not validate"):
        EventCatalog([PageViewed]).decode(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"not json",
        b"[1, 2]",
        b'{"type": "activity.page_viewed"}',
        envelope_value(type=7),
        envelope_value(version="1"),
        envelope_value(version=True),
        envelope_value(version=0),
        envelope_value(id="not-a-uuid"),
        envelope_value(occurred_at="yesterday"),
        envelope_value(correlation_id=12),
    ],
    ids=[
        "null",
        "empty",
        "not-json",
        "array",
        "missing-fields",
        "type-not-string",
        "version-string",
        "version-bool",
        "version-zero",
        "bad-id",
        "bad-time",
        "bad-correlation",
    ],
)
def test_malformed_values_are_decode_errors(value: bytes | None) -> None:
    with pytest.raises(DecodeError):
        EventCatalog([PageViewed]).decode(value)
    with pytest.raises(DecodeError):  # the type header does not change the verdict
        EventCatalog([PageViewed]).decode(value, None, "activity.page_viewed")


def test_a_naive_occurrence_time_is_a_decode_error_on_either_path() -> None:
    value = envelope_value(occurred_at="2024-05-17T09:30:15")
    for event_type in (None, "activity.page_viewed"):
        with pytest.raises(DecodeError, match="timezone-aware"):
            EventCatalog([PageViewed]).decode(value, None, event_type)


def cart_v1_value() -> bytes:
    return envelope_value(
        type="shop.cart_updated", key="c1", data={"cart_id": "c1", "item": "book"}
    )


@pytest.mark.parametrize(
    ("value", "event_type"),
    [
        (encode(Envelope(PageViewed(user_id="u1", url="/"))).value, "activity.page_viewed"),
        (envelope_value(correlation_id=str(uuid7()), causation_id=str(uuid7())), None),
        (envelope_value(key=""), "activity.page_viewed"),
        (envelope_value(id=str(uuid7()).upper()), "activity.page_viewed"),
        (envelope_value(extra_field=1), "activity.page_viewed"),
        (cart_v1_value(), "shop.cart_updated"),
        (envelope_value(), "shop.cart_updated"),
    ],
    ids=["current", "ids", "empty-key", "upper-case-id", "extra-field", "old-version", "lying"],
)
def test_the_type_header_path_decodes_as_the_general_path(
    value: bytes, event_type: str | None
) -> None:
    catalog = EventCatalog([PageViewed, CartUpdated])
    position = Position("activity", 0, 5)
    general = catalog.decode(value, position)
    routed = catalog.decode(value, position, event_type or general.event_type)
    assert routed == general
    assert type(routed.event) is type(general.event)
    assert routed.event_id.version == general.event_id.version


def test_a_catalog_holds_one_class_per_type() -> None:
    catalog = EventCatalog([CartUpdated])
    catalog.add(CartUpdated)
    with pytest.raises(ValueError, match=r"two classes for 'shop\.cart_updated'"):
        catalog.add(CartUpdatedV2)
    assert "shop.cart_updated" in catalog
    assert "eventplatform.correction" in catalog
    assert set(catalog.classes()) == {CartUpdated, Correction}


def test_ids_survive_the_round_trip_as_uuids() -> None:
    envelope = Envelope(PageViewed(user_id="u1", url="/"), correlation_id=uuid.uuid4())
    decoded = EventCatalog([PageViewed]).decode(encode(envelope).value)
    assert isinstance(decoded.event_id, uuid.UUID)
    assert decoded.correlation_id == envelope.correlation_id
