"""The metrics app end to end: points through a real broker into the rollups, sketches and
views, checked against a small set worked out by hand and against a reference fold of a
simulated fleet, on SQLite and PostgreSQL; a faulty agent's points replaced by a
correction leave every table as if only the right values had been sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import metrics_reference as reference
import pytest
from activity_dataset import number
from projection_threads import apply_all

from eventplatform.apps.metrics import app
from eventplatform.apps.metrics.corrections import correct_points, points_in_window, rescaled_points
from eventplatform.apps.metrics.events import MetricPoint, points_correction
from eventplatform.apps.metrics.projections import metric_rollups
from eventplatform.apps.metrics.simulator import FleetShape, FleetSimulator
from eventplatform.apps.metrics.sketch import representative
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.query import find_named_query, named_parameters, run_named_query
from eventplatform.testing import fresh_database, running_broker

BROKER_OVERRIDES = ["num.partitions=3", "group.initial.rebalance.delay.ms=0"]
CORRECTION_TIMEOUT_S = 180.0
LATENCY = "api.latency{host=a}"
JOBS = "jobs.done{queue=q1}"
TEMPERATURE = "temp{room=lab}"


def at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 20, hour, minute, second, tzinfo=UTC)


def point(
    name: str, tags: dict[str, str], value: float, kind: Any, moment: datetime
) -> MetricPoint:
    return MetricPoint(name=name, tags=tags, value=value, kind=kind, at=moment)


def hand_points() -> list[MetricPoint]:
    latency, jobs, temperature = {"host": "a"}, {"queue": "q1"}, {"room": "lab"}
    return [
        point("jobs.done", jobs, 1, "counter", at(10, 0, 0)),
        point("temp", temperature, 21.5, "gauge", at(10, 0, 0)),
        point("api.latency", latency, 10, "histogram", at(10, 0, 5)),
        point("api.latency", latency, 20, "histogram", at(10, 0, 20)),
        point("jobs.done", jobs, 2, "counter", at(10, 0, 30)),
        point("temp", temperature, 19.0, "gauge", at(10, 0, 30)),
        point("api.latency", latency, 30, "histogram", at(10, 0, 40)),
        point("temp", temperature, 22.0, "gauge", at(10, 1, 0)),
        point("api.latency", latency, 1000, "histogram", at(10, 1, 10)),
        point("jobs.done", jobs, 3, "counter", at(10, 59, 59)),
        point("jobs.done", jobs, 4, "counter", at(11, 0, 0)),
    ]


def minute(hour: int, minute_: int) -> tuple[str, datetime]:
    return "minute", at(hour, minute_, 0)


def hour(hour_: int) -> tuple[str, datetime]:
    return "hour", at(hour_, 0, 0)


# (points, sum, min, max, last_at, last), worked out by hand from hand_points()
HAND_ROLLUPS = {
    (JOBS, *minute(10, 0)): (2, 3.0, 1.0, 2.0, at(10, 0, 30), 2.0),
    (JOBS, *minute(10, 59)): (1, 3.0, 3.0, 3.0, at(10, 59, 59), 3.0),
    (JOBS, *minute(11, 0)): (1, 4.0, 4.0, 4.0, at(11, 0, 0), 4.0),
    (JOBS, *hour(10)): (3, 6.0, 1.0, 3.0, at(10, 59, 59), 3.0),
    (JOBS, *hour(11)): (1, 4.0, 4.0, 4.0, at(11, 0, 0), 4.0),
    (TEMPERATURE, *minute(10, 0)): (2, 40.5, 19.0, 21.5, at(10, 0, 30), 19.0),
    (TEMPERATURE, *minute(10, 1)): (1, 22.0, 22.0, 22.0, at(10, 1, 0), 22.0),
    (TEMPERATURE, *hour(10)): (3, 62.5, 19.0, 22.0, at(10, 1, 0), 22.0),
    (LATENCY, *minute(10, 0)): (3, 60.0, 10.0, 30.0, at(10, 0, 40), 30.0),
    (LATENCY, *minute(10, 1)): (1, 1000.0, 1000.0, 1000.0, at(10, 1, 10), 1000.0),
    (LATENCY, *hour(10)): (4, 1060.0, 10.0, 1000.0, at(10, 1, 10), 1000.0),
}
# the value of rank p * (n - 1) / 100 rounded down (from 0): of 3 values ranks 1, 1, 1; of 4,
# ranks 1, 2, 2
HAND_QUANTILES = {
    (LATENCY, *minute(10, 0)): (3, 20.0, 20.0, 20.0),
    (LATENCY, *minute(10, 1)): (1, 1000.0, 1000.0, 1000.0),
    (LATENCY, *hour(10)): (4, 20.0, 30.0, 30.0),
}
HAND_SERIES = {
    JOBS: ("counter", 4, at(10, 0, 0), at(11, 0, 0)),
    TEMPERATURE: ("gauge", 3, at(10, 0, 0), at(10, 1, 0)),
    LATENCY: ("histogram", 4, at(10, 0, 5), at(10, 1, 10)),
}


def named(url: str, name: str) -> list[tuple[Any, ...]]:
    """The named query's rows over everything (a window of ten years)."""
    query = find_named_query([app], name)
    parameters = named_parameters(query, since="3650d", given={})
    return [
        tuple(number(v) for v in row)
        for row in run_named_query(url, query, parameters, allow_superuser=True).rows
    ]


def represented(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return (row[0], *(representative(value) for value in row[1:]))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_runner_folds_the_points_as_worked_out_by_hand(kind: str, tmp_path: Path) -> None:
    # a broker of its own: the test appends a correction
    with (
        running_broker(tmp_path / "broker", BROKER_OVERRIDES) as metrics_broker,
        fresh_database(kind, tmp_path) as url,
    ):
        with EventProducer(metrics_broker.bootstrap) as producer:
            hand_refs = producer.append(hand_points())
        migrate.upgrade(url, [app])
        apply_all(metric_rollups.name, [app], url, metrics_broker.bootstrap, hand_refs)
        views = reference.read_views(url, ["series", "rollups", "quantiles"])
        assert views["series"] == HAND_SERIES
        assert views["rollups"] == HAND_ROLLUPS
        assert views["quantiles"] == {k: represented(v) for k, v in HAND_QUANTILES.items()}
        assert reference.expected(hand_points())["quantiles"] == views["quantiles"]
        assert named(url, "metrics.latency") == [(LATENCY, 4, *represented((4, 20, 30, 30))[1:])]
        assert named(url, "metrics.counters") == [(JOBS, 10.0, 4)]
        assert named(url, "metrics.gauges") == [(TEMPERATURE, 19.0, 22.0, 62.5 / 3)]
        assert [row[0] for row in named(url, "metrics.series")] == sorted(HAND_SERIES)

        # the faulty thermometer: 10:00:00 to 10:00:45 was one reading of 20.0 at 10:00:10
        start, end = at(10, 0, 0), at(10, 0, 45)
        assert len(points_in_window(url, TEMPERATURE, start, end)) == 2
        fixed = point("temp", {"room": "lab"}, 20.0, "gauge", at(10, 0, 10))
        done = correct_points(
            url, metrics_broker.bootstrap, TEMPERATURE, start, end, [fixed], "thermometer swap"
        )
        assert (done.retracted, done.replacements, len(done.appended)) == (2, 1, 4)
        apply_all(
            metric_rollups.name,
            [app],
            url,
            metrics_broker.bootstrap,
            list(done.appended),
            CORRECTION_TIMEOUT_S,
        )
        views = reference.read_views(url, ["series", "rollups"])
        assert views["rollups"][TEMPERATURE, *minute(10, 0)] == (
            1,
            20.0,
            20.0,
            20.0,
            at(10, 0, 10),
            20.0,
        )
        assert views["rollups"][TEMPERATURE, *hour(10)] == (
            2,
            42.0,
            20.0,
            22.0,
            at(10, 1, 0),
            22.0,
        )
        assert views["series"][TEMPERATURE] == ("gauge", 2, at(10, 0, 10), at(10, 1, 0))
        assert len(points_in_window(url, TEMPERATURE, start, end)) == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_simulated_fleet_with_its_faulty_agent_corrected_matches_the_reference(
    kind: str, tmp_path: Path
) -> None:
    begin = datetime(2026, 11, 20, 23, 30, tzinfo=UTC)  # across midnight: two days
    simulation = FleetSimulator(FleetShape(faulty_minutes=5), seed=7).run(
        begin, begin + timedelta(hours=1)
    )
    faulty = simulation.faulty
    assert faulty is not None and len(simulation.points) > 10_000
    with (
        running_broker(tmp_path / "broker", BROKER_OVERRIDES) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(simulation.points)
        migrate.upgrade(url, [app])
        apply_all(metric_rollups.name, [app], url, broker.bootstrap, refs, CORRECTION_TIMEOUT_S)
        names = ["series", "rollups", "quantiles"]
        reference.assert_views_equal(
            reference.read_views(url, names), reference.expected(simulation.points)
        )

        replacements = rescaled_points(url, faulty.series, faulty.start, faulty.end, 0.01)
        assert [p.value for p in replacements] == [p.value for p in faulty.true_points]
        done = correct_points(
            url, broker.bootstrap, faulty.series, faulty.start, faulty.end, replacements, "unit"
        )
        apply_all(
            metric_rollups.name,
            [app],
            url,
            broker.bootstrap,
            list(done.appended),
            CORRECTION_TIMEOUT_S,
        )
        wrong = {id(p) for p in simulation.points if _in(p, faulty)}
        as_sent = [p for p in simulation.points if id(p) not in wrong] + list(faulty.true_points)
        reference.assert_views_equal(reference.read_views(url, names), reference.expected(as_sent))


def _in(metric: MetricPoint, faulty: Any) -> bool:
    return bool(metric.series == faulty.series and faulty.start <= metric.at < faulty.end)


def test_a_correction_refuses_points_of_another_series_or_outside_its_window() -> None:
    good = point("temp", {"room": "lab"}, 20.0, "gauge", at(10, 0, 10))
    with pytest.raises(ValueError, match="outside the window"):
        points_correction(TEMPERATURE, at(10, 1, 0), at(10, 2, 0), [], [good], "r")
    with pytest.raises(ValueError, match="of series"):
        points_correction(JOBS, at(10, 0, 0), at(10, 2, 0), [], [good], "r")
    with pytest.raises(ValueError, match="end must come after"):
        points_correction(TEMPERATURE, at(10, 2, 0), at(10, 0, 0), [], [], "r")


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "bad name!", "value": 1.0},
        {"name": "ok", "value": float("nan")},
        {"name": "ok", "value": float("inf")},
        {"name": "ok", "value": 1.0, "tags": {"k": "a,b"}},
        {"name": "ok", "value": 1.0, "kind": "summary"},
    ],
)
def test_invalid_points_are_refused(fields: dict[str, Any]) -> None:
    values = {"kind": "gauge", "at": at(10, 0, 0), **fields}
    with pytest.raises(ValueError):
        MetricPoint(**values)
