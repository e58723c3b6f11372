"""The event SDK against the shared broker: create topics, read them back, read their ends.

The broker is the session one from ``tests/platform/conftest.py``. Each test
uses topics no other test writes to (named after the test, or with a random
suffix), so offsets and record counts are the test's own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

if TYPE_CHECKING:
    from eventplatform.testing import BrokerProcess

REQUEST_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 30.0


class Log:
    """Admin and read access to the broker, with every wait bounded."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> str:
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
        )
        futures = self.admin.create_topics([topic], operation_timeout=REQUEST_TIMEOUT_S)
        futures[name].result(timeout=REQUEST_TIMEOUT_S)
        self.wait_for_partitions(name, partitions)
        return name

    def wait_for_partitions(self, topic: str, partitions: int) -> None:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while time.monotonic() < deadline:
            metadata = self.admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
            described = metadata.topics.get(topic)
            ready = described is not None and described.error is None
            if ready and len(described.partitions) == partitions:
                return
            time.sleep(0.05)
        raise AssertionError(f"topic {topic} did not show {partitions} partitions")

    def partition_count(self, topic: str) -> int:
        metadata = self.admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
        return len(metadata.topics[topic].partitions)

    def topic_config(self, topic: str) -> dict[str, str]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        futures = self.admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
        entries = futures[resource].result(timeout=REQUEST_TIMEOUT_S)
        return {name: entry.value for name, entry in entries.items()}

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's high watermark: the offset the next record would get."""
        consumer = self._consumer()
        try:
            return {
                partition: consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S, cached=False
                )[1]
                for partition in range(self.partition_count(topic))
            }
        finally:
            consumer.close()

    def records(self, topic: str) -> list[Message]:
        """Every record of ``topic`` up to its current end, partition by partition."""
        ends = self.end_offsets(topic)
        expected = sum(ends.values())
        consumer = self._consumer()
        found: list[Message] = []
        try:
            consumer.assign(
                [TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in ends]
            )
            deadline = time.monotonic() + READ_TIMEOUT_S
            while len(found) < expected:
                if time.monotonic() > deadline:
                    raise AssertionError(f"read {len(found)} of {expected} records of {topic}")
                for message in consumer.consume(100, timeout=0.5):
                    if message.error() is not None:
                        raise KafkaException(message.error())
                    found.append(message)
        finally:
            consumer.close()
        return sorted(found, key=lambda message: (message.partition(), message.offset()))

    def _consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"sdk-tests-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )


@pytest.fixture(scope="session")
def log(broker: BrokerProcess) -> Log:
    return Log(broker.bootstrap)


@pytest.fixture
def registry_topic() -> str:
    """A fresh registry topic, so a test starts with no registered schema."""
    return f"_schemas-{uuid.uuid4().hex[:10]}"
