"""The envelope's wire form: record key, orjson value and routing headers.

A record carrying an event has

* key: the entity key, UTF-8;
* value: a JSON object ``{"id", "type", "version", "occurred_at", "key",
  "correlation_id", "causation_id", "data"}``, where ``data`` is the payload
  at the version it was written with;
* headers ``event-type`` and ``event-version`` (UTF-8), so a consumer can
  route or skip an event without parsing its value;
* timestamp: ``occurred_at`` in milliseconds (CreateTime).

Decoding goes through an :class:`EventCatalog`, which upcasts old payloads
to the latest version of their class before validating them. A record the log
erased (null value, the one header ``eventplatform.erased``) decodes to nothing
(:meth:`EventCatalog.decode_record`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, NotRequired

import orjson
from pydantic import StrictInt, StrictStr, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs it on Python 3.11

from eventplatform.events.corrections import Correction
from eventplatform.events.errors import (
    DecodeError,
    EventValidationError,
    UnknownEventTypeError,
    UpcastError,
)
from eventplatform.events.model import Appendable, Envelope, Event, Position, _unvalidated
from eventplatform.events.wire import TYPE_HEADER as TYPE_HEADER
from eventplatform.events.wire import UUID_TEXT_LENGTH as UUID_TEXT_LENGTH
from eventplatform.events.wire import VERSION_HEADER as VERSION_HEADER
from eventplatform.events.wire import is_erased

EVENT_CLASSES_CACHED = 256
"""Event classes whose encoding parts are kept."""
ENVELOPE_FIELDS = ("id", "type", "version", "occurred_at", "key", "data")
_SAFE_UNKNOWN = uuid.SafeUUID.unknown  # an enum member lookup costs a descriptor call

Headers = Sequence[tuple[str, bytes | None]]


class EncodedEvent(NamedTuple):
    """One event ready for a producer: where it goes and its bytes."""

    topic: str
    partition: int | None
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    timestamp_ms: int


def encode(envelope: Envelope[Event]) -> EncodedEvent:
    """The record for ``envelope``. A correction goes to its original's partition.

    An event that bypassed validation (``model_construct``) and would not
    decode is refused here, before it reaches any producer (see
    :func:`encode_all`).
    """
    return encode_all([envelope])[0]


def _validated_payload(event: Event) -> bytes:
    """``event``'s JSON, validated again; raises EventValidationError saying what is wrong."""
    try:
        data: bytes = event.__pydantic_serializer__.to_json(event, warnings="error")
        type(event).model_validate_json(data)
    except ValidationError as exc:
        raise EventValidationError(
            f"{event.event_type}: the event does not validate: {exc}"
        ) from exc
    except Exception as exc:
        raise EventValidationError(f"{event.event_type}: cannot serialize: {exc}") from exc
    return data


def encode_all(envelopes: Sequence[Envelope[Event]]) -> list[EncodedEvent]:
    """The records for ``envelopes`` (see :func:`encode` and :func:`encode_rows`)."""
    return encode_rows(
        [
            (
                envelope.event,
                envelope.event_id,
                envelope.occurred_at,
                envelope.key,
                envelope.correlation_id,
                envelope.causation_id,
            )
            for envelope in envelopes
        ]
    )


def encode_rows(rows: Sequence[Appendable]) -> list[EncodedEvent]:
    """The records for events and their envelopes' fields, as
    :func:`~eventplatform.events.model.appendables` gives them.

    Every payload must decode as its class again. Pydantic validated an event
    when it was made; if its class's JSON is known to read back as what was
    written (:func:`round_trips`), that is enough. The payloads of any other
    class, and of any event pydantic did not validate
    (:func:`~eventplatform.events.model.was_validated`), are validated again
    from their JSON, each class's together as one list.
    """
    records = []
    datas = []
    unchecked: dict[type[Event], list[int]] = {}
    classes: dict[type[Event], _ClassParts] = {}
    unvalidated = _unvalidated
    dumps = orjson.dumps
    new_record = tuple.__new__
    last_time: datetime | None = None
    stamp = (b"", 0)
    last_ids: tuple[uuid.UUID | None, uuid.UUID | None] | None = None
    cause = b""
    for index, (event, event_id, occurred_at, key, correlation_id, causation_id) in enumerate(rows):
        event_class = type(event)
        parts = classes.get(event_class)
        if parts is None:
            parts = classes[event_class] = _class_parts(event_class)
        try:
            data = event_class.__pydantic_serializer__.to_json(event, warnings=False)
        except Exception:
            _validated_payload(event)  # raises, saying what is wrong
            raise
        datas.append(data)
        if not parts.trusted or id(event) in unvalidated:
            unchecked.setdefault(event_class, []).append(index)
        if occurred_at is not last_time:
            last_time = occurred_at
            stamp = (occurred_at.isoformat().encode(), int(occurred_at.timestamp() * 1000))
        ids = (correlation_id, causation_id)
        if ids != last_ids:
            last_ids = ids
            cause = b',"correlation_id":%b,"causation_id":%b' % (
                dumps(_optional_str(ids[0])),
                dumps(_optional_str(ids[1])),
            )
        value = b'{"id":%b%b%b","key":%b%b,"data":%b}' % (
            dumps(event_id),
            parts.head,
            stamp[0],
            dumps(key),
            cause,
            data,
        )
        if parts.correction:
            topic, partition = event.of.topic, event.of.partition  # type: ignore[attr-defined]
        else:
            topic, partition = parts.topic, None
        records.append(
            new_record(
                EncodedEvent,
                (topic, partition, key.encode(), value, parts.headers, stamp[1]),
            )
        )
    for event_class, indexes in unchecked.items():
        try:
            payloads = b",".join([datas[index] for index in indexes])
            _payloads_adapter(event_class).validate_json(b"[" + payloads + b"]")
        except Exception as exc:
            for index in indexes:
                _validated_payload(rows[index][0])  # raises for the one at fault
            raise EventValidationError(f"{event_class.event_type}: {exc}") from exc
    return records


@functools.lru_cache(maxsize=EVENT_CLASSES_CACHED)
def round_trips(event_class: type[Event]) -> bool:
    """Whether every validated ``event_class`` payload reads back from its JSON as itself.

    True when the class's fields are built only of types whose JSON form
    validates back to the same value: strings, integers, booleans, dates and
    times, UUIDs, literals and enums, finite floats (``allow_inf_nan=False``:
    an infinite or NaN float is written as ``null``), and lists, tuples,
    sets, string-keyed dicts and optionals of them, with defaults of the
    field's own type. Anything else (a custom serializer or validator, an
    alias, a computed field, a nested model, a union, JSON settings of the
    class's own) makes it False, and its events are checked by a round trip.
    """
    schema = event_class.__pydantic_core_schema__
    config = schema.get("config", {})
    return (
        schema.get("type") == "model"
        and not schema.get("custom_init")
        and not schema.get("root_model")
        and not any(name.startswith(("ser_json", "val_json")) for name in config)
        and "serialization" not in schema
        and _fields_round_trip(schema["schema"])
    )


_NO_DEFAULT = object()
_EMPTY_FACTORIES = (list, tuple, set, frozenset, dict)
_PLAIN_SCHEMAS = frozenset({"str", "int", "bool", "datetime", "date", "time", "uuid", "literal"})
_FIELD_KEYS = frozenset({"type", "schema", "metadata", "frozen"})
_DEFAULT_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "nullable": (type(None),),
    "list": (list,),
    "tuple": (tuple,),
    "set": (set,),
    "frozenset": (frozenset,),
    "dict": (dict,),
}
"""The default values a field of each schema type may have and still be trusted: its
own type (and for a container, empty)."""


def _fields_round_trip(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") != "model-fields" or schema.get("computed_fields"):
        return False
    if "extras_schema" in schema or "serialization" in schema:
        return False
    fields = schema["fields"].values()
    return all(
        set(field) <= _FIELD_KEYS and _value_round_trips(field["schema"]) for field in fields
    )


def _value_round_trips(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if "serialization" in schema:
        return False
    if kind in _PLAIN_SCHEMAS:
        return True
    if kind == "enum":
        return all(isinstance(member.value, str | int) for member in schema["members"])
    if kind == "float":
        return schema.get("allow_inf_nan") is False
    if kind in {"list", "set", "frozenset", "nullable"}:
        inner = schema.get("items_schema", schema.get("schema"))
        return inner is not None and _value_round_trips(inner)
    if kind == "tuple":
        return all(_value_round_trips(item) for item in schema["items_schema"])
    if kind == "dict":
        keys = schema.get("keys_schema", {"type": "str"})
        values = schema.get("values_schema")
        return (
            keys.get("type") == "str"
            and _value_round_trips(keys)
            and values is not None
            and _value_round_trips(values)
        )
    if kind == "default":
        inner = schema["schema"]
        default = schema.get("default", _NO_DEFAULT)
        if schema.get("default_factory") in _EMPTY_FACTORIES:
            default = schema["default_factory"]()
        fits = _DEFAULT_TYPES.get(inner.get("type", ""), ())
        empty = not isinstance(default, list | tuple | set | frozenset | dict) or not default
        return type(default) in fits and empty and _value_round_trips(inner)
    return False


@functools.lru_cache(maxsize=EVENT_CLASSES_CACHED)
def _payloads_adapter(event_class: type[Event]) -> TypeAdapter[Any]:
    return TypeAdapter(list[event_class])  # type: ignore[valid-type]


class _ClassParts(NamedTuple):
    """What every record of a class shares."""

    head: bytes
    """The value's type, version and the start of ``occurred_at``."""
    headers: list[tuple[str, bytes]]
    """One list, read by the producer, never changed."""
    topic: str
    correction: bool
    """Its records go to the partition of the event each corrects."""
    trusted: bool
    """Its validated payloads need no second validation (:func:`round_trips`)."""


@functools.lru_cache(maxsize=EVENT_CLASSES_CACHED)
def _class_parts(event_class: type[Event]) -> _ClassParts:
    head = (
        b',"type":'
        + orjson.dumps(event_class.event_type)
        + b',"version":'
        + str(event_class.event_version).encode()
        + b',"occurred_at":"'
    )
    headers = [
        (TYPE_HEADER, event_class.event_type.encode()),
        (VERSION_HEADER, str(event_class.event_version).encode()),
    ]
    correction = issubclass(event_class, Correction)
    return _ClassParts(head, headers, event_class.event_topic, correction, round_trips(event_class))


def header_type(headers: Headers | None) -> str | None:
    """The event type named in a record's headers, without parsing its value."""
    for name, value in headers or ():
        if name == TYPE_HEADER and value is not None:
            return value.decode("utf-8", "replace")
    return None


class EventCatalog:
    """The event classes a reader knows, by type name. Always knows corrections.

    The catalog holds the *latest* class of each type. Older payloads reach it
    through the class's upcasters; a payload newer than the class is refused,
    because a reader cannot guess fields it was not built with.
    """

    def __init__(self, classes: Iterable[type[Event]] = ()) -> None:
        self._classes: dict[str, type[Event]] = {Correction.event_type: Correction}
        self._wire: dict[str, TypeAdapter[Any]] = {}
        for event_class in classes:
            self.add(event_class)

    def add(self, event_class: type[Event]) -> None:
        known = self._classes.get(event_class.event_type)
        if known is not None and known is not event_class:
            raise ValueError(
                f"two classes for {event_class.event_type!r}: "
                f"{known.__qualname__} and {event_class.__qualname__}"
            )
        self._classes[event_class.event_type] = event_class

    def __contains__(self, event_type: object) -> bool:
        return event_type in self._classes

    def classes(self) -> list[type[Event]]:
        return list(self._classes.values())

    def event(self, event_type: str, version: int, data: Any) -> Event:
        """Validate ``data`` (written as ``event_type`` v``version``) as the latest class."""
        event_class = self._classes.get(event_type)
        if event_class is None:
            raise UnknownEventTypeError(f"no event class for type {event_type!r}")
        data = upcast(event_class, version, data)
        try:
            return event_class.model_validate(data)
        except ValidationError as exc:
            raise EventValidationError(
                f"{event_type} v{version}: payload does not validate: {exc}"
            ) from exc

    def decode(
        self, value: bytes | None, position: Position | None = None, event_type: str | None = None
    ) -> Envelope[Event]:
        """The envelope in a record value; raises :class:`~.errors.EventError` subclasses.

        ``event_type`` is the type the record's headers name, if any. An event
        of that type written at its class's version then decodes in one pass
        (JSON straight to the model); anything else, including every
        malformed record, takes the general path, which upcasts and names
        what is wrong.
        """
        if event_type is not None and value is not None:
            decoded = self._decode_current(value, position, event_type)
            if decoded is not None:
                return decoded
        raw = parse(value)
        event = self.event(raw["type"], raw["version"], raw["data"])
        return envelope_of(raw, event, position)

    def decode_record(
        self, value: bytes | None, headers: Headers | None, position: Position | None = None
    ) -> Envelope[Event] | None:
        """The envelope in a consumed record, or None if the log erased the record
        (:func:`~.wire.is_erased`): it holds no event, and is no malformed one either.
        Raises :class:`~.errors.EventError` subclasses as :meth:`decode` does."""
        if is_erased(headers, value):
            return None
        return self.decode(value, position, header_type(headers))

    def _decode_current(
        self, value: bytes, position: Position | None, event_type: str
    ) -> Envelope[Event] | None:
        adapter = self._wire.get(event_type)
        if adapter is None:
            event_class = self._classes.get(event_type)
            if event_class is None:
                return None
            adapter = self._wire[event_type] = _wire_adapter(event_class)
        try:
            raw = adapter.validate_json(value)
        except ValidationError:
            return None
        event = raw["data"]
        if raw["type"] != event_type or raw["version"] != event.event_version or not raw["key"]:
            return None
        try:
            occurred_at = datetime.fromisoformat(raw["occurred_at"])
            if occurred_at.tzinfo is None:
                return None
            return Envelope.decoded(
                event,
                _uuid(raw["id"]),
                occurred_at,
                raw["key"],
                _optional_uuid(raw.get("correlation_id")),
                _optional_uuid(raw.get("causation_id")),
                position,
            )
        except (TypeError, ValueError, AttributeError):
            return None


def _wire_adapter(event_class: type[Event]) -> TypeAdapter[Any]:
    """A validator of a whole record value whose payload is ``event_class`` at its version."""
    wire = TypedDict(  # type: ignore[misc]  # noqa: UP013 (the payload class is a variable)
        f"{event_class.__name__}Record",
        {
            "id": StrictStr,
            "type": StrictStr,
            "version": StrictInt,
            "occurred_at": StrictStr,
            "key": StrictStr,
            "correlation_id": NotRequired[StrictStr | None],
            "causation_id": NotRequired[StrictStr | None],
            "data": event_class,
        },
    )
    return TypeAdapter(wire)


def parse(value: bytes | None) -> dict[str, Any]:
    """The envelope object in a record value, checked for shape but not validated."""
    if value is None:
        raise DecodeError("the record has no value")
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"the record value is not JSON: {exc}") from exc
    if not isinstance(raw, dict) or any(name not in raw for name in ENVELOPE_FIELDS):
        raise DecodeError("the record value is not an event envelope")
    if not isinstance(raw["type"], str) or type(raw["version"]) is not int:
        raise DecodeError("the envelope's type or version is malformed")
    return raw


def envelope_of(raw: dict[str, Any], event: Event, position: Position | None) -> Envelope[Event]:
    try:
        return Envelope(
            event,
            event_id=uuid.UUID(raw["id"]),
            occurred_at=datetime.fromisoformat(raw["occurred_at"]),
            key=raw["key"],
            correlation_id=_optional_uuid(raw.get("correlation_id")),
            causation_id=_optional_uuid(raw.get("causation_id")),
            position=position,
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise DecodeError(f"the envelope's metadata is malformed: {exc}") from exc


def upcast(event_class: type[Event], version: int, data: Any) -> Any:
    """Run ``event_class``'s upcasters from ``version`` up to the class's version."""
    if version > event_class.event_version:
        raise UnknownEventTypeError(
            f"{event_class.event_type} v{version} is newer than this reader's "
            f"v{event_class.event_version}"
        )
    if version < 1:
        raise DecodeError(f"{event_class.event_type}: version {version} is not >= 1")
    while version < event_class.event_version:
        step = event_class.upcasters.get(version)
        if step is None:
            raise UpcastError(
                f"{event_class.event_type}: no upcaster from v{version} to v{version + 1}"
            )
        try:
            data = step(data)
        except Exception as exc:
            raise UpcastError(
                f"{event_class.event_type}: upcaster from v{version} failed: {exc!r}"
            ) from exc
        version += 1
    return data


def _uuid(text: str) -> uuid.UUID:
    """``uuid.UUID(text)``, faster for the canonical 36-character form the codec writes."""
    if len(text) == UUID_TEXT_LENGTH and text[8] == text[13] == text[18] == text[23] == "-":
        digits = text.replace("-", "")
        if digits.isalnum():  # int() would accept "_" and surrounding spaces
            value = object.__new__(uuid.UUID)
            object.__setattr__(value, "int", int(digits, 16))
            object.__setattr__(value, "is_safe", _SAFE_UNKNOWN)
            return value
    return uuid.UUID(text)


def _optional_str(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def _optional_uuid(value: Any) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(value)
