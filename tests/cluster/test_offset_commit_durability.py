"""Committed offsets on a cluster are as durable as acks=all records.

A group's commits are records of its ``__consumer_offsets`` partition. The coordinator
(that partition's leader) answers an OffsetCommit only once the ISR holds the record,
as Kafka's does: answered after the leader's own append, a commit is lost when the
leader dies before its followers fetch it, and the new coordinator reports an older
offset than the one the client was told is committed.
"""

from __future__ import annotations

import time
from pathlib import Path

from cluster_workload import create_topic
from confluent_kafka import Consumer, KafkaError, TopicPartition

from eventplatform.log.groups.records import OFFSETS_TOPIC, partition_for
from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status
from eventplatform.tools.errors import ToolError

TOPIC = "committed"
GROUP = "durable-commits"
PAUSED_WAIT_S = 1.5
ELECTION_TIMEOUT_S = 30.0


def group_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )


def offsets_partition(cluster: LocalCluster) -> dict[str, object]:
    status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
    partitions = status["topics"][OFFSETS_TOPIC]["partitions"]
    partition: dict[str, object] = partitions[partition_for(GROUP, len(partitions))]
    return partition


def wait_new_leader(cluster: LocalCluster, old: int) -> int:
    deadline = time.monotonic() + ELECTION_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            leader = offsets_partition(cluster)["leader"]
        except ToolError:
            leader = -1
        if isinstance(leader, int) and leader not in (-1, old):
            return leader
        time.sleep(0.2)
    raise AssertionError(f"no new leader of the group's {OFFSETS_TOPIC} partition")


def test_an_offset_commit_is_answered_only_once_replicated_and_survives_the_coordinator(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, 1, 3)
        first = group_consumer(cluster.bootstrap)
        first.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        partition = offsets_partition(cluster)
        leader = partition["leader"]
        assert isinstance(leader, int)
        followers = [node for node in partition["replicas"] if node != leader]  # type: ignore[attr-defined]

        answers: list[KafkaError | None] = []
        for node in followers:
            cluster.pause(node)
        first_commit = {"on_commit": lambda error, _: answers.append(error)}
        committing = Consumer(
            {
                **first_commit,
                "bootstrap.servers": cluster.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        committing.commit(offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=True)
        deadline = time.monotonic() + PAUSED_WAIT_S
        while time.monotonic() < deadline:
            committing.poll(0.1)
        confirmed_while_paused = answers[:1] == [None]

        cluster.kill(leader)
        for node in followers:
            cluster.resume(node)
        wait_new_leader(cluster, leader)
        cluster.start([leader])
        committing.poll(1.0)
        confirmed = None in answers

        reader = group_consumer(cluster.bootstrap)
        [reported] = reader.committed([TopicPartition(TOPIC, 0)], timeout=30)
        reader.close()
        committing.close()
        first.close()
        if confirmed:
            assert reported.offset == 5, f"confirmed 5, the new coordinator reports {reported}"
        else:
            assert reported.offset in (1, 5)
        assert not confirmed_while_paused, "a commit was confirmed before any follower had it"
    finally:
        cluster.stop()
