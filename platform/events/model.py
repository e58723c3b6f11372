"""Declaring events: ``Event`` subclasses, their envelope, and log positions.

An event type is a pydantic model with a stable type name and a schema
version, declared as class keywords::

    class PageViewed(Event, type="activity.page_viewed", version=2, key="user_id"):
        user_id: str
        url: str

``key`` names the field whose value is the entity key; the key decides the
partition, so every event of one entity stays in order. A class may instead
override :meth:`Event.entity_key`. ``topic`` defaults to the type name's
first segment (``activity`` above).

Events are immutable (frozen, unknown fields refused). Metadata that is not
part of the payload (event id, occurred-at time, correlation and causation
ids, and once consumed the log position) lives in the :class:`Envelope`.

This module is pure: it imports no client, broker or database.
"""

from __future__ import annotations

import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from eventplatform.events.errors import EventDefinitionError, EventValidationError
from eventplatform.events.ids import uuid7, uuid7s

TYPE_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_-]*)+$")
TOPIC_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
VERSION_MAX = 1_000_000

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
_UNVALIDATED_STATE = "eventplatform_unvalidated"

_unvalidated: dict[int, weakref.ref[Any]] = {}
"""The live events pydantic did not validate, by ``id``: built by ``model_construct``,
``model_copy(update=...)``, or copied or unpickled from one of those. An entry
goes with its event (its weak reference's callback removes it), so an ``id``
reused later is not mistaken for it. A plain dict, so that the codec's check
of every event it encodes is one lookup."""


class Event(BaseModel):
    """Base of every event type. Subclasses declare ``type=`` and ``version=``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str]
    event_version: ClassVar[int]
    event_topic: ClassVar[str]
    key_field: ClassVar[str | None]
    upcasters: ClassVar[dict[int, Upcaster]]

    def __init_subclass__(
        cls,
        *,
        type: str | None = None,
        version: int = 1,
        key: str | None = None,
        topic: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if type is None:
            return  # an abstract intermediate class: it cannot be appended
        if not TYPE_NAME_PATTERN.match(type):
            raise EventDefinitionError(
                f"{cls.__name__}: type {type!r} must be dotted names, like 'activity.page_viewed'"
            )
        if not isinstance(version, int) or not 1 <= version <= VERSION_MAX:
            raise EventDefinitionError(f"{cls.__name__}: version must be an integer >= 1")
        event_topic = type.split(".", 1)[0] if topic is None else topic
        if not TOPIC_NAME_PATTERN.match(event_topic) or event_topic in {".", ".."}:
            raise EventDefinitionError(f"{cls.__name__}: {event_topic!r} is not a topic name")
        cls.event_type = type
        cls.event_version = version
        cls.event_topic = event_topic
        cls.key_field = key
        cls.upcasters = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "event_type" not in cls.__dict__:
            return
        overrides_key = cls.entity_key is not Event.entity_key
        if cls.key_field is None and not overrides_key:
            raise EventDefinitionError(
                f"{cls.__name__}: declare key='<field>' or override entity_key()"
            )
        if cls.key_field is not None and cls.key_field not in cls.model_fields:
            raise EventDefinitionError(
                f"{cls.__name__}: key field {cls.key_field!r} is not a field of the event"
            )

    def entity_key(self) -> str:
        """The entity key: it decides the partition and orders the entity's events."""
        value = getattr(self, type(self).key_field or "")
        return value if isinstance(value, str) else str(value)

    # The ways to an event that pydantic did not validate mark it, so that the
    # codec checks it again (see was_validated).

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Any:
        return _mark_unvalidated(super().model_construct(_fields_set, **values))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        made = super().model_copy(update=update, deep=deep)
        return _mark_unvalidated(made) if update else made

    def __copy__(self) -> Any:
        return _marked_like(self, super().__copy__())

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        return _marked_like(self, super().__deepcopy__(memo))

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        return {**state, _UNVALIDATED_STATE: True} if id(self) in _unvalidated else state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        unvalidated = state.get(_UNVALIDATED_STATE, False)
        super().__setstate__(state)
        if unvalidated:
            _mark_unvalidated(self)


def was_validated(event: Event) -> bool:
    """Whether pydantic validated ``event``: False for one built by ``model_construct``
    or ``model_copy(update=...)``, or copied or unpickled from such an event."""
    return id(event) not in _unvalidated


def _mark_unvalidated(event: Any) -> Any:
    key = id(event)
    _unvalidated[key] = weakref.ref(event, lambda _: _unvalidated.pop(key, None))
    return event


def _marked_like(original: Event, made: Any) -> Any:
    return _mark_unvalidated(made) if id(original) in _unvalidated else made


def upcaster(event_class: type[Event], from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function that turns a ``from_version`` payload into ``from_version + 1``.

    The function takes and returns the payload as a JSON-shaped ``dict``. A
    chain v1→v2→…→latest brings every old event up to the class's version, so
    consumers only ever see the latest version.
    """
    if not 1 <= from_version < event_class.event_version:
        raise EventDefinitionError(
            f"{event_class.__name__} is version {event_class.event_version}: "
            f"an upcaster from v{from_version} cannot lead to it"
        )

    def register(function: Upcaster) -> Upcaster:
        if from_version in event_class.upcasters:
            raise EventDefinitionError(
                f"{event_class.__name__} already has an upcaster from v{from_version}"
            )
        event_class.upcasters[from_version] = function
        return function

    return register


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a record sits in the log. Positions order by topic, partition, offset."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True, slots=True)
class EventRef:
    """An appended event: its id, entity key and log position.

    ``append`` returns one per event; a :class:`~eventplatform.events.Correction`
    takes one to name the event it amends.
    """

    event_id: uuid.UUID
    key: str
    position: Position


E = TypeVar("E", bound=Event)


@dataclass(frozen=True, slots=True)
class Envelope(Generic[E]):
    """An event with its metadata. ``position`` is set once the event is in the log."""

    event: E
    event_id: uuid.UUID = field(default_factory=uuid7)
    occurred_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    key: str = ""
    correlation_id: uuid.UUID | None = None
    causation_id: uuid.UUID | None = None
    position: Position | None = None

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.event.entity_key())
        if self.occurred_at.tzinfo is None:
            raise ValueError("occurred_at must be timezone-aware")

    @classmethod
    def decoded(
        cls,
        event: E,
        event_id: uuid.UUID,
        occurred_at: datetime,
        key: str,
        correlation_id: uuid.UUID | None,
        causation_id: uuid.UUID | None,
        position: Position | None,
    ) -> Envelope[E]:
        """An envelope from a decoded record: fields already checked (key given, aware time)."""
        envelope = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(envelope, "event", event)
        setattr_(envelope, "event_id", event_id)
        setattr_(envelope, "occurred_at", occurred_at)
        setattr_(envelope, "key", key)
        setattr_(envelope, "correlation_id", correlation_id)
        setattr_(envelope, "causation_id", causation_id)
        setattr_(envelope, "position", position)
        return envelope

    @property
    def event_type(self) -> str:
        return self.event.event_type

    @property
    def version(self) -> int:
        return self.event.event_version

    def ref(self) -> EventRef:
        """This event's ref; only an event read from (or appended to) the log has one."""
        if self.position is None:
            raise ValueError("the event has no log position yet")
        return EventRef(self.event_id, self.key, self.position)

    def caused(self, event: Event, *, occurred_at: datetime | None = None) -> Envelope[Event]:
        """A new envelope for an event this one caused: same correlation, causation = self."""
        return Envelope(
            event,
            occurred_at=occurred_at or datetime.now(UTC),
            correlation_id=self.correlation_id or self.event_id,
            causation_id=self.event_id,
        )

    def at(self, position: Position) -> Envelope[E]:
        return replace(self, position=position)


def envelope_for(
    item: Event | Envelope[Any],
    *,
    correlation_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
) -> Envelope[Any]:
    """``item`` as an envelope ready to append: an envelope as it is, an event wrapped
    with the given ids. Raises EventValidationError for anything else."""
    return envelopes_for([item], correlation_id=correlation_id, causation_id=causation_id)[0]


def envelopes_for(
    items: Iterable[Event | Envelope[Any]],
    *,
    correlation_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
) -> list[Envelope[Any]]:
    """Each item as an envelope ready to append (see :func:`envelope_for`). The events
    wrapped here get new ids, in order, and one time: now."""
    items = list(items)
    rows = iter(appendables(items, correlation_id=correlation_id, causation_id=causation_id))
    decoded = Envelope.decoded
    return [
        item if isinstance(item, Envelope) else decoded(*row, None)
        for item, row in zip(items, rows, strict=True)
    ]


Appendable = tuple[Event, uuid.UUID, datetime, str, uuid.UUID | None, uuid.UUID | None]
"""An event ready to encode, with its envelope's fields in :class:`Envelope`'s order:
event, event id, occurred at, key, correlation id, causation id. A tuple, because an
append of many events makes one per event."""


def appendables(
    items: Iterable[Event | Envelope[Any]],
    *,
    correlation_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
) -> list[Appendable]:
    """What :func:`envelopes_for` gives, as :data:`Appendable` rows, without building the
    envelopes. Raises EventValidationError for an item that is not an appendable event."""
    items = list(items)
    wrapped = sum(1 for item in items if not isinstance(item, Envelope))
    ids = iter(uuid7s(wrapped))
    now = datetime.now(UTC)
    checked: set[type] = set()
    rows: list[Appendable] = []
    for item in items:
        event: Event = item.event if isinstance(item, Envelope) else item
        event_class = type(event)
        if event_class not in checked:
            _check_appendable(item, event_class)
            checked.add(event_class)
        if isinstance(item, Envelope):
            rows.append(
                (
                    event,
                    item.event_id,
                    item.occurred_at,
                    item.key,
                    item.correlation_id,
                    item.causation_id,
                )
            )
        else:
            rows.append((event, next(ids), now, event.entity_key(), correlation_id, causation_id))
    return rows


def _check_appendable(item: object, event_class: type) -> None:
    if not issubclass(event_class, Event):
        raise EventValidationError(f"{type(item).__name__} is not an Event or an Envelope")
    if "event_type" not in event_class.__dict__:
        raise EventValidationError(f"{event_class.__name__} declares no type= and version=")
