"""Spark replay over erased records, on both read paths, against a real broker.

The log holds events, erased records (as any producer can send them: key, timestamp,
null value, the one header ``eventplatform.erased``) and corrections of erased records:
one left alone, one replaced and its replacement replaced again, one retracted, one
replaced later. The projection is built four ways, each in its own database, as the
equivalence tests build it:

* the streaming runner applies everything;
* a Spark rebuild from the start of the log;
* the runner applies the first part, then a Spark rebuild from its checkpoints
  applies the rest on top (a correction there reaches an erased record before the
  range, which the runner's own path reads back through the replay's read path);
* the runner applies the first part, then a Spark backfill from half its checkpoint.

All four must equal the in-memory fold of the history, with the same corrected-event
records and no dead letter, and checkpoints at the end of the log.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from correction_streams import declare_subject, stored_tables
from erased_records import (
    ErasureLog,
    corrected_events,
    folded,
    parked_errors,
    position_of,
    run_until_applied,
)
from replay_databases import checkpoints, databases, ranges, url_of

from eventplatform.events import ErasedRecord, Position
from eventplatform.spark_projections.backfilling import backfill
from eventplatform.spark_projections.offsets import OffsetRange, parse_options
from eventplatform.spark_projections.read_paths import read_chunk, read_values
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import BrokerProcess, running_broker

BROKER_OVERRIDES = ["num.partitions=1", "group.initial.rebalance.delay.ms=0"]
READ_PATHS = ("direct", "kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES) as process:
        yield process


def source_options(broker: BrokerProcess, read_path: str) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "dataDir": str(broker.data_dir),
        "readPath": read_path,
    }


@pytest.mark.parametrize("read_path", READ_PATHS)
def test_both_read_paths_give_what_is_left_of_an_erased_record(
    broker: BrokerProcess, read_path: str
) -> None:
    subject = declare_subject(uuid.uuid4().hex[:10])
    log = ErasureLog(broker.bootstrap, subject)
    try:
        kept = log.tick("ant", 1, "red")
        gone = log.erased("ant")
        last = log.erased("bee")
    finally:
        log.close()
    options = source_options(broker, read_path)

    values = read_values(options, [position_of(kept), gone.position, last.position])

    assert values[gone.position] == gone
    assert values[last.position] == last
    assert isinstance(values[position_of(kept)], bytes)
    chunk = OffsetRange(log.topic, 0, 0, last.position.offset + 1)
    parsed = parse_options({**options, "topics": log.topic})
    rows = [row for batch in read_chunk(parsed, chunk) for row in batch.to_pylist()]
    assert [row["offset"] for row in rows] == [0, 1, 2], "an erased record is still a row"
    erased_row = rows[1]
    assert (erased_row["key"], erased_row["value"], erased_row["event_type"]) == (
        b"ant",
        None,
        None,
    )
    assert erased_row["headers"] == [{"key": "eventplatform.erased", "value": b""}]


@pytest.mark.parametrize("read_path", READ_PATHS)
def test_spark_replays_leave_erased_events_out_as_the_runner_does(
    spark: Any, broker: BrokerProcess, tmp_path: Path, read_path: str
) -> None:
    subject = declare_subject(uuid.uuid4().hex[:10])
    name = subject.projection.name
    options = source_options(broker, read_path)
    with databases("sqlite", tmp_path, 4) as (streamed, rebuilt, on_top, backfilled):
        for engine in (streamed, rebuilt, on_top, backfilled):
            subject.entities.metadata.create_all(engine)
        log = ErasureLog(broker.bootstrap, subject)
        try:
            log.tick("ant", 5, "red")
            log.erased("ant")
            log.tick("bee", 2, "blue")
            replaced = log.erased("ant")
            first_replacement = log.replace(replaced, "ant", 7, "green")
            retracted = log.erased("cat")
            log.correct(retracted, retract=True)
            for engine in (on_top, backfilled):
                run_until_applied(engine, subject, broker.bootstrap, log.last)
            log.tick("ant", 1, "blue")
            log.replace(first_replacement, "ant", 9, "green")
            later = log.erased("dog")
            log.tick("cat", 3, "red")
            log.replace(later, "dog", 4, "red")
            log.erased("bee")
            run_until_applied(streamed, subject, broker.bootstrap, log.last)
        finally:
            log.close()

        full = ranges(broker.bootstrap, log.topic, {})
        rebuild(spark, subject.projection, url_of(rebuilt), full, options, from_start=True)
        middle = ranges(broker.bootstrap, log.topic, checkpoints(on_top, name))
        rebuild(spark, subject.projection, url_of(on_top), middle, options, from_start=False)
        halves = {tp: offset // 2 for tp, offset in checkpoints(backfilled, name).items()}
        window = ranges(broker.bootstrap, log.topic, halves)
        backfill(spark, subject.projection, url_of(backfilled), window, options)

        expected = folded(subject, log.history)
        ant = expected[subject.entities.name][("ant",)]
        assert (ant["total"], ant["trail"]) == (5 + 9 + 1, "red|green|blue")
        end = {(log.topic, 0): log.last.offset + 1}
        for engine in (streamed, rebuilt, on_top, backfilled):
            assert stored_tables(engine, subject) == expected
            assert parked_errors(engine, subject) == []
            assert corrected_events(engine, subject) == corrected_events(streamed, subject)
            assert checkpoints(engine, name) == end
        erased_positions = [r.position for r in log.history if isinstance(r, ErasedRecord)]
        recorded = {Position(row[1], row[2], row[3]) for row in corrected_events(rebuilt, subject)}
        assert set(erased_positions) <= recorded, "a later correction knows they held nothing"
