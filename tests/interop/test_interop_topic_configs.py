"""Every topic config of Kafka 4, through real admin clients.

CreateTopics, AlterConfigs (kafka-python), IncrementalAlterConfigs and
DescribeConfigs (confluent-kafka) accept each config Kafka 4 defines for
topics, with Kafka's defaults, and refuse the values Kafka refuses with
INVALID_CONFIG. Every module runs against one broker and against a 3-node
cluster, whose topic configs live in the controller's metadata; every wait is
bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from eventplatform.testing import BrokerProcess, wait_until

ADMIN_TIMEOUT_S = 30.0
LONG_MAX = str(2**63 - 1)

KAFKA_TOPIC_CONFIG_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": LONG_MAX,
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
"""Kafka 4's topic configs and their defaults (the broker's own ``log.*`` settings aside)."""
SET_BY_THE_BROKER = {"segment.bytes"}
"""Topic configs whose broker setting the interop brokers change (``log.segment.bytes``)."""

EVERY_CONFIG_SET = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "5",
    "compression.lz4.level": "10",
    "compression.type": "zstd",
    "compression.zstd.level": "-5",
    "delete.retention.ms": "3600000",
    "file.delete.delay.ms": "1000",
    "flush.messages": "1000",
    "flush.ms": "5000",
    "follower.replication.throttled.replicas": "*",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "0:1,1:2",
    "local.retention.bytes": "1048576",
    "local.retention.ms": "3600000",
    "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.25",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "104857600",
    "retention.ms": "86400000",
    "segment.bytes": "1048576",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "1000",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
}
"""A valid value other than the default for every one of Kafka 4's topic configs."""

REFUSED_VALUES = [
    ("compression.type", "brotli"),
    ("compression.type", "none"),
    ("compression.gzip.level", "0"),
    ("compression.gzip.level", "10"),
    ("compression.lz4.level", "18"),
    ("compression.zstd.level", "23"),
    ("compression.zstd.level", "-131073"),
    ("max.compaction.lag.ms", "0"),
    ("min.compaction.lag.ms", "-1"),
    ("segment.jitter.ms", "-1"),
    ("preallocate", "yes"),
    ("message.timestamp.after.max.ms", "-1"),
    ("message.timestamp.before.max.ms", "soon"),
    ("follower.replication.throttled.replicas", "1-2"),
    ("leader.replication.throttled.replicas", "*,0:1"),
    ("local.retention.ms", "-3"),
    ("local.retention.bytes", "-3"),
    ("remote.storage.enable", "true"),
    ("remote.log.copy.disable", "maybe"),
]
"""Values Kafka refuses (remote storage needs a remote log manager, which there is none of)."""


def _describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    [future] = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S).values()
    described: dict[str, ConfigEntry] = future.result(timeout=ADMIN_TIMEOUT_S)
    return described


def _described_when(
    admin: AdminClient, topic: str, wanted: Callable[[dict[str, ConfigEntry]], bool]
) -> dict[str, ConfigEntry]:
    """The topic's configs once ``wanted`` holds (a cluster's other brokers learn a change
    from the controller a moment after the one that answered)."""
    described = _describe(admin, topic)

    def settled() -> bool:
        described.clear()
        described.update(_describe(admin, topic))
        return wanted(described)

    wait_until(settled, ADMIN_TIMEOUT_S)
    return described


def _values(described: dict[str, ConfigEntry]) -> dict[str, str]:
    return {name: entry.value or "" for name, entry in described.items()}


def test_describe_configs_lists_every_kafka_topic_config_with_its_default(
    admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    described = _describe(admin, topic)
    missing = sorted(set(KAFKA_TOPIC_CONFIG_DEFAULTS) - set(described))
    assert missing == []
    defaults = {
        name: value
        for name, value in KAFKA_TOPIC_CONFIG_DEFAULTS.items()
        if name not in SET_BY_THE_BROKER
    }
    assert {name: described[name].value or "" for name in defaults} == defaults
    assert {described[name].source for name in defaults} == {ConfigSource.DEFAULT_CONFIG.value}


def test_create_topics_accepts_every_kafka_topic_config_and_describes_it_back(
    admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1, config=EVERY_CONFIG_SET)
    described = _describe(admin, topic)
    assert {name: _values(described).get(name) for name in EVERY_CONFIG_SET} == EVERY_CONFIG_SET
    assert {described[name].source for name in EVERY_CONFIG_SET} == {
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def test_both_alter_config_apis_set_compression_type_and_the_compaction_lags(
    broker: BrokerProcess, admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "max.compaction.lag.ms", "60000", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    [future] = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=ADMIN_TIMEOUT_S)
    wanted = {"compression.type": "gzip", "max.compaction.lag.ms": "60000"}
    described = _described_when(
        admin, topic, lambda d: all(_values(d)[k] == v for k, v in wanted.items())
    )
    assert {name: _values(described)[name] for name in wanted} == wanted

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        replaced = {"compression.type": "lz4", "min.compaction.lag.ms": "5000"}
        client.alter_configs([KafkaPythonConfigResource(ConfigResourceType.TOPIC, topic, replaced)])
    finally:
        client.close()
    # kafka-python's alter_configs sends the topic's other overrides along, so they stay.
    expected = {**replaced, "max.compaction.lag.ms": "60000"}
    described = _described_when(
        admin, topic, lambda d: all(_values(d)[k] == v for k, v in expected.items())
    )
    assert {name: _values(described)[name] for name in expected} == expected


@pytest.mark.parametrize(("name", "value"), REFUSED_VALUES)
def test_a_topic_config_value_kafka_refuses_is_invalid_config(
    admin: AdminClient, name: str, value: str
) -> None:
    topic = NewTopic(f"refused-{name.replace('.', '-')}", num_partitions=1, config={name: value})
    futures = admin.create_topics([topic], validate_only=True, operation_timeout=ADMIN_TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[topic.topic].result(timeout=ADMIN_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG, raised.value.args[0]


def test_a_minimum_compaction_lag_above_the_maximum_is_invalid_config(
    admin: AdminClient,
) -> None:
    config = {"min.compaction.lag.ms": "60000", "max.compaction.lag.ms": "1000"}
    topic = NewTopic("refused-compaction-lags", num_partitions=1, config=config)
    futures = admin.create_topics([topic], validate_only=True, operation_timeout=ADMIN_TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[topic.topic].result(timeout=ADMIN_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_a_record_older_than_message_timestamp_before_max_ms_is_refused_as_invalid_timestamp(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    hour_ms = 3_600_000
    topic = new_topic(partitions=1, config={"message.timestamp.before.max.ms": str(hour_ms)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    errors: list[KafkaError | None] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        errors.append(error)

    now_ms = int(time.time() * 1000)
    for value, timestamp in ((b"stale", now_ms - 2 * hour_ms), (b"fresh", now_ms)):
        producer.produce(topic, value, partition=0, timestamp=timestamp, on_delivery=delivered)
        assert producer.flush(ADMIN_TIMEOUT_S) == 0
    assert [None if e is None else e.code() for e in errors] == [KafkaError.INVALID_TIMESTAMP, None]
