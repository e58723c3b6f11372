"""kafka-python 3.x against a real broker process, with the client's defaults.

kafka-python 3.x turns idempotence on by default (acks=all, an
InitProducerId round trip, sequence numbers), so every produce here is
idempotent unless a test says otherwise. Records are checked byte for byte,
in order per partition, at the partition the Java-compatible murmur2
partitioner picks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from eventplatform.events.partitioner import partition_for_key
from eventplatform.testing import BrokerProcess

SEND_TIMEOUT_S = 30.0
POLL_TIMEOUT_S = 60.0
PARTITIONS = 3


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Placed:
    partition: int
    offset: int
    record: Record


def keyed_records(count: int, tag: str) -> list[Record]:
    return [
        Record(
            f"account-{index % 101}".encode(),
            f"{tag} {index} ".encode() + b"z" * (index % 40),
            (("index", str(index).encode()),) if index % 10 == 0 else (),
        )
        for index in range(count)
    ]


def produce(
    bootstrap: str, topic: str, records: Iterable[Record], **config: object
) -> list[Placed]:
    """Send with kafka-python's defaults (plus ``config``); returns where each record went."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [
            (
                record,
                producer.send(
                    topic, key=record.key, value=record.value, headers=list(record.headers)
                ),
            )
            for record in records
        ]
        producer.flush(timeout=SEND_TIMEOUT_S)
        placed = []
        for record, future in futures:
            metadata = future.get(timeout=SEND_TIMEOUT_S)
            placed.append(Placed(metadata.partition, metadata.offset, record))
    finally:
        producer.close(timeout=SEND_TIMEOUT_S)
    return placed


def drain(consumer: KafkaConsumer, count: int, timeout_s: float = POLL_TIMEOUT_S) -> list[Placed]:
    """Poll until ``count`` records arrived or the deadline passed.

    Each poll may take all the time left (it returns as soon as records arrive): a
    kafka-python 3.0 member that joins between two short polls can drop its own
    assignment, then neither fetches nor heartbeats until the group removes it."""
    received: list[Placed] = []
    deadline = time.monotonic() + timeout_s
    while len(received) < count and (left_s := deadline - time.monotonic()) > 0:
        for records in consumer.poll(timeout_ms=max(1, int(left_s * 1000))).values():
            for message in records:
                record = Record(message.key, message.value, tuple(message.headers))
                received.append(Placed(message.partition, message.offset, record))
    return received


def assert_same_partition_logs(received: Sequence[Placed], produced: Sequence[Placed]) -> None:
    """Per partition: the same records, in the same order, at the offsets the producer was told."""
    partitions = {item.partition for item in produced} | {item.partition for item in received}
    for partition in partitions:
        got = [(item.offset, item.record) for item in received if item.partition == partition]
        sent = [(item.offset, item.record) for item in produced if item.partition == partition]
        assert got == sent, f"partition {partition} differs"


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_and_assigned_consume(
    broker: BrokerProcess, new_topic: Callable[..., str], compression: str | None
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    records = keyed_records(3_000, tag=f"{compression}")

    produced = produce(broker.bootstrap, topic, records, compression_type=compression)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, index) for index in range(PARTITIONS)])
        consumer.seek_to_beginning()
        received = drain(consumer, len(records))
    finally:
        consumer.close()

    assert len(received) == len(records)
    assert_same_partition_logs(received, produced)
    for item in produced:
        assert item.partition == partition_for_key(item.record.key, PARTITIONS)
    for partition in range(PARTITIONS):
        offsets = [item.offset for item in produced if item.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_non_idempotent_acks_one_round_trip(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    records = keyed_records(2_000, tag="acks1")

    produced = produce(broker.bootstrap, topic, records, enable_idempotence=False, acks=1)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, index) for index in range(PARTITIONS)])
        consumer.seek_to_beginning()
        received = drain(consumer, len(records))
    finally:
        consumer.close()
    assert len(received) == len(records)
    assert_same_partition_logs(received, produced)


def test_group_consumer_reads_everything_and_resumes_after_commit(
    broker: BrokerProcess, new_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    """A subscribed group member reads all records; after a commit, a new member starts there.

    The client's group and metadata decisions are kept in the log shown on a failure."""
    caplog.set_level(logging.DEBUG, logger="kafka.coordinator")
    caplog.set_level(logging.INFO, logger="kafka.cluster")
    topic = new_topic(partitions=PARTITIONS)
    group = f"kafka-python-{time.monotonic_ns()}"
    first = produce(broker.bootstrap, topic, keyed_records(1_000, tag="first"))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        received = drain(consumer, len(first))
        consumer.commit()
    finally:
        consumer.close()
    assert len(received) == len(first)
    assert_same_partition_logs(received, first)

    second = produce(broker.bootstrap, topic, keyed_records(100, tag="second"))
    resumed = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        after_commit = drain(resumed, len(second))
        extra = drain(resumed, 1, timeout_s=1.0)
    finally:
        resumed.close()
    assert extra == []
    assert sorted(after_commit, key=lambda p: (p.partition, p.offset)) == sorted(
        second, key=lambda p: (p.partition, p.offset)
    )
