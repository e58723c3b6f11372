"""Partitions placed on chosen nodes, and groups whose partitions live on every node.

On a 3-node cluster a topic with replication factor 1 puts each partition
on one node, so most of a group's partitions live on nodes other than its
coordinator. Committed offsets (OffsetCommit, OffsetFetch, the admin API's
alter and list group offsets) must work for every partition the cluster
has, and requests that only a partition's leader answers (ListOffsets,
DeleteRecords) must send a client on to the leader with
NOT_LEADER_OR_FOLLOWER. CreateTopics and CreatePartitions take an explicit
replica assignment, validated as Kafka does. Every module runs against one
broker and against a 3-node cluster; every wait is bounded.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    NewPartitions,
    NewTopic,
)
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient

from eventplatform.log.protocol import decode_response, encode_request
from eventplatform.log.protocol.apis import LIST_OFFSETS
from eventplatform.testing import BrokerProcess, wait_until

ADMIN_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0
POLL_S = 0.1
RECORDS_PER_PARTITION = 5
PARTITIONS_PER_NODE = 2
LIST_OFFSETS_VERSION = 5
LATEST_TIMESTAMP = -1
SOCKET_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    numbers = iter(range(100))

    def name() -> str:
        return f"{request.node.name.split('[')[0][:150]}-{next(numbers)}".replace("_", "-")

    yield name


def _brokers(admin: AdminClient) -> list[int]:
    return sorted(admin.list_topics(timeout=10).brokers)


def _assigned(name: str, assignment: list[list[int]]) -> NewTopic:
    """A topic laid out by ``assignment`` (librdkafka wants the partition count too)."""
    return NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)


def _create(admin: AdminClient, topic: NewTopic) -> None:
    futures = admin.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic.topic].result(timeout=ADMIN_TIMEOUT_S)


def _create_error(admin: AdminClient, topic: NewTopic) -> int:
    futures = admin.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[topic.topic].result(timeout=ADMIN_TIMEOUT_S)
    return int(raised.value.args[0].code())


def _replicas_when_settled(admin: AdminClient, topic: str, partitions: int) -> dict[int, list[int]]:
    """Each partition's replicas once some broker reports all ``partitions`` of it."""
    found: dict[int, list[int]] = {}

    def settled() -> bool:
        described = admin.list_topics(topic, timeout=10).topics.get(topic)
        if described is None or described.error is not None:
            return False
        found.clear()
        found.update({p.id: list(p.replicas) for p in described.partitions.values()})
        return len(found) == partitions and all(
            p.leader >= 0 for p in described.partitions.values()
        )

    assert wait_until(settled, ADMIN_TIMEOUT_S), f"{topic} did not settle: {found}"
    return found


def _spread_topic(admin: AdminClient, name: str) -> tuple[str, dict[int, int]]:
    """A replication-factor-1 topic with partitions on every node; each partition's leader."""
    brokers = _brokers(admin)
    partitions = PARTITIONS_PER_NODE * len(brokers)
    _create(admin, NewTopic(name, num_partitions=partitions, replication_factor=1))
    replicas = _replicas_when_settled(admin, name, partitions)
    leaders = {index: nodes[0] for index, nodes in replicas.items()}
    assert set(leaders.values()) == set(brokers), f"partitions not on every node: {leaders}"
    return name, leaders


def _produce(bootstrap: str, topic: str, partitions: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for index in range(RECORDS_PER_PARTITION):
            producer.produce(
                topic, value=f"{tag}-{partition}-{index}".encode(), partition=partition
            )
    assert producer.flush(ADMIN_TIMEOUT_S) == 0


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def _read(consumer: Consumer, count: int) -> list[str]:
    values: list[str] = []

    def enough() -> bool:
        message = consumer.poll(POLL_S)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value().decode())
        return len(values) >= count

    assert wait_until(enough, CONSUME_TIMEOUT_S, interval_s=0), f"read {len(values)} of {count}"
    return values


def test_a_group_commits_offsets_for_partitions_on_every_node_and_a_new_member_resumes(
    broker: BrokerProcess, admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    topic, leaders = _spread_topic(admin, topic_name())
    _produce(broker.bootstrap, topic, len(leaders), "first")
    group = f"{topic}-group"
    consumer = _group_consumer(broker.bootstrap, group)
    try:
        consumer.subscribe([topic])
        assert len(_read(consumer, RECORDS_PER_PARTITION * len(leaders))) == (
            RECORDS_PER_PARTITION * len(leaders)
        )
        committed = consumer.commit(asynchronous=False)
        assert committed is not None
        assert {tp.partition: tp.error for tp in committed} == dict.fromkeys(leaders)
    finally:
        consumer.close()
    _produce(broker.bootstrap, topic, len(leaders), "second")
    resumed = _group_consumer(broker.bootstrap, group)
    try:
        resumed.subscribe([topic])
        values = _read(resumed, RECORDS_PER_PARTITION * len(leaders))
        assert all(value.startswith("second-") for value in values), values[:5]
        extra = resumed.poll(1.0)
        assert extra is None or extra.error() is not None, "nothing past the second round"
    finally:
        resumed.close()


def test_the_admin_api_alters_and_lists_group_offsets_for_partitions_on_every_node(
    broker: BrokerProcess, admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    topic, leaders = _spread_topic(admin, topic_name())
    _produce(broker.bootstrap, topic, len(leaders), "records")
    group = f"{topic}-group"
    wanted = [TopicPartition(topic, index, index % RECORDS_PER_PARTITION) for index in leaders]
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])
    altered = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    assert {tp.partition: tp.error for tp in altered.topic_partitions} == dict.fromkeys(leaders)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    listed = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == sorted(
        (tp.partition, tp.offset) for tp in wanted
    )


def _list_offsets_at(port: int, topic: str, partition: int) -> int:
    """The error code node at ``port`` answers to ListOffsets(latest) for one partition."""
    body: dict[str, Any] = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": -1,
                        "timestamp": LATEST_TIMESTAMP,
                    }
                ],
            }
        ],
    }
    frame = encode_request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body, correlation_id=1)
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as connection:
        connection.sendall(frame)
        stream = connection.makefile("rb")
        size = _SIZE.unpack(stream.read(_SIZE.size))[0]
        _, answer = decode_response(LIST_OFFSETS, LIST_OFFSETS_VERSION, stream.read(size))
    return int(answer["topics"][0]["partitions"][0]["error_code"])


def test_list_offsets_and_delete_records_at_a_node_without_the_partition_answer_not_leader(
    broker: BrokerProcess, admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    topic, leaders = _spread_topic(admin, topic_name())
    brokers = _brokers(admin)
    ports = {node: admin.list_topics(timeout=10).brokers[node].port for node in brokers}
    partition, leader = next(iter(leaders.items()))
    others = [node for node in brokers if node != leader]
    unknown = KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _list_offsets_at(ports[leader], topic, partition) == KafkaError.NO_ERROR
    assert _list_offsets_at(ports[leader], topic, len(leaders)) == unknown
    for node in others:
        not_leader = KafkaError.NOT_LEADER_FOR_PARTITION
        assert _list_offsets_at(ports[node], topic, partition) == not_leader
        assert _list_offsets_at(ports[node], topic, len(leaders)) == unknown
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        target = KafkaPythonTopicPartition(topic, partition)
        for node in others:
            with pytest.raises(kafka.errors.NotLeaderForPartitionError):
                client.delete_records({target: 0}, partition_leader_id=node)
        deleted = client.delete_records({target: 0}, partition_leader_id=leader)
        assert deleted[target]["low_watermark"] == 0
    finally:
        client.close()


# ---------------------------------------------------------------- replica assignments


def test_create_topics_places_replicas_where_the_assignment_says(
    admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    brokers = _brokers(admin)
    rotated = brokers[1:] + brokers[:1]
    assignment = [rotated, list(reversed(brokers)), brokers]
    name = topic_name()
    _create(admin, _assigned(name, assignment))
    replicas = _replicas_when_settled(admin, name, len(assignment))
    assert [replicas[index] for index in range(len(assignment))] == assignment
    single = [[node] for node in reversed(brokers)]
    name = topic_name()
    _create(admin, _assigned(name, single))
    replicas = _replicas_when_settled(admin, name, len(single))
    assert [replicas[index] for index in range(len(single))] == single


def test_create_topics_refuses_an_assignment_kafka_refuses(
    admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    brokers = _brokers(admin)
    invalid = KafkaError.INVALID_REPLICA_ASSIGNMENT
    unknown_node = [[max(brokers) + 7]]
    assert _create_error(admin, _assigned(topic_name(), unknown_node)) == invalid
    twice = [[brokers[0], brokers[0]]]
    assert _create_error(admin, _assigned(topic_name(), twice)) == invalid
    if len(brokers) > 1:
        uneven = [[brokers[0]], [brokers[0], brokers[1]]]
        assert _create_error(admin, _assigned(topic_name(), uneven)) == invalid


def test_create_partitions_places_new_replicas_where_the_assignment_says(
    admin: AdminClient, topic_name: Callable[[], str]
) -> None:
    brokers = _brokers(admin)
    name = topic_name()
    _create(admin, _assigned(name, [brokers]))
    added = [list(reversed(brokers)), brokers[1:] + brokers[:1]]
    futures = admin.create_partitions(
        [NewPartitions(name, 3, replica_assignment=added)], operation_timeout=ADMIN_TIMEOUT_S
    )
    futures[name].result(timeout=ADMIN_TIMEOUT_S)
    replicas = _replicas_when_settled(admin, name, 3)
    assert [replicas[1], replicas[2]] == added
    wrong = [[max(brokers) + 7]]
    futures = admin.create_partitions(
        [NewPartitions(name, 4, replica_assignment=wrong)], operation_timeout=ADMIN_TIMEOUT_S
    )
    with pytest.raises(KafkaException) as raised:
        futures[name].result(timeout=ADMIN_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
