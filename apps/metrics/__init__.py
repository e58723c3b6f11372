"""Metrics: StatsD and Prometheus samples as events, rolled up per minute, hour and day.

``app`` is what the platform installs (through the ``eventplatform.apps``
entry point): the event types of :mod:`.events`, the projections of
:mod:`.projections`, the named queries of :mod:`.queries`, and the Alembic
revisions in ``migrations/`` that create the tables and the analysts' views.
Its commands (``platform apps metrics ...``) are in :mod:`.cli`, its part of
``platform demo`` in :mod:`.demo`.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.apps.metrics.events import MetricPoint, PointsCorrected
from eventplatform.apps.metrics.projections import daily, metric_rollups
from eventplatform.apps.metrics.queries import QUERIES
from eventplatform.projections import App

APP_NAME = "metrics"

app = App(
    name=APP_NAME,
    projections=[metric_rollups, daily],
    event_types=[MetricPoint, PointsCorrected],
    migrations=Path(__file__).resolve().parent / "migrations",
    queries=QUERIES,
    commands="eventplatform.apps.metrics.cli:commands",
    demo="eventplatform.apps.metrics.demo:demo",
    description="Metrics from StatsD and Prometheus: rollups per minute, hour and day, "
    "and histogram quantiles.",
)
