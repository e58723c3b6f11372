"""Spark downsampling: the per-day history of every series, computed from the log.

The streaming runner keeps minute and hour rollups current. The day
rollups and sketches of ``metrics.daily`` are computed by Spark instead, as
a backfill: the first run reads the whole log; each later run recomputes
only the days that events appended since the previous run touch (new
points, and the points that corrections retract or replace), and leaves
the other days as they are. So the days stay in the table after the topic's
retention has deleted their points from the log, which is what makes them
the downsampled history.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventplatform.apps.metrics.projections import daily
from eventplatform.spark_projections import ReplayRequest, ReplaySummary, plan_ranges


def downsample(
    spark: Any, database_url: str, source_options: Mapping[str, str], *, dry_run: bool = False
) -> ReplaySummary:
    """Bring ``metrics.daily`` up to the end of the log; returns the backfill's summary."""
    from eventplatform.spark_projections import backfill

    # No partition chosen: every partition reads from where the last run stopped.
    since_last_run = ReplayRequest(from_offsets={})
    ranges = plan_ranges(daily, database_url, source_options, since_last_run)
    return backfill(spark, daily, database_url, ranges, source_options, dry_run=dry_run)
