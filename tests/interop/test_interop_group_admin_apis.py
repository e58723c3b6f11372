"""The newer group and admin APIs through confluent-kafka's and kafka-python's admin clients.

OffsetDelete (kafka-python's ``delete_group_offsets``; confluent-kafka has no
binding for it), ListGroups with state and type filters, DescribeConfigs of
a group, DescribeTopicPartitions (kafka-python's ``describe_topic_partitions``)
and DescribeLogDirs, against a real broker process and a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from confluent_records import ADMIN_TIMEOUT_S, make_consumer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupSubscribedToTopicError, NoError

from eventplatform.testing import BrokerProcess

ASSIGNMENT_TIMEOUT_S = 30.0


@pytest.fixture
def kafka_python_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        yield client
    finally:
        client.close()


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``offsets`` for ``group`` without joining it (the group stays Empty)."""
    consumer = make_consumer(bootstrap, **{"group.id": group})
    try:
        partitions = [TopicPartition(t, p, offset) for (t, p), offset in offsets.items()]
        consumer.commit(offsets=partitions, asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> list[int]:
    consumer = make_consumer(bootstrap, **{"group.id": group})
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    finally:
        consumer.close()
    return [entry.offset for entry in found]


def _subscribed_consumer(bootstrap: str, group: str, topic: str) -> Any:
    """A consumer of ``group`` subscribed to ``topic``, once it has its assignment."""
    consumer = make_consumer(bootstrap, **{"group.id": group})
    consumer.subscribe([topic])
    deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.2)
    return consumer


def test_kafka_python_deletes_offsets_of_a_topic_no_member_subscribes_to(
    broker: BrokerProcess, new_topic: Any, kafka_python_admin: KafkaAdminClient
) -> None:
    subscribed, other = new_topic(1), new_topic(1)
    group = f"{subscribed}-group"
    _commit(broker.bootstrap, group, {(subscribed, 0): 5, (other, 0): 6})
    consumer = _subscribed_consumer(broker.bootstrap, group, subscribed)
    try:
        refused = kafka_python_admin.delete_group_offsets(
            group, [KafkaPythonPartition(subscribed, 0)]
        )
        assert list(refused.values()) == [GroupSubscribedToTopicError]
        answer = kafka_python_admin.delete_group_offsets(group, [KafkaPythonPartition(other, 0)])
        assert list(answer.values()) == [NoError]
    finally:
        consumer.close()
    assert _committed(broker.bootstrap, group, [(subscribed, 0), (other, 0)])[1] < 0
    kafka_python_admin.delete_group_offsets(group, [KafkaPythonPartition(subscribed, 0)])
    assert _committed(broker.bootstrap, group, [(subscribed, 0)]) == [-1001]


def test_list_consumer_groups_filters_by_state_and_type(
    broker: BrokerProcess, admin: AdminClient, new_topic: Any, kafka_python_admin: KafkaAdminClient
) -> None:
    topic = new_topic(1)
    busy, idle = f"{topic}-busy", f"{topic}-idle"
    _commit(broker.bootstrap, idle, {(topic, 0): 1})
    consumer = _subscribed_consumer(broker.bootstrap, busy, topic)
    try:

        def listed(**filters: Any) -> set[str]:
            result = admin.list_consumer_groups(**filters).result(timeout=ADMIN_TIMEOUT_S)
            return {group.group_id for group in result.valid} & {busy, idle}

        assert listed(states={ConsumerGroupState.STABLE}) == {busy}
        assert listed(states={ConsumerGroupState.EMPTY}) == {idle}
        assert listed(types={ConsumerGroupType.CLASSIC}) == {busy, idle}
        assert listed(types={ConsumerGroupType.CONSUMER}) == set()
        groups = kafka_python_admin.list_groups(states_filter=["Stable"], types_filter=["classic"])
        assert {g["group_id"] for g in groups} & {busy, idle} == {busy}
    finally:
        consumer.close()


def test_describe_configs_of_a_group_returns_kafkas_group_configs(admin: AdminClient) -> None:
    resource = ConfigResource(ResourceType.GROUP, "any-group")
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["consumer.session.timeout.ms"].value == "45000"
    assert configs["consumer.heartbeat.interval.ms"].value == "5000"
    assert configs["consumer.session.timeout.ms"].is_default


def test_kafka_python_describe_topic_partitions_pages_with_a_cursor(
    new_topic: Any, kafka_python_admin: KafkaAdminClient
) -> None:
    topic = new_topic(3)
    first = kafka_python_admin.describe_topic_partitions([topic], response_partition_limit=2)
    assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
    cursor = first["next_cursor"]
    assert (cursor["topic_name"], cursor["partition_index"]) == (topic, 2)
    rest = kafka_python_admin.describe_topic_partitions([topic], cursor=cursor)
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
    assert rest["next_cursor"] is None


def test_kafka_python_describe_log_dirs_reports_partition_sizes(
    new_topic: Any, kafka_python_admin: KafkaAdminClient
) -> None:
    topic = new_topic(2)
    answers = kafka_python_admin.describe_log_dirs({topic: [0, 1]})
    held: dict[int, int] = {}
    for answer in answers:
        for log_dir in answer["log_dirs"]:
            assert log_dir["error_code"] == 0
            for entry in log_dir["topics"]:
                assert entry["name"] == topic
                held.update(
                    {p["partition_index"]: p["partition_size"] for p in entry["partitions"]}
                )
    assert sorted(held) == [0, 1]
