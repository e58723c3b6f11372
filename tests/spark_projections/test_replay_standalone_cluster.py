"""``platform replay`` runs unchanged on a standalone Spark cluster.

The test starts a master and one worker on 127.0.0.1 with the ``spark-class``
script of the pyspark package (see :mod:`spark_cluster`), appends events and
corrections to a real broker, and rebuilds a projection twice, each into its
own database: with the real CLI against the cluster (``--spark-master
spark://...``), and in this process in local mode (the suite's shared
session). Tables and checkpoints must be identical row for row, and hold what
the events say. The master must list the CLI's application as finished, and
the worker must have launched an executor for it that ran tasks, so the job
cannot have run anywhere else.

The CLI loads this module as the app (``--app <this module>:APP``); the
projection is the correction tests' subject, declared once at import.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from correction_streams import declare_subject, stored_tables
from spark_cluster import HOST, GroupProcess, SparkCluster, standalone_cluster
from sqlalchemy import Engine, select

from eventplatform.events import Correction, Event, EventProducer
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import App
from eventplatform.projections.database import create_store_engine
from eventplatform.spark_projections.replay import ReplayRequest, plan_ranges, rebuild
from eventplatform.testing import BrokerProcess, running_broker

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "support"
PLATFORM = Path(sys.executable).with_name("platform")
SUBJECT = declare_subject("standalone")
APP = App(
    name="standalone_replay_tests",
    projections=[SUBJECT.projection],
    event_types=[SUBJECT.event_class],
)
PROJECTION = SUBJECT.projection
BROKER_OVERRIDES = ["num.partitions=3", "group.initial.rebalance.delay.ms=0"]
REPLAY_TIMEOUT_S = 120.0

ENTITIES = ("ant", "bee", "cat", "dog", "eel", "fox", "gnu")
LABELS = ("red", "green", "blue")
EVENTS = 60
REPLACED = {3: 100, 17: -40, 42: 7, 51: None}
"""Event index: the amount of its replacement (the label becomes ``blue``)."""
RETRACTED = (5, 29, 44)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    # Executors and their Python workers inherit the worker's environment. They run the
    # interpreter the driver names (PYSPARK_PYTHON), so the worker does not set it.
    worker_env = {"PYTHONPATH": python_path()}
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster"), worker_env=worker_env) as c:
        yield c


def python_path() -> str:
    """The test support modules and this directory, ahead of any inherited entries."""
    inherited = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    return os.pathsep.join(dict.fromkeys([str(SUPPORT), str(HERE), *inherited]))


def append_events(bootstrap: str) -> tuple[int, int]:
    """Append the events, then their corrections; the sum and count of the surviving amounts."""
    event_class: Any = SUBJECT.event_class
    events: list[Event] = [
        event_class(
            entity=ENTITIES[(index * 5) % len(ENTITIES)],
            amount=None if index % 11 == 7 else (index * 7) % 23 - 5,
            label=LABELS[index % len(LABELS)],
        )
        for index in range(EVENTS)
    ]
    with EventProducer(bootstrap) as producer:
        refs = producer.append(events)
        corrections = [
            Correction(
                of=refs[index],
                replacement=event_class(entity=events[index].entity, amount=amount, label="blue"),
            )
            for index, amount in REPLACED.items()
        ]
        corrections += [Correction(of=refs[index], retract=True) for index in RETRACTED]
        producer.append(corrections)
    surviving = {index: event.amount for index, event in enumerate(events)}
    surviving.update(REPLACED)
    for index in RETRACTED:
        del surviving[index]
    return sum(amount or 0 for amount in surviving.values()), len(surviving)


def prepared(url: str) -> Engine:
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    SUBJECT.entities.metadata.create_all(engine)
    return engine


def checkpoints(engine: Engine) -> dict[tuple[str, int], int]:
    table = schema.checkpoints
    with engine.connect() as connection:
        rows = connection.execute(
            select(table.c.topic, table.c.partition, table.c.next_offset).where(
                table.c.projection == PROJECTION.name
            )
        )
        return {(topic, partition): offset for topic, partition, offset in rows}


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def start_replay(
    cluster: SparkCluster, broker: BrokerProcess, database_url: str, app_name: str, cwd: Path
) -> GroupProcess:
    """Start ``platform replay`` against the cluster, as an operator would run it."""
    settings = {
        "spark.app.name": app_name,
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.showConsoleProgress": "false",
    }
    command = [
        str(PLATFORM),
        "replay",
        "--projection",
        PROJECTION.name,
        "--app",
        f"{Path(__file__).stem}:APP",
        "--spark-master",
        cluster.master_url,
        "--bootstrap",
        broker.bootstrap,
        "--data-dir",
        str(broker.data_dir),
        "--database",
        database_url,
    ]
    for key, value in settings.items():
        command += ["--spark-conf", f"{key}={value}"]
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": python_path(),
        "SPARK_LOCAL_IP": HOST,
    }
    for name in ("EVENTPLATFORM_SPARK_MASTER", "EVENTPLATFORM_SPARK_CONF", "EVENTPLATFORM_APPS"):
        env.pop(name, None)
    return GroupProcess(command, env=env, cwd=cwd, output=cwd / "replay.out")


def test_a_standalone_cluster_rebuilds_what_local_mode_does(
    spark: Any, broker: BrokerProcess, cluster: SparkCluster, tmp_path: Path
) -> None:
    on_cluster = prepared(f"sqlite:///{tmp_path / 'standalone.db'}")
    in_local_mode = prepared(f"sqlite:///{tmp_path / 'local.db'}")
    total, count = append_events(broker.bootstrap)

    app_name = f"eventplatform-standalone-{uuid.uuid4().hex[:8]}"
    with start_replay(cluster, broker, url_of(on_cluster), app_name, tmp_path) as replay:
        # The local rebuild runs meanwhile, in this process's local-mode session.
        url = url_of(in_local_mode)
        options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
        ranges = plan_ranges(PROJECTION, url, options, ReplayRequest())
        rebuild(spark, PROJECTION, url, ranges, options, from_start=True)
        status = replay.finish(REPLAY_TIMEOUT_S)
    output = replay.output()
    assert status == 0, f"{output}\n{cluster.log_tails()}"
    corrections = len(REPLACED) + len(RETRACTED)
    assert f"events read {EVENTS + corrections}," in output, output
    assert f"corrections {corrections}, parked 0," in output, output

    application = cluster.wait_for_finished(app_name)
    executors = cluster.executor_dirs(application["id"])
    assert executors, f"the worker launched no executor for {application}"
    executor_log = "".join((path / "stderr").read_text(errors="replace") for path in executors)
    assert "Finished task" in executor_log, executor_log[-4000:]

    expected = stored_tables(in_local_mode, SUBJECT)
    assert stored_tables(on_cluster, SUBJECT) == expected
    labels = expected[SUBJECT.labels.name].values()
    assert (sum(row["total"] for row in labels), sum(row["ticks"] for row in labels)) == (
        total,
        count,
    )
    end = {(r.topic, r.partition): r.end for r in ranges}
    assert checkpoints(on_cluster) == checkpoints(in_local_mode) == end
    on_cluster.dispose()
    in_local_mode.dispose()
