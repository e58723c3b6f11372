"""Keyed records through confluent-kafka: produce, consume, and where murmur2 puts them.

Shared by the confluent-kafka interop suites. ``murmur2`` here is an
independent implementation, so the suites can check librdkafka and
the SDK's ``eventplatform.events.partitioner`` against it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

RECORD_COUNT = 100_000
MATRIX_PARTITIONS = 4
DISTINCT_KEYS = 7_919
# An hour ago: recent enough that the default 7-day retention keeps every record.
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000
PRODUCE_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 60.0
ADMIN_TIMEOUT_S = 30.0
CONSUME_BATCH = 10_000
MURMUR2_SEED = 0x9747B28C
MURMUR2_MULTIPLIER = 0x5BD1E995
UINT32_MASK = 0xFFFFFFFF
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DELIVERY_MODES: dict[str, dict[str, Any]] = {
    "acks0": {"acks": "0", "enable.idempotence": False},
    "acks1": {"acks": "1", "enable.idempotence": False},
    "acksall": {"acks": "all", "enable.idempotence": False},
    "idempotent": {"enable.idempotence": True},
}


# ---------------------------------------------------------------- murmur2


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (which librdkafka's ``rd_murmur2`` matches), signed 32-bit."""
    length = len(data)
    hashed = (MURMUR2_SEED ^ length) & UINT32_MASK
    body_length = length - length % 4
    for start in range(0, body_length, 4):
        word = int.from_bytes(data[start : start + 4], "little")
        word = (word * MURMUR2_MULTIPLIER) & UINT32_MASK
        word ^= word >> 24
        word = (word * MURMUR2_MULTIPLIER) & UINT32_MASK
        hashed = ((hashed * MURMUR2_MULTIPLIER) & UINT32_MASK) ^ word
    tail = data[body_length:]
    if len(tail) == 3:
        hashed ^= tail[2] << 16
    if len(tail) >= 2:
        hashed ^= tail[1] << 8
    if tail:
        hashed ^= tail[0]
        hashed = (hashed * MURMUR2_MULTIPLIER) & UINT32_MASK
    hashed ^= hashed >> 13
    hashed = (hashed * MURMUR2_MULTIPLIER) & UINT32_MASK
    hashed ^= hashed >> 15
    return hashed - (1 << 32) if hashed & 0x80000000 else hashed


def murmur2_partition(key: bytes, partition_count: int) -> int:
    """The partition librdkafka's ``murmur2_random`` picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


# Kafka's UtilsTest.testMurmur2 vectors: the oracle itself must be right.
MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes
    value: bytes
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] | None


@dataclass(frozen=True, slots=True)
class Received:
    partition: int
    offset: int
    record: Record


def keyed_records(count: int) -> list[Record]:
    """Keys repeat (so one key's records must stay in order); every 100th record has headers."""
    records = []
    for index in range(count):
        key = f"user-{index % DISTINCT_KEYS}".encode()
        value = f"event {index} for {key.decode()} ".encode() + b"x" * (index % 64)
        headers = (("index", str(index).encode()),) if index % 100 == 0 else None
        records.append(Record(key, value, BASE_TIMESTAMP_MS + index, headers))
    return records


def expected_placement(records: Sequence[Record], partition_count: int) -> dict[int, list[Record]]:
    by_key: dict[bytes, int] = {}
    placement: dict[int, list[Record]] = {index: [] for index in range(partition_count)}
    for record in records:
        if record.key not in by_key:
            by_key[record.key] = murmur2_partition(record.key, partition_count)
        placement[by_key[record.key]].append(record)
    return placement


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    config: Mapping[str, Any] | None = None,
    partition: int | None = None,
) -> list[KafkaError]:
    """Produce and flush; returns the delivery errors."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            **(config or {}),
        }
    )
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error)

    deadline = time.monotonic() + PRODUCE_TIMEOUT_S
    for record in records:
        arguments: dict[str, Any] = {
            "key": record.key,
            "value": record.value,
            "timestamp": record.timestamp_ms,
            "on_delivery": on_delivery,
        }
        if record.headers is not None:
            arguments["headers"] = list(record.headers)
        if partition is not None:
            arguments["partition"] = partition
        while True:
            try:
                producer.produce(topic, **arguments)
                break
            except BufferError:
                assert time.monotonic() < deadline, "the producer queue never drained"
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(max(deadline - time.monotonic(), 1.0))
    assert remaining == 0, f"{remaining} records were still undelivered after the deadline"
    return errors


def received_from(message: Message) -> Received:
    timestamp_type, timestamp_ms = message.timestamp()
    assert timestamp_type == TIMESTAMP_CREATE_TIME
    headers = message.headers()
    record = Record(
        message.key(),
        message.value(),
        timestamp_ms,
        tuple(headers) if headers is not None else None,
    )
    return Received(message.partition(), message.offset(), record)


def make_consumer(bootstrap: str, **config: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-assign-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **config,
        }
    )


def consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    count: int,
    timeout_s: float = CONSUME_TIMEOUT_S,
    start_offset: int = OFFSET_BEGINNING,
) -> list[Received]:
    """Read from ``start_offset`` until ``count`` records arrived or the deadline passed."""
    consumer = make_consumer(bootstrap)
    consumer.assign([TopicPartition(topic, index, start_offset) for index in partitions])
    received: list[Received] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(CONSUME_BATCH, 0.2):
                assert message.error() is None, message.error()
                received.append(received_from(message))
    finally:
        consumer.close()
    return received


def by_partition(received: Iterable[Received]) -> dict[int, list[Received]]:
    result: dict[int, list[Received]] = {}
    for item in received:
        result.setdefault(item.partition, []).append(item)
    return result


def partition_mismatch(
    partition: int, actual: Sequence[Received], expected: Sequence[Record]
) -> str | None:
    """A short description of the first difference, or None when they agree exactly."""
    for position, item in enumerate(actual):
        if item.offset != position:
            return f"partition {partition}: position {position} has offset {item.offset}"
        if position >= len(expected):
            return f"partition {partition}: unexpected extra record {item.record}"
        if item.record != expected[position]:
            return (
                f"partition {partition} offset {position}: "
                f"got {item.record}, expected {expected[position]}"
            )
    if len(actual) != len(expected):
        return f"partition {partition}: {len(actual)} records, expected {len(expected)}"
    return None


def oversize_record(size: int) -> Record:
    payload = random.Random(size).randbytes(size)
    return Record(b"big", payload, BASE_TIMESTAMP_MS, None)


UNCOMPRESSED = {"compression.type": "none", "linger.ms": 0}
