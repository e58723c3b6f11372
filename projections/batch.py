"""Turning polled records into a batch plan: pure, no IO.

Each record becomes one step: an event to apply (with its contributions), a
correction to apply, a record to skip (a type the projection does not read),
or a poison record (it does not decode, or its handler raised). The plan
also says where each partition's checkpoint moves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from eventplatform.events import Correction, Envelope, EventError, Position
from eventplatform.events.codec import envelope_of, header_type, parse
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.model import Contribution, Projection

StepKind = Literal["apply", "correct", "poison"]


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
    contributions: list[Contribution] = field(default_factory=list)
    error: BaseException | None = None
    event_type: str | None = None


@dataclass(slots=True)
class BatchPlan:
    steps: list[Step]
    moves: dict[tuple[str, int], tuple[int | None, int]]
    stop_at: Step | None = None


def plan_batch(
    projection: Projection,
    records: Iterable[Record],
    expected: dict[tuple[str, int], int | None],
) -> BatchPlan:
    """Plan the records of one poll. Records of partitions not in ``expected`` are dropped.

    A record below the partition's expected offset was applied already (the
    consumer re-delivered it) and is dropped too. With the ``stop`` policy the
    plan ends before the first poison record.
    """
    catalog = projection.catalog()
    steps: list[Step] = []
    moves: dict[tuple[str, int], tuple[int | None, int]] = {}
    for record in records:
        partition = (record.position.topic, record.position.partition)
        if partition not in expected:
            continue
        start = expected[partition]
        if start is not None and record.position.offset < start:
            continue
        step = _step(projection, catalog, record)
        if step is not None and step.kind == "poison" and projection.on_error == "stop":
            return BatchPlan(steps, moves, stop_at=step)
        if step is not None:
            steps.append(step)
        moves[partition] = (start, record.position.offset + 1)
    return BatchPlan(steps, moves)


def _step(projection: Projection, catalog: Any, record: Record) -> Step | None:
    event_type = header_type(record.headers)
    if event_type is not None and not projection.handles(event_type):
        return None
    try:
        raw = parse(record.value)
        if not projection.handles(raw["type"]):
            return None
        event = catalog.event(raw["type"], raw["version"], raw["data"])
        envelope = envelope_of(raw, event, record.position)
    except EventError as exc:
        return Step("poison", record, error=exc, event_type=event_type)
    if isinstance(envelope.event, Correction):
        return Step("correct", record, envelope=envelope, event_type=event_type)
    try:
        rank = projection.rank(record.position)
        contributions = projection.contributions(envelope, rank)
    except HandlerError as exc:
        return Step("poison", record, envelope=envelope, error=exc, event_type=event_type)
    return Step("apply", record, envelope=envelope, contributions=contributions)
