"""Correcting events: immutable events that amend an earlier event.

A :class:`Correction` names the event it amends by event id and log position,
and carries either a replacement event or a retraction. It is appended with
the original's entity key, to the original's topic and partition, so it is
ordered after the original and the original is never rewritten.

Corrections of corrections are allowed. Every correction belongs to the chain
of one *root* (the first, non-correction event); the root's effective content
is decided by the chain's latest correction in log order: its replacement, or
nothing if it retracts. A correction may name the root or any correction in
its chain.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from eventplatform.events.model import Envelope, Event, EventRef, Position

CORRECTION_TYPE = "eventplatform.correction"


class CorrectedEvent(BaseModel):
    """The event a correction amends: its id, entity key and log position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: uuid.UUID
    key: str
    topic: str
    partition: int
    offset: int

    @property
    def position(self) -> Position:
        return Position(self.topic, self.partition, self.offset)

    @classmethod
    def of(cls, target: EventRef | Envelope[Any]) -> CorrectedEvent:
        ref = target.ref() if isinstance(target, Envelope) else target
        return cls(
            event_id=ref.event_id,
            key=ref.key,
            topic=ref.position.topic,
            partition=ref.position.partition,
            offset=ref.position.offset,
        )


class ReplacementEvent(BaseModel):
    """A replacement as it travels: type, version and JSON payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    version: int
    data: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> ReplacementEvent:
        return cls(
            type=event.event_type, version=event.event_version, data=event.model_dump(mode="json")
        )


class Correction(Event, type=CORRECTION_TYPE, version=1):
    """``Correction(of=<ref or envelope>, replacement=<event> | retract=True, reason=...)``."""

    of: CorrectedEvent
    replacement: ReplacementEvent | None = None
    retract: bool = False
    reason: str = ""

    @model_validator(mode="before")
    @classmethod
    def _accept_sdk_objects(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        values = dict(values)
        target = values.get("of")
        if isinstance(target, EventRef | Envelope):
            values["of"] = CorrectedEvent.of(target)
        replacement = values.get("replacement")
        if isinstance(replacement, Event):
            if isinstance(replacement, Correction):
                raise ValueError("a replacement must be a domain event, not a correction")
            if replacement.entity_key() != _key_of(values.get("of")):
                raise ValueError("the replacement must have the corrected event's entity key")
            values["replacement"] = ReplacementEvent.of(replacement)
        return values

    @model_validator(mode="after")
    def _replacement_xor_retract(self) -> Correction:
        if (self.replacement is None) == (not self.retract):
            raise ValueError("a correction carries either replacement=<event> or retract=True")
        return self

    def entity_key(self) -> str:
        return self.of.key


def _key_of(target: Any) -> str | None:
    if isinstance(target, CorrectedEvent):
        return target.key
    if isinstance(target, dict):
        key = target.get("key")
        return key if isinstance(key, str) else None
    return None
