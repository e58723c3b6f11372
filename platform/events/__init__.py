"""The event SDK: declare events, append them, correct them, read them back.

from eventplatform.events import Event, EventProducer, Correction

class PageViewed(Event, type="activity.page_viewed", version=1, key="user_id"):
    user_id: str
    url: str

with EventProducer("127.0.0.1:9092") as producer:
    [ref] = producer.append([PageViewed(user_id="u1", url="/")])
    producer.append([Correction(of=ref, replacement=PageViewed(user_id="u1", url="/home"))])

The package is the pure model (``model``, ``codec``, ``corrections``,
``compatibility``, ``deciders``, ``history``, ``partitioner``, ``errors``, ``ids``,
``wire``, ``erasure``) and its adapters to the log
(``producer``, ``registry``: librdkafka; ``batching``: trio; ``entities``, ``log_client``:
the entity store and ``erase_events`` over the log's own wire client). The adapters
connect, TLS and SASL included, as :mod:`eventplatform.client_config` resolves
(``ClientConfig``, ``load_client_config``; docs/security.md). Each name below is
imported from its module on first use, so importing the model alone loads no
client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventplatform.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from eventplatform.client_config import (
        ClientConfig,
        ClientConfigError,
        KafkaConnection,
        kafka_settings,
        load_client_config,
    )
    from eventplatform.events.batching import (
        BATCH_EVENTS_DEFAULT,
        QUEUE_EVENTS_DEFAULT,
        AppendQueue,
        serve_datagrams,
    )
    from eventplatform.events.codec import TYPE_HEADER, VERSION_HEADER, EventCatalog, encode
    from eventplatform.events.compatibility import Compatibility
    from eventplatform.events.corrections import CORRECTION_TYPE, Correction
    from eventplatform.events.deciders import (
        Command,
        CommandRejectedError,
        ConcurrencyError,
        Decider,
        Decision,
        decide_on,
    )
    from eventplatform.events.entities import (
        EntityStore,
        EntityStoreError,
        Repository,
        VersionConflictError,
    )
    from eventplatform.events.erasure import ErasedRecord
    from eventplatform.events.errors import (
        AppendError,
        DecodeError,
        EventDefinitionError,
        EventError,
        EventValidationError,
        IncompatibleSchemaError,
        RegistryError,
        UnknownEventTypeError,
        UpcastError,
    )
    from eventplatform.events.history import EntityHistory, corrected_history
    from eventplatform.events.ids import uuid7
    from eventplatform.events.log_client import LogClientError, erase_events
    from eventplatform.events.model import Envelope, Event, EventRef, Position, upcaster
    from eventplatform.events.producer import EventProducer
    from eventplatform.events.registry import SchemaRegistry
    from eventplatform.events.snapshots import MemorySnapshots, Snapshot, SnapshotStore
    from eventplatform.events.sql_snapshots import SqlSnapshots
    from eventplatform.events.wire import ERASED_HEADER, is_erased

_EXPORTS: dict[str, str] = {
    "CORRECTION_TYPE": "eventplatform.events.corrections",
    "ERASED_HEADER": "eventplatform.events.wire",
    "ErasedRecord": "eventplatform.events.erasure",
    "is_erased": "eventplatform.events.wire",
    "TYPE_HEADER": "eventplatform.events.codec",
    "VERSION_HEADER": "eventplatform.events.codec",
    "AppendError": "eventplatform.events.errors",
    "ClientConfig": "eventplatform.client_config",
    "ClientConfigError": "eventplatform.client_config",
    "KafkaConnection": "eventplatform.client_config",
    "load_client_config": "eventplatform.client_config",
    "kafka_settings": "eventplatform.client_config",
    "Command": "eventplatform.events.deciders",
    "CommandRejectedError": "eventplatform.events.deciders",
    "ConcurrencyError": "eventplatform.events.deciders",
    "Decider": "eventplatform.events.deciders",
    "Decision": "eventplatform.events.deciders",
    "decide_on": "eventplatform.events.deciders",
    "EntityHistory": "eventplatform.events.history",
    "LogClientError": "eventplatform.events.log_client",
    "erase_events": "eventplatform.events.log_client",
    "corrected_history": "eventplatform.events.history",
    "EntityStore": "eventplatform.events.entities",
    "EntityStoreError": "eventplatform.events.entities",
    "Repository": "eventplatform.events.entities",
    "VersionConflictError": "eventplatform.events.entities",
    "Compatibility": "eventplatform.events.compatibility",
    "Correction": "eventplatform.events.corrections",
    "DecodeError": "eventplatform.events.errors",
    "Envelope": "eventplatform.events.model",
    "Event": "eventplatform.events.model",
    "EventCatalog": "eventplatform.events.codec",
    "EventDefinitionError": "eventplatform.events.errors",
    "EventError": "eventplatform.events.errors",
    "EventProducer": "eventplatform.events.producer",
    "EventRef": "eventplatform.events.model",
    "EventValidationError": "eventplatform.events.errors",
    "IncompatibleSchemaError": "eventplatform.events.errors",
    "Position": "eventplatform.events.model",
    "RegistryError": "eventplatform.events.errors",
    "SchemaRegistry": "eventplatform.events.registry",
    "MemorySnapshots": "eventplatform.events.snapshots",
    "SqlSnapshots": "eventplatform.events.sql_snapshots",
    "Snapshot": "eventplatform.events.snapshots",
    "SnapshotStore": "eventplatform.events.snapshots",
    "UnknownEventTypeError": "eventplatform.events.errors",
    "UpcastError": "eventplatform.events.errors",
    "encode": "eventplatform.events.codec",
    "upcaster": "eventplatform.events.model",
    "uuid7": "eventplatform.events.ids",
    "BATCH_EVENTS_DEFAULT": "eventplatform.events.batching",
    "QUEUE_EVENTS_DEFAULT": "eventplatform.events.batching",
    "AppendQueue": "eventplatform.events.batching",
    "serve_datagrams": "eventplatform.events.batching",
}
"""Each exported name and the module that defines it (one line per name)."""

__all__ = [
    "BATCH_EVENTS_DEFAULT",
    "CORRECTION_TYPE",
    "ERASED_HEADER",
    "QUEUE_EVENTS_DEFAULT",
    "TYPE_HEADER",
    "VERSION_HEADER",
    "AppendError",
    "AppendQueue",
    "ClientConfig",
    "ClientConfigError",
    "Command",
    "CommandRejectedError",
    "Compatibility",
    "ConcurrencyError",
    "Correction",
    "Decider",
    "Decision",
    "DecodeError",
    "EntityHistory",
    "EntityStore",
    "EntityStoreError",
    "Envelope",
    "ErasedRecord",
    "Event",
    "EventCatalog",
    "EventDefinitionError",
    "EventError",
    "EventProducer",
    "EventRef",
    "EventValidationError",
    "IncompatibleSchemaError",
    "KafkaConnection",
    "LogClientError",
    "MemorySnapshots",
    "Position",
    "RegistryError",
    "Repository",
    "SchemaRegistry",
    "Snapshot",
    "SnapshotStore",
    "SqlSnapshots",
    "UnknownEventTypeError",
    "UpcastError",
    "VersionConflictError",
    "corrected_history",
    "decide_on",
    "encode",
    "erase_events",
    "is_erased",
    "kafka_settings",
    "load_client_config",
    "serve_datagrams",
    "upcaster",
    "uuid7",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
