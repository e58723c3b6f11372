"""Corrections in a replay: resolved once on the driver, applied as rewritten records.

The streaming runner applies a correction when it reaches it. A replay sees
the whole range at once, so the driver resolves every correction in it
first, with the runner's rules (:func:`eventplatform.projections.corrections.find_root`):
a correction names an earlier event of its own partition by position and id;
a chain of corrections leads back to its root, the first, non-correction
event; a correction whose link does not hold is a poison event.

For a root inside the range the executors then read the root as if it
held its effective content, the latest correction's replacement, or skip it
if that retracts it, and they skip the corrections themselves: a fold of
the corrected history. A root before the range (a replay on top of live
state) was applied already; its corrections go through the runner's own
correction path when the result is swapped in.

A link may be a record the log erased. It holds nothing, and the chain ends
there: the erased record is a root that held nothing, as in the runner
(:mod:`eventplatform.projections.corrections`). A replacement of it is read at
its position as the stand-in root's envelope (``Resolution.stand_ins``: the id
the correction names, the record's key and its timestamp), and a retraction of
it changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from eventplatform.events.corrections import Correction
from eventplatform.events.erasure import ErasedRecord
from eventplatform.events.model import Envelope, Position
from eventplatform.projections.fold import link_problem

PositionKey = tuple[str, int, int]
Replacement = tuple[str, int, Any] | None
"""A corrected event's effective content: (type, version, data), or None if retracted."""


@dataclass
class Resolution:
    """What the driver learnt from the range's corrections."""

    replacements: dict[PositionKey, Replacement] = field(default_factory=dict)
    """Effective content of each root in the range, by position."""
    corrections: set[PositionKey] = field(default_factory=set)
    """Every correction in the range (the executors skip them)."""
    latest: dict[Position, tuple[str, Envelope[Correction]]] = field(default_factory=dict)
    """Per root in the range: its event id and the correction that decides its content."""
    before_range: list[Envelope[Correction]] = field(default_factory=list)
    """Valid corrections whose root precedes the range, in log order."""
    invalid: list[tuple[Envelope[Correction], str]] = field(default_factory=list)
    """Corrections whose chain does not hold, with the reason: poison events."""
    values: dict[Position, bytes] = field(default_factory=dict)
    """The corrections' record values (a dead letter keeps its record)."""
    chains: dict[PositionKey, list[tuple[PositionKey, Replacement]]] = field(default_factory=dict)
    """Per root in the range: its valid corrections in log order, with their content."""
    stand_ins: dict[PositionKey, bytes] = field(default_factory=dict)
    """Per erased record in the range that a correction names: the record value its
    replacements are read into (an envelope with the stand-in root's id, key and time)."""
    erased: list[Position] = field(default_factory=list)
    """Every erased record of the range, in log order."""


def key_of(position: Position) -> PositionKey:
    return (position.topic, position.partition, position.offset)


def resolve(
    corrections: Iterable[Envelope[Correction]],
    starts: Mapping[tuple[str, int], int],
    ids_at: Callable[[list[Position]], Mapping[Position, str | None]],
    erased: Iterable[ErasedRecord] = (),
) -> Resolution:
    """Resolve ``corrections`` (any order) of a range starting at ``starts`` per partition.

    ``ids_at(positions)`` gives the event id held at each position that is
    not a correction of the range (None, or absent, where there is none).
    ``erased`` are the range's records the log erased.
    """
    ordered = sorted(corrections, key=lambda envelope: _at(envelope))
    by_position = {_at(envelope): envelope for envelope in ordered}
    erased_at = {record.position: record for record in erased}
    result = Resolution(
        corrections={key_of(position) for position in by_position}, erased=sorted(erased_at)
    )

    def before(position: Position) -> bool:
        return position.offset < starts.get((position.topic, position.partition), 0)

    targets = {envelope.event.of.position for envelope in ordered}
    ids = ids_at(
        sorted(p for p in targets if p not in by_position and p not in erased_at and not before(p))
    )
    root_of: dict[Position, tuple[Position, str] | _Before | None] = {}
    for envelope in ordered:
        here = _at(envelope)
        target = envelope.event.of
        problem = link_problem(here, target.position)
        if problem is not None:
            problem = f"{here}: names {target.position}, {problem}"
        root: tuple[Position, str] | _Before | None = None
        if problem is None and before(target.position):
            root = BEFORE  # the runner's own path resolves it against the log
        elif problem is None and target.position in erased_at:
            root = (target.position, str(target.event_id))  # held nothing: no id to check
            stand_in = erased_at[target.position].stand_in(target.event_id)
            result.stand_ins[key_of(target.position)] = stand_in_value(stand_in)
        elif problem is None:
            held = by_position.get(target.position)
            held_id = str(held.event_id) if held is not None else ids.get(target.position)
            if held_id != str(target.event_id):
                problem = _mismatch(here, target.event_id, target.position, held_id)
            elif held is None:
                root = (target.position, str(held_id))
            else:
                root = root_of.get(target.position)
                if root is None:
                    problem = f"{here}: names {target.position}, a correction that is poison"
        root_of[here] = root
        if isinstance(root, _Before):
            result.before_range.append(envelope)
        elif root is None:
            result.invalid.append((envelope, problem or f"{here}: its chain does not hold"))
        else:
            root_position, root_id = root
            content = _content(envelope.event)
            result.latest[root_position] = (root_id, envelope)
            result.replacements[key_of(root_position)] = content
            result.chains.setdefault(key_of(root_position), []).append((key_of(here), content))
    return result


class _Before:
    """The chain leads before the range."""


def stand_in_value(stand_in: Envelope[Any]) -> bytes:
    """A record value holding the stand-in root's envelope, with no payload: the
    executors read a replacement into it (type, version and data)."""
    return orjson.dumps(
        {
            "id": str(stand_in.event_id),
            "type": stand_in.event_type,
            "version": stand_in.event.event_version,
            "occurred_at": stand_in.occurred_at.isoformat(),
            "key": stand_in.key,
            "correlation_id": None,
            "causation_id": None,
            "data": {},
        }
    )


BEFORE = _Before()


def _content(correction: Correction) -> Replacement:
    replacement = correction.replacement
    if replacement is None:
        return None
    data: Any = replacement.data
    return (replacement.type, replacement.version, data)


def _mismatch(here: Position, wanted: Any, target: Position, held: str | None) -> str:
    return f"{here}: names event {wanted} at {target}, which holds {held or 'nothing'}"


def _at(envelope: Envelope[Any]) -> Position:
    assert envelope.position is not None, "a replayed correction has its log position"
    return envelope.position
