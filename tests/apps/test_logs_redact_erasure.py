"""``platform apps logs redact`` end to end on one broker, with the log app's runner: the
leaking lines leave every table and then the log itself, so neither a consumer reading the
topic from offset 0 nor any table yields the secret; a run the runner did not keep up with
fails saying the log is not erased yet, and the next run erases what it left."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import logs_reference as reference
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from sqlalchemy import inspect, text

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC, LogLine
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.cli import main
from eventplatform.events import EventProducer
from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.projections import create_store_engine, migrate
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


def log_records(bootstrap: str) -> list[Message]:
    """Every record of the ``logs`` topic, read by a plain consumer from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(TOPIC, timeout=READ_TIMEOUT_S).topics[TOPIC].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), READ_TIMEOUT_S)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        found: list[Message] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(found) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(found)} of {sum(ends.values())}"
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                found.append(message)
    finally:
        consumer.close()
    return found


def holding(records: list[Message], secret: str) -> list[Message]:
    return [r for r in records if secret.encode() in (r.value() or b"")]


def erased(records: list[Message]) -> list[Message]:
    return [r for r in records if r.value() is None and r.headers() == [(ERASED_HEADER, b"")]]


def tables_holding(url: str, secret: str) -> list[str]:
    """The tables of the database (the platform's and the app's) with a row whose text
    holds ``secret``."""
    engine = create_store_engine(url)
    found = []
    try:
        names = inspect(engine).get_table_names()
        with engine.connect() as connection:
            for name in names:
                rows = connection.execute(text(f'SELECT * FROM "{name}"'))
                if any(secret in str(tuple(row)) or WORD in str(tuple(row)) for row in rows):
                    found.append(name)
    finally:
        engine.dispose()
    assert "logs_recent" in names and "ep_checkpoints" in names
    return found


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_redact_takes_the_lines_out_of_every_table_and_then_out_of_the_log(
    kind: str, tmp_path: Path
) -> None:
    with (
        running_broker(tmp_path / "broker", ["num.partitions=3"]) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        ready = setup(broker.bootstrap, url, tmp_path / "redactions")
        assert tables_holding(url, SECRET) != []
        assert len(holding(log_records(broker.bootstrap), SECRET)) == LEAKING

        with running_projections([NAME], [app], url, broker.bootstrap):
            done = ready.redact()
            assert done.exit_code == 0, done.output
            ready.caught_up()

        assert done.output == (
            f"retracted {LEAKING} lines from the tables and erased {LEAKING} records from the log\n"
        )
        records = log_records(broker.bootstrap)
        assert holding(records, SECRET) == []
        assert len(erased(records)) == LEAKING
        assert len(records) == len(LINES) + 1 + LEAKING, "the decision and one retraction a line"
        assert tables_holding(url, SECRET) == []
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
    assert len(holding(log_records(sqlite_setup.bootstrap), SECRET)) == LEAKING


def test_a_run_the_runner_did_not_apply_in_time_is_erased_by_the_next_run(
    sqlite_setup: Setup,
) -> None:
    failed = sqlite_setup.redact("--timeout", "1")

    assert failed.exit_code == 1
    assert "logs.lines did not apply the retraction within 1 s" in failed.output
    assert f"the log still holds {LEAKING} redacted line(s)" in failed.output
    assert "run this command again" in failed.output
    assert len(list(sqlite_setup.pending.glob("*.pending"))) == 1
    assert len(holding(log_records(sqlite_setup.bootstrap), SECRET)) == LEAKING

    sqlite_setup.apply()  # the runner applies the retraction: the lines leave the tables
    assert reference.search(sqlite_setup.url, SECRET) == []
    finished = sqlite_setup.redact()  # no runner needed: nothing is left to retract

    assert finished.exit_code == 0, finished.output
    assert finished.output == (
        f"retracted 0 lines from the tables and erased {LEAKING} records from the log "
        f"({LEAKING} left by an earlier run)\n"
    )
    records = log_records(sqlite_setup.bootstrap)
    assert holding(records, SECRET) == [] and len(erased(records)) == LEAKING
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
    records = log_records(sqlite_setup.bootstrap)
    assert holding(records, SECRET) == [] and len(erased(records)) == LEAKING
    assert len(records) == len(LINES) + 1 + LEAKING, "the first run's retraction only"
    assert tables_holding(sqlite_setup.url, SECRET) == []
