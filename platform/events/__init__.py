"""The event SDK: declare events, append them, correct them, read them back.

from eventplatform.events import Event, EventProducer, Correction

class PageViewed(Event, type="activity.page_viewed", version=1, key="user_id"):
    user_id: str
    url: str

with EventProducer("127.0.0.1:9092") as producer:
    [ref] = producer.append([PageViewed(user_id="u1", url="/")])
    producer.append([Correction(of=ref, replacement=PageViewed(user_id="u1", url="/home"))])
"""

from eventplatform.events.codec import TYPE_HEADER, VERSION_HEADER, EventCatalog, encode
from eventplatform.events.compatibility import Compatibility
from eventplatform.events.corrections import CORRECTION_TYPE, Correction
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
from eventplatform.events.ids import uuid7
from eventplatform.events.model import Envelope, Event, EventRef, Position, upcaster
from eventplatform.events.producer import EventProducer
from eventplatform.events.registry import SchemaRegistry

__all__ = [
    "CORRECTION_TYPE",
    "TYPE_HEADER",
    "VERSION_HEADER",
    "AppendError",
    "Compatibility",
    "Correction",
    "DecodeError",
    "Envelope",
    "Event",
    "EventCatalog",
    "EventDefinitionError",
    "EventError",
    "EventProducer",
    "EventRef",
    "EventValidationError",
    "IncompatibleSchemaError",
    "Position",
    "RegistryError",
    "SchemaRegistry",
    "UnknownEventTypeError",
    "UpcastError",
    "encode",
    "upcaster",
    "uuid7",
]

# exports for apps
from eventplatform.events.batching import (
    BATCH_EVENTS_DEFAULT,
    QUEUE_EVENTS_DEFAULT,
    AppendQueue,
    serve_datagrams,
)

__all__ += [
    "BATCH_EVENTS_DEFAULT",
    "QUEUE_EVENTS_DEFAULT",
    "AppendQueue",
    "serve_datagrams",
]
