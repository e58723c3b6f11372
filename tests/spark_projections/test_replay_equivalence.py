"""Spark replay computes the streaming runner's tables, corrections included.

Each example appends a random stream of events, replacements and
retractions (corrections of corrections too) in two parts to a fresh topic
of a real broker, across several partitions, and builds the projection three
ways, each in its own database:

* A: the streaming runner applies everything;
* B: a Spark rebuild from the start of the log;
* C: the streaming runner applies the first part, then a Spark rebuild from
  its checkpoints applies the rest on top of its tables;
* D: the streaming runner applies the first part, then a Spark backfill of
  a window from half its checkpoints to the end recomputes the rows that
  window (and the unapplied rest) touches.

The three must be identical row for row (bookkeeping columns included),
with the checkpoints at the end of the log. It runs on SQLite and PostgreSQL:
the two streams written out below and ``REPLAY_EQUIVALENCE_EXAMPLES`` generated
ones (2 in the suite; ``make replay-equivalence`` runs 30).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from correction_streams import (
    Append,
    Operation,
    Replace,
    Retract,
    Stream,
    declare_subject,
    operations,
    run_until_applied,
    stored_tables,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from replay_databases import checkpoints, databases, ranges, url_of

from eventplatform.events import EventProducer
from eventplatform.spark_projections.backfilling import backfill
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import BrokerProcess, running_broker

PARTITIONS = 3
BROKER_OVERRIDES = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
EXAMPLES_MAX = int(os.environ.get("REPLAY_EQUIVALENCE_EXAMPLES", "2"))
BATCH_SIZE = 7


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES) as process:
        yield process


def check_equivalence(
    spark: Any,
    broker: BrokerProcess,
    kind: str,
    directory: Path,
    stream: tuple[Operation, ...],
    split: int,
) -> None:
    subject = declare_subject(uuid.uuid4().hex[:10])
    topic = subject.event_class.event_topic
    name = subject.projection.name
    options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    with (
        databases(kind, directory, 4) as (streamed, rebuilt, on_top, backfilled),
        EventProducer(broker.bootstrap) as producer,
    ):
        for engine in (streamed, rebuilt, on_top, backfilled):
            subject.entities.metadata.create_all(engine)
        appended = Stream(producer, subject.event_class)
        appended.append(stream[:split])
        run_until_applied(on_top, subject, broker.bootstrap, BATCH_SIZE, appended.refs)
        run_until_applied(backfilled, subject, broker.bootstrap, BATCH_SIZE, appended.refs)
        appended.append(stream[split:])
        run_until_applied(streamed, subject, broker.bootstrap, BATCH_SIZE, appended.refs)

        full = ranges(broker.bootstrap, topic, {})
        rebuild(spark, subject.projection, url_of(rebuilt), full, options, from_start=True)
        middle = ranges(broker.bootstrap, topic, checkpoints(on_top, subject.projection.name))
        rebuild(spark, subject.projection, url_of(on_top), middle, options, from_start=False)
        halves = {tp: offset // 2 for tp, offset in checkpoints(backfilled, name).items()}
        window = ranges(broker.bootstrap, topic, halves)
        backfill(spark, subject.projection, url_of(backfilled), window, options)

        expected = stored_tables(streamed, subject)
        assert stored_tables(rebuilt, subject) == expected
        assert stored_tables(on_top, subject) == expected
        assert stored_tables(backfilled, subject) == expected
        end = {(r.topic, r.partition): r.end for r in full}
        for engine in (rebuilt, on_top, backfilled):
            assert checkpoints(engine, name) == end


MIXED = (
    Append("ant", 5, "red"),
    Append("bee", 7, "blue"),
    Append("ant", None, "green"),
    Replace(0, 11, "green"),
    Retract(1),
    Append("cat", -3, "red"),
    Replace(3, 2, "blue"),
    Retract(5),
    Append("dog", 4, "blue"),
    Replace(2, 9, "red"),
)

EARLIER_AND_LATER = (
    Append("ant", 1, "red"),
    Append("ant", 3, "red"),
    Replace(1, 19, "red"),
    Retract(0),
)
"""With the first event applied before the rebuild: retracting it recomputes a row
whose other event the rebuild corrected."""


@settings(
    max_examples=EXAMPLES_MAX,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stream=operations(), cut=st.floats(0.0, 1.0))
@example(stream=MIXED, cut=0.35)
@example(stream=EARLIER_AND_LATER, cut=0.25)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_spark_rebuilds_equal_the_streaming_runner(
    spark: Any,
    broker: BrokerProcess,
    tmp_path: Path,
    kind: str,
    stream: tuple[Operation, ...],
    cut: float,
) -> None:
    split = max(1, int(len(stream) * cut))
    check_equivalence(spark, broker, kind, tmp_path, stream, split)
