"""Consumer groups with kafka-python 3.x against a real broker process.

Two consumers split a six-partition topic (range assignor), consume every
record once, commit, and the survivor takes every partition when the other
leaves. Every wait has a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import CommitFailedError, RebalanceInProgressError

from eventplatform.testing import BrokerProcess

SESSION_TIMEOUT_MS = 6_000
WAIT_S = 30.0
POLL_MS = 500
"""Long enough for a join to finish within one poll: kafka-python 3.0 can lose a join
that completes between two short polls (the member then neither syncs nor heartbeats,
and the group drops it after its session)."""


def make_consumer(bootstrap: str, group: str, topic: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=f"{group}-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
        request_timeout_ms=SESSION_TIMEOUT_MS + 5_000,
    )
    consumer.subscribe([topic])
    return consumer


@pytest.fixture
def consumers() -> Iterator[list[KafkaConsumer]]:
    opened: list[KafkaConsumer] = []
    yield opened
    for consumer in opened:
        consumer.close(autocommit=False)


def poll_until(
    members: list[KafkaConsumer],
    seen: dict[int, list[tuple[int, int]]],
    condition: Callable[[], bool],
    what: str,
) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for index, consumer in enumerate(members):
            for batch in consumer.poll(timeout_ms=POLL_MS).values():
                seen.setdefault(index, []).extend((r.partition, r.offset) for r in batch)
        if condition():
            return
    assignments = [sorted(tp.partition for tp in c.assignment()) for c in members]
    pytest.fail(f"{what} within {WAIT_S} s; assignments {assignments}")


def commit_when_settled(
    members: list[KafkaConsumer],
    seen: dict[int, list[tuple[int, int]]],
    condition: Callable[[], bool],
    what: str,
) -> None:
    """Poll until ``condition``, then commit every member's positions. A member may still
    be rejoining when the assignments already look right (a metadata update after its
    first join starts another rebalance); kafka-python then refuses the commit, and the
    remedy it documents is to poll until the rebalance completes and commit again."""
    deadline = time.monotonic() + WAIT_S
    while True:
        poll_until(members, seen, condition, what)
        try:
            for consumer in members:
                consumer.commit()
            return
        except (RebalanceInProgressError, CommitFailedError):
            if time.monotonic() > deadline:
                raise


def test_two_kafka_python_consumers_split_a_topic_commit_and_take_over(
    broker: BrokerProcess, new_topic: Callable[..., str], consumers: list[KafkaConsumer]
) -> None:
    topic = new_topic(6)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition in range(6):
        for index in range(5):
            producer.produce(topic, value=f"{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0
    group = f"{topic}-group"
    consumers.append(make_consumer(broker.bootstrap, group, topic))
    consumers.append(make_consumer(broker.bootstrap, group, topic))
    seen: dict[int, list[tuple[int, int]]] = {}

    def split_evenly() -> bool:
        sizes = sorted(len(consumer.assignment()) for consumer in consumers)
        records = [record for records in seen.values() for record in records]
        # each owner at the end of its partitions: a member that got a partition in the
        # rebalance after another read it still starts from the beginning, and would
        # commit that position
        at_end = all(
            consumer.position(partition) == 5
            for consumer in consumers
            for partition in consumer.assignment()
        )
        return sizes == [3, 3] and len(set(records)) == 30 and at_end

    commit_when_settled(consumers, seen, split_evenly, "an even split and every record")
    checker = consumers[0]
    for partition in range(6):
        assert checker.committed(TopicPartition(topic, partition)) == 5
    explicit = {TopicPartition(topic, 0): OffsetAndMetadata(2, "rewound", -1)}
    owner = next(c for c in consumers if TopicPartition(topic, 0) in c.assignment())
    owner.commit(explicit)
    assert owner.committed(TopicPartition(topic, 0), metadata=True).metadata == "rewound"

    leaving = consumers.pop()
    leaving.close(autocommit=False)
    poll_until(
        consumers, seen, lambda: len(consumers[0].assignment()) == 6, "the survivor taking over"
    )
