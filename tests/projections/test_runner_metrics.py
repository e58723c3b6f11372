"""A projection runner's metrics endpoint and progress log: a real ``platform projections
run`` with ``--metrics-listen``, against a real broker and a SQLite store. Its counters
must match what it applied (ticks, a parked poison one, corrections), its lag must reach
0 in events and in seconds, and it must log progress lines while it runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import projection_test_app
import pytest
from metrics_scrape import Scrape, found_in, metrics_url_in, scrape_until
from projection_test_app import POISON_LABEL, Tick
from runner_process import RunnerProcess

from eventplatform.events import Correction, EventProducer
from eventplatform.projections.migrate import upgrade
from eventplatform.testing import BrokerProcess, running_broker

PARTITIONS = 2
TICKS = 30
ENTITIES = 5
CORRECTIONS = 2
PROGRESS_INTERVAL_S = 0.5
PROJECTION = projection_test_app.totals_projection.name
RUNNER_SETTINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path / "broker", overrides) as process:
        yield process


def partitions(scraped: Scrape, name: str) -> dict[str, float]:
    """``name``'s sample per partition of the projection's topic."""
    found = scraped.matching(name, projection=PROJECTION, topic=Tick.event_topic)
    return {dict(labels)["partition"]: value for labels, value in found.items()}


def applied(scraped: Scrape) -> float:
    return scraped.get("eventplatform_projection_events_applied_total", projection=PROJECTION) or 0


def caught_up(scraped: Scrape, events: int) -> bool:
    """Applied ``events`` (all the log holds), with every partition's lag at 0."""
    lags = partitions(scraped, "eventplatform_projection_lag_events")
    ends = partitions(scraped, "eventplatform_projection_log_end_offset")
    return (
        applied(scraped) == events
        and sum(ends.values()) == events
        and len(lags) == PARTITIONS
        and not any(lags.values())
    )


def test_a_runner_reports_what_it_applied_and_its_lag(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'projections.db'}"
    upgrade(database, [projection_test_app.app])
    ticks = [Tick(entity=f"e{n % ENTITIES}", amount=n, label="alpha") for n in range(TICKS)]
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(ticks)
    runner = RunnerProcess(
        "metered",
        projection=PROJECTION,
        app=projection_test_app.__name__,
        database_url=database,
        bootstrap=broker.bootstrap,
        output_dir=tmp_path,
        batch_size=10,
        consumer_settings=RUNNER_SETTINGS,
        extra_arguments=[
            "--metrics-listen",
            "127.0.0.1:0",
            "--progress-interval",
            str(PROGRESS_INTERVAL_S),
        ],
    ).start()
    try:
        url = metrics_url_in(runner.output)
        first = scrape_until(url, lambda s: caught_up(s, TICKS))
        ends = partitions(first, "eventplatform_projection_log_end_offset")
        assert sum(ends.values()) == TICKS
        assert partitions(first, "eventplatform_projection_checkpoint_offset") == ends
        assert set(partitions(first, "eventplatform_projection_lag_seconds").values()) == {0.0}
        batches = first.value("eventplatform_projection_batches_total", projection=PROJECTION)
        assert 1 <= batches <= TICKS

        later = [
            Tick(entity="e0", amount=1, label=POISON_LABEL),
            *(
                Correction(of=ref, replacement=Tick(entity=tick.entity, amount=0, label="beta"))
                for ref, tick in list(zip(refs, ticks, strict=True))[:CORRECTIONS]
            ),
        ]
        with EventProducer(broker.bootstrap) as producer:
            producer.append(later)
        total = TICKS + len(later)
        final = scrape_until(url, lambda s: caught_up(s, total))
        labels = {"projection": PROJECTION}
        assert final.value("eventplatform_projection_events_parked_total", **labels) == 1
        assert final.value("eventplatform_projection_corrections_applied_total", **labels) == (
            CORRECTIONS
        )
        assert final.value("eventplatform_projection_checkpoint_conflicts_total", **labels) == 0
        assert sum(partitions(final, "eventplatform_projection_log_end_offset").values()) == total
        # A progress line every PROGRESS_INTERVAL_S: one of them says it is all applied.
        found_in(runner.output, re.compile(rf"\({total} in all, 1 parked\), lag 0 events"))
        assert runner.stop() == 0
        summary = runner.summary()
        assert summary is not None and summary.events == total and summary.parked == 1
    finally:
        runner.kill()
