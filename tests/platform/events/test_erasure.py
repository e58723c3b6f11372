"""Erased records in the SDK: told apart from events and from bad records, skipped by the
decoder, and held as nothing in a corrected history and in an entity's version."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from eventplatform.events import (
    ERASED_HEADER,
    TYPE_HEADER,
    Correction,
    DecodeError,
    EntityHistory,
    Envelope,
    ErasedRecord,
    Event,
    EventCatalog,
    EventRef,
    Position,
    corrected_history,
    decide_on,
    encode,
    is_erased,
)
from eventplatform.events.deciders import Command, Decider
from eventplatform.events.erasure import occurred_at_of

TOPIC = "er"
ERASED_HEADERS = [(ERASED_HEADER, b"")]


class Tick(Event, type="er.tick", version=1, key="entity", topic=TOPIC):
    entity: str
    amount: int


CATALOG = EventCatalog([Tick])


def at(offset: int, event: Event, **fields: Any) -> Envelope[Any]:
    return Envelope(event, position=Position(TOPIC, 0, offset), **fields)


def erased(offset: int, key: str = "a", timestamp_ms: int = 1_700_000_000_123) -> ErasedRecord:
    return ErasedRecord(Position(TOPIC, 0, offset), key, timestamp_ms)


def ref_of(record: ErasedRecord) -> EventRef:
    """What a correction appended before the erasure names: the event the record held."""
    return EventRef(uuid.uuid4(), record.key, record.position)


def amounts(envelopes: list[Envelope[Any]]) -> list[int]:
    return [envelope.event.amount for envelope in envelopes]


def test_only_a_null_value_with_the_erased_header_is_erased() -> None:
    assert is_erased(ERASED_HEADERS, None)
    assert is_erased([(ERASED_HEADER, None)], None)
    assert not is_erased(None, None), "a tombstone is no erasure"
    assert not is_erased([], None)
    assert not is_erased([(TYPE_HEADER, b"er.tick")], None)
    assert not is_erased(ERASED_HEADERS, b"{}"), "a record with a value holds it"


def test_an_erased_record_decodes_to_nothing_and_a_tombstone_does_not_decode() -> None:
    record = encode(Envelope(Tick(entity="a", amount=1)))
    assert CATALOG.decode_record(None, ERASED_HEADERS) is None
    decoded = CATALOG.decode_record(record.value, record.headers, Position(TOPIC, 0, 4))
    assert decoded is not None and decoded.event == Tick(entity="a", amount=1)
    with pytest.raises(DecodeError):
        CATALOG.decode_record(None, None)


def test_an_erased_records_timestamp_is_its_time_to_the_millisecond() -> None:
    record = erased(3, timestamp_ms=1_700_000_000_123)
    assert record.occurred_at == datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)
    assert occurred_at_of(-1) == datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert ErasedRecord.of(record.position, None, 5).key == ""


def test_an_erased_record_left_alone_holds_nothing() -> None:
    first, last = at(0, Tick(entity="a", amount=1)), at(2, Tick(entity="a", amount=3))
    assert corrected_history([first, erased(1), last], CATALOG) == [first, last]


def test_a_retraction_of_an_erased_event_changes_nothing() -> None:
    first, gone = at(0, Tick(entity="a", amount=1)), erased(1)
    retraction = at(2, Correction(of=ref_of(gone), retract=True))
    assert corrected_history([first, gone, retraction], CATALOG) == [first]


def test_a_replacement_of_an_erased_event_stands_at_its_place_with_its_time() -> None:
    first, gone, last = (
        at(0, Tick(entity="a", amount=1)),
        erased(1),
        at(2, Tick(entity="a", amount=3)),
    )
    named = ref_of(gone)
    replacement = at(3, Correction(of=named, replacement=Tick(entity="a", amount=2)))
    history = corrected_history([first, gone, last, replacement], CATALOG)
    assert amounts(history) == [1, 2, 3]
    stand_in = history[1]
    assert (stand_in.event_id, stand_in.key, stand_in.position) == (
        named.event_id,
        "a",
        gone.position,
    )
    assert stand_in.occurred_at == gone.occurred_at


def test_the_chain_of_an_erased_event_goes_on_from_its_stand_in() -> None:
    gone = erased(0)
    replaced = at(1, Correction(of=ref_of(gone), replacement=Tick(entity="a", amount=2)))
    again = at(2, Correction(of=replaced, replacement=Tick(entity="a", amount=5)))
    assert amounts(corrected_history([gone, replaced, again], CATALOG)) == [5]
    retracted = at(3, Correction(of=again, retract=True))
    assert corrected_history([gone, replaced, again, retracted], CATALOG) == []


def test_an_erased_correction_ends_the_chain_that_names_it() -> None:
    root = at(0, Tick(entity="a", amount=1))
    gone = erased(1)  # it was a replacement of the root
    replacement = at(2, Correction(of=ref_of(gone), replacement=Tick(entity="a", amount=7)))
    assert amounts(corrected_history([root, gone, replacement], CATALOG)) == [1, 7]


def test_an_entitys_erased_records_count_in_its_version() -> None:
    command = Command()
    opened = at(0, Tick(entity="a", amount=1))
    deposit = at(2, Tick(entity="a", amount=3), causation_id=command.command_id)
    history = EntityHistory.of(
        TOPIC, 0, "a", [opened, deposit], CATALOG, first_version=4, erased=[erased(1)]
    )
    assert history.version == 7
    assert [history.version_before(0), history.version_before(1)] == [4, 6]
    assert amounts(list(history.corrected)) == [1, 3]

    total: Decider[Command, int] = Decider(
        initial=0,
        decide=lambda command, state: [Tick(entity="a", amount=state)],
        evolve=lambda state, event: state + event.amount,
    )
    assert decide_on(total, history, Command()).expected_version == 7
    repeated = decide_on(total, history, command)
    assert repeated.repeated and repeated.expected_version == 6
