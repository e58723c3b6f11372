"""The metrics app under Spark: a rebuild after a faulty agent's points were replaced reads
as if only the right values had been sent, like the streaming runner; the downsampling
computes the per-day history, first from the whole log, then only the days that new
points and corrections touch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import metrics_reference as reference
import pytest
from projection_threads import apply_all
from replay_databases import ranges

from eventplatform.apps.metrics import app
from eventplatform.apps.metrics.corrections import correct_points, rescaled_points
from eventplatform.apps.metrics.downsample import downsample
from eventplatform.apps.metrics.events import TOPIC, MetricPoint
from eventplatform.apps.metrics.projections import metric_rollups
from eventplatform.apps.metrics.simulator import FleetShape, FleetSimulator
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import fresh_database, running_broker

BEGIN = datetime(2026, 11, 20, 23, 45, tzinfo=UTC)  # across midnight: two days
APPLY_TIMEOUT_S = 180.0
ROLLUP_VIEWS = ["series", "rollups", "quantiles"]
DAILY_VIEWS = ["daily", "daily_quantiles"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_rebuild_and_downsampling_after_a_correction(kind: str, spark: Any, tmp_path: Path) -> None:
    shape = FleetShape(faulty_minutes=5, latency_samples=5)
    simulation = FleetSimulator(shape, seed=11).run(BEGIN, BEGIN + timedelta(minutes=30))
    faulty = simulation.faulty
    assert faulty is not None
    with (
        running_broker(tmp_path / "broker", ["num.partitions=3"]) as broker,
        fresh_database(kind, tmp_path) as streamed,
        fresh_database(kind, tmp_path) as rebuilt,
    ):
        options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(simulation.points)
        for url in (streamed, rebuilt):
            migrate.upgrade(url, [app])
        apply_all(metric_rollups.name, [app], streamed, broker.bootstrap, refs, APPLY_TIMEOUT_S)
        assert downsample(spark, rebuilt, options).parked == 0
        reference.assert_views_equal(
            reference.read_views(rebuilt, DAILY_VIEWS), reference.expected(simulation.points)
        )

        fixed = rescaled_points(streamed, faulty.series, faulty.start, faulty.end, 0.01)
        done = correct_points(
            streamed, broker.bootstrap, faulty.series, faulty.start, faulty.end, fixed, "unit"
        )
        apply_all(
            metric_rollups.name,
            [app],
            streamed,
            broker.bootstrap,
            list(done.appended),
            APPLY_TIMEOUT_S,
        )
        later = BEGIN + timedelta(days=1)
        extra = [
            MetricPoint(name="late.gauge", value=5.0, kind="gauge", at=later),
            MetricPoint(
                name="http.latency_ms",
                tags={"service": "search", "host": "search-1"},
                value=999.0,
                kind="histogram",
                at=BEGIN + timedelta(minutes=20),
            ),
        ]
        with EventProducer(broker.bootstrap) as producer:
            producer.append(extra)
        wrong = {id(p) for p in simulation.points if _faulty(p, faulty)}
        as_sent = [p for p in simulation.points if id(p) not in wrong]
        as_sent += [*faulty.true_points, *extra]

        summary = rebuild(
            spark,
            metric_rollups,
            rebuilt,
            ranges(broker.bootstrap, TOPIC, {}),
            options,
            from_start=True,
        )
        assert summary.parked == 0 and summary.corrections == len(done.appended) - 1 - len(fixed)
        reference.assert_views_equal(
            reference.read_views(rebuilt, ROLLUP_VIEWS), reference.expected(as_sent)
        )
        again = downsample(spark, rebuilt, options)
        # the corrected series' day, the late gauge's day, the extra latency's rollup and sketch
        assert again.rows_touched == 4
        reference.assert_views_equal(
            reference.read_views(rebuilt, DAILY_VIEWS), reference.expected(as_sent)
        )


def _faulty(point: MetricPoint, faulty: Any) -> bool:
    return bool(point.series == faulty.series and faulty.start <= point.at < faulty.end)
