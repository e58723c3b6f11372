"""confluent-kafka's AdminClient against a real broker process.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and
IncrementalAlterConfigs, and that topic configs take effect. Every wait is
bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import (
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
)
from confluent_records import (
    ADMIN_TIMEOUT_S,
    BASE_TIMESTAMP_MS,
    UNCOMPRESSED,
    Record,
    consume,
    make_consumer,
    oversize_record,
    produce,
)

from eventplatform.testing import BrokerProcess, running_broker

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


def _partition_count_when_settled(admin: AdminClient, topic: str, wanted: int) -> int:
    """The topic's partition count once a broker reports ``wanted`` (bounded). In a cluster
    the broker that answered CreatePartitions has the change; the one the next Metadata
    goes to learns it from the controller a moment later, as in Kafka."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    count = _topic_names(admin).get(topic, 0)
    while count != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        count = _topic_names(admin).get(topic, 0)
    return count


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
    brokers = len(admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers)
    requests = {
        existing: NewTopic(existing, num_partitions=1, replication_factor=1),
        "bad-config-value": NewTopic("bad-config-value", 1, 1, config={"cleanup.policy": "shred"}),
        "unknown-config": NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
        "too-many-replicas": NewTopic(
            "too-many-replicas", num_partitions=1, replication_factor=brokers + 1
        ),
    }
    futures = admin.create_topics(list(requests.values()), operation_timeout=ADMIN_TIMEOUT_S)
    codes = {name: _error_code(futures[name]) for name in requests}

    assert codes == {
        existing: KafkaError.TOPIC_ALREADY_EXISTS,
        "bad-config-value": KafkaError.INVALID_CONFIG,
        "unknown-config": KafkaError.INVALID_CONFIG,
        "too-many-replicas": KafkaError.INVALID_REPLICATION_FACTOR,
    }
    assert not {"bad-config-value", "unknown-config", "too-many-replicas"} & set(
        _topic_names(admin)
    )


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


RECREATED_FLUSH_TIMEOUT_S = 15.0
"""Far less than the producer's message.timeout.ms: a flush ends by what it learns."""

RECREATED_PARTITION_GONE = {KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY}
"""How librdkafka fails a message queued for a partition that went away. Which of the two
it reports depends on the order of its own threads: the broker thread that lets the
partition go fails what is queued there with _UNKNOWN_PARTITION, and a partition
destroyed with the message still in its queue fails it with _DESTROY. Either way the
message is failed, neither delivered nor left waiting."""


def test_a_producer_fails_what_it_queued_for_partitions_a_recreated_topic_no_longer_has(
    tmp_path: Path,
) -> None:
    """librdkafka tells a re-created topic from the deleted one by its id in Metadata; it
    then drops the partitions the new topic lacks and fails what waited for them, so a
    flush ends. Without the id it kept them, and the flush waited for message.timeout.ms.
    Its own broker, since nothing may auto-create the topic while it is gone."""
    reports: list[KafkaError | None] = []

    def report(error: KafkaError | None, _message: Message) -> None:
        reports.append(error)

    with running_broker(tmp_path, ["auto.create.topics.enable=false"]) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = "recreated"
        created = admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])
        assert _error_code(created[topic]) is None
        settings = {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 120_000}
        producer = Producer(settings)
        producer.produce(topic, b"before", partition=5, on_delivery=report)
        assert producer.flush(RECREATED_FLUSH_TIMEOUT_S) == 0
        deleted = admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
        assert _error_code(deleted[topic]) is None
        producer.produce(topic, b"while deleted", partition=5, on_delivery=report)
        producer.poll(1.0)
        recreated = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        assert _error_code(recreated[topic]) is None

        assert producer.flush(RECREATED_FLUSH_TIMEOUT_S) == 0
    assert reports[0] is None
    assert reports[1] is not None and reports[1].code() in RECREATED_PARTITION_GONE


def test_create_partitions(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)

    grown = admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=ADMIN_TIMEOUT_S)
    assert _error_code(grown[topic]) is None
    assert _partition_count_when_settled(admin, topic, 5) == 5
    record = Record(b"k", b"in the new partition", BASE_TIMESTAMP_MS, None)
    assert produce(broker.bootstrap, topic, [record], partition=4) == []
    [received] = consume(broker.bootstrap, topic, [4], 1)
    assert (received.partition, received.offset, received.record) == (4, 0, record)

    shrunk = admin.create_partitions([NewPartitions(topic, 3)])
    missing = admin.create_partitions([NewPartitions("no-such-topic", 3)])
    assert _error_code(shrunk[topic]) == KafkaError.INVALID_PARTITIONS
    assert _error_code(missing["no-such-topic"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _topic_names(admin)[topic] == 5


def test_max_message_bytes_from_create_topics_rejects_oversize(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    limited = new_topic(partitions=1, config={"max.message.bytes": "4096"})
    unlimited = new_topic(partitions=1)
    big = oversize_record(10_000)

    rejected = produce(broker.bootstrap, limited, [big], UNCOMPRESSED)
    accepted = produce(broker.bootstrap, unlimited, [big], UNCOMPRESSED)
    small = produce(broker.bootstrap, limited, [oversize_record(100)], UNCOMPRESSED)

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

    errors = produce(broker.bootstrap, topic, [oversize_record(2_000)], UNCOMPRESSED)

    assert [error.code() for error in errors] == [KafkaError.RECORD_LIST_TOO_LARGE]


def _alter_topic(admin: AdminClient, topic: str, *entries: ConfigEntry) -> int | None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    [future] = admin.incremental_alter_configs([resource]).values()
    return _error_code(future)


def test_incremental_alter_configs_applies_and_reverts(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    big = oversize_record(10_000)
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
