"""The metrics app's part of ``platform demo``: a fleet's points with one agent faulty for
a while, its points replaced by the right values, and the days downsampled by Spark."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from eventplatform.apps.metrics.corrections import correct_points, rescaled_points
from eventplatform.apps.metrics.downsample import downsample
from eventplatform.apps.metrics.projections import daily, metric_rollups
from eventplatform.apps.metrics.simulator import (
    FAULTY_FACTOR,
    FleetShape,
    FleetSimulator,
    Simulation,
)
from eventplatform.projections import AppDemo, DemoRun, DemoSimulation, DemoSparkStep

FLEET = FleetShape(interval_s=15.0, latency_samples=5)
"""Fewer points than the simulator's default, so the demo's hours append in seconds."""
DOWNSAMPLING = f"downsampling the metrics to days with Spark ({daily.name})"


def simulate(run: DemoRun) -> DemoSimulation:
    """What the fleet's agents report over the window; one agent reports x100 for a while."""
    fleet = FleetSimulator(FLEET, seed=run.seed).run(run.begin, run.end)
    report = f"{len(fleet.points)} points of a fleet of {len(FleetSimulator().hosts())}"
    return DemoSimulation(fleet.points, report, correct=partial(replace_faulty, fleet))


def replace_faulty(fleet: Simulation, run: DemoRun) -> Sequence[str]:
    """The faulty agent's points in its faulty window, replaced by their right values."""
    faulty = fleet.faulty
    if faulty is None:
        return []
    url = run.database_url
    right = rescaled_points(url, faulty.series, faulty.start, faulty.end, 1 / FAULTY_FACTOR)
    done = correct_points(
        url, run.bootstrap, faulty.series, faulty.start, faulty.end, right, "agent reported x100"
    )
    return [
        f"replaced {done.retracted} points of {faulty.series} "
        f"({faulty.start:%H:%M} to {faulty.end:%H:%M} UTC), a hundred times too large"
    ]


def downsample_days(spark: Any, run: DemoRun) -> Sequence[str]:
    summary = downsample(spark, run.database_url, run.source_options)
    return [f"{summary.rows_written} day rows from {summary.events_read} events"]


demo = AppDemo(
    simulate=simulate,
    simulates="metrics",
    corrects="a faulty metrics agent",
    streamed=(metric_rollups.name,),
    spark_steps=(DemoSparkStep(DOWNSAMPLING, downsample_days),),
)
