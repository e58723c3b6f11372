"""The metrics app's views, read back, and what they must show, computed directly.

:func:`expected` is an independent reading of the app's definitions: plain
loops over the points, no projection machinery. :func:`read_views` reads
the analysts' views in the same shapes, times as aware UTC datetimes.
Sums compare to 1e-9 relative (they are double precision, and a
correction's negation need not cancel to the last bit); everything else
compares exactly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from activity_dataset import as_day, as_utc, number
from sqlalchemy import text

from eventplatform.apps.metrics.events import MetricPoint
from eventplatform.apps.metrics.sketch import PERCENTILES, representative
from eventplatform.projections.database import create_store_engine

SUM_TOLERANCE = 1e-9


def truncated(moment: datetime, granularity: str) -> datetime:
    moment = moment.astimezone(UTC)
    if granularity == "minute":
        return datetime(
            moment.year, moment.month, moment.day, moment.hour, moment.minute, tzinfo=UTC
        )
    return datetime(moment.year, moment.month, moment.day, moment.hour, tzinfo=UTC)


def _fold(rows: dict[Any, list[Any]], key: Any, point: MetricPoint) -> None:
    row = rows.get(key)
    if row is None:
        rows[key] = [1, point.value, point.value, point.value, point.at, point.value]
        return
    row[0] += 1
    row[1] += point.value
    row[2] = min(row[2], point.value)
    row[3] = max(row[3], point.value)
    if (point.at, repr(point.value)) > (row[4], repr(row[5])):
        row[4], row[5] = point.at, point.value


def expected(points: Iterable[MetricPoint]) -> dict[str, dict[Any, Any]]:
    """The views for ``points`` (in append order)."""
    rollups: dict[Any, list[Any]] = {}
    daily: dict[Any, list[Any]] = {}
    sketches: dict[Any, list[float]] = defaultdict(list)
    daily_sketches: dict[Any, list[float]] = defaultdict(list)
    series: dict[str, list[Any]] = {}
    for point in points:
        name = point.series
        seen = series.setdefault(name, [point.kind, 0, point.at, point.at])
        seen[0] = point.kind
        seen[1] += 1
        seen[2], seen[3] = min(seen[2], point.at), max(seen[3], point.at)
        day = point.at.astimezone(UTC).date()
        _fold(daily, (name, day), point)
        if point.kind == "histogram":
            daily_sketches[name, day].append(point.value)
        for granularity in ("minute", "hour"):
            key = (name, granularity, truncated(point.at, granularity))
            _fold(rollups, key, point)
            if point.kind == "histogram":
                sketches[key].append(point.value)
    return {
        "series": {name: tuple(row) for name, row in series.items()},
        "rollups": {key: tuple(row) for key, row in rollups.items()},
        "quantiles": {key: _quantiles(values) for key, values in sketches.items()},
        "daily": {key: tuple(row) for key, row in daily.items()},
        "daily_quantiles": {key: _quantiles(values) for key, values in daily_sketches.items()},
    }


def _quantiles(values: list[float]) -> tuple[Any, ...]:
    """The observations and p50, p95, p99 read off the exact sorted values' buckets."""
    ordered = sorted(values)
    found = []
    for p in PERCENTILES:
        exact = ordered[p * (len(ordered) - 1) // 100]
        found.append(representative(exact))
    return (len(values), *found)


VIEW_QUERIES = {
    "series": "SELECT series, kind, points, first_at, last_at FROM metrics_series",
    "rollups": "SELECT series, granularity, bucket, points, total, minimum, maximum, last_at, "
    "last FROM metrics_rollup_values",
    "quantiles": "SELECT series, granularity, bucket, observations, p50, p95, p99 "
    "FROM metrics_quantiles",
    "daily": "SELECT series, day, points, total, minimum, maximum, last_at, last "
    "FROM metrics_daily_values",
    "daily_quantiles": "SELECT series, day, observations, p50, p95, p99 "
    "FROM metrics_daily_quantiles",
}


def read_views(url: str, names: Iterable[str] = VIEW_QUERIES) -> dict[str, dict[Any, Any]]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            found = {
                name: [tuple(row) for row in connection.execute(text(VIEW_QUERIES[name]))]
                for name in names
            }
    finally:
        engine.dispose()
    shaped: dict[str, dict[Any, Any]] = {}
    for name, rows in found.items():
        if name == "series":
            shaped[name] = {r[0]: (r[1], number(r[2]), as_utc(r[3]), as_utc(r[4])) for r in rows}
        elif name == "rollups":
            shaped[name] = {(r[0], r[1], as_utc(r[2])): _rollup(r[3:]) for r in rows}
        elif name == "daily":
            shaped[name] = {(r[0], as_day(r[1])): _rollup(r[2:]) for r in rows}
        elif name == "quantiles":
            shaped[name] = {(r[0], r[1], as_utc(r[2])): _numbers(r[3:]) for r in rows}
        else:
            shaped[name] = {(r[0], as_day(r[1])): _numbers(r[2:]) for r in rows}
    return shaped


def _rollup(values: tuple[Any, ...]) -> tuple[Any, ...]:
    points, total, minimum, maximum, last_at, last = values
    return (number(points), float(total), minimum, maximum, as_utc(last_at), last)


def _numbers(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return (number(values[0]), *(float(v) for v in values[1:]))


def assert_views_equal(found: dict[str, dict[Any, Any]], wanted: dict[str, dict[Any, Any]]) -> None:
    """The views ``found`` has equal ``wanted``'s: sums to :data:`SUM_TOLERANCE` relative,
    everything else exactly."""
    for name in found:
        assert set(found[name]) == set(wanted[name]), name
        for key, row in wanted[name].items():
            got = found[name][key]
            if name in {"rollups", "daily"}:
                assert math.isclose(got[1], row[1], rel_tol=SUM_TOLERANCE, abs_tol=1e-9), (
                    key,
                    got,
                    row,
                )
                got, row = (got[0], *got[2:]), (row[0], *row[2:])
            assert got == row, (name, key, got, row)
