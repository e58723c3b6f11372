"""Corrections whose link does not hold are parked by a rebuild as by the streaming runner.

The log holds ticks, one valid correction, and four that do not hold: one
names the right position with the wrong event id, one names an event of
another partition, one a partition the topic does not have, and one an
offset past the end of its partition. The last three are written with a
plain Kafka producer, as a client other than the SDK could. A Spark rebuild
from the start must leave the same rows and the same dead letters as the
runner; none of the bad links may fail the replay.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import projection_test_app
import pytest
from confluent_kafka import Producer
from projection_test_app import Tick, label_totals, totals, totals_projection
from projection_threads import apply_all
from replay_databases import ranges
from sqlalchemy import select

from eventplatform.events import Correction, Envelope, EventProducer, EventRef, Position, codec
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import BrokerProcess, fresh_database, running_broker

PARTITIONS = 2
FLUSH_TIMEOUT_S = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path / "broker", overrides) as process:
        yield process


def produce_raw(bootstrap: str, envelope: Envelope[Correction], partition: int) -> None:
    """``envelope`` as the SDK encodes it, but appended to ``partition`` of its topic."""
    record = codec.encode(envelope)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        record.topic, record.value, record.key, partition=partition, headers=record.headers
    )
    assert producer.flush(FLUSH_TIMEOUT_S) == 0


def state(url: str) -> dict[str, Any]:
    engine = create_store_engine(url)
    letters = schema.dead_letters
    try:
        with engine.connect() as connection:
            tables = {
                table.name: connection.execute(select(table).order_by(*table.primary_key)).all()
                for table in (totals, label_totals)
            }
            parked = connection.execute(
                select(letters.c.topic, letters.c.partition, letters.c.offset)
                .where(letters.c.projection == totals_projection.name)
                .order_by(letters.c.topic, letters.c.partition, letters.c.offset)
            ).all()
    finally:
        engine.dispose()
    return {"tables": tables, "parked": parked}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_rebuild_parks_the_corrections_the_runner_parks(
    kind: str, spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(
            [Tick(entity=f"e{n}", amount=n, label=f"l{n % 2}") for n in range(12)]
        )
        first = next(ref for ref in refs if ref.position.partition == 0)
        other = next(ref for ref in refs if ref.position.partition == 1)
        refs += producer.append(
            [
                Correction(of=first, replacement=Tick(entity=first.key, amount=100, label="fixed")),
                Correction(of=EventRef(uuid.uuid4(), first.key, first.position), retract=True),
            ]
        )
    topic = first.position.topic
    bad_links = [
        (other, "another partition"),
        (EventRef(first.event_id, first.key, Position(topic, 7, 3)), "no such partition"),
        (EventRef(first.event_id, first.key, Position(topic, 0, 10**6)), "past the end"),
    ]
    for target, _ in bad_links:
        produce_raw(broker.bootstrap, Envelope(Correction(of=target, retract=True)), 0)

    apps = [projection_test_app.app]
    with (
        fresh_database(kind, tmp_path) as streamed,
        fresh_database(kind, tmp_path) as rebuilt,
    ):
        for url in (streamed, rebuilt):
            migrate.upgrade(url, apps)
        ends = ranges(broker.bootstrap, topic, {})
        last = [
            EventRef(uuid.uuid4(), "", Position(r.topic, r.partition, r.end - 1))
            for r in ends
            if r.end
        ]
        apply_all(totals_projection.name, apps, streamed, broker.bootstrap, last)
        options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
        summary = rebuild(spark, totals_projection, rebuilt, ends, options, from_start=True)

        expected = state(streamed)
        assert len(expected["parked"]) == 4  # the wrong id and the three bad links
        assert summary.parked == 4
        assert state(rebuilt) == expected
