"""``platform replay`` from the command line: bad input fails clearly and changes nothing.

A broker holds the test app's ticks; a rebuild through the command builds
the live tables. Then each bad request must exit non-zero with a one-line
error naming the problem, and leave the tables, checkpoints and dead letters
exactly as they were. A dry run prints the plan and changes nothing; a
backfill through the command recomputes rows to the same values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import projection_test_app
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from projection_test_app import Tick, label_totals, totals, totals_projection
from sqlalchemy import Engine, select

from eventplatform.events import EventProducer
from eventplatform.events.partitioner import partition_for_key
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import APPS_ENV
from eventplatform.projections.database import create_store_engine
from eventplatform.replay_cli import replay
from eventplatform.testing import BrokerProcess, running_broker

NAME = totals_projection.name
APP = ("--app", "projection_test_app")
PARTITIONS = 2
EVENTS = 40
TRIMMED_TO = 3
DELETE_TIMEOUT_S = 30
SPARSE_PARTITIONS = 3
EMPTY_PARTITION = 2
SPARSE_EVENTS = 24
DRY_RUN_S_MAX = 5.0
"""A dry run plans from the log's bounds and the database alone: it starts no Spark."""


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as process:
        with EventProducer(process.bootstrap) as producer:
            producer.append(
                [Tick(entity=f"e{n % 7}", amount=n, label=f"l{n % 3}") for n in range(EVENTS)]
            )
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        futures = admin.delete_records([TopicPartition(Tick.event_topic, 1, TRIMMED_TO)])
        for future in futures.values():
            future.result(timeout=DELETE_TIMEOUT_S)
        yield process


@pytest.fixture(scope="module")
def empty_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("empty")) as process:
        yield process


def entities_outside(partition: int, partitions: int, count: int) -> list[str]:
    """``count`` entities whose events go to any partition but ``partition``."""
    names = (f"e{n}" for n in range(count * partitions * 4))
    return [n for n in names if partition_for_key(n.encode(), partitions) != partition][:count]


@pytest.fixture(scope="module")
def sparse_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Topic pt with one partition that never gets an event."""
    overrides = [f"num.partitions={SPARSE_PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("sparse"), overrides) as process:
        entities = entities_outside(EMPTY_PARTITION, SPARSE_PARTITIONS, 5)
        with EventProducer(process.bootstrap) as producer:
            refs = producer.append(
                [
                    Tick(entity=entities[n % len(entities)], amount=n, label=f"l{n % 3}")
                    for n in range(SPARSE_EVENTS)
                ]
            )
        assert EMPTY_PARTITION not in {ref.position.partition for ref in refs}
        yield process


@pytest.fixture
def url(spark: Any, broker: BrokerProcess, tmp_path: Path) -> str:
    """A database the command rebuilt from the start of the log."""
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [projection_test_app.app])
    result = run(broker, url, "--spark-master", "local[2]")
    assert result.exit_code == 0, result.output
    assert "parked 0" in result.output
    return url


def run(broker: BrokerProcess, url: str, *arguments: str) -> Result:
    return CliRunner().invoke(
        replay,
        [
            "--projection",
            NAME,
            *arguments,
            "--bootstrap",
            broker.bootstrap,
            "--data-dir",
            str(broker.data_dir),
            "--database",
            url,
            *APP,
        ],
    )


def snapshot(url: str) -> dict[str, Any]:
    engine: Engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table.name: connection.execute(select(table).order_by(*table.primary_key)).all()
                for table in (totals, label_totals, schema.checkpoints, schema.dead_letters)
            }
    finally:
        engine.dispose()


def test_a_rebuild_through_the_command_folds_every_event(url: str, broker: BrokerProcess) -> None:
    state = snapshot(url)
    assert sum(row.ticks for row in state["pt_totals"]) == sum(
        row.ticks for row in state["pt_label_totals"]
    )
    assert sum(row.ticks for row in state["pt_totals"]) == EVENTS - TRIMMED_TO
    checkpoints = {(r.topic, r.partition): r.next_offset for r in state["ep_checkpoints"]}
    assert sum(checkpoints.values()) == EVENTS


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--from-offset", "100000"), "past the high watermark"),
        (("--from-offsets", '{"pt": {"1": 0}}'), "below the log start offset"),
        (("--from-offset", "0", "--topic", "no-such-topic"), "not 'no-such-topic'"),
        (("--from-offset", "0", "--partition", "9"), "no partition 9"),
        (("--from-offset", "0", "--to-offset", "100000"), "past the high watermark"),
        (("--from-offsets", "[1, 2]"), "--from-offsets"),
        (("--from-timestamp", "yesterday"), "neither epoch milliseconds nor ISO 8601"),
        (("--from-offset", "1", "--from-timestamp", "0"), "give one of"),
        (("--mode", "backfill"), "a backfill covers a range"),
        (("--spark-conf", "no-equals-sign"), "KEY=VALUE"),
        (("--from-offsets", '{"nope": {"0": 1}}'), f"names 'nope', which {NAME} does not read"),
    ],
)
def test_bad_input_fails_clearly_and_leaves_the_live_tables_untouched(
    url: str, broker: BrokerProcess, arguments: tuple[str, ...], message: str
) -> None:
    before = snapshot(url)
    result = run(broker, url, *arguments)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert snapshot(url) == before


def test_an_unknown_projection_fails_clearly(broker: BrokerProcess, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    result = CliRunner().invoke(
        replay,
        ["--projection", "no.such.projection", "--bootstrap", broker.bootstrap, "--database", url],
    )
    assert result.exit_code != 0
    assert "no.such.projection" in result.output


def test_a_topic_the_cluster_lacks_fails_clearly(
    spark: Any, empty_broker: BrokerProcess, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [projection_test_app.app])
    before = snapshot(url)
    result = run(empty_broker, url)
    assert result.exit_code != 0
    assert "topic 'pt' does not exist" in result.output
    assert snapshot(url) == before


def test_a_dry_run_prints_the_plan_and_changes_nothing(url: str, broker: BrokerProcess) -> None:
    before = snapshot(url)
    result = run(broker, url, "--dry-run")
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[0] == f"plan: {NAME} (rebuild) into pt_totals, pt_label_totals"
    )
    assert f"pt/1: offsets {TRIMMED_TO}.." in result.output
    assert snapshot(url) == before


def test_a_backfill_through_the_command_recomputes_rows_to_the_same_values(
    url: str, broker: BrokerProcess
) -> None:
    before = snapshot(url)
    result = run(
        broker, url, "--mode", "backfill", "--from-offset", "5", "--spark-master", "local[2]"
    )
    assert result.exit_code == 0, result.output
    assert "replayed: projection_tests.totals (backfill)" in result.output
    assert "rows recomputed" in result.output
    after = snapshot(url)
    assert after["pt_totals"] == before["pt_totals"]
    assert after["pt_label_totals"] == before["pt_label_totals"]
    assert [row[:4] for row in after["ep_checkpoints"]] == [
        row[:4] for row in before["ep_checkpoints"]
    ]


def test_from_an_offset_skips_an_empty_partition_and_rebuilds_live_tables(
    spark: Any, sparse_broker: BrokerProcess, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [projection_test_app.app])
    assert run(sparse_broker, url, "--spark-master", "local[2]").exit_code == 0
    before = snapshot(url)

    result = run(sparse_broker, url, "--from-offset", "5", "--spark-master", "local[2]")

    assert result.exit_code == 0, result.output
    assert f"pt/{EMPTY_PARTITION}: nothing to replay" in result.output
    assert "the live tables are not at the start" in result.output
    after = snapshot(url)
    assert after["pt_totals"] == before["pt_totals"]
    assert after["pt_label_totals"] == before["pt_label_totals"]
    assert [row[:4] for row in after["ep_checkpoints"]] == [
        row[:4] for row in before["ep_checkpoints"]
    ]


def timed_dry_run(broker: BrokerProcess, url: str, *arguments: str) -> Result:
    started = time.monotonic()
    result = run(broker, url, *arguments, "--dry-run")
    assert time.monotonic() - started < DRY_RUN_S_MAX, result.output
    assert "Traceback" not in result.output
    return result


def test_a_dry_run_says_how_a_rebuild_from_an_offset_runs_on_live_tables(
    url: str, broker: BrokerProcess
) -> None:
    before = snapshot(url)
    result = timed_dry_run(broker, url, "--from-offset", "0")
    assert result.exit_code == 0, result.output
    assert f"pt/1: starts at its log start {TRIMMED_TO}" in result.output
    assert "the live tables are not at the start (pt/0 at " in result.output
    assert f"pt/1: offsets {TRIMMED_TO}.." in result.output
    assert snapshot(url) == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--from-offsets", '{"pt": {"0": 5, "9": 1}}'), "names pt/9, which do not exist"),
        (("--from-offsets", '{"pt": {"0": 5}}', "--partition", "1"), "names pt/0, which"),
        (("--from-offset", "100000"), "past the high watermark of every partition"),
        ((), "the database has no table pt_totals, pt_label_totals"),
    ],
)
def test_a_dry_run_refuses_what_the_real_run_would_refuse_without_starting_spark(
    broker: BrokerProcess, tmp_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [])  # the platform's tables, not the app's
    result = timed_dry_run(broker, url, *arguments)
    assert result.exit_code != 0
    assert message in result.output
