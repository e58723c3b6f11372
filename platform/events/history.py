"""An entity's or a partition's history as readers see it: corrections applied.

:class:`EntityHistory` is one entity's events as the entity store read them: every
record with its key, in log order, and the same history with corrections applied.

A :class:`~eventplatform.events.Correction` amends an earlier event of its partition;
the event's content is its chain's latest replacement, or nothing once retracted (see
:mod:`.corrections`). :func:`corrected_history` applies every correction of a history,
which is how projections fold it and how the entity store hands an entity's events to
its decider. A history may hold the records the log erased, where they lie
(:class:`~eventplatform.events.erasure.ErasedRecord`): an erased record holds nothing,
and a correction that names one amends nothing, so its replacement stands at the
erased record's place (see :mod:`.erasure`). Pure: no client, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eventplatform.events.codec import EventCatalog
from eventplatform.events.corrections import Correction, ReplacementEvent
from eventplatform.events.erasure import ErasedRecord
from eventplatform.events.errors import UnknownEventTypeError
from eventplatform.events.model import Envelope, Event, Position


@dataclass(frozen=True)
class EntityHistory:
    """One entity's events: ``envelopes`` are every record with its key, corrections
    included, in log order; ``corrected`` the history with corrections applied (what a
    decider folds). ``version`` is the number of records, the version an append expects.

    A history read from a snapshot on holds only the events after it:
    ``first_version`` records came before ``envelopes[0]``, up to ``from_offset``.
    ``erased`` are the entity's records the log erased: no events, but records all the
    same, so they count in its version."""

    topic: str
    partition: int
    key: str
    envelopes: Sequence[Envelope[Any]]
    corrected: Sequence[Envelope[Any]]
    first_version: int = 0
    from_offset: int = 0
    erased: Sequence[ErasedRecord] = ()

    @property
    def version(self) -> int:
        return self.first_version + len(self.envelopes) + len(self.erased)

    def version_before(self, index: int) -> int:
        """The entity's version just before ``envelopes[index]``: the records ahead of it,
        erased ones included."""
        if not self.erased:
            return self.first_version + index
        position = self.envelopes[index].position
        assert position is not None, "an entity's history is read from the log"
        erased = sum(1 for record in self.erased if record.position.offset < position.offset)
        return self.first_version + index + erased

    @property
    def amends_earlier_events(self) -> bool:
        """Whether a correction here amends an event before ``from_offset``: the state
        folded up to there is then not the state of the corrected history."""
        return any(
            isinstance(e.event, Correction) and e.event.of.offset < self.from_offset
            for e in self.envelopes
        )

    @classmethod
    def of(
        cls,
        topic: str,
        partition: int,
        key: str,
        envelopes: Sequence[Envelope[Any]],
        catalog: EventCatalog,
        *,
        first_version: int = 0,
        from_offset: int = 0,
        erased: Sequence[ErasedRecord] = (),
    ) -> EntityHistory:
        records: list[Envelope[Any] | ErasedRecord] = [*envelopes, *erased]
        if erased:
            records.sort(key=_offset_of)
        corrected = corrected_history(records, catalog)
        return cls(topic, partition, key, envelopes, corrected, first_version, from_offset, erased)


def _offset_of(record: Envelope[Any] | ErasedRecord) -> int:
    assert record.position is not None, "an entity's history is read from the log"
    return record.position.offset


def corrected_history(
    envelopes: Iterable[Envelope[Any] | ErasedRecord], catalog: EventCatalog
) -> list[Envelope[Any]]:
    """The history with every correction applied, in the order the originals came.

    ``envelopes`` must be in log order within each partition (corrections
    always share their original's partition). A corrected event keeps its
    envelope (id, key, time, position) and takes its chain's latest
    replacement; a retracted one, or one whose replacement type the catalog
    does not know, drops out. Corrections naming unknown events are ignored.

    Erased records among them hold nothing. A correction naming one (by its
    position; the id it names can no longer be checked) makes it a root that held
    nothing before: its stand-in (:meth:`~.erasure.ErasedRecord.stand_in`) takes the
    chain's latest replacement, at the erased record's place.
    """
    roots: list[Envelope[Any] | ErasedRecord] = []
    erased_at: dict[Position, int] = {}
    root_of: dict[uuid.UUID, uuid.UUID] = {}
    effective: dict[uuid.UUID, Event | None] = {}
    for envelope in envelopes:
        if isinstance(envelope, ErasedRecord):
            erased_at[envelope.position] = len(roots)
            roots.append(envelope)
            continue
        event = envelope.event
        if not isinstance(event, Correction):
            roots.append(envelope)
            root_of[envelope.event_id] = envelope.event_id
            continue
        root = root_of.get(event.of.event_id)
        if root is None:
            root = _erased_root(event, roots, erased_at)
            if root is None:
                continue
            root_of[root] = root
        root_of[envelope.event_id] = root
        effective[root] = replacement_event(event, catalog)
    history = []
    for envelope in roots:
        if isinstance(envelope, ErasedRecord):
            continue
        if envelope.event_id not in effective:
            history.append(envelope)
        elif (payload := effective[envelope.event_id]) is not None:
            history.append(replace(envelope, event=payload))
    return history


def _erased_root(
    correction: Correction,
    roots: list[Envelope[Any] | ErasedRecord],
    erased_at: dict[Position, int],
) -> uuid.UUID | None:
    """The id of the root standing in for the erased record ``correction`` names, put in
    its place among ``roots``; None if it names no erased record."""
    index = erased_at.pop(correction.of.position, None)
    if index is None:
        return None
    erased = roots[index]
    assert isinstance(erased, ErasedRecord)
    roots[index] = erased.stand_in(correction.of.event_id)
    return correction.of.event_id


def replacement_event(correction: Correction, catalog: EventCatalog) -> Event | None:
    """The correction's replacement as the latest version of its class, or ``None``.

    ``None`` means the correction retracts, or replaces with a type this
    catalog does not read (which, for this reader, is the same thing).
    """
    return replacement_content(correction.replacement, catalog)


def replacement_content(
    replacement: ReplacementEvent | None, catalog: EventCatalog
) -> Event | None:
    if replacement is None:
        return None
    try:
        return catalog.event(replacement.type, replacement.version, replacement.data)
    except UnknownEventTypeError:
        return None
