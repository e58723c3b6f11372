"""Operating projections against a real broker: poison events, retry, status, read-your-writes.

Each test gets its own broker (topic ``pt`` starts empty) and a fresh
database on SQLite and on PostgreSQL, upgraded with the test app's tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import projection_test_app
import projection_threads
import pytest
from click.testing import CliRunner
from projection_test_app import Tick, label_totals, tick_rows, totals, totals_projection
from sqlalchemy import Table, select

from eventplatform.events import Correction, Envelope, EventProducer, EventRef, Position
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import APPS_ENV, App
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError, ProjectionStoppedError
from eventplatform.projections.model import Projection
from eventplatform.projections.operations import (
    RetryOutcome,
    projection_status,
    retry_dead_letters,
    run_projection,
    wait_until_applied,
)
from eventplatform.projections.registry import is_database_group
from eventplatform.projections.runner import COMMITS
from eventplatform.projections_cli import projections
from eventplatform.testing import BrokerProcess, running_broker

NAME = totals_projection.name
APP_OPTION = ("--app", "projection_test_app")
TEST_APP = projection_test_app.app
APPS = [TEST_APP]
PARTITIONS = 2
BROKER_OVERRIDES = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
APPLY_TIMEOUT_S = 30.0
IDLE_EXIT_S = 2.0
SUBPROCESS_TIMEOUT_S = 60
SUPPORT = Path(__file__).resolve().parents[1] / "support"
PLATFORM = Path(sys.executable).with_name("platform")
BACKDATED_S = 120

strict_projection = Projection(
    "projection_tests.strict",
    tables=[totals, label_totals],
    on_error="stop",
    description="The test app's handler under the stop policy.",
)
strict_projection.on(Tick)(tick_rows)
STRICT_APP = App("projection_tests_strict", projections=[strict_projection])


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker", BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture
def url(database_url: str) -> str:
    migrate.upgrade(database_url, APPS)
    return database_url


@pytest.fixture
def producer(broker: BrokerProcess) -> Iterator[EventProducer]:
    with EventProducer(broker.bootstrap) as producer:
        yield producer


def running_projection(url: str, bootstrap: str) -> AbstractContextManager[None]:
    """The test app's projection, run in a background thread until the block ends."""
    return projection_threads.running_projection(NAME, APPS, url, bootstrap)


def apply_all(url: str, bootstrap: str, refs: list[EventRef]) -> None:
    """Run the test app's projection until it has applied ``refs``."""
    projection_threads.apply_all(NAME, APPS, url, bootstrap, refs, APPLY_TIMEOUT_S)


def run_until_stopped(url: str, bootstrap: str, batch_size: int = 1000) -> None:
    """Run the stop-policy projection; it raises at a poison event, or exits when idle."""
    run_projection(
        strict_projection.name,
        [STRICT_APP],
        database_url=url,
        bootstrap=bootstrap,
        batch_size=batch_size,
        idle_exit_s=IDLE_EXIT_S,
    )


def table_rows(url: str, table: Table) -> dict[str, dict[str, Any]]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            found = connection.execute(select(table)).mappings().all()
    finally:
        engine.dispose()
    return {row[table.primary_key.columns[0].name]: dict(row) for row in found}


def dead_letters(url: str) -> list[dict[str, Any]]:
    table = schema.dead_letters
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(table).order_by(table.c.id)).mappings().all()
    finally:
        engine.dispose()
    return [dict(row) for row in rows]


def checkpoint(url: str, name: str, position: Position) -> int | None:
    table = schema.checkpoints
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(
                select(table.c.next_offset).where(
                    table.c.projection == name,
                    table.c.topic == position.topic,
                    table.c.partition == position.partition,
                )
            ).scalar_one_or_none()
    finally:
        engine.dispose()


def ticks(entity: str, *labels: str, amount: int = 1) -> list[Tick]:
    return [Tick(entity=entity, amount=amount, label=label) for label in labels]


# Poison events ------------------------------------------------------------


def test_park_moves_a_poison_event_aside_and_goes_on(
    url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    refs = producer.append(ticks("a", "x", "poison", "y"))
    apply_all(url, broker.bootstrap, refs)

    row = table_rows(url, totals)["a"]
    assert (row["ticks"], row["trail"]) == (2, "x|y")
    [letter] = dead_letters(url)
    assert letter["projection"] == NAME
    assert (letter["topic"], letter["partition"], letter["offset"]) == (
        refs[1].position.topic,
        refs[1].position.partition,
        refs[1].position.offset,
    )
    assert letter["event_id"] == str(refs[1].event_id)
    assert letter["event_type"] == Tick.event_type
    assert "'poison' is not a label" in letter["error"]
    assert letter["status"] == schema.DEAD_LETTER_PARKED
    assert checkpoint(url, NAME, refs[0].position) == refs[-1].position.offset + 1
    [status] = projection_status(APPS, database_url=url, bootstrap=broker.bootstrap, name=NAME)
    assert status.parked == 1


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_stop_halts_right_before_a_poison_event(
    url: str, broker: BrokerProcess, producer: EventProducer, batch_size: int
) -> None:
    refs = producer.append(ticks("a", "x", "y", "poison", "z"))
    with pytest.raises(ProjectionStoppedError, match="poison"):
        run_until_stopped(url, broker.bootstrap, batch_size)

    assert table_rows(url, totals)["a"]["trail"] == "x|y"
    assert checkpoint(url, strict_projection.name, refs[2].position) == refs[2].position.offset
    assert dead_letters(url) == []
    [status] = projection_status(
        [STRICT_APP], database_url=url, bootstrap=broker.bootstrap, name=strict_projection.name
    )
    assert status.last_error is not None
    assert str(refs[2].position) in status.last_error
    assert status.last_error_at is not None
    assert status.lag_events == 2


def test_a_stopped_projection_shows_as_failed(
    sqlite_url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    migrate.upgrade(sqlite_url, APPS)
    producer.append(ticks("a", "poison"))
    with pytest.raises(ProjectionStoppedError):
        run_until_stopped(sqlite_url, broker.bootstrap)

    [status] = projection_status(
        [STRICT_APP], database_url=sqlite_url, bootstrap=None, name=strict_projection.name
    )
    assert status.status == "failed"


def test_stop_halts_before_an_invalid_correction(
    url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    [first] = producer.append(ticks("a", "x"))
    not_first = EventRef(uuid.uuid4(), first.key, first.position)
    refs = producer.append(
        [
            Tick(entity="a", amount=1, label="y"),
            Correction(of=not_first, retract=True),
            Tick(entity="a", amount=1, label="z"),
        ]
    )
    with pytest.raises(ProjectionStoppedError):
        run_until_stopped(url, broker.bootstrap)

    assert table_rows(url, totals)["a"]["trail"] == "x|y"
    assert checkpoint(url, strict_projection.name, refs[1].position) == refs[1].position.offset


# Retrying dead letters ------------------------------------------------------


def test_retry_applies_parked_events_once_the_handler_is_fixed(
    url: str, broker: BrokerProcess, producer: EventProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_all(url, broker.bootstrap, producer.append(ticks("a", "x", "poison", "y", amount=2)))
    assert retry_dead_letters(NAME, APPS, database_url=url, bootstrap=broker.bootstrap) == (
        RetryOutcome(retried=0, still_parked=1)
    )

    monkeypatch.setattr(projection_test_app, "POISON_LABEL", "no longer poison")
    result = CliRunner().invoke(
        projections,
        ["retry", NAME, "--bootstrap", broker.bootstrap, "--database", url, *APP_OPTION],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    assert f"{NAME}: 1 applied, 0 still parked" in result.output
    row = table_rows(url, totals)["a"]
    assert (row["total"], row["ticks"], row["labels"]) == (6, 3, ["poison", "x", "y"])
    assert table_rows(url, label_totals)["poison"]["total"] == 2
    [letter] = dead_letters(url)
    assert letter["status"] == schema.DEAD_LETTER_RETRIED
    assert letter["retried_at"] is not None
    assert retry_dead_letters(NAME, APPS, database_url=url, bootstrap=broker.bootstrap) == (
        RetryOutcome(retried=0, still_parked=0)
    )


def test_retrying_a_parked_event_that_was_corrected_since_applies_its_correction_only(
    url: str, broker: BrokerProcess, producer: EventProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    [poison] = producer.append(ticks("a", "poison", amount=5))
    fixed = Tick(entity="a", amount=3, label="x")
    apply_all(url, broker.bootstrap, producer.append([Correction(of=poison, replacement=fixed)]))
    assert table_rows(url, totals)["a"]["total"] == 3

    monkeypatch.setattr(projection_test_app, "POISON_LABEL", "no longer poison")
    retry_dead_letters(NAME, APPS, database_url=url, bootstrap=broker.bootstrap)

    row = table_rows(url, totals)["a"]
    assert (row["total"], row["ticks"], row["labels"]) == (3, 1, ["x"])
    assert set(table_rows(url, label_totals)) == {"x"}
    assert [letter["status"] for letter in dead_letters(url)] == [schema.DEAD_LETTER_RETRIED]


# Status -------------------------------------------------------------------


def test_status_reports_lag_in_events_and_seconds_and_rows_per_table(
    url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    [never_run] = projection_status(APPS, database_url=url, bootstrap=broker.bootstrap, name=NAME)
    assert never_run.status == "never run"
    assert never_run.rows == {"pt_totals": 0, "pt_label_totals": 0}

    apply_all(url, broker.bootstrap, producer.append(ticks("a", "x", "y") + ticks("b", "x")))
    [caught_up] = projection_status(APPS, database_url=url, bootstrap=broker.bootstrap, name=NAME)
    assert caught_up.status == "stopped"
    assert (caught_up.lag_events, caught_up.lag_seconds) == (0, None)
    assert caught_up.rows == {"pt_totals": 2, "pt_label_totals": 2}
    assert is_database_group(NAME, caught_up.group_id)
    assert caught_up.parked == 0

    backdated = datetime.now(UTC) - timedelta(seconds=BACKDATED_S)
    behind = producer.append(
        [Envelope(tick, occurred_at=backdated) for tick in ticks("a", "p", "q", "r")]
    )
    [lagging] = projection_status(APPS, database_url=url, bootstrap=broker.bootstrap, name=NAME)
    assert lagging.lag_events == 3
    assert lagging.lag_seconds is not None
    assert BACKDATED_S - 5 < lagging.lag_seconds < BACKDATED_S + 60
    [partition] = [p for p in lagging.partitions if p.lag_events]
    assert (partition.topic, partition.partition) == (
        behind[0].position.topic,
        behind[0].position.partition,
    )
    assert partition.next_offset == behind[0].position.offset
    assert partition.end_offset == behind[-1].position.offset + 1
    assert sum(p.end_offset for p in lagging.partitions) == 6


def test_cli_lists_projections_and_reports_their_status(
    sqlite_url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    migrate.upgrade(sqlite_url, APPS)
    apply_all(sqlite_url, broker.bootstrap, producer.append(ticks("a", "x", "y")))
    producer.append(ticks("a", "z"))
    common = ["--database", sqlite_url, *APP_OPTION]

    listed = platform("projections", "list", *common)
    status = platform("projections", "status", NAME, "--bootstrap", broker.bootstrap, *common)

    ours = [line for line in listed.splitlines() if line.startswith(f"{NAME}\t")]
    [group] = [
        each.group_id
        for each in projection_status(APPS, database_url=sqlite_url, bootstrap=None, name=NAME)
    ]
    assert is_database_group(NAME, group)
    assert ours == [f"{NAME}\tstopped\tgroup {group}\ttables pt_totals, pt_label_totals"]
    # the bundled apps are not installed: this database never got their tables
    assert not any(line.startswith("activity.") for line in listed.splitlines())
    lines = status.splitlines()
    assert lines[0] == f"{NAME}: stopped"
    assert lines[1] == f"  group: {group}"
    assert lines[2].startswith("  lag: 1 event, ")
    assert lines[2].endswith("s")
    assert "  parked events: 0" in lines
    assert "  last error: -" in lines
    assert "  rows pt_totals: 1" in lines
    assert "  rows pt_label_totals: 2" in lines


def platform(*arguments: str) -> str:
    environment = {key: value for key, value in os.environ.items() if key != APPS_ENV}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(SUPPORT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    completed = subprocess.run(
        [str(PLATFORM), *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


# Read-your-writes ---------------------------------------------------------


def test_a_wait_after_append_sees_the_row(
    url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    commits = COMMITS.count
    with running_projection(url, broker.bootstrap):
        for number in range(5):
            entity = f"entity-{number}"
            refs = producer.append([Tick(entity=entity, amount=number, label="x")])
            wait_until_applied(url, NAME, refs, timeout_s=APPLY_TIMEOUT_S)
            assert table_rows(url, totals)[entity]["total"] == number
            assert table_rows(url, label_totals)["x"]["ticks"] == number + 1
    assert COMMITS.count > commits  # the runner in this process signalled its commits


def test_a_wait_that_is_never_satisfied_times_out(
    url: str, broker: BrokerProcess, producer: EventProducer
) -> None:
    refs = producer.append(ticks("a", "x"))
    started = time.monotonic()
    with pytest.raises(ApplyTimeoutError, match=NAME):
        wait_until_applied(url, NAME, refs, timeout_s=0.5)
    assert time.monotonic() - started < 5
