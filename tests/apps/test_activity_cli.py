"""``platform apps activity``: simulate traffic into a broker, then find and retract its
bots from the command line."""

from __future__ import annotations

import uuid
from pathlib import Path

import activity_dataset as data
from click.testing import CliRunner
from projection_threads import apply_all

from eventplatform.apps.activity_tracking import app
from eventplatform.apps.activity_tracking.bots import suspected_bots
from eventplatform.apps.activity_tracking.events import TOPIC
from eventplatform.cli import main
from eventplatform.events import EventRef, Position
from eventplatform.projections import migrate
from eventplatform.projections.kafka import log_ends
from eventplatform.testing import BrokerProcess, fresh_database, running_broker

RETRACT_TIMEOUT_S = 180.0


def log_tail(broker: BrokerProcess) -> list[EventRef]:
    """A reference to the last record of every partition of the activity topic."""
    ends = log_ends(broker.bootstrap, [TOPIC])
    return [
        EventRef(uuid.uuid4(), "", Position(topic, partition, high - 1))
        for (topic, partition), (_, high) in ends.items()
        if high
    ]


def apply_everything(broker: BrokerProcess, url: str, timeout_s: float = 60.0) -> None:
    for projection in app.projections:
        apply_all(projection.name, [app], url, broker.bootstrap, log_tail(broker), timeout_s)


def test_simulate_then_retract_the_bots(tmp_path: Path) -> None:
    cli = CliRunner()
    with (
        running_broker(tmp_path / "broker", data.BROKER_OVERRIDES) as broker,
        fresh_database("sqlite", tmp_path) as url,
    ):
        simulated = cli.invoke(
            main,
            [
                "apps",
                "activity",
                "simulate",
                "--bootstrap",
                broker.bootstrap,
                "--hours",
                "0.5",
                "--start",
                "2026-11-21T13:00",
                "--sessions-per-hour",
                "400",
                "--bot-share",
                "0.05",
                "--seed",
                "9",
            ],
        )
        assert simulated.exit_code == 0, simulated.output
        assert "bots) to 'activity', 2026-11-21 13:00 to 13:30 UTC" in simulated.output
        migrate.upgrade(url, [app])
        apply_everything(broker, url)
        suspects = suspected_bots(url)
        assert suspects

        common = ["--database", url, "--bootstrap", broker.bootstrap]
        dry = cli.invoke(main, ["apps", "activity", "retract-bots", *common, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert f"would retract {len(suspects)} sessions" in dry.output
        assert suspected_bots(url) == suspects

        done = cli.invoke(main, ["apps", "activity", "retract-bots", *common])
        assert done.exit_code == 0, done.output
        assert f"retracted {len(suspects)} sessions" in done.output
        assert "crawler user agent" in done.output
        apply_everything(broker, url, RETRACT_TIMEOUT_S)
        assert suspected_bots(url) == []
