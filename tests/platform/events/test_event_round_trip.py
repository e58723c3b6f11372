"""Which payloads ``encode`` trusts without a second validation, and that the trust holds.

Pydantic validates an event when it is made. ``encode_all`` validates a
payload again from its JSON only where that first validation does not
guarantee the record decodes: for a class whose JSON might not read back as
itself (``round_trips`` is False), and for an event pydantic never validated.
"""

from __future__ import annotations

import copy
import enum
import math
import pickle
import uuid
from datetime import UTC, date, datetime, time
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, field_serializer, field_validator

from eventplatform.events import Envelope, Event, EventCatalog, EventValidationError, encode
from eventplatform.events.codec import _payloads_adapter, encode_all, round_trips
from eventplatform.events.model import was_validated

EXAMPLES = 200


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Wide(Event, type="roundtrip.wide", key="entity"):
    """Every kind of field a trusted class may have."""

    entity: str = Field(min_length=1)
    count: int
    flag: bool
    ratio: float = Field(allow_inf_nan=False)
    at: datetime
    day: date
    moment: time
    ident: uuid.UUID
    colour: Colour
    mode: Literal["a", "b"]
    tags: list[str] = Field(default_factory=list)
    pair: tuple[int, str]
    unique: frozenset[int] = frozenset()
    counts: dict[str, list[int]] = Field(default_factory=dict)
    note: str | None = None


class AnyFloat(Event, type="roundtrip.any_float", key="entity"):
    entity: str
    value: float


class Lowered(Event, type="roundtrip.lowered", key="entity"):
    entity: str

    @field_validator("entity")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class Aliased(Event, type="roundtrip.aliased", key="entity"):
    entity: str = Field(alias="Entity")


class Nested(Event, type="roundtrip.nested", key="entity"):
    entity: str
    inner: Wide


class Either(Event, type="roundtrip.either", key="entity"):
    entity: str
    value: int | str


class CustomJson(Event, type="roundtrip.custom_json", key="entity"):
    entity: str
    count: int

    @field_serializer("count")
    def _as_text(self, value: int) -> str:
        return f"#{value}"


class WrongDefault(Event, type="roundtrip.wrong_default", key="entity"):
    entity: str
    count: int = "none"  # type: ignore[assignment]  # pydantic does not check defaults


class FilledDefault(Event, type="roundtrip.filled_default", key="entity"):
    entity: str
    tags: list[str] = Field(default=["x"])


class Plain(Event, type="roundtrip.plain", key="entity"):
    entity: str
    count: int


@pytest.mark.parametrize(
    ("event_class", "trusted"),
    [
        (Wide, True),
        (Plain, True),
        (AnyFloat, False),  # NaN and infinities are written as null
        (Lowered, False),
        (Aliased, False),
        (Nested, False),
        (Either, False),
        (CustomJson, False),
        (WrongDefault, False),
        (FilledDefault, False),
    ],
)
def test_only_classes_whose_json_reads_back_as_written_are_trusted(
    event_class: type[Event], trusted: bool
) -> None:
    assert round_trips(event_class) is trusted


def wide_events() -> st.SearchStrategy[Wide]:
    text = st.text(max_size=20)
    return st.builds(
        Wide,
        entity=st.text(min_size=1, max_size=20),
        count=st.integers(min_value=-(2**63), max_value=2**63 - 1),
        flag=st.booleans(),
        ratio=st.floats(allow_nan=False, allow_infinity=False),
        at=st.datetimes(timezones=st.sampled_from([UTC, None])),
        day=st.dates(),
        moment=st.times(),
        ident=st.uuids(),
        colour=st.sampled_from(Colour),
        mode=st.sampled_from(["a", "b"]),
        tags=st.lists(text, max_size=4),
        pair=st.tuples(st.integers(min_value=-1000, max_value=1000), text),
        unique=st.frozensets(st.integers(min_value=0, max_value=100), max_size=4),
        counts=st.dictionaries(text, st.lists(st.integers(0, 9), max_size=3), max_size=3),
        note=st.none() | text,
    )


@settings(max_examples=EXAMPLES, deadline=None)
@given(event=wide_events())
def test_a_trusted_class_decodes_to_the_event_it_encoded(event: Wide) -> None:
    record = encode(Envelope(event))
    decoded = EventCatalog([Wide]).decode(record.value)
    assert decoded.event == event


def test_a_trusted_class_is_not_validated_a_second_time() -> None:
    class Fresh(Event, type="roundtrip.fresh", key="entity"):
        entity: str

    adapters = _payloads_adapter.cache_info().currsize
    encode_all([Envelope(Fresh(entity="e1")), Envelope(Fresh(entity="e2"))])
    assert _payloads_adapter.cache_info().currsize == adapters
    with pytest.raises(EventValidationError, match="entity"):
        encode(Envelope(Fresh.model_construct(entity=7), key="e3"))
    assert _payloads_adapter.cache_info().currsize == adapters + 1


def test_a_float_that_is_not_finite_is_refused_where_it_is_not_excluded() -> None:
    with pytest.raises(EventValidationError, match="value"):
        encode(Envelope(AnyFloat(entity="e1", value=math.nan)))
    assert EventCatalog([AnyFloat]).decode(
        encode(Envelope(AnyFloat(entity="e1", value=1.5))).value
    ).event == AnyFloat(entity="e1", value=1.5)


def test_a_class_whose_validator_changes_values_is_checked_again() -> None:
    constructed = Lowered.model_construct(entity="MIXED")
    record = encode(Envelope(constructed, key="MIXED"))
    assert EventCatalog([Lowered]).decode(record.value).event == Lowered(entity="mixed")


def unvalidated_copies(event: Plain) -> dict[str, Plain]:
    return {
        "model_construct": Plain.model_construct(entity="e1", count="many"),
        "model_copy(update=...)": event.model_copy(update={"count": "many"}),
        "copy.copy": copy.copy(Plain.model_construct(entity="e1", count="many")),
        "copy.deepcopy": copy.deepcopy(Plain.model_construct(entity="e1", count="many")),
        "model_copy": Plain.model_construct(entity="e1", count="many").model_copy(),
        "pickle": pickle.loads(pickle.dumps(Plain.model_construct(entity="e1", count="many"))),
    }


@pytest.mark.parametrize("way", list(unvalidated_copies(Plain(entity="e1", count=1))))
def test_every_way_around_validation_is_refused_by_encode(way: str) -> None:
    event = unvalidated_copies(Plain(entity="e1", count=1))[way]
    assert not was_validated(event)
    with pytest.raises(EventValidationError, match="count"):
        encode(Envelope(event, key="e1"))


def test_copies_of_a_validated_event_stay_trusted() -> None:
    event = Plain(entity="e1", count=1)
    copies = [
        event.model_copy(),
        copy.copy(event),
        copy.deepcopy(event),
        pickle.loads(pickle.dumps(event)),
        Plain.model_validate_json(event.model_dump_json()),
    ]
    assert all(was_validated(made) and made == event for made in copies)


def test_an_unvalidated_mark_goes_with_its_event() -> None:
    event_id = id(Plain.model_construct(entity="e1", count="many"))
    later = [Plain(entity="e2", count=n) for n in range(100)]
    assert all(was_validated(made) for made in later if id(made) == event_id)
    assert all(was_validated(made) for made in later)
