"""Erased records as readers of events see them.

The log can erase a record in place: the record keeps its offset, timestamp and key,
its value becomes null and its one header is ``eventplatform.erased``
(:func:`~eventplatform.events.wire.is_erased` tells). An erased record holds no event,
so every reader skips it as an event that contributes nothing, and moves past its
offset as past any other.

A correction may still name an erased record: the record was an event when the
correction was appended, or the correction amends a correction that was erased
since. Its *erased link* then holds nothing, as if its root had been retracted: a
retraction of it changes nothing, and a replacement of it contributes the
replacement, at the erased record's position. What the log keeps of the record is
an :class:`ErasedRecord`; :meth:`ErasedRecord.stand_in` is the root that stands in
for the record in a chain: the id the correction names, the record's key, and its
timestamp as the time the event occurred (the timestamp is the envelope's
``occurred_at`` to the millisecond, as the codec writes it), so every reader that
folds the replacement gives it the same envelope.

Pure: no client, no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from eventplatform.events.model import Envelope, Event, Position
from eventplatform.events.wire import ERASED_HEADER as ERASED_HEADER
from eventplatform.events.wire import is_erased as is_erased

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ErasedEvent(Event, type="eventplatform.erased", version=1):
    """The content of an erased record's stand-in: nothing a projection reads."""

    def entity_key(self) -> str:
        return ""


ERASED_EVENT = ErasedEvent()


@dataclass(frozen=True, slots=True)
class ErasedRecord:
    """What the log keeps of an erased record: where it is, its key and its timestamp."""

    position: Position
    key: str
    """The record's key as text (empty if it had none)."""
    timestamp_ms: int

    @classmethod
    def of(cls, position: Position, key: bytes | None, timestamp_ms: int) -> ErasedRecord:
        text = "" if key is None else key.decode("utf-8", "replace")
        return cls(position, text, timestamp_ms)

    @property
    def occurred_at(self) -> datetime:
        """The record's timestamp as an aware time, exact to the millisecond."""
        return occurred_at_of(self.timestamp_ms)

    def stand_in(self, event_id: uuid.UUID) -> Envelope[ErasedEvent]:
        """The root that stands in for this record in a correction's chain, whose
        correction names it as event ``event_id``."""
        return Envelope.decoded(
            ERASED_EVENT, event_id, self.occurred_at, self.key, None, None, self.position
        )


def occurred_at_of(timestamp_ms: int) -> datetime:
    """A record timestamp (ms since the epoch) as an aware UTC time, without float error."""
    return _EPOCH + timedelta(milliseconds=timestamp_ms)


def is_stand_in(envelope: Envelope[Event]) -> bool:
    """Whether ``envelope`` stands in for an erased record (:meth:`ErasedRecord.stand_in`)."""
    return isinstance(envelope.event, ErasedEvent)
