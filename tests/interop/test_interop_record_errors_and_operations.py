"""Per-record produce errors and authorized operations, through confluent-kafka.

A batch with keyless records sent to a compacted topic is refused as Kafka
refuses it: the response names the offending records (``record_errors``),
so librdkafka reports INVALID_RECORD on exactly those and
_INVALID_DIFFERENT_RECORD on the others. Without an authorizer the broker
reports every operation that applies to a topic, the cluster or a group
when a client asks for them.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    KafkaError,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient
from confluent_records import ADMIN_TIMEOUT_S, make_consumer

from eventplatform.testing import BrokerProcess

BROKER_NODES = (1,)
DELIVERY_TIMEOUT_S = 30.0
BATCH_RECORDS = 10
LARGE_BATCH_RECORDS = 100

TOPIC_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPERATIONS = {
    AclOperation.CREATE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
}
GROUP_OPERATIONS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}


def _produce_one_batch(bootstrap: str, topic: str, keys: list[bytes | None]) -> list[Any]:
    """Produce ``keys`` (one record each) as one batch to partition 0; the delivery errors
    in the order the records were given."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 500,
            "enable.idempotence": False,
            "acks": "all",
            "retries": 0,
        }
    )
    errors: dict[int, Any] = {}

    def on_delivery(position: int) -> Any:
        def record(error: KafkaError | None, _message: Message) -> None:
            errors[position] = error

        return record

    for position, key in enumerate(keys):
        value = f"value-{position}".encode()
        producer.produce(topic, value, key=key, partition=0, on_delivery=on_delivery(position))
    remaining = producer.flush(DELIVERY_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records undelivered"
    return [errors[position] for position in range(len(keys))]


def test_every_tenth_record_keyless_on_a_compacted_topic_fails_alone_as_invalid_record(
    broker: BrokerProcess, new_topic: Any
) -> None:
    """librdkafka's own check (0011): 10 keyless records among 100 in one batch are
    INVALID_RECORD, the 90 others _INVALID_DIFFERENT_RECORD. (With exactly one named record
    librdkafka gives every record the partition's error; the raw answer is checked in the
    broker tests.)"""
    topic = new_topic(1, {"cleanup.policy": "compact"})
    keys: list[bytes | None] = [
        None if n % 10 == 0 else f"key-{n}".encode() for n in range(LARGE_BATCH_RECORDS)
    ]
    errors = _produce_one_batch(broker.bootstrap, topic, keys)
    codes = [error.code() for error in errors]
    expected = [
        KafkaError.INVALID_RECORD if n % 10 == 0 else KafkaError._INVALID_DIFFERENT_RECORD
        for n in range(LARGE_BATCH_RECORDS)
    ]
    assert codes == expected


def test_two_keyless_records_both_get_invalid_record_and_nothing_is_written(
    broker: BrokerProcess, new_topic: Any
) -> None:
    topic = new_topic(1, {"cleanup.policy": "compact"})
    keys: list[bytes | None] = [f"key-{n}".encode() for n in range(BATCH_RECORDS)]
    keys[0] = keys[7] = None
    errors = _produce_one_batch(broker.bootstrap, topic, keys)
    codes = [error.code() for error in errors]
    expected = [KafkaError._INVALID_DIFFERENT_RECORD] * BATCH_RECORDS
    expected[0] = expected[7] = KafkaError.INVALID_RECORD
    assert codes == expected
    consumer = make_consumer(broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 0)


def test_describe_topics_reports_every_topic_operation_when_asked(
    admin: AdminClient, new_topic: Any
) -> None:
    topic = new_topic(1)
    futures = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    description = futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    assert set(description.authorized_operations) == TOPIC_OPERATIONS
    plain = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=ADMIN_TIMEOUT_S)
    assert plain.authorized_operations is None


def test_describe_cluster_reports_every_cluster_operation_when_asked(admin: AdminClient) -> None:
    description = admin.describe_cluster(include_authorized_operations=True).result(
        timeout=ADMIN_TIMEOUT_S
    )
    assert set(description.authorized_operations) == CLUSTER_OPERATIONS
    plain = admin.describe_cluster().result(timeout=ADMIN_TIMEOUT_S)
    assert plain.authorized_operations is None


def test_describe_consumer_groups_reports_every_group_operation_when_asked(
    broker: BrokerProcess, admin: AdminClient, new_topic: Any
) -> None:
    topic = new_topic(1)
    group = f"{topic}-group"
    consumer = make_consumer(broker.bootstrap, **{"group.id": group})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        futures = admin.describe_consumer_groups([group], include_authorized_operations=True)
        description = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    finally:
        consumer.close()
    assert description.state == ConsumerGroupState.STABLE
    assert set(description.authorized_operations) == GROUP_OPERATIONS
