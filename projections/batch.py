"""Turning polled records into a batch plan: no IO.

The plan is a sequence of steps in log order. Runs of applied events become
one :class:`~.premerge.BatchDelta` each: their rows pre-merged per table and
row key, ready for one upsert per table. Between runs stand the records that
need a step of their own: a correction to apply, or a poison record (it does
not decode, or its handler raised). Records of types the projection does not
read are skipped, and so are records the log erased (no event, and no poison
either): the plan lists those, so the store remembers that they contributed
nothing. The plan also says where each partition's checkpoint moves, past
every record it skipped.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from eventplatform.events.codec import header_type, parse
from eventplatform.events.corrections import Correction
from eventplatform.events.errors import EventError
from eventplatform.events.model import Envelope, Position
from eventplatform.events.wire import is_erased
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.model import Projection
from eventplatform.projections.premerge import BatchDelta, Premerger

StepKind = Literal["correct", "poison"]
GC_YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections while planning (default 700)."""


@dataclass(frozen=True, slots=True)
class Record:
    """What the runner needs of a consumed record."""

    position: Position
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


@dataclass(slots=True)
class Step:
    kind: StepKind
    record: Record
    envelope: Envelope[Any] | None = None
    error: BaseException | None = None
    event_type: str | None = None


@dataclass(slots=True)
class BatchPlan:
    steps: list[Step | BatchDelta]
    moves: dict[tuple[str, int], tuple[int | None, int]]
    stop_at: Step | None = None
    erased: list[Position] = field(default_factory=list)
    """The records the log erased that the plan passes, in log order per partition."""

    @property
    def events(self) -> int:
        """How many records the plan applies, corrects or parks."""
        return sum(s.events if isinstance(s, BatchDelta) else 1 for s in self.steps)


def plan_batch(
    projection: Projection,
    records: Iterable[Record],
    expected: dict[tuple[str, int], int | None],
    premerger: Premerger | None = None,
) -> BatchPlan:
    """Plan the records of one poll. Records of partitions not in ``expected`` are dropped.

    A record below the partition's expected offset was applied already (the
    consumer re-delivered it) and is dropped too. With the ``stop`` policy the
    plan ends before the first poison record.
    """
    premerger = premerger or Premerger(projection)
    catalog = projection.decoding_catalog()
    handlers = projection.handlers
    rank_of = projection.rank
    stop = projection.on_error == "stop"
    steps: list[Step | BatchDelta] = []
    moves: dict[tuple[str, int], tuple[int | None, int]] = {}
    erased: list[Position] = []
    delta = premerger.delta()
    add = premerger.adder(delta)
    for record in records:
        position = record.position
        partition = (position.topic, position.partition)
        start = expected.get(partition, -1)
        if start == -1 or (start is not None and position.offset < start):
            continue
        step: Step | None = None
        if record.value is None and is_erased(record.headers, None):
            erased.append(position)
            moves[partition] = (start, position.offset + 1)
            continue
        event_type = header_type(record.headers) or _value_type(record.value)
        if event_type is None or projection.handles(event_type):
            try:
                envelope = catalog.decode(record.value, position, event_type)
            except EventError as exc:
                held = _value_type(record.value)
                if held is None or projection.handles(held):
                    step = Step("poison", record, error=exc, event_type=event_type)
                # else: the headers named a type the value does not hold, and the
                # projection does not read the one it holds: skip it
            else:
                event = envelope.event
                entry = handlers.get(event.event_type)
                if entry is not None:
                    try:
                        add(projection.rows(entry[1], envelope), rank_of(position))
                    except HandlerError as exc:
                        step = Step("poison", record, envelope, error=exc, event_type=event_type)
                elif isinstance(event, Correction):
                    step = Step("correct", record, envelope, event_type=event_type)
        if step is not None:
            if stop and step.kind == "poison":
                _close(steps, delta)
                return BatchPlan(steps, moves, stop_at=step, erased=erased)
            if delta:
                steps.append(delta)
                delta = premerger.delta()
                add = premerger.adder(delta)
            steps.append(step)
        moves[partition] = (start, position.offset + 1)
    _close(steps, delta)
    return BatchPlan(steps, moves, erased=erased)


def _value_type(value: bytes | None) -> str | None:
    """The type a record without headers holds; None if it is no envelope at all."""
    try:
        return parse(value)["type"]  # type: ignore[no-any-return]
    except EventError:
        return None


def _close(steps: list[Step | BatchDelta], delta: BatchDelta) -> None:
    if delta:
        steps.append(delta)


@contextmanager
def young_collections_rare() -> Iterator[None]:
    """Keep what exists out of collections, and collect young objects seldom.

    A batch allocates and frees hundreds of thousands of small objects, none
    in cycles the planner makes; at the default threshold the collector would
    walk the young generation every 700 allocations.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
