"""The metrics app's projections: series, rollups per minute and hour, quantile sketches.

``metrics.rollups`` is what the streaming runner keeps current:

* ``metrics_series``: one row per series (name, tags as JSON, kind, how
  many points, first and last point);
* ``metrics_rollups``: per series, granularity (``minute``, ``hour``) and
  bucket: how many points, their sum, min, max, and the latest point as
  ``moment|value`` text (:func:`last_sample`), which the ``metrics_rollup_values``
  view splits into ``last_at`` and ``last``;
* ``metrics_sketches``: per series, granularity and bucket, the quantile
  sketch of its histogram observations (see :mod:`.sketch`): one row per
  sketch bucket with its count; the ``metrics_quantiles`` view reads p50,
  p95 and p99 off them;
* ``metrics_points``: every point (series, moment, value) with where it sits
  in the log, which is what :mod:`.corrections` retracts.

``metrics.daily`` is the same rollup and sketch per UTC day
(``metrics_daily_rollups``, ``metrics_daily_sketches``). It is the
downsampled history: :mod:`.downsample` computes it with Spark from the log,
so it outlives the minute rows an operator prunes.

Sums are double precision: a sum that a correction has reduced can differ
from one computed afresh in the last bits. Counts, minimums, maximums, last
values and sketches are exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime

from sqlalchemy import BigInteger, Column, Date, DateTime, Float, Integer, MetaData, String

from eventplatform.apps.metrics.events import SERIES_MAX, MetricPoint
from eventplatform.apps.metrics.sketch import representative
from eventplatform.events import Envelope
from eventplatform.projections import (
    Count,
    First,
    Latest,
    Max,
    Min,
    Only,
    Projection,
    Row,
    Sum,
    merge_column,
    projection_table,
)

NAME_MAX = 200
TAGS_JSON_MAX = 8192
GRANULARITIES = ("minute", "hour")

metadata = MetaData()

series = projection_table(
    "metrics_series",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    merge_column("name", String(NAME_MAX), First()),
    merge_column("tags", String(TAGS_JSON_MAX), First()),
    merge_column("kind", String(16), Latest()),
    merge_column("points", BigInteger, Count()),
    merge_column("first_at", DateTime(timezone=True), Min()),
    merge_column("last_at", DateTime(timezone=True), Max()),
)


SAMPLE_MAX = 64
# byte order on PostgreSQL too, so the database's max is Python's
SAMPLE_TYPE = String(SAMPLE_MAX).with_variant(String(SAMPLE_MAX, collation="C"), "postgresql")


def _rollup_columns() -> list[Column[object]]:
    return [
        merge_column("points", BigInteger, Count()),
        merge_column("total", Float, Sum()),
        merge_column("minimum", Float, Min()),
        merge_column("maximum", Float, Max()),
        merge_column("last_sample", SAMPLE_TYPE, Max()),
    ]


def last_sample(moment: datetime, value: float) -> str:
    """``moment|value`` with the moment in fixed-width UTC, so the greatest string is the
    latest point (ties: the greater text); the views split it into ``last_at`` and ``last``."""
    return f"{moment.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}|{value!r}"


rollups = projection_table(
    "metrics_rollups",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    Column("granularity", String(8), primary_key=True),
    Column("bucket", DateTime(timezone=True), primary_key=True),
    *_rollup_columns(),
)

sketches = projection_table(
    "metrics_sketches",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    Column("granularity", String(8), primary_key=True),
    Column("bucket", DateTime(timezone=True), primary_key=True),
    Column("value", Float, primary_key=True),
    merge_column("observations", BigInteger, Count()),
)

points = projection_table(
    "metrics_points",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    Column("at", DateTime(timezone=True), primary_key=True),
    Column("event_id", String(36), primary_key=True),
    merge_column("value", Float, Only()),
    merge_column("log_partition", Integer, Only()),
    merge_column("log_offset", BigInteger, Only()),
)

daily_rollups = projection_table(
    "metrics_daily_rollups",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    Column("day", Date, primary_key=True),
    *_rollup_columns(),
)

daily_sketches = projection_table(
    "metrics_daily_sketches",
    metadata,
    Column("series", String(SERIES_MAX), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("value", Float, primary_key=True),
    merge_column("observations", BigInteger, Count()),
)

metric_rollups = Projection(
    "metrics.rollups",
    tables=[series, rollups, sketches, points],
    description="Per series: rollups per minute and hour (count, sum, min, max, last), "
    "quantile sketches of histograms, and every point.",
)
daily = Projection(
    "metrics.daily",
    tables=[daily_rollups, daily_sketches],
    description="The downsampled history: rollups and quantile sketches per series per day, "
    "computed with Spark (platform apps metrics downsample).",
)


def bucket(moment: datetime, granularity: str) -> datetime:
    """``moment`` truncated to the start of its minute or hour (UTC)."""
    moment = moment.astimezone(UTC)
    if granularity == "minute":
        return moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def tags_json(tags: dict[str, str]) -> str:
    return json.dumps(tags, sort_keys=True, separators=(",", ":"))


def _values(point: MetricPoint) -> dict[str, float | str]:
    value = point.value
    sample = last_sample(point.at, value)
    return {"total": value, "minimum": value, "maximum": value, "last_sample": sample}


@metric_rollups.on(MetricPoint)
def point_rollups(envelope: Envelope[MetricPoint]) -> Iterator[Row]:
    point = envelope.event
    name = point.series
    position = envelope.position
    assert position is not None, "a projected event has its log position"
    yield Row(
        series,
        series=name,
        name=point.name,
        tags=tags_json(point.tags),
        kind=point.kind,
        first_at=point.at,
        last_at=point.at,
    )
    yield Row(
        points,
        series=name,
        at=point.at,
        event_id=str(envelope.event_id),
        value=point.value,
        log_partition=position.partition,
        log_offset=position.offset,
    )
    for granularity in GRANULARITIES:
        moment = bucket(point.at, granularity)
        yield Row(rollups, series=name, granularity=granularity, bucket=moment, **_values(point))
        if point.kind == "histogram":
            value = representative(point.value)
            yield Row(sketches, series=name, granularity=granularity, bucket=moment, value=value)


@daily.on(MetricPoint)
def point_day(envelope: Envelope[MetricPoint]) -> Iterator[Row]:
    point = envelope.event
    day = day_of(point.at)
    yield Row(daily_rollups, series=point.series, day=day, **_values(point))
    if point.kind == "histogram":
        yield Row(daily_sketches, series=point.series, day=day, value=representative(point.value))


PROJECTIONS = (metric_rollups, daily)
