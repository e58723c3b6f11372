"""``platform apps logs redact`` end to end on one broker, with the log app's runner: the
leaking lines leave every table and then the log itself, so neither a consumer reading the
topic from offset 0 nor any table yields the secret; a run the runner did not keep up with
fails saying the log is not erased yet, and the next run erases what it left."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import logs_reference as reference
import pytest
from click.testing import CliRunner, Result

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC, LogLine
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.cli import main
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import fresh_database, running_broker

SECRET = "sw0rdfish-7f3a"
APPLY_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 30.0
NAME = lines_projection.name
WORD = SECRET[3:9]
"""A piece of the secret's first word that a search index keeps as written: FTS5 stores
each word in its own tables' blobs after the prefix it shares with the word before."""


def at(second: int) -> datetime:
    return datetime(2026, 11, 20, 9, 0, second, tzinfo=UTC)


LINES = [
    LogLine(service="api", host="h1", level="info", message="GET /orders/17 200", at=at(1)),
    LogLine(service="auth", host="h1", level="info", message=f"login ok with {SECRET}", at=at(2)),
    LogLine(service="api", host="h2", level="warn", message="slow upstream", at=at(3)),
    LogLine(
        service="auth",
        host="h2",
        level="error",
        message=f"login failed: {SECRET} rejected",
        at=at(4),
    ),
    LogLine(service="worker", host="h1", level="info", message="job 12 done", at=at(5)),
]
LEAKING = 2


@dataclass
class Setup:
    bootstrap: str
    url: str
    pending: Path

    def redact(self, *extra: str) -> Result:
        arguments = [
            "apps", "logs", "redact", SECRET, "--reason", "a password in the auth log",
            "--database", self.url, "--bootstrap", self.bootstrap,
            "--pending-dir", str(self.pending), *extra,
        ]  # fmt: skip
        return CliRunner().invoke(main, arguments)

    def caught_up(self) -> None:
        wait_caught_up([NAME], self.url, self.bootstrap, [TOPIC], APPLY_TIMEOUT_S)

    def apply(self) -> None:
        with running_projections([NAME], [app], self.url, self.bootstrap):
            self.caught_up()


def setup(broker_bootstrap: str, url: str, pending: Path) -> Setup:
    """The lines appended, the tables created, and the runner caught up, then stopped."""
    ensure_topic(broker_bootstrap)
    with EventProducer(broker_bootstrap) as producer:
        producer.append(LINES)
    migrate.upgrade(url, [app])
    ready = Setup(broker_bootstrap, url, pending)
    ready.apply()
    assert len(reference.search(url, SECRET)) == LEAKING
    return ready


@pytest.fixture
def sqlite_setup(tmp_path: Path) -> Iterator[Setup]:
    with (
        running_broker(tmp_path / "broker", ["num.partitions=3"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
    ):
        yield setup(broker.bootstrap, url, tmp_path / "redactions")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_redact_takes_the_lines_out_of_every_table_and_then_out_of_the_log(
    kind: str, tmp_path: Path
) -> None:
    with (
        running_broker(tmp_path / "broker", ["num.partitions=3"]) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        ready = setup(broker.bootstrap, url, tmp_path / "redactions")
        assert reference.tables_holding(url, SECRET, WORD) != []
        assert len(reference.holding(reference.log_records(broker.bootstrap), SECRET)) == LEAKING

        with running_projections([NAME], [app], url, broker.bootstrap):
            done = ready.redact()
            assert done.exit_code == 0, done.output
            ready.caught_up()

        assert done.output == (
            f"retracted {LEAKING} lines from the tables and erased {LEAKING} records from the log\n"
        )
        records = reference.log_records(broker.bootstrap)
        assert reference.holding(records, SECRET) == []
        assert len(reference.erased(records)) == LEAKING
        assert len(records) == len(LINES) + 1 + LEAKING, "the decision and one retraction a line"
        assert reference.tables_holding(url, SECRET, WORD) == []
        assert reference.search(url, SECRET) == []
        clean = [line for line in LINES if SECRET not in line.message]
        assert reference.read_views(url) == reference.expected(clean)
        assert list((tmp_path / "redactions").iterdir()) == [], "nothing left pending"


def test_a_dry_run_and_keep_log_leave_the_log_as_it_was(sqlite_setup: Setup) -> None:
    dry = sqlite_setup.redact("--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.output == (
        f"would retract {LEAKING} lines from the tables and erase {LEAKING} records from the log\n"
    )
    kept = sqlite_setup.redact("--keep-log")
    assert kept.exit_code == 0, kept.output
    assert kept.output == f"retracted {LEAKING} lines from the tables; the log keeps them\n"
    sqlite_setup.apply()

    assert reference.search(sqlite_setup.url, SECRET) == []
    assert len(reference.holding(reference.log_records(sqlite_setup.bootstrap), SECRET)) == LEAKING


def test_a_run_the_runner_did_not_apply_in_time_is_erased_by_the_next_run(
    sqlite_setup: Setup,
) -> None:
    failed = sqlite_setup.redact("--timeout", "1")

    assert failed.exit_code == 1
    assert "logs.lines did not apply the retraction within 1 s" in failed.output
    assert f"the log still holds {LEAKING} redacted line(s)" in failed.output
    assert "run this command again" in failed.output
    assert len(list(sqlite_setup.pending.glob("*.pending"))) == 1
    assert len(reference.holding(reference.log_records(sqlite_setup.bootstrap), SECRET)) == LEAKING

    sqlite_setup.apply()  # the runner applies the retraction: the lines leave the tables
    assert reference.search(sqlite_setup.url, SECRET) == []
    finished = sqlite_setup.redact()  # no runner needed: nothing is left to retract

    assert finished.exit_code == 0, finished.output
    assert finished.output == (
        f"retracted 0 lines from the tables and erased {LEAKING} records from the log "
        f"({LEAKING} left by an earlier run)\n"
    )
    records = reference.log_records(sqlite_setup.bootstrap)
    assert reference.holding(records, SECRET) == [] and len(reference.erased(records)) == LEAKING
    assert list(sqlite_setup.pending.iterdir()) == []


def test_a_next_run_waits_for_the_retraction_pending_before_it_and_appends_none_again(
    sqlite_setup: Setup,
) -> None:
    failed = sqlite_setup.redact("--timeout", "1")
    assert failed.exit_code == 1
    assert len(reference.search(sqlite_setup.url, SECRET)) == LEAKING, "not applied yet"

    with running_projections([NAME], [app], sqlite_setup.url, sqlite_setup.bootstrap):
        finished = sqlite_setup.redact()
        assert finished.exit_code == 0, finished.output

    assert finished.output == (
        f"retracted {LEAKING} lines from the tables and erased {LEAKING} records from the log "
        f"({LEAKING} left by an earlier run)\n"
    )
    records = reference.log_records(sqlite_setup.bootstrap)
    assert reference.holding(records, SECRET) == [] and len(reference.erased(records)) == LEAKING
    assert len(records) == len(LINES) + 1 + LEAKING, "the first run's retraction only"
    assert reference.tables_holding(sqlite_setup.url, SECRET) == []
