"""Spark replay and backfill of projections from the log."""

# exports for apps
from eventplatform.spark_projections.backfill import backfill
from eventplatform.spark_projections.errors import ReplayError
from eventplatform.spark_projections.replay import ReplayRequest, ReplaySummary, plan_ranges
from eventplatform.spark_projections.session import spark_session

__all__ = [
    "ReplayError",
    "ReplayRequest",
    "ReplaySummary",
    "backfill",
    "plan_ranges",
    "spark_session",
]
