"""A backfill after a handler fix recomputes the rows of a window, and only those.

A handler with a bug (blue ticks count ten times their amount) applied the
whole log; blue ticks, and a replacement that turns an earlier red tick
blue, appear only in a middle window of it. A backfill of that window with
the fixed handler must leave the tables equal to those the fixed handler
builds from the whole log, and must not rewrite a row the window does not
touch (a row edited by hand beforehand stays edited).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from correction_streams import Append, Replace, Stream, declare_subject, run_until_applied
from correction_streams import stored_tables as tables_of
from replay_databases import checkpoints, databases, ranges, url_of

from eventplatform.events import EventProducer
from eventplatform.projections.kafka import log_ends
from eventplatform.spark_projections.backfilling import backfill
from eventplatform.spark_projections.replay import ReplayRange
from eventplatform.testing import BrokerProcess, running_broker

PARTITIONS = 3
BATCH_SIZE = 5
BEFORE = (
    Append("ant", 5, "red"),
    Append("bee", 7, "green"),
    Append("dog", 4, "red"),
    Append("cat", 2, "green"),
)
WINDOW = (
    Append("ant", 10, "blue"),
    Append("bee", 3, "blue"),
    Replace(0, 6, "blue"),
)
AFTER = (
    Append("ant", 1, "red"),
    Append("cat", 8, "green"),
)


def buggy_amount(tick: Any) -> int | None:
    if tick.label == "blue" and tick.amount is not None:
        return int(tick.amount) * 10
    return int(tick.amount) if tick.amount is not None else None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as process:
        yield process


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_backfill_after_a_handler_fix_recomputes_the_window_rows_only(
    spark: Any, broker: BrokerProcess, tmp_path: Path, kind: str
) -> None:
    tag = uuid.uuid4().hex[:10]
    fixed, buggy = declare_subject(tag), declare_subject(tag, buggy_amount)
    topic = fixed.event_class.event_topic
    options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    with (
        databases(kind, tmp_path, 2) as (reference, repaired),
        EventProducer(broker.bootstrap) as producer,
    ):
        for engine in (reference, repaired):
            fixed.entities.metadata.create_all(engine)
        appended = Stream(producer, fixed.event_class)
        appended.append(BEFORE)
        window_start = {tp: high for tp, (_, high) in log_ends(broker.bootstrap, [topic]).items()}
        appended.append(WINDOW)
        window_end = {tp: high for tp, (_, high) in log_ends(broker.bootstrap, [topic]).items()}
        appended.append(AFTER)
        run_until_applied(reference, fixed, broker.bootstrap, BATCH_SIZE, appended.refs)
        run_until_applied(repaired, buggy, broker.bootstrap, BATCH_SIZE, appended.refs)
        expected = tables_of(reference, fixed)
        assert tables_of(repaired, fixed) != expected  # the bug shows
        with repaired.begin() as connection:  # dog and green: rows the window does not touch
            connection.execute(
                fixed.entities.update().values(total=999).where(fixed.entities.c.entity == "dog")
            )
            connection.execute(
                fixed.labels.update().values(total=999).where(fixed.labels.c.label == "green")
            )
        window = [
            ReplayRange(
                r.topic,
                r.partition,
                window_start[(r.topic, r.partition)],
                window_end[(r.topic, r.partition)],
                r.log_start,
                r.high_watermark,
            )
            for r in ranges(broker.bootstrap, topic, {})
        ]
        summary = backfill(spark, fixed.projection, url_of(repaired), window, options)

        got = tables_of(repaired, fixed)
        entities, labels = fixed.entities.name, fixed.labels.name
        assert got[entities][("dog",)]["total"] == 999
        assert got[labels][("green",)]["total"] == 999
        got[entities][("dog",)]["total"] = expected[entities][("dog",)]["total"]
        got[labels][("green",)]["total"] = expected[labels][("green",)]["total"]
        assert got == expected
        # entities ant and bee; labels and label extremes red and blue (the replaced content)
        assert summary.rows_touched == 2 + 2 + 2
        end = {(r.topic, r.partition): r.end for r in ranges(broker.bootstrap, topic, {})}
        assert checkpoints(repaired, fixed.projection.name) == end
