"""The metrics app's named queries: ``platform query metrics.<name> [--since 1h]``.

Each runs on SQLite and PostgreSQL alike. The quantile queries merge the
minute sketches of the window (adding their counts) and read p50, p95 and
p99 off the merged sketch with a running sum, as :mod:`.sketch` defines.
"""

from __future__ import annotations

from eventplatform.apps.metrics.sketch import PERCENTILES
from eventplatform.projections import NamedQuery

LIMIT_DEFAULT = 20


def quantiles_over(merged: str, group: str) -> str:
    """SQL reading p50, p95 and p99 per ``group`` off ``merged`` (a query of rows
    ``group, value, observations``)."""
    return (
        f"WITH merged AS ({merged}), ranked AS ("
        f"SELECT {group}, value, SUM(observations) OVER ("
        f"PARTITION BY {group} ORDER BY value ROWS UNBOUNDED PRECEDING) AS running, "
        f"SUM(observations) OVER (PARTITION BY {group}) AS total FROM merged) "
        f"SELECT {group}, MAX(total) AS observations, "
        + ", ".join(
            f"MIN(CASE WHEN 100 * running > {p} * (total - 1) THEN value END) AS p{p}"
            for p in PERCENTILES
        )
        + " "
        f"FROM ranked GROUP BY {group}"
    )


QUERIES = (
    NamedQuery(
        "series",
        "SELECT series, kind, points, first_at, last_at FROM metrics_series "
        "WHERE last_at >= :since ORDER BY series LIMIT :limit",
        "The series that reported in the window, with their points and first and last report.",
        since_default="1d",
        parameters={"limit": 100},
    ),
    NamedQuery(
        "latency",
        quantiles_over(
            "SELECT series, value, SUM(observations) AS observations FROM metrics_sketches "
            "WHERE granularity = 'minute' AND bucket >= :since AND observations > 0 "
            "GROUP BY series, value",
            "series",
        )
        + " ORDER BY series LIMIT :limit",
        "p50, p95 and p99 of every histogram series over the window (merged minute sketches).",
        since_default="1h",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "counters",
        "SELECT r.series, SUM(r.total) AS total, SUM(r.points) AS points "
        "FROM metrics_rollups r JOIN metrics_series s ON s.series = r.series "
        "WHERE s.kind = 'counter' AND r.granularity = 'minute' AND r.bucket >= :since "
        "GROUP BY r.series ORDER BY total DESC, r.series LIMIT :limit",
        "The counters with the largest increase over the window.",
        since_default="1h",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "gauges",
        "SELECT r.series, MIN(r.minimum) AS minimum, MAX(r.maximum) AS maximum, "
        "SUM(r.total) / SUM(r.points) AS mean "
        "FROM metrics_rollups r JOIN metrics_series s ON s.series = r.series "
        "WHERE s.kind = 'gauge' AND r.granularity = 'minute' AND r.bucket >= :since "
        "GROUP BY r.series ORDER BY r.series LIMIT :limit",
        "Every gauge's minimum, maximum and mean over the window.",
        since_default="1h",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "daily",
        "SELECT series, day, points, total, minimum, maximum, last FROM metrics_daily_values "
        "WHERE day >= :since_day ORDER BY series, day LIMIT :limit",
        "The downsampled history: one row per series per day (from the Spark downsampling).",
        since_default="30d",
        parameters={"limit": 100},
    ),
)
