"""Replacing a series' points in a time window, after a faulty agent.

:func:`correct_points` looks up, in the ``metrics_points`` table, where the
series' points in ``[start, end)`` sit in the log, and appends their
:func:`~.events.points_correction`: every old point retracted, the
replacements appended. Once the runner applies it, every rollup, sketch
and point reads as if only the replacements had been sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select

from eventplatform.apps.metrics.errors import MetricsError
from eventplatform.apps.metrics.events import TOPIC, MetricPoint, points_correction
from eventplatform.apps.metrics.projections import points, series
from eventplatform.events import EventProducer, EventRef, KafkaConnection, Position
from eventplatform.projections import create_store_engine, reading


def points_in_window(
    database_url: str, series: str, start: datetime, end: datetime
) -> list[EventRef]:
    """Where the series' points with ``start <= at < end`` sit in the log, in log order."""
    table = points
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            rows = connection.execute(
                select(table.c.event_id, table.c.log_partition, table.c.log_offset)
                .where(table.c.series == series, table.c.at >= start, table.c.at < end)
                .order_by(table.c.log_offset)
            )
            return [
                EventRef(uuid.UUID(event_id), series, Position(TOPIC, int(partition), int(offset)))
                for event_id, partition, offset in rows
            ]
    finally:
        engine.dispose()


def rescaled_points(
    database_url: str, name: str, start: datetime, end: datetime, factor: float
) -> list[MetricPoint]:
    """The series' points in ``[start, end)`` with their values times ``factor``: the
    replacements for an agent that reported in the wrong unit."""
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            found = connection.execute(
                select(series.c.name, series.c.tags, series.c.kind).where(series.c.series == name)
            ).first()
            if found is None:
                raise MetricsError(f"no series {name!r} in metrics_series")
            rows = connection.execute(
                select(points.c.at, points.c.value)
                .where(points.c.series == name, points.c.at >= start, points.c.at < end)
                .order_by(points.c.at)
            ).all()
    finally:
        engine.dispose()
    metric, tags, kind = found
    return [
        MetricPoint(
            name=metric, tags=json.loads(tags), value=value * factor, kind=kind, at=_aware(at)
        )
        for at, value in rows
    ]


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive times; the tables hold UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class PointsCorrection:
    series: str
    retracted: int
    replacements: int
    appended: tuple[EventRef, ...] = ()
    """The correction's own events, once appended (none on a dry run)."""


def correct_points(
    database_url: str,
    bootstrap: KafkaConnection,
    series: str,
    start: datetime,
    end: datetime,
    replacements: Sequence[MetricPoint],
    reason: str,
    *,
    dry_run: bool = False,
) -> PointsCorrection:
    """Replace ``series``' points in ``[start, end)`` with ``replacements`` (none: delete)."""
    refs = points_in_window(database_url, series, start, end)
    events = points_correction(series, start, end, refs, replacements, reason)
    if dry_run:
        return PointsCorrection(series, len(refs), len(replacements))
    with EventProducer(bootstrap) as producer:
        appended = producer.append(events)
    return PointsCorrection(series, len(refs), len(replacements), tuple(appended))
