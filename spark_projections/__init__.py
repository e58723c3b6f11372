"""Spark replay and backfill of projections from the log.

    from eventplatform.spark_projections import ReplayRequest, plan_ranges, rebuild, spark_session

The record decoding (``columns``) and the resolution of corrections
(``corrections``) are pure; the rest drives Spark, librdkafka and the SQL store.
Each name below is imported from its module on first use, so a Spark worker that
decodes records loads neither Spark's session nor an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventplatform.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from eventplatform.spark_projections.backfilling import backfill
    from eventplatform.spark_projections.errors import ReplayConfigError, ReplayError
    from eventplatform.spark_projections.replay import (
        ReplayRequest,
        ReplaySummary,
        plan_ranges,
        rebuild,
    )
    from eventplatform.spark_projections.session import spark_session

_EXPORTS: dict[str, str] = {
    "ReplayConfigError": "eventplatform.spark_projections.errors",
    "ReplayError": "eventplatform.spark_projections.errors",
    "ReplayRequest": "eventplatform.spark_projections.replay",
    "ReplaySummary": "eventplatform.spark_projections.replay",
    "plan_ranges": "eventplatform.spark_projections.replay",
    "rebuild": "eventplatform.spark_projections.replay",
    "spark_session": "eventplatform.spark_projections.session",
    "backfill": "eventplatform.spark_projections.backfilling",
}
"""Each exported name and the module that defines it (one line per name)."""

__all__ = [
    "ReplayConfigError",
    "ReplayError",
    "ReplayRequest",
    "ReplaySummary",
    "backfill",
    "plan_ranges",
    "rebuild",
    "spark_session",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
