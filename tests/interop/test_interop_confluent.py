"""confluent-kafka (librdkafka) against a real broker process: round trips and placement.

Round trips of 100,000 keyed records for every compression codec and every
delivery mode a producer can ask for, and key placement as librdkafka's
``murmur2_random`` partitioner computes it. Every wait is bounded.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from confluent_records import (
    BASE_TIMESTAMP_MS,
    CODECS,
    DELIVERY_MODES,
    MATRIX_PARTITIONS,
    MURMUR2_VECTORS,
    RECORD_COUNT,
    Record,
    by_partition,
    consume,
    expected_placement,
    keyed_records,
    murmur2,
    murmur2_partition,
    partition_mismatch,
    produce,
)

from eventplatform.events import partitioner
from eventplatform.testing import BrokerProcess

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

    The SDK's partitioner (``eventplatform.events.partitioner``) must agree
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
