"""The pure-Python murmur2 partitioner agrees with Kafka, librdkafka and a real broker."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

import confluent_kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from eventplatform.events.partitioner import (
    murmur2,
    murmur2_random_partition,
    partition_for_key,
    to_positive,
    to_signed_int32,
)

if TYPE_CHECKING:
    from eventplatform.testing import BrokerProcess

UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"

# librdkafka src/rdmurmur2.c, unittest_murmur2: keys at every alignment and tail length.
LIBRDKAFKA_VECTORS = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (UNALIGNED, 0x78424F1C),
    (UNALIGNED[1:], 0x4A62B377),
    (UNALIGNED[2:], 0xE0E4E09E),
    (UNALIGNED[3:], 0x62B8B43F),
    (b"", 0x106E08D9),
]

# Kafka clients/src/test/java/.../utils/UtilsTest.java, testMurmur2: Java's signed results.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_VECTORS)
def test_murmur2_matches_librdkafkas_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_murmur2_matches_kafkas_java_vectors(key: bytes, expected: int) -> None:
    assert to_signed_int32(murmur2(key)) == expected


def test_to_positive_clears_only_the_sign_bit() -> None:
    assert to_positive(0xFFFFFFFF) == 0x7FFFFFFF
    assert to_positive(0x80000000) == 0
    assert to_positive(12345) == 12345


def test_partition_for_key_is_the_positive_hash_modulo_the_count() -> None:
    # 0xd067cf64 & 0x7fffffff = 1348980580; 1348980580 % 7 = 3
    assert partition_for_key(b"kafka", 7) == 3
    assert partition_for_key(b"", 4) == 0x106E08D9 % 4


@given(key=st.binary(max_size=64), partition_count=st.integers(min_value=1, max_value=10_000))
def test_partition_for_key_agrees_with_librdkafka_in_process(
    key: bytes, partition_count: int
) -> None:
    assert partition_for_key(key, partition_count) == confluent_kafka.murmur2(key, partition_count)


def test_keyless_records_go_to_a_random_partition_in_range() -> None:
    source = random.Random(7)
    chosen = Counter(murmur2_random_partition(None, 4, random_source=source) for _ in range(400))

    assert set(chosen) == {0, 1, 2, 3}
    assert murmur2_random_partition(b"kafka", 7, random_source=source) == 3


@pytest.mark.parametrize("partition_count", [0, -1])
def test_a_partition_count_below_one_is_refused(partition_count: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for_key(b"k", partition_count)
    with pytest.raises(ValueError, match="at least 1"):
        murmur2_random_partition(None, partition_count)


def test_librdkafka_places_keyed_records_where_the_python_partitioner_says(
    broker: BrokerProcess,
) -> None:
    """Produce through librdkafka's murmur2_random to a real broker; read each partition back."""
    topic, partition_count = "partitioner-placement", 7
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partition_count, 1)])[topic].result(timeout=15)
    source = random.Random(2024)
    keys = [b"", b"kafka", *(source.randbytes(source.randint(1, 24)) for _ in range(200))]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for index, key in enumerate(keys):
        producer.produce(topic, key=key, value=str(index).encode())
    assert producer.flush(15) == 0

    landed = read_partitions(broker.bootstrap, topic, partition_count, len(keys))

    assert len(landed) == len(keys)
    assert Counter(landed.values()).keys() == set(range(partition_count))
    for index, key in enumerate(keys):
        assert landed[index] == partition_for_key(key, partition_count), key


def read_partitions(
    bootstrap: str, topic: str, partition_count: int, expected: int
) -> dict[int, int]:
    """``record index -> partition`` for every record, read from the broker."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "partitioner-test",
            "enable.auto.commit": False,
        }
    )
    consumer.assign(
        [TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in range(partition_count)]
    )
    landed: dict[int, int] = {}
    try:
        for _ in range(200):
            if len(landed) == expected:
                break
            for message in consumer.consume(num_messages=500, timeout=0.1):
                assert message.error() is None, message.error()
                landed[int(message.value() or b"")] = message.partition() or 0
    finally:
        consumer.close()
    return landed
