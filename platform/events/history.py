"""An entity's or a partition's history as readers see it: corrections applied.

:class:`EntityHistory` is one entity's events as the entity store read them: every
record with its key, in log order, and the same history with corrections applied.

A :class:`~eventplatform.events.Correction` amends an earlier event of its partition;
the event's content is its chain's latest replacement, or nothing once retracted (see
:mod:`.corrections`). :func:`corrected_history` applies every correction of a history,
which is how projections fold it and how the entity store hands an entity's events to
its decider. Pure: no client, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eventplatform.events.codec import EventCatalog
from eventplatform.events.corrections import Correction, ReplacementEvent
from eventplatform.events.errors import UnknownEventTypeError
from eventplatform.events.model import Envelope, Event


@dataclass(frozen=True)
class EntityHistory:
    """One entity's events: ``envelopes`` are every record with its key, corrections
    included, in log order; ``corrected`` the history with corrections applied (what a
    decider folds). ``version`` is the number of records, the version an append expects.

    A history read from a snapshot on holds only the events after it:
    ``first_version`` records came before ``envelopes[0]``, up to ``from_offset``."""

    topic: str
    partition: int
    key: str
    envelopes: Sequence[Envelope[Any]]
    corrected: Sequence[Envelope[Any]]
    first_version: int = 0
    from_offset: int = 0

    @property
    def version(self) -> int:
        return self.first_version + len(self.envelopes)

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
    ) -> EntityHistory:
        corrected = corrected_history(envelopes, catalog)
        return cls(topic, partition, key, envelopes, corrected, first_version, from_offset)


def corrected_history(
    envelopes: Iterable[Envelope[Any]], catalog: EventCatalog
) -> list[Envelope[Any]]:
    """The history with every correction applied, in the order the originals came.

    ``envelopes`` must be in log order within each partition (corrections
    always share their original's partition). A corrected event keeps its
    envelope (id, key, time, position) and takes its chain's latest
    replacement; a retracted one, or one whose replacement type the catalog
    does not know, drops out. Corrections naming unknown events are ignored.
    """
    roots: list[Envelope[Any]] = []
    root_of: dict[uuid.UUID, uuid.UUID] = {}
    effective: dict[uuid.UUID, Event | None] = {}
    for envelope in envelopes:
        event = envelope.event
        if not isinstance(event, Correction):
            roots.append(envelope)
            root_of[envelope.event_id] = envelope.event_id
            continue
        root = root_of.get(event.of.event_id)
        if root is None:
            continue
        root_of[envelope.event_id] = root
        effective[root] = replacement_event(event, catalog)
    history = []
    for envelope in roots:
        if envelope.event_id not in effective:
            history.append(envelope)
        elif (payload := effective[envelope.event_id]) is not None:
            history.append(replace(envelope, event=payload))
    return history


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
