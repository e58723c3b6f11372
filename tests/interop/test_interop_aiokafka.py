"""aiokafka against a real broker process.

aiokafka runs on asyncio, and the suite runs async tests under trio, so each
test is synchronous and drives its own event loop with ``asyncio.run``.
Records are checked byte for byte, in order per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from eventplatform.events.partitioner import partition_for_key
from eventplatform.testing import BrokerProcess

TIMEOUT_S = 60.0
PARTITIONS = 3
UNKNOWN = -1


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
            f"device-{index % 53}".encode(),
            f"{tag} {index} ".encode() + b"q" * (index % 30),
            (("index", str(index).encode()),) if index % 10 == 0 else (),
        )
        for index in range(count)
    ]


async def produce(
    bootstrap: str, topic: str, records: Sequence[Record], **config: Any
) -> list[Placed]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, key=record.key, value=record.value, headers=list(record.headers)
            )
            for record in records
        ]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
    finally:
        await producer.stop()
    # acks=0 gets no answer, so aiokafka has no metadata for those records.
    return [
        Placed(entry.partition, entry.offset, record)
        if entry is not None
        else Placed(UNKNOWN, UNKNOWN, record)
        for entry, record in zip(metadata, records, strict=True)
    ]


async def drain(
    consumer: AIOKafkaConsumer, count: int, timeout_s: float = TIMEOUT_S
) -> list[Placed]:
    """Fetch until ``count`` records arrived or the deadline passed."""
    received: list[Placed] = []
    deadline = time.monotonic() + timeout_s
    while len(received) < count and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=200)
        for messages in batches.values():
            for message in messages:
                record = Record(message.key, message.value, tuple(message.headers))
                received.append(Placed(message.partition, message.offset, record))
    return received


def assert_same_partition_logs(received: Sequence[Placed], produced: Sequence[Placed]) -> None:
    partitions = {item.partition for item in produced} | {item.partition for item in received}
    for partition in partitions:
        got = [(item.offset, item.record) for item in received if item.partition == partition]
        sent = [(item.offset, item.record) for item in produced if item.partition == partition]
        assert got == sent, f"partition {partition} differs"


async def _assigned_round_trip(
    bootstrap: str, topic: str, records: Sequence[Record], **config: Any
) -> tuple[list[Placed], list[Placed]]:
    produced = await produce(bootstrap, topic, records, **config)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, index) for index in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        received = await drain(consumer, len(records))
    finally:
        await consumer.stop()
    return produced, received


@pytest.mark.parametrize(
    "config",
    [
        {"compression_type": None},
        {"compression_type": "gzip"},
        {"compression_type": "snappy"},
        {"compression_type": "lz4"},
        {"compression_type": "zstd"},
        {"enable_idempotence": True},
        {"acks": 0},
        {"acks": "all"},
    ],
    ids=["none", "gzip", "snappy", "lz4", "zstd", "idempotent", "acks0", "acksall"],
)
def test_produce_and_assigned_consume(
    broker: BrokerProcess, new_topic: Callable[..., str], config: dict[str, Any]
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    records = keyed_records(3_000, tag=str(config))

    produced, received = asyncio.run(
        _assigned_round_trip(broker.bootstrap, topic, records, **config)
    )

    assert len(received) == len(records)
    if config.get("acks") == 0:
        # Nothing tells the producer where its records went: place them with
        # murmur2 and expect them in send order from offset 0. On loopback to
        # a healthy broker none may be lost.
        produced = []
        counts = dict.fromkeys(range(PARTITIONS), 0)
        for record in records:
            partition = partition_for_key(record.key, PARTITIONS)
            produced.append(Placed(partition, counts[partition], record))
            counts[partition] += 1
    for item in produced:
        assert item.partition == partition_for_key(item.record.key, PARTITIONS)
    assert_same_partition_logs(received, produced)


async def _drain_all(consumers: Sequence[AIOKafkaConsumer], count: int) -> list[list[Placed]]:
    """Fetch from every member until together they hold ``count`` records or time runs out."""
    received: list[list[Placed]] = [[] for _ in consumers]
    deadline = time.monotonic() + TIMEOUT_S
    while sum(map(len, received)) < count and time.monotonic() < deadline:
        batches = await asyncio.gather(
            *(consumer.getmany(timeout_ms=200) for consumer in consumers)
        )
        for held, batch in zip(received, batches, strict=True):
            for messages in batch.values():
                for message in messages:
                    record = Record(message.key, message.value, tuple(message.headers))
                    held.append(Placed(message.partition, message.offset, record))
    return received


async def _round_robin_group(
    bootstrap: str, topic: str, partition_count: int, records: Sequence[Record]
) -> tuple[list[Placed], list[set[int]], list[list[Placed]]]:
    group = f"aiokafka-{time.monotonic_ns()}"
    consumers = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=(RoundRobinPartitionAssignor,),
        )
        for _ in range(2)
    ]
    for consumer in consumers:
        await consumer.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            assignments = [consumer.assignment() for consumer in consumers]
            if all(assignments) and sum(map(len, assignments)) == partition_count:
                break
            await asyncio.gather(*(consumer.getmany(timeout_ms=100) for consumer in consumers))
        produced = await produce(bootstrap, topic, records)
        halves = await _drain_all(consumers, len(records))
        partitions = [{tp.partition for tp in consumer.assignment()} for consumer in consumers]
    finally:
        for consumer in consumers:
            await consumer.stop()
    return produced, partitions, halves


def test_round_robin_group_splits_the_records(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Two members of a roundrobin group share 6 partitions; together they read each record once."""
    partition_count = 6
    topic = new_topic(partitions=partition_count)
    records = keyed_records(1_200, tag="group")

    produced, partitions, halves = asyncio.run(
        _round_robin_group(broker.bootstrap, topic, partition_count, records)
    )

    # roundrobin deals partitions out alternately (range would give 0-2 and 3-5).
    assert sorted(map(sorted, partitions)) == [[0, 2, 4], [1, 3, 5]]
    for assigned, half in zip(partitions, halves, strict=True):
        assert {item.partition for item in half} <= assigned
    assert_same_partition_logs(halves[0] + halves[1], produced)
