"""The event SDK's exceptions.

    EventError
    ├── EventDefinitionError   an Event subclass is declared wrongly (raised at import)
    ├── EventValidationError   an event or payload does not satisfy its schema
    ├── UnknownEventTypeError       a record names a type or version the catalog cannot read
    ├── UpcastError            an upcaster chain is missing a step or failed
    ├── DecodeError            a record is not an event envelope
    ├── IncompatibleSchemaError     a new schema version breaks the type's compatibility rule
    ├── RegistryError          the schema registry topic cannot be read or written
    └── AppendError            the log did not acknowledge every event of an append

Third-party exceptions (pydantic, confluent-kafka, orjson) are translated at
the boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class EventError(Exception):
    """Base of every error the event SDK raises."""


class EventDefinitionError(EventError, TypeError):
    """An ``Event`` subclass declaration is invalid."""


class EventValidationError(EventError, ValueError):
    """An event does not satisfy its schema; nothing was sent."""


class UnknownEventTypeError(EventError):
    """The catalog has no class for a record's event type, or the version is newer."""


class UpcastError(EventError):
    """An old payload cannot be brought to the latest version."""


class DecodeError(EventError, ValueError):
    """A record's bytes are not an event envelope."""


class IncompatibleSchemaError(EventError):
    """Registering a schema version would break the type's compatibility rule.

    ``field`` names the offending field (a dotted path for nested fields).
    """

    def __init__(self, message: str, *, event_type: str, field: str) -> None:
        super().__init__(message)
        self.event_type = event_type
        self.field = field


class RegistryError(EventError):
    """The ``_schemas`` topic could not be read or written."""


class AppendError(EventError):
    """The log did not acknowledge every event of an append.

    ``positions`` holds the refs of the events that were acknowledged, in the
    order given, with ``None`` for the ones that were not.
    """

    def __init__(self, message: str, positions: list[object]) -> None:
        super().__init__(message)
        self.positions = positions
