"""The schema registry: every event type's JSON schemas, kept in the log itself.

The registry lives in one compacted topic, ``_schemas`` (one partition, so
its records have one order). It holds two kinds of records:

* ``schema:<type>:<version>`` → ``{"type", "version", "schema", "fingerprint",
  "registered_at"}``: a version's pydantic JSON schema. Versions are
  immutable: registering the same schema again is a no-op, registering a
  different one under a registered version is refused.
* ``config:<type>`` → ``{"type", "compatibility", "updated_at"}``: the type's
  :class:`~eventplatform.events.compatibility.Compatibility` mode
  (``BACKWARD`` when there is none).

A null value (a tombstone) removes its key's record. Compaction keeps the
latest record of every key, and the latest record of a key is also what
reading the log in order leaves in the catalog, so the state is the same
before and after compaction. Records with other key prefixes are skipped,
so later kinds of record do not break older readers; malformed records are
skipped and logged, so one bad record written by hand stops no producer.

``EventProducer(..., schemas=SchemaRegistry(...))`` registers each event
class on its first append and refuses the whole append if the class is
incompatible, so an event whose schema breaks its type's rule is never sent.

A new version must be higher than every registered version of its type, and
is checked against the highest registered lower version under the type's
mode; see :mod:`~eventplatform.events.compatibility` for what breaks a mode.

:class:`SchemaCatalog` is the pure state machine that applies records;
:class:`SchemaRegistry` moves records between it and the topic with
confluent-kafka. Registrations from several processes at once are resolved by
log order: the last record written for a version is the one that counts, and a
registrant that reads back someone else's schema for its version raises.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from eventplatform.client_config import KafkaConnection, kafka_settings
from eventplatform.events.compatibility import (
    Compatibility,
    check_compatible,
    differing_field,
    without_documentation,
)
from eventplatform.events.errors import (
    EventDefinitionError,
    IncompatibleSchemaError,
    RegistryError,
)
from eventplatform.events.model import TYPE_NAME_PATTERN, Event

SCHEMAS_TOPIC = "_schemas"
BOOTSTRAP_DEFAULT = "127.0.0.1:9092"
TIMEOUT_S_DEFAULT = 10.0
RESULT_MARGIN_S = 5.0
CONSUME_POLL_S = 0.5
NOT_READY_BACKOFF_S = 0.1
# Answers a topic gives while it is being created or moving its leader.
NOT_READY_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)
CLIENT_ID = "eventplatform-schema-registry"
CONSUMER_GROUP = "eventplatform-schema-registry"
BROKER_DEFAULT_REPLICATION = -1
SCHEMA_KEY_PREFIX = "schema:"
CONFIG_KEY_PREFIX = "config:"
COMPATIBILITY_DEFAULT = Compatibility.BACKWARD
TOPIC_CONFIG = {"cleanup.policy": "compact"}

LOGGER = logging.getLogger(__name__)
LIBRDKAFKA_LOGGER = logging.getLogger("eventplatform.events.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """One registered version of an event type."""

    event_type: str
    version: int
    schema: dict[str, Any]
    fingerprint: str
    registered_at: datetime


def fingerprint(schema: Mapping[str, Any]) -> str:
    """SHA-256 of the schema's canonical JSON, titles and descriptions left out.

    Editing a docstring or a field's description therefore does not call for
    a new version; any change to what the schema accepts does.
    """
    canonical = orjson.dumps(without_documentation(schema), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def schema_key(event_type: str, version: int) -> bytes:
    return f"{SCHEMA_KEY_PREFIX}{event_type}:{version}".encode()


def config_key(event_type: str) -> bytes:
    return f"{CONFIG_KEY_PREFIX}{event_type}".encode()


def schema_record(entry: RegisteredSchema) -> tuple[bytes, bytes]:
    """The ``(key, value)`` of the record that registers ``entry``."""
    value = {
        "type": entry.event_type,
        "version": entry.version,
        "schema": entry.schema,
        "fingerprint": entry.fingerprint,
        "registered_at": entry.registered_at.isoformat(),
    }
    return schema_key(entry.event_type, entry.version), orjson.dumps(value)


def config_record(
    event_type: str, mode: Compatibility, *, updated_at: datetime
) -> tuple[bytes, bytes]:
    """The ``(key, value)`` of the record that sets ``event_type``'s compatibility mode."""
    value = {"type": event_type, "compatibility": mode.value, "updated_at": updated_at.isoformat()}
    return config_key(event_type), orjson.dumps(value)


class SchemaCatalog:
    """The registry's state, built by applying ``_schemas`` records in log order.

    Pure: no IO, no clock. Not thread-safe; :class:`SchemaRegistry` serializes
    access. ``next_offset`` is the offset of the next record to apply.

    A malformed record (one that is not JSON, or whose key and value
    disagree) is skipped and listed in ``skipped`` as ``(offset, reason)``:
    one bad record written by hand must not stop every producer.
    """

    def __init__(self) -> None:
        self._schemas: dict[str, dict[int, RegisteredSchema]] = {}
        self._modes: dict[str, Compatibility] = {}
        self.next_offset = 0
        self.skipped: list[tuple[int, str]] = []

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply the record at ``offset``, which must follow the last one applied."""
        if offset < self.next_offset:
            raise ValueError(f"record offset {offset} is behind {self.next_offset}")
        self.next_offset = offset + 1
        text = (key or b"").decode("utf-8", "replace")
        try:
            if text.startswith(SCHEMA_KEY_PREFIX):
                self._apply_schema(text, value)
            elif text.startswith(CONFIG_KEY_PREFIX):
                self._apply_config(text, value)
        except (ValueError, KeyError, TypeError) as exc:
            self.skipped.append((offset, f"malformed record {text!r}: {exc!r}"))

    def _apply_schema(self, key: str, value: bytes | None) -> None:
        event_type, _, version_text = key.removeprefix(SCHEMA_KEY_PREFIX).rpartition(":")
        version = int(version_text)
        if value is None:
            self._schemas.get(event_type, {}).pop(version, None)
            return
        raw = orjson.loads(value)
        if not isinstance(raw, dict):
            raise TypeError("the record's value is not a JSON object")
        entry = RegisteredSchema(
            event_type=raw["type"],
            version=raw["version"],
            schema=raw["schema"],
            fingerprint=raw["fingerprint"],
            registered_at=datetime.fromisoformat(raw["registered_at"]),
        )
        if (entry.event_type, entry.version) != (event_type, version):
            raise ValueError("the record's key does not match its value")
        if not isinstance(entry.schema, dict) or type(entry.version) is not int:
            raise TypeError("the record's schema or version is malformed")
        self._schemas.setdefault(event_type, {})[version] = entry

    def _apply_config(self, key: str, value: bytes | None) -> None:
        event_type = key.removeprefix(CONFIG_KEY_PREFIX)
        if value is None:
            self._modes.pop(event_type, None)
            return
        raw = orjson.loads(value)
        if not isinstance(raw, dict) or raw["type"] != event_type:
            raise ValueError("the record's key does not match its value")
        self._modes[event_type] = Compatibility(raw["compatibility"])

    def types(self) -> list[str]:
        """Every type with at least one registered version, sorted."""
        return sorted(event_type for event_type, found in self._schemas.items() if found)

    def versions(self, event_type: str) -> list[int]:
        return sorted(self._schemas.get(event_type, {}))

    def get(self, event_type: str, version: int) -> RegisteredSchema | None:
        return self._schemas.get(event_type, {}).get(version)

    def compatibility(self, event_type: str) -> Compatibility:
        return self._modes.get(event_type, COMPATIBILITY_DEFAULT)

    def is_registered(self, event_type: str, version: int, schema: Mapping[str, Any]) -> bool:
        """Whether exactly this schema is registered at this version."""
        entry = self.get(event_type, version)
        return entry is not None and entry.fingerprint == fingerprint(schema)

    def admit(
        self,
        event_type: str,
        version: int,
        schema: Mapping[str, Any],
        *,
        registered_at: datetime,
    ) -> RegisteredSchema | None:
        """The entry to write to register ``schema``, or ``None`` if it already is.

        Raises :class:`IncompatibleSchemaError` if the version is taken by a
        different schema, is lower than a registered one, or breaks the type's
        compatibility mode against the highest registered lower version.
        """
        schema_fingerprint = fingerprint(schema)
        existing = self.get(event_type, version)
        if existing is not None:
            if existing.fingerprint == schema_fingerprint:
                return None
            field = differing_field(existing.schema, schema)
            raise IncompatibleSchemaError(
                f"{event_type} v{version} is already registered with a different schema"
                f"{f' (field {field!r} differs)' if field else ''}; "
                "a changed schema needs a new version",
                event_type=event_type,
                field=field,
            )
        versions = self.versions(event_type)
        if versions and version < versions[-1]:
            raise IncompatibleSchemaError(
                f"{event_type} v{version} is older than the registered v{versions[-1]}: "
                "versions must increase",
                event_type=event_type,
                field="",
            )
        if versions:
            previous = self._schemas[event_type][versions[-1]]
            check_compatible(
                event_type,
                previous_schema=previous.schema,
                new_schema=schema,
                mode=self.compatibility(event_type),
                previous_version=previous.version,
                new_version=version,
            )
        return RegisteredSchema(
            event_type, version, dict(schema), schema_fingerprint, registered_at
        )


class SchemaRegistry:
    """The registry over the ``_schemas`` topic; also the producer's schema guard.

    Queries answer from the state read at the last refresh: the first query
    reads the topic, and every write reads it again first, so it checks
    against the latest registrations. :meth:`refresh` reads it on demand.
    Every request waits at most ``timeout_s``. Thread-safe.
    """

    def __init__(
        self,
        bootstrap: KafkaConnection = BOOTSTRAP_DEFAULT,
        *,
        config: Mapping[str, Any] | None = None,
        topic: str = SCHEMAS_TOPIC,
        timeout_s: float = TIMEOUT_S_DEFAULT,
    ) -> None:
        self._settings: dict[str, Any] = {
            "client.id": CLIENT_ID,
            **kafka_settings(bootstrap),
            "logger": LIBRDKAFKA_LOGGER,
            **(config or {}),
        }
        self._topic = topic
        self._timeout_s = timeout_s
        self._catalog = SchemaCatalog()
        self._lock = threading.RLock()
        self._loaded = False
        self._topic_ready = False
        self._producer: Producer | None = None

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def topic(self) -> str:
        return self._topic

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self._timeout_s)
                self._producer = None

    def register(self, event_class: type[Event]) -> int:
        """Register ``event_class``'s schema under its version; returns the version.

        Idempotent. Raises :class:`IncompatibleSchemaError` (naming the field)
        if the schema breaks the type's compatibility mode, or if the version
        is taken by another schema or is not higher than the registered ones.
        """
        event_type, version, schema = _schema_of(event_class)
        with self._lock:
            if self._loaded and self._catalog.is_registered(event_type, version, schema):
                return version
            self.refresh()
            entry = self._catalog.admit(event_type, version, schema, registered_at=_now())
            if entry is None:
                return version
            self._write(*schema_record(entry))
            self.refresh()
            if not self._catalog.is_registered(event_type, version, schema):
                raise IncompatibleSchemaError(
                    f"{event_type} v{version} was registered concurrently with a different schema",
                    event_type=event_type,
                    field="",
                )
            return version

    def ensure_registered(self, event_class: type[Event]) -> None:
        """The producer's check: register ``event_class`` or raise before anything is sent."""
        self.register(event_class)

    def set_compatibility(self, event_type: str | type[Event], mode: Compatibility | str) -> None:
        """Set the mode later versions of ``event_type`` are checked under."""
        name = _type_name(event_type)
        compatibility = Compatibility(mode)
        with self._lock:
            self.refresh()
            self._write(*config_record(name, compatibility, updated_at=_now()))
            self.refresh()

    def compatibility(self, event_type: str | type[Event]) -> Compatibility:
        with self._lock:
            self._load_once()
            return self._catalog.compatibility(_type_name(event_type))

    def versions(self, event_type: str | type[Event]) -> list[int]:
        """The type's registered versions in increasing order; empty if there is none."""
        with self._lock:
            self._load_once()
            return self._catalog.versions(_type_name(event_type))

    def schema(self, event_type: str | type[Event], version: int) -> dict[str, Any]:
        """The JSON schema registered for ``event_type`` v``version``; ``KeyError`` if none."""
        return self.registered(event_type, version).schema

    def registered(self, event_type: str | type[Event], version: int) -> RegisteredSchema:
        """The registration of ``event_type`` v``version``; ``KeyError`` if none."""
        name = _type_name(event_type)
        with self._lock:
            self._load_once()
            entry = self._catalog.get(name, version)
        if entry is None:
            raise KeyError(f"{name} v{version} is not registered")
        return entry

    def types(self) -> list[str]:
        """Every event type with a registered version, sorted."""
        with self._lock:
            self._load_once()
            return self._catalog.types()

    def refresh(self) -> None:
        """Read the records appended since the last read, up to the topic's end."""
        with self._lock:
            self._ensure_topic()
            self._read_to_end()
            self._loaded = True

    def _load_once(self) -> None:
        if not self._loaded:
            self.refresh()

    def _ensure_topic(self) -> None:
        """Create the compacted topic if it is missing; refuse one that is not compacted."""
        if self._topic_ready:
            return
        admin = AdminClient(self._settings)
        new_topic = NewTopic(
            self._topic,
            num_partitions=1,
            replication_factor=BROKER_DEFAULT_REPLICATION,
            config=dict(TOPIC_CONFIG),
        )
        action = f"cannot create topic {self._topic!r}"
        try:
            futures = admin.create_topics(
                [new_topic], request_timeout=self._timeout_s, operation_timeout=self._timeout_s
            )
            self._result(futures[self._topic], action)
        except KafkaException as exc:
            if _error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
                raise _registry_error(action, exc) from exc
            self._check_compacted(admin)
        self._topic_ready = True

    def _check_compacted(self, admin: AdminClient) -> None:
        resource = ConfigResource(ResourceType.TOPIC, self._topic)
        futures = admin.describe_configs([resource], request_timeout=self._timeout_s)
        with self._translated(f"cannot describe topic {self._topic!r}"):
            entries = self._result(futures[resource], f"describing topic {self._topic!r}")
        policy = entries.get("cleanup.policy")
        value = "" if policy is None else str(policy.value)
        if "compact" not in value.split(","):
            raise RegistryError(
                f"topic {self._topic!r} exists with cleanup.policy={value!r}: the schema "
                "registry needs a compacted topic, or retention would delete schemas"
            )

    def _read_to_end(self) -> None:
        consumer = Consumer(
            {
                **self._settings,
                "group.id": CONSUMER_GROUP,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            with self._translated(f"cannot read topic {self._topic!r}"):
                low, high = self._watermarks(consumer)
                if high < self._catalog.next_offset:
                    self._catalog = SchemaCatalog()  # the topic was deleted and created again
                start = max(low, self._catalog.next_offset)
                if start < high:
                    consumer.assign([TopicPartition(self._topic, 0, start)])
                    self._consume_until(consumer, high)
        finally:
            consumer.close()

    def _watermarks(self, consumer: Consumer) -> tuple[int, int]:
        """The partition's first and next offsets; retried while a new topic gets a leader."""
        deadline = time.monotonic() + self._timeout_s
        partition = TopicPartition(self._topic, 0)
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    partition, timeout=self._timeout_s, cached=False
                )
                return low, high
            except KafkaException as exc:
                if _error_code(exc) not in NOT_READY_ERRORS or time.monotonic() > deadline:
                    raise
            time.sleep(NOT_READY_BACKOFF_S)

    def _consume_until(self, consumer: Consumer, high: int) -> None:
        """Apply records until offset ``high`` (or the partition's end) or time out."""
        deadline = time.monotonic() + self._timeout_s
        while self._catalog.next_offset < high:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise RegistryError(
                    f"reading topic {self._topic!r} timed out after {self._timeout_s:g}s "
                    f"at offset {self._catalog.next_offset} of {high}"
                )
            message = consumer.poll(min(remaining_s, CONSUME_POLL_S))
            if message is None:
                continue
            if self._at_end(message):
                return
            offset = message.offset()
            if offset is not None:
                self._apply(offset, message.key(), message.value())

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        skipped = len(self._catalog.skipped)
        self._catalog.apply(offset, key, value)
        for record_offset, reason in self._catalog.skipped[skipped:]:
            LOGGER.warning("%s@%d: skipped a %s", self._topic, record_offset, reason)

    def _at_end(self, message: Message[Any, Any]) -> bool:
        error = message.error()
        if error is None:
            return False
        if error.code() == KafkaError._PARTITION_EOF:
            return True
        raise RegistryError(f"cannot read topic {self._topic!r}: {error.str()} ({error.name()})")

    def _write(self, key: bytes, value: bytes) -> None:
        """Append one record and wait until every in-sync replica has it."""
        if self._producer is None:
            self._producer = Producer(
                {
                    **self._settings,
                    # One record at a time, flushed before the next: a retried
                    # duplicate is the same key and value, so idempotence (and
                    # its producer-id handshake) buys nothing here.
                    "acks": "all",
                    "enable.idempotence": False,
                    "delivery.timeout.ms": int(self._timeout_s * 1000),
                }
            )
        failures: list[KafkaError] = []

        def on_delivery(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failures.append(error)

        with self._translated(f"cannot write to topic {self._topic!r}"):
            self._producer.produce(
                self._topic, key=key, value=value, partition=0, on_delivery=on_delivery
            )
            unsent = self._producer.flush(self._timeout_s + RESULT_MARGIN_S)
        if unsent:
            raise RegistryError(
                f"writing to topic {self._topic!r} was not acknowledged within {self._timeout_s:g}s"
            )
        if failures:
            error = failures[0]
            raise RegistryError(
                f"cannot write to topic {self._topic!r}: {error.str()} ({error.name()})"
            )

    def _result(self, future: Any, action: str) -> Any:
        try:
            return future.result(timeout=self._timeout_s + RESULT_MARGIN_S)
        except TimeoutError as exc:
            raise RegistryError(f"{action}: no answer within {self._timeout_s:g}s") from exc

    @contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        try:
            yield
        except KafkaException as exc:
            raise _registry_error(action, exc) from exc


def _registry_error(action: str, exception: KafkaException) -> RegistryError:
    error = exception.args[0] if exception.args else None
    if isinstance(error, KafkaError):
        return RegistryError(f"{action}: {error.str()} ({error.name()})")
    return RegistryError(f"{action}: {exception}")


def _error_code(exception: KafkaException) -> int | None:
    error = exception.args[0] if exception.args else None
    return error.code() if isinstance(error, KafkaError) else None


def _schema_of(event_class: type[Event]) -> tuple[str, int, dict[str, Any]]:
    if not isinstance(event_class, type) or "event_type" not in event_class.__dict__:
        raise EventDefinitionError(f"{event_class!r} is not an Event class with type= and version=")
    try:
        schema = event_class.model_json_schema()
    except Exception as exc:
        raise EventDefinitionError(
            f"{event_class.event_type}: cannot build a JSON schema: {exc}"
        ) from exc
    return event_class.event_type, event_class.event_version, schema


def _type_name(event_type: str | type[Event]) -> str:
    name = event_type if isinstance(event_type, str) else event_type.event_type
    if not TYPE_NAME_PATTERN.match(name):
        raise ValueError(f"{name!r} is not an event type name, like 'activity.page_viewed'")
    return name


def _now() -> datetime:
    return datetime.now(UTC)
