"""A 3-node cluster of real processes, healthy: what clients and operators see.

Producer ids are unique across the brokers; metadata names real leaders and
replicas; a produce, or a fetch before v11, sent to a follower is refused
with NOT_LEADER_OR_FOLLOWER, and one naming an old leader epoch with
FENCED_LEADER_EPOCH; acks=all is refused with NOT_ENOUGH_REPLICAS when the
ISR is below min.insync.replicas; `platform cluster status` shows it all."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_requests import ask, fetch_body, partition_metadata
from cluster_workload import create_topic, wait_healed
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH, INIT_PRODUCER_ID, PRODUCE
from eventplatform.log.storage.record_batch import Record, encode_batch
from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.create(tmp_path_factory.mktemp("cluster"), 3, ["min.insync.replicas=2"])
    local.start()
    try:
        yield local
    finally:
        local.stop()


def produce_body(topic: str, partition: int, acks: int = -1) -> dict[str, Any]:
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")], base_offset=0)
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }


def produce_error(cluster: LocalCluster, node: int, topic: str, partition: int) -> int:
    response = ask(cluster, node, PRODUCE, 8, produce_body(topic, partition))
    return int(response["responses"][0]["partition_responses"][0]["error_code"])


def test_producer_ids_are_unique_across_brokers(cluster: LocalCluster) -> None:
    ids = [
        ask(
            cluster,
            node,
            INIT_PRODUCER_ID,
            1,
            {"transactional_id": None, "transaction_timeout_ms": 60000},
        )["producer_id"]
        for node in (1, 2, 3, 1, 2, 3)
    ]
    assert len(set(ids)) == len(ids), ids


def test_metadata_names_leaders_and_only_the_leader_serves(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap, "basics", 3, 3)
    partitions = partition_metadata(cluster, "basics")
    assert [p["leader_id"] for p in partitions] == [1, 2, 3]
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in partitions)
    leader = partitions[0]["leader_id"]
    follower = next(n for n in (1, 2, 3) if n != leader)
    assert produce_error(cluster, leader, "basics", 0) == ErrorCode.NONE
    assert produce_error(cluster, follower, "basics", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetch = fetch_body("basics")
    answer = ask(cluster, follower, FETCH, 10, fetch)
    assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # with no replica.selector.class the leader serves a consumer in any rack
    answer = ask(cluster, leader, FETCH, 11, {**fetch, "rack_id": "elsewhere"})
    assert answer["responses"][0]["partitions"][0]["preferred_read_replica"] == -1
    stale = fetch_body("basics", partitions[0]["leader_epoch"] + 1)
    answer = ask(cluster, leader, FETCH, 11, stale)
    assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    answer = ask(cluster, leader, FETCH, 11, fetch)
    assert answer["responses"][0]["partitions"][0]["high_watermark"] == 1


def test_controlled_shutdown_moves_leadership_before_the_broker_stops(
    cluster: LocalCluster,
) -> None:
    create_topic(cluster.bootstrap, "handover", 1, 3)
    (before,) = partition_metadata(cluster, "handover")
    old_leader = before["leader_id"]
    assert produce_error(cluster, old_leader, "handover", 0) == ErrorCode.NONE
    started = time.monotonic()
    cluster.stop([old_leader])
    assert time.monotonic() - started < 10
    survivor = next(n for n in (1, 2, 3) if n != old_leader)
    (after,) = partition_metadata(cluster, "handover", survivor)
    assert after["leader_id"] not in (old_leader, -1)
    assert after["leader_epoch"] == before["leader_epoch"] + 1
    assert old_leader not in after["isr_nodes"]
    new_leader = after["leader_id"]
    assert produce_error(cluster, new_leader, "handover", 0) == ErrorCode.NONE
    fetch = fetch_body("handover", before["leader_epoch"])
    answer = ask(cluster, new_leader, FETCH, 11, fetch)
    assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    cluster.start([old_leader])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (now,) = partition_metadata(cluster, "handover", survivor)
        if sorted(now["isr_nodes"]) == [1, 2, 3]:
            break
        time.sleep(0.2)
    assert sorted(now["isr_nodes"]) == [1, 2, 3]
    answer = ask(cluster, old_leader, FETCH, 11, fetch)
    assert answer["responses"][0]["partitions"][0]["error_code"] in (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
    )


def test_status_shows_the_cluster(cluster: LocalCluster) -> None:
    wait_healed(cluster)
    status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
    assert sorted(b["broker"] for b in status["brokers"]) == [1, 2, 3]
    output = subprocess.run(
        [str(cluster.platform), "cluster", "status", "--data-dir", str(cluster.directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "under-replicated: none" in output
    assert "controllers: 1, 2, 3; active" in output


def test_acks_all_needs_min_insync_replicas(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap, "lonely", 1, 1)
    (partition,) = partition_metadata(cluster, "lonely")
    leader = partition["leader_id"]
    assert produce_error(cluster, leader, "lonely", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
    response = ask(cluster, leader, PRODUCE, 8, produce_body("lonely", 0, acks=1))
    assert response["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def test_a_topic_change_is_answered_once_every_broker_has_it(cluster: LocalCluster) -> None:
    # a broker that is not the active controller is paused for PAUSE_S (less than its
    # session, so it stays live) while another is asked: the answer waits until the paused
    # one has the change, so a client that then asks it finds it
    pause_s = 1.0
    controller = fetch_cluster_status(data_dir=cluster.directory, controllers=None)["controller"]
    lagging, asked = (n for n in (1, 2, 3) if n != controller)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.nodes[asked].kafka_port}"})
    admin.list_topics(timeout=10)
    name = "everywhere"
    for change in ("create", "delete"):
        cluster.pause(lagging)
        threading.Timer(pause_s, cluster.resume, [lagging]).start()
        started = time.monotonic()
        if change == "create":
            topic = NewTopic(name, num_partitions=2, replication_factor=1)
            admin.create_topics([topic])[name].result(timeout=30)
        else:
            admin.delete_topics([name], operation_timeout=30)[name].result(timeout=30)
        assert time.monotonic() - started >= pause_s * 0.9, change
        expected = 2 if change == "create" else 0
        assert len(partition_metadata(cluster, name, lagging)) == expected, change
