"""A 3-node cluster of real processes at a low open-file limit: a topic whose replicas
would take the descriptors the brokers need for clients is refused, with the
figures, and the cluster goes on creating and serving topics that fit."""

from __future__ import annotations

import resource
from pathlib import Path

from admin_requests import create_topics_body, new_topic
from cluster_requests import ask
from cluster_workload import create_topic
from confluent_kafka import Consumer, Producer, TopicPartition

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import CREATE_TOPICS, METADATA
from eventplatform.testing import LocalCluster

TIMEOUT_S = 15.0
OPEN_FILES_LIMIT = 512


def test_a_topic_whose_replicas_would_exhaust_each_brokers_descriptors_is_refused(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["offsets.topic.num.partitions=1"])
    cluster.start()
    try:
        for node in cluster.nodes.values():
            assert node.process is not None
            limit = (OPEN_FILES_LIMIT, OPEN_FILES_LIMIT)
            resource.prlimit(node.process.pid, resource.RLIMIT_NOFILE, limit)
        body = create_topics_body(new_topic("wide", 300, 3))
        (result,) = ask(cluster, 2, CREATE_TOPICS, 4, body, TIMEOUT_S)["topics"]
        assert result["error_code"] == ErrorCode.POLICY_VIOLATION, result
        assert f"open-file limit of {OPEN_FILES_LIMIT}" in result["error_message"]
        lookup = {
            "topics": [{"name": "wide"}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        metadata = ask(cluster, 1, METADATA, 8, lookup, TIMEOUT_S)
        assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        create_topic(cluster.bootstrap, "narrow", 3, 3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for value in (b"a", b"b", b"c"):
            producer.produce("narrow", value, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "limits",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("narrow", 0, 0)])
        values = []
        while len(values) < 3:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, values
            values.append(message.value())
        consumer.close()
        assert values == [b"a", b"b", b"c"]
    finally:
        cluster.stop()
