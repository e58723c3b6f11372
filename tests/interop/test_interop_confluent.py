"""confluent-kafka (librdkafka) against a real broker process.

Round trips of 100,000 keyed records for every compression codec and every
delivery mode a producer can ask for, key placement as librdkafka's
``murmur2_random`` partitioner computes it, fetch long polling, ListOffsets
and the admin API. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from eventplatform import partitioner

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


# ---------------------------------------------------------------- round trips


@pytest.mark.slow
@pytest.mark.parametrize("mode", DELIVERY_MODES)
@pytest.mark.parametrize("codec", CODECS)
def test_keyed_round_trip(
    broker: BrokerProcess, new_topic: Callable[..., str], codec: str, mode: str
) -> None:
    """100k keyed records come back complete, in order per partition, byte for byte.

    acks=0 gets no answer from the broker, so the producer cannot see a loss;
    but on loopback to a healthy broker nothing drops the requests, and the
    broker appends them in the order they arrived on the connection. A lost
    or reordered record there is a broker bug, so acks=0 is held to the same
    exact-content check as the acknowledged modes.
    """
    topic = new_topic(partitions=MATRIX_PARTITIONS)
    records = keyed_records(RECORD_COUNT)
    config = {"compression.type": codec, **DELIVERY_MODES[mode]}

    errors = produce(broker.bootstrap, topic, records, config)
    assert errors == []

    received = consume(broker.bootstrap, topic, range(MATRIX_PARTITIONS), RECORD_COUNT)
    expected = expected_placement(records, MATRIX_PARTITIONS)
    actual = by_partition(received)
    assert set(actual) <= set(expected)
    mismatches = [
        partition_mismatch(index, actual.get(index, []), expected[index])
        for index in range(MATRIX_PARTITIONS)
    ]
    assert [text for text in mismatches if text] == []
    assert len(received) == RECORD_COUNT


def test_key_placement_matches_murmur2_random(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Binary keys of every tail length, and the empty key, land where murmur2 says.

    The project's own partitioner (``eventplatform.partitioner``) must agree
    with both this independent oracle and where librdkafka put the records.
    """
    assert {key: murmur2(key) for key in MURMUR2_VECTORS} == MURMUR2_VECTORS
    partition_count = 7
    topic = new_topic(partitions=partition_count)
    generator = random.Random(20240601)
    keys = {generator.randbytes(generator.randint(1, 33)) for _ in range(3_000)} | {b""}
    records = [
        Record(key, number.to_bytes(4, "big"), BASE_TIMESTAMP_MS, None)
        for number, key in enumerate(sorted(keys))
    ]
    empty_key_copies = [Record(b"", b"again", BASE_TIMESTAMP_MS, None)] * 20
    assert produce(broker.bootstrap, topic, records + empty_key_copies) == []

    received = consume(
        broker.bootstrap, topic, range(partition_count), len(records) + len(empty_key_copies)
    )

    assert len(received) == len(records) + len(empty_key_copies)
    placed: dict[bytes, set[int]] = {}
    for item in received:
        placed.setdefault(item.record.key, set()).add(item.partition)
    oracle = {key: {murmur2_partition(key, partition_count)} for key in keys}
    project = {key: {partitioner.partition_for_key(key, partition_count)} for key in keys}
    assert {key: placed[key] for key in keys if placed[key] != oracle[key]} == {}
    assert {key: project[key] for key in keys if project[key] != oracle[key]} == {}
    assert len(set().union(*placed.values())) == partition_count


# ---------------------------------------------------------------- fetch


def _broker_fetch_requests(statistics: Mapping[str, Any]) -> int:
    return sum(
        entry.get("req", {}).get("Fetch", 0)
        for entry in statistics["brokers"].values()
        if entry.get("nodeid", -1) >= 0
    )


def test_one_fetch_returns_records_of_every_partition(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """A consumer of 8 partitions gets all of them from one Fetch, not one Fetch each."""
    partition_count = 8
    topic = new_topic(partitions=partition_count)
    for index in range(partition_count):
        record = Record(f"k{index}".encode(), f"v{index}".encode(), BASE_TIMESTAMP_MS, None)
        assert produce(broker.bootstrap, topic, [record], partition=index) == []

    fetch_counts: list[int] = []
    consumer = make_consumer(
        broker.bootstrap,
        **{
            "fetch.wait.max.ms": 5_000,
            "statistics.interval.ms": 100,
            "stats_cb": lambda text: fetch_counts.append(_broker_fetch_requests(json.loads(text))),
        },
    )
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partition_count)])
    partitions_seen: set[int] = set()
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(partitions_seen) < partition_count and time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None:
                assert message.error() is None, message.error()
                partitions_seen.add(message.partition())
        counted_after = len(fetch_counts)
        while len(fetch_counts) < counted_after + 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()

    assert partitions_seen == set(range(partition_count))
    # The first Fetch carries all eight partitions; the one after it long-polls
    # for 5 s, so at most a couple of requests were ever sent.
    assert fetch_counts[-1] <= 2, f"{fetch_counts[-1]} Fetch requests for one record each"


def test_long_poll_answers_as_soon_as_a_record_arrives(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """A consumer parked on an empty topic with a 10 s fetch wait sees a new record at once."""
    topic = new_topic(partitions=1)
    consumer = make_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10_000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        idle_until = time.monotonic() + 1.5
        while time.monotonic() < idle_until:
            assert consumer.poll(0.1) is None
        record = Record(b"late", b"arrival", BASE_TIMESTAMP_MS, None)
        assert produce(broker.bootstrap, topic, [record], {"linger.ms": 0}) == []
        produced_at = time.monotonic()
        message = None
        deadline = produced_at + 15.0
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.05)
        latency_s = time.monotonic() - produced_at
    finally:
        consumer.close()

    assert message is not None and message.error() is None
    assert message.value() == b"arrival"
    assert latency_s < 2.0, f"the waiting fetch answered {latency_s:.2f} s after the append"


def _seconds_to_first_record(bootstrap: str, topic: str, **config: Any) -> float:
    consumer = make_consumer(bootstrap, **config)
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = started + 20.0
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.02)
            if message is not None:
                assert message.error() is None, message.error()
                return time.monotonic() - started
    finally:
        consumer.close()
    raise AssertionError("no record within 20 s")


def test_fetch_min_bytes_holds_the_answer_until_the_wait_expires(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """With fewer bytes ready than fetch.min.bytes the broker answers after fetch.wait.max.ms."""
    topic = new_topic(partitions=1)
    small = Record(b"k", b"small", BASE_TIMESTAMP_MS, None)
    assert produce(broker.bootstrap, topic, [small]) == []

    eager_s = _seconds_to_first_record(
        broker.bootstrap, topic, **{"fetch.min.bytes": 1, "fetch.wait.max.ms": 2_500}
    )
    patient_s = _seconds_to_first_record(
        broker.bootstrap, topic, **{"fetch.min.bytes": 1_000_000, "fetch.wait.max.ms": 2_500}
    )

    assert eager_s < 1.5
    assert 2.0 <= patient_s < 6.0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_long_poll_does_not_spin_the_broker(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Consumers polling empty partitions cost the broker almost no CPU."""
    assert broker.process is not None
    topic = new_topic(partitions=6)
    consumers = [
        make_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
        for _ in range(3)
    ]
    for consumer in consumers:
        consumer.assign([TopicPartition(topic, index, OFFSET_END) for index in range(6)])
    try:
        warm_until = time.monotonic() + 2.0
        while time.monotonic() < warm_until:
            for consumer in consumers:
                assert consumer.poll(0.05) is None
        cpu_before = _cpu_seconds(broker.process.pid)
        measured_from = time.monotonic()
        while time.monotonic() < measured_from + 4.0:
            for consumer in consumers:
                assert consumer.poll(0.05) is None
        cpu_used = _cpu_seconds(broker.process.pid) - cpu_before
        wall = time.monotonic() - measured_from
    finally:
        for consumer in consumers:
            consumer.close()

    assert cpu_used < 0.1 * wall, f"broker used {cpu_used:.2f} s CPU in {wall:.1f} s idle"


def _single_partition_messages(
    bootstrap: str, topic: str, start_offset: int, count: int, **config: Any
) -> list[Message]:
    consumer = make_consumer(bootstrap, **config)
    consumer.assign([TopicPartition(topic, 0, start_offset)])
    messages: list[Message] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(CONSUME_BATCH, 0.2):
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


def test_a_record_larger_than_the_fetch_limits_still_arrives(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """A 300 kB record behind a 1 kB partition fetch limit is delivered, and so is what follows."""
    topic = new_topic(partitions=1)
    big = _oversize_record(300_000)
    records = [Record(b"a", b"before", BASE_TIMESTAMP_MS, None), big]
    records.append(Record(b"c", b"after", BASE_TIMESTAMP_MS, None))
    for record in records:
        assert produce(broker.bootstrap, topic, [record], UNCOMPRESSED) == []

    messages = _single_partition_messages(
        broker.bootstrap, topic, 0, 3, **{"max.partition.fetch.bytes": 1024}
    )

    assert [message.value() for message in messages] == [record.value for record in records]


def test_seek_into_the_middle_of_a_compressed_batch(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Starting at offset 537 delivers exactly 537 onwards, though its batch begins earlier."""
    topic = new_topic(partitions=1)
    records = [
        Record(b"k", f"value {index}".encode(), BASE_TIMESTAMP_MS + index, None)
        for index in range(1_000)
    ]
    config = {"compression.type": "gzip", "linger.ms": 50, "batch.num.messages": 1_000}
    assert produce(broker.bootstrap, topic, records, config) == []

    messages = _single_partition_messages(broker.bootstrap, topic, 537, 463)

    assert [message.offset() for message in messages] == list(range(537, 1_000))
    assert [message.value() for message in messages] == [r.value for r in records[537:]]


def test_an_offset_past_the_end_resets_to_earliest(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    records = [Record(b"k", f"v{index}".encode(), BASE_TIMESTAMP_MS, None) for index in range(10)]
    assert produce(broker.bootstrap, topic, records) == []

    messages = _single_partition_messages(
        broker.bootstrap, topic, 5_000, 10, **{"auto.offset.reset": "earliest"}
    )

    assert [message.offset() for message in messages] == list(range(10))


def test_null_and_empty_keys_and_values_stay_distinct(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    shapes = [(b"k", None), (None, b""), (b"", b"x"), (None, None), (b"k2", b"")]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for key, value in shapes:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(PRODUCE_TIMEOUT_S) == 0

    messages = _single_partition_messages(broker.bootstrap, topic, 0, len(shapes))

    assert [(message.key(), message.value()) for message in messages] == shapes


def test_log_append_time_topic_stamps_broker_time(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """A LogAppendTime topic replaces the producer's timestamps, in compressed batches too."""
    append_topic = new_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    create_topic = new_topic(partitions=1)
    old_ms = int(time.time() * 1000) - 3_600_000
    records = [Record(b"k", f"v{index}".encode(), old_ms + index, None) for index in range(20)]
    before_ms = int(time.time() * 1000)
    assert produce(broker.bootstrap, append_topic, records, {"compression.type": "gzip"}) == []
    assert produce(broker.bootstrap, create_topic, records, {"compression.type": "gzip"}) == []
    after_ms = int(time.time() * 1000)

    stamped = _single_partition_messages(broker.bootstrap, append_topic, 0, 20)
    kept = _single_partition_messages(broker.bootstrap, create_topic, 0, 20)

    assert [message.value() for message in stamped] == [record.value for record in records]
    for message in stamped:
        timestamp_type, timestamp_ms = message.timestamp()
        assert timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        assert before_ms - 1_000 <= timestamp_ms <= after_ms + 1_000
    assert [message.timestamp() for message in kept] == [
        (TIMESTAMP_CREATE_TIME, record.timestamp_ms) for record in records
    ]


def test_compacted_topic_keeps_the_latest_value_of_each_key(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """cleanup.policy=compact with small segments: old versions disappear, the latest stay."""
    topic = new_topic(
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    keys = [f"key-{index}".encode() for index in range(10)]
    records = [
        Record(key, f"{key.decode()} version {version}".encode(), BASE_TIMESTAMP_MS, None)
        for version in range(40)
        for key in keys
    ]
    small_batches = {"linger.ms": 0, "batch.size": 1024}
    assert produce(broker.bootstrap, topic, records, small_batches) == []
    latest = {record.key: record.value for record in records}

    deadline = time.monotonic() + 30.0
    remaining = len(records)
    while time.monotonic() < deadline:
        remaining = _count_from_beginning(broker.bootstrap, topic)
        if remaining < len(records) // 2:
            break
        time.sleep(0.5)
    survivors = _single_partition_messages(broker.bootstrap, topic, 0, remaining)

    assert remaining < len(records) // 2, f"{remaining} of {len(records)} records after 30 s"
    last_seen = {message.key(): message.value() for message in survivors}
    assert last_seen == latest
    offsets = [message.offset() for message in survivors]
    assert offsets == sorted(offsets)
    assert offsets[-1] == len(records) - 1


def _count_from_beginning(bootstrap: str, topic: str) -> int:
    consumer = make_consumer(bootstrap, **{"enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    count = 0
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return count
            count += 1
    finally:
        consumer.close()
    raise AssertionError("never reached the end of the partition")


# ---------------------------------------------------------------- ListOffsets


def test_watermarks_and_offsets_for_times(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    records = [
        Record(f"k{index}".encode(), f"v{index}".encode(), BASE_TIMESTAMP_MS + 1_000 * index, None)
        for index in range(10)
    ]
    assert produce(broker.bootstrap, topic, records, partition=0) == []
    consumer = make_consumer(broker.bootstrap)
    try:
        watermarks = [
            consumer.get_watermark_offsets(TopicPartition(topic, index), timeout=10, cached=False)
            for index in range(2)
        ]
        found = {}
        for target in (
            BASE_TIMESTAMP_MS - 5_000,
            BASE_TIMESTAMP_MS,
            BASE_TIMESTAMP_MS + 2_500,
            BASE_TIMESTAMP_MS + 9_000,
            BASE_TIMESTAMP_MS + 9_001,
        ):
            [answer] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert answer.error is None
            found[target - BASE_TIMESTAMP_MS] = answer.offset
        [empty] = consumer.offsets_for_times([TopicPartition(topic, 1, BASE_TIMESTAMP_MS)], 10)
    finally:
        consumer.close()

    assert watermarks == [(0, 10), (0, 0)]
    assert found == {-5_000: 0, 0: 0, 2_500: 3, 9_000: 9, 9_001: OFFSET_END}
    assert empty.offset == OFFSET_END


def test_offsets_for_times_with_timestamps_out_of_order(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """The answer is the first offset whose timestamp is at or after the target."""
    topic = new_topic(partitions=1)
    deltas_ms = [1_000, 5_000, 2_000, 6_000, 3_000]
    records = [
        Record(b"k", f"v{index}".encode(), BASE_TIMESTAMP_MS + delta, None)
        for index, delta in enumerate(deltas_ms)
    ]
    for record in records:
        assert produce(broker.bootstrap, topic, [record], {"linger.ms": 0}) == []
    consumer = make_consumer(broker.bootstrap)
    found = {}
    try:
        for target in (0, 1_500, 2_000, 5_000, 5_500, 6_001):
            query = TopicPartition(topic, 0, BASE_TIMESTAMP_MS + target)
            [answer] = consumer.offsets_for_times([query], timeout=10)
            assert answer.error is None
            found[target] = answer.offset
    finally:
        consumer.close()

    assert found == {0: 0, 1_500: 1, 2_000: 1, 5_000: 1, 5_500: 3, 6_001: OFFSET_END}


def test_admin_list_offsets_specs(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    """AdminClient.list_offsets: earliest, latest, by timestamp and the max-timestamp record.

    Timestamps go out of order so the record with the largest timestamp
    (offset 3) is neither the first nor the last.
    """
    topic = new_topic(partitions=1)
    deltas_ms = [1_000, 5_000, 2_000, 6_000, 3_000]
    for index, delta in enumerate(deltas_ms):
        record = Record(b"k", f"v{index}".encode(), BASE_TIMESTAMP_MS + delta, None)
        assert produce(broker.bootstrap, topic, [record], {"linger.ms": 0}) == []
    partition = TopicPartition(topic, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "timestamp": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 1_500),
        "max_timestamp": OffsetSpec.max_timestamp(),
    }
    answers = {}
    for name, spec in specs.items():
        [future] = admin.list_offsets({partition: spec}, request_timeout=10).values()
        info = future.result(timeout=ADMIN_TIMEOUT_S)
        answers[name] = info.offset
        if name == "max_timestamp":
            max_timestamp_ms = info.timestamp

    assert answers == {"earliest": 0, "latest": 5, "timestamp": 1, "max_timestamp": 3}
    assert max_timestamp_ms == BASE_TIMESTAMP_MS + 6_000


def test_earliest_follows_delete_records_and_latest_skips_history(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    records = [
        Record(f"k{index}".encode(), f"v{index}".encode(), BASE_TIMESTAMP_MS + index, None)
        for index in range(10)
    ]
    assert produce(broker.bootstrap, topic, records) == []
    futures = admin.delete_records([TopicPartition(topic, 0, 4)], operation_timeout=10)
    [deleted] = futures.values()
    assert deleted.result(timeout=ADMIN_TIMEOUT_S).low_watermark == 4

    consumer = make_consumer(broker.bootstrap)
    try:
        watermarks = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10, cached=False)
    finally:
        consumer.close()
    from_earliest = consume(broker.bootstrap, topic, [0], 6)
    assert watermarks == (4, 10)
    assert [item.offset for item in from_earliest] == list(range(4, 10))
    assert [item.record.value for item in from_earliest] == [f"v{i}".encode() for i in range(4, 10)]

    latest_consumer = make_consumer(broker.bootstrap)
    latest_consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    try:
        idle_until = time.monotonic() + 1.0
        while time.monotonic() < idle_until:
            assert latest_consumer.poll(0.1) is None
        newer = Record(b"k", b"after", BASE_TIMESTAMP_MS + 99, None)
        assert produce(broker.bootstrap, topic, [newer]) == []
        message = None
        deadline = time.monotonic() + 10.0
        while message is None and time.monotonic() < deadline:
            message = latest_consumer.poll(0.1)
    finally:
        latest_consumer.close()
    assert message is not None and message.error() is None
    assert (message.offset(), message.value()) == (10, b"after")


# ---------------------------------------------------------------- admin


def _error_code(future: Any) -> int | None:
    try:
        future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def _topic_names(admin: AdminClient) -> dict[str, int]:
    metadata = admin.list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S).values()
    result: dict[str, ConfigEntry] = future.result(timeout=ADMIN_TIMEOUT_S)
    return result


def test_create_topic_with_config_overrides(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=5, config={"retention.ms": "3600000", "cleanup.policy": "compact"})

    assert _topic_names(admin)[topic] == 5
    configs = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, topic))
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # The broker's log.segment.bytes override is every topic's default.
    assert configs["segment.bytes"].value == "536870912"
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    broker_configs = _describe(admin, ConfigResource(ConfigResource.Type.BROKER, "1"))
    assert broker_configs["num.partitions"].value == "3"
    assert broker_configs["log.retention.check.interval.ms"].value == "500"


def test_create_topic_with_broker_defaults(admin: AdminClient) -> None:
    """Partition count and replication factor -1 mean the broker's defaults (CreateTopics v4)."""
    name = "broker-defaults-topic"
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=-1, replication_factor=-1)],
        operation_timeout=ADMIN_TIMEOUT_S,
    )
    assert _error_code(futures[name]) is None
    assert _topic_names(admin)[name] == 3


def test_create_topics_validate_only_creates_nothing(admin: AdminClient) -> None:
    name = "validate-only-topic"
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=1, config={"retention.ms": "1000"})],
        validate_only=True,
        operation_timeout=ADMIN_TIMEOUT_S,
    )
    assert _error_code(futures[name]) is None
    invalid = admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=1, config={"retention.ms": "x"})],
        validate_only=True,
    )
    assert _error_code(invalid[name]) == KafkaError.INVALID_CONFIG
    assert name not in _topic_names(admin)


def test_create_topics_errors(admin: AdminClient, new_topic: Callable[..., str]) -> None:
    existing = new_topic(partitions=1)
    requests = {
        existing: NewTopic(existing, num_partitions=1, replication_factor=1),
        "bad-config-value": NewTopic("bad-config-value", 1, 1, config={"cleanup.policy": "shred"}),
        "unknown-config": NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
        "two-replicas": NewTopic("two-replicas", num_partitions=1, replication_factor=2),
    }
    futures = admin.create_topics(list(requests.values()), operation_timeout=ADMIN_TIMEOUT_S)
    codes = {name: _error_code(futures[name]) for name in requests}

    assert codes == {
        existing: KafkaError.TOPIC_ALREADY_EXISTS,
        "bad-config-value": KafkaError.INVALID_CONFIG,
        "unknown-config": KafkaError.INVALID_CONFIG,
        "two-replicas": KafkaError.INVALID_REPLICATION_FACTOR,
    }
    assert not {"bad-config-value", "unknown-config", "two-replicas"} & set(_topic_names(admin))


def test_delete_topics_and_recreate_empty(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    record = Record(b"k", b"gone", BASE_TIMESTAMP_MS, None)
    assert produce(broker.bootstrap, topic, [record], partition=1) == []

    futures = admin.delete_topics([topic, "never-existed"], operation_timeout=ADMIN_TIMEOUT_S)
    assert _error_code(futures[topic]) is None
    assert _error_code(futures["never-existed"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic not in _topic_names(admin)

    recreated = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    assert _error_code(recreated[topic]) is None
    consumer = make_consumer(broker.bootstrap)
    try:
        watermarks = consumer.get_watermark_offsets(TopicPartition(topic, 1), 10, cached=False)
    finally:
        consumer.close()
    assert _topic_names(admin)[topic] == 3
    assert watermarks == (0, 0)


def test_create_partitions(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)

    grown = admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=ADMIN_TIMEOUT_S)
    assert _error_code(grown[topic]) is None
    assert _topic_names(admin)[topic] == 5
    record = Record(b"k", b"in the new partition", BASE_TIMESTAMP_MS, None)
    assert produce(broker.bootstrap, topic, [record], partition=4) == []
    [received] = consume(broker.bootstrap, topic, [4], 1)
    assert (received.partition, received.offset, received.record) == (4, 0, record)

    shrunk = admin.create_partitions([NewPartitions(topic, 3)])
    missing = admin.create_partitions([NewPartitions("no-such-topic", 3)])
    assert _error_code(shrunk[topic]) == KafkaError.INVALID_PARTITIONS
    assert _error_code(missing["no-such-topic"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _topic_names(admin)[topic] == 5


def _oversize_record(size: int) -> Record:
    payload = random.Random(size).randbytes(size)
    return Record(b"big", payload, BASE_TIMESTAMP_MS, None)


UNCOMPRESSED = {"compression.type": "none", "linger.ms": 0}


def test_max_message_bytes_from_create_topics_rejects_oversize(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    limited = new_topic(partitions=1, config={"max.message.bytes": "4096"})
    unlimited = new_topic(partitions=1)
    big = _oversize_record(10_000)

    rejected = produce(broker.bootstrap, limited, [big], UNCOMPRESSED)
    accepted = produce(broker.bootstrap, unlimited, [big], UNCOMPRESSED)
    small = produce(broker.bootstrap, limited, [_oversize_record(100)], UNCOMPRESSED)

    assert [error.code() for error in rejected] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert accepted == []
    assert small == []


def test_a_batch_larger_than_segment_bytes_is_rejected_as_kafka_does(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Kafka answers RECORD_LIST_TOO_LARGE for a batch over ``segment.bytes``.

    ``max.message.bytes`` (MESSAGE_TOO_LARGE) is not what the producer broke
    here, and telling the two apart is how an operator knows which to raise.
    """
    topic = new_topic(partitions=1, config={"segment.bytes": "1024"})

    errors = produce(broker.bootstrap, topic, [_oversize_record(2_000)], UNCOMPRESSED)

    assert [error.code() for error in errors] == [KafkaError.RECORD_LIST_TOO_LARGE]


def _alter_topic(admin: AdminClient, topic: str, *entries: ConfigEntry) -> int | None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    [future] = admin.incremental_alter_configs([resource]).values()
    return _error_code(future)


def test_incremental_alter_configs_applies_and_reverts(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    big = _oversize_record(10_000)
    assert produce(broker.bootstrap, topic, [big], UNCOMPRESSED) == []

    limit = ConfigEntry("max.message.bytes", "4096", incremental_operation=AlterConfigOpType.SET)
    assert _alter_topic(admin, topic, limit) is None
    described = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, topic))
    rejected = produce(broker.bootstrap, topic, [big], UNCOMPRESSED)

    revert = ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)
    assert _alter_topic(admin, topic, revert) is None
    reverted = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, topic))
    accepted_again = produce(broker.bootstrap, topic, [big], UNCOMPRESSED)

    bad = ConfigEntry("retention.ms", "forever", incremental_operation=AlterConfigOpType.SET)
    assert _alter_topic(admin, topic, bad) == KafkaError.INVALID_CONFIG
    assert described["max.message.bytes"].value == "4096"
    assert [error.code() for error in rejected] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert reverted["max.message.bytes"].value == "1048588"
    assert accepted_again == []
    assert len(consume(broker.bootstrap, topic, [0], 2)) == 2


def test_topic_retention_ms_removes_only_that_topics_old_records(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """retention.ms set on one topic expires its day-old records; a default topic keeps them."""
    short = new_topic(partitions=1, config={"retention.ms": "60000"})
    default = new_topic(partitions=1)
    day_old_ms = int(time.time() * 1000) - 24 * 3600 * 1000
    records = [Record(b"k", f"old {i}".encode(), day_old_ms + i, None) for i in range(50)]
    assert produce(broker.bootstrap, short, records) == []
    assert produce(broker.bootstrap, default, records) == []

    consumer = make_consumer(broker.bootstrap)
    deadline = time.monotonic() + 20.0
    try:
        while time.monotonic() < deadline:
            short_marks = consumer.get_watermark_offsets(TopicPartition(short, 0), 10, False)
            if short_marks == (50, 50):
                break
            time.sleep(0.2)
        default_marks = consumer.get_watermark_offsets(TopicPartition(default, 0), 10, False)
    finally:
        consumer.close()

    assert short_marks == (50, 50)
    assert default_marks == (0, 50)
