"""Consumer groups with aiokafka (round-robin assignor) against a real broker process.

Two consumers in one asyncio loop split a four-partition topic the
round-robin way, consume every record, commit, and read their commits
back; the survivor takes every partition when the other stops. Every wait
has a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from confluent_kafka import Producer

from eventplatform.testing import BrokerProcess

WAIT_S = 30.0


async def consume_in_group(bootstrap: str, topic: str, group: str) -> None:
    consumers = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=(RoundRobinPartitionAssignor,),
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
        )
        for _ in range(2)
    ]
    for consumer in consumers:
        await consumer.start()
    try:
        seen: set[tuple[int, int]] = set()

        def split() -> bool:
            assigned = sorted(sorted(tp.partition for tp in c.assignment()) for c in consumers)
            return assigned == [[0, 2], [1, 3]] and len(seen) == 20

        await poll_until(consumers, seen, split)
        for consumer in consumers:
            await consumer.commit()
        for partition in range(4):
            assert await consumers[0].committed(TopicPartition(topic, partition)) == 5
        await consumers.pop().stop()
        await poll_until(consumers, seen, lambda: len(consumers[0].assignment()) == 4)
    finally:
        for consumer in consumers:
            await consumer.stop()


async def poll_until(
    consumers: list[AIOKafkaConsumer], seen: set[tuple[int, int]], condition: Callable[[], bool]
) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            for consumer in consumers:
                batches = await consumer.getmany(timeout_ms=50)
                for records in batches.values():
                    seen.update((record.partition, record.offset) for record in records)


def test_aiokafka_round_robin_group_splits_commits_and_takes_over(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(4)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition in range(4):
        for index in range(5):
            producer.produce(topic, value=f"{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0
    asyncio.run(consume_in_group(broker.bootstrap, topic, f"{topic}-group"))
