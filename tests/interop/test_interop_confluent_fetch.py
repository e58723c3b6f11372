"""confluent-kafka against a real broker process: fetching and ListOffsets.

One fetch over many partitions, long polling, fetch limits, seeks into
compressed batches, LogAppendTime, compaction, watermarks and
offsets_for_times. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    OffsetSpec,
)
from confluent_records import (
    ADMIN_TIMEOUT_S,
    BASE_TIMESTAMP_MS,
    CONSUME_BATCH,
    CONSUME_TIMEOUT_S,
    PRODUCE_TIMEOUT_S,
    UNCOMPRESSED,
    Record,
    consume,
    make_consumer,
    oversize_record,
    produce,
)

from eventplatform.testing import BrokerProcess

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
    # The first Fetch to each leader carries all its partitions; the one after it
    # long-polls for 5 s, so at most a couple of requests per broker were ever sent.
    brokers = len(broker.bootstrap.split(","))
    assert fetch_counts[-1] <= 2 * brokers, f"{fetch_counts[-1]} Fetch requests for one record each"


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
    """Consumers polling empty partitions cost the broker almost no CPU: what it spends
    while they long-poll, less what it spends with no client at all (a cluster node's
    heartbeats, quorum and replica fetches), stays under a tenth of a core."""
    assert broker.process is not None
    pid = broker.process.pid
    topic = new_topic(partitions=6)
    cpu_before = _cpu_seconds(pid)
    measured_from = time.monotonic()
    time.sleep(4.0)
    background = (_cpu_seconds(pid) - cpu_before) / (time.monotonic() - measured_from)
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
        cpu_before = _cpu_seconds(pid)
        measured_from = time.monotonic()
        while time.monotonic() < measured_from + 4.0:
            for consumer in consumers:
                assert consumer.poll(0.05) is None
        cpu_used = _cpu_seconds(pid) - cpu_before
        wall = time.monotonic() - measured_from
    finally:
        for consumer in consumers:
            consumer.close()

    polling = cpu_used / wall - background
    assert polling < 0.1, (
        f"broker used {cpu_used:.2f} s CPU in {wall:.1f} s of idle long polls, "
        f"{polling:.0%} of a core above its {background:.0%} with no client"
    )


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
    big = oversize_record(300_000)
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
