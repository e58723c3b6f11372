"""Declaring events, their envelope, UUIDv7 ids, positions, upcaster registration, corrections."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from eventplatform.events import (
    Correction,
    Envelope,
    Event,
    EventDefinitionError,
    EventRef,
    Position,
    upcaster,
    uuid7,
)
from eventplatform.events.ids import uuid7_unix_ms


class PageViewed(Event, type="activity.page_viewed", version=2, key="user_id"):
    user_id: str
    url: str


class MetricRecorded(Event, type="metrics.recorded", key="name", topic="metrics-raw"):
    name: str
    value: float


class CounterBumped(Event, type="metrics.counter_bumped", key="counter"):
    counter: int


class Located(Event, type="geo.located"):
    latitude: float
    longitude: float

    def entity_key(self) -> str:
        return f"{self.latitude:.1f},{self.longitude:.1f}"


class Audited(Event):
    """An intermediate base without a type: shared fields, never appended itself."""

    actor: str


class LoggedIn(Audited, type="auth.logged_in", key="actor"):
    method: str


def test_class_keywords_become_the_type_version_topic_and_key() -> None:
    assert PageViewed.event_type == "activity.page_viewed"
    assert PageViewed.event_version == 2
    assert PageViewed.event_topic == "activity"
    assert PageViewed.key_field == "user_id"
    assert PageViewed(user_id="u1", url="/").entity_key() == "u1"


def test_the_version_defaults_to_one_and_the_topic_can_be_named() -> None:
    assert MetricRecorded.event_version == 1
    assert MetricRecorded.event_topic == "metrics-raw"


def test_a_non_string_key_field_is_turned_into_text() -> None:
    assert CounterBumped(counter=42).entity_key() == "42"


def test_a_class_may_compute_its_key_instead_of_naming_a_field() -> None:
    assert Located(latitude=52.52, longitude=13.40).entity_key() == "52.5,13.4"


def test_an_intermediate_class_passes_its_fields_to_typed_subclasses() -> None:
    event = LoggedIn(actor="alice", method="password")
    assert event.entity_key() == "alice"
    assert LoggedIn.event_topic == "auth"


@pytest.mark.parametrize(
    "type_name",
    ["pageviewed", "activity.", ".page_viewed", "activity..viewed", "1activity.viewed",
     "activity.page viewed", "activity:viewed", ""],
)  # fmt: skip
def test_type_names_must_be_dotted_identifiers(type_name: str) -> None:
    with pytest.raises(EventDefinitionError, match="must be dotted names"):

        class Bad(Event, type=type_name, key="id"):
            id: str


@pytest.mark.parametrize("version", [0, -1, 1_000_001])
def test_versions_must_be_positive_and_bounded(version: int) -> None:
    with pytest.raises(EventDefinitionError, match="version"):

        class Bad(Event, type="shop.bad", version=version, key="id"):
            id: str


def test_a_topic_must_be_a_valid_topic_name() -> None:
    with pytest.raises(EventDefinitionError, match="is not a topic name"):

        class Bad(Event, type="shop.bad", key="id", topic="no spaces"):
            id: str


def test_an_event_without_a_key_is_refused_at_declaration() -> None:
    with pytest.raises(EventDefinitionError, match="declare key="):

        class NoKey(Event, type="shop.no_key"):
            id: str


def test_the_key_must_name_a_field() -> None:
    with pytest.raises(EventDefinitionError, match="'order_id' is not a field"):

        class WrongKey(Event, type="shop.wrong_key", key="order_id"):
            id: str


def test_declaration_errors_are_type_errors_too() -> None:
    assert issubclass(EventDefinitionError, TypeError)


def test_events_are_immutable_and_refuse_unknown_fields() -> None:
    event = PageViewed(user_id="u1", url="/")
    with pytest.raises(ValidationError):
        event.url = "/other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="referrer"):
        PageViewed(user_id="u1", url="/", referrer="x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="url"):
        PageViewed(user_id="u1", url=3)  # type: ignore[arg-type]


def test_an_envelope_fills_in_id_time_and_key() -> None:
    before = datetime.now(UTC)
    envelope = Envelope(PageViewed(user_id="u1", url="/"))
    assert envelope.key == "u1"
    assert envelope.event_id.version == 7
    assert before <= envelope.occurred_at <= datetime.now(UTC)
    assert envelope.event_type == "activity.page_viewed"
    assert envelope.version == 2
    assert envelope.position is None


def test_an_envelope_keeps_an_explicit_key() -> None:
    envelope = Envelope(PageViewed(user_id="u1", url="/"), key="tenant-7")
    assert envelope.key == "tenant-7"


def test_an_envelope_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Envelope(PageViewed(user_id="u1", url="/"), occurred_at=datetime(2024, 1, 1))


def test_only_a_positioned_envelope_has_a_ref() -> None:
    envelope = Envelope(PageViewed(user_id="u1", url="/"))
    with pytest.raises(ValueError, match="no log position"):
        envelope.ref()
    position = Position("activity", 2, 41)
    placed = envelope.at(position)
    assert placed.ref() == EventRef(envelope.event_id, "u1", position)
    assert envelope.position is None


def test_a_caused_event_carries_correlation_and_causation() -> None:
    first = Envelope(PageViewed(user_id="u1", url="/"))
    second = first.caused(PageViewed(user_id="u1", url="/next"))
    third = second.caused(PageViewed(user_id="u1", url="/last"))
    assert second.correlation_id == first.event_id
    assert second.causation_id == first.event_id
    assert third.correlation_id == first.event_id
    assert third.causation_id == second.event_id


def test_positions_order_by_topic_partition_offset() -> None:
    positions = [Position("b", 0, 1), Position("a", 1, 0), Position("a", 0, 5), Position("a", 0, 2)]
    assert sorted(positions) == [
        Position("a", 0, 2),
        Position("a", 0, 5),
        Position("a", 1, 0),
        Position("b", 0, 1),
    ]
    assert str(Position("activity", 3, 17)) == "activity/3@17"


def test_uuid7_has_version_7_and_the_rfc_variant() -> None:
    value = uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_uuid7_carries_the_current_millisecond() -> None:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    assert abs(uuid7_unix_ms(uuid7()) - now_ms) < 1000


def test_uuid7_is_strictly_increasing_within_a_process() -> None:
    values = [uuid7() for _ in range(20_000)]
    assert all(earlier < later for earlier, later in itertools.pairwise(values))
    assert len(set(values)) == len(values)


def test_an_upcaster_must_lead_to_the_class_version() -> None:
    class Versioned(Event, type="shop.versioned", version=2, key="id"):
        id: str

    with pytest.raises(EventDefinitionError, match="cannot lead to it"):
        upcaster(Versioned, 2)
    with pytest.raises(EventDefinitionError, match="cannot lead to it"):
        upcaster(Versioned, 0)

    @upcaster(Versioned, 1)
    def first(data: dict[str, object]) -> dict[str, object]:
        return data

    with pytest.raises(EventDefinitionError, match="already has an upcaster from v1"):

        @upcaster(Versioned, 1)
        def second(data: dict[str, object]) -> dict[str, object]:
            return data

    assert Versioned.upcasters == {1: first}


def original_ref() -> EventRef:
    return EventRef(uuid7(), "u1", Position("activity", 2, 10))


def test_a_correction_carries_a_replacement_for_the_original() -> None:
    ref = original_ref()
    correction = Correction(of=ref, replacement=PageViewed(user_id="u1", url="/fixed"))
    assert correction.of.event_id == ref.event_id
    assert correction.of.position == ref.position
    assert correction.replacement is not None
    assert correction.replacement.type == "activity.page_viewed"
    assert correction.replacement.version == 2
    assert correction.replacement.data == {"user_id": "u1", "url": "/fixed"}
    assert correction.entity_key() == "u1"
    assert not correction.retract


def test_a_correction_may_retract_instead() -> None:
    correction = Correction(of=original_ref(), retract=True, reason="bot traffic")
    assert correction.replacement is None
    assert correction.reason == "bot traffic"


def test_a_correction_names_a_positioned_envelope() -> None:
    envelope = Envelope(PageViewed(user_id="u1", url="/")).at(Position("activity", 1, 3))
    correction = Correction(of=envelope, retract=True)
    assert correction.of.position == Position("activity", 1, 3)
    assert correction.of.event_id == envelope.event_id


def test_a_correction_needs_exactly_one_of_replacement_and_retract() -> None:
    with pytest.raises(ValidationError, match="either replacement"):
        Correction(of=original_ref())
    with pytest.raises(ValidationError, match="either replacement"):
        Correction(of=original_ref(), replacement=PageViewed(user_id="u1", url="/"), retract=True)


def test_a_replacement_must_keep_the_entity_key() -> None:
    with pytest.raises(ValidationError, match="entity key"):
        Correction(of=original_ref(), replacement=PageViewed(user_id="u2", url="/"))


def test_a_replacement_cannot_be_a_correction() -> None:
    inner = Correction(of=original_ref(), retract=True)
    with pytest.raises(ValidationError, match="not a correction"):
        Correction(of=original_ref(), replacement=inner)


def test_the_envelope_time_can_be_set_for_backfills() -> None:
    past = datetime.now(UTC) - timedelta(days=3)
    envelope = Envelope(PageViewed(user_id="u1", url="/"), occurred_at=past)
    assert envelope.occurred_at == past
