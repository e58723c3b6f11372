"""Named regression tests for replication's historical failure modes, on real processes.

* **Jepsen on Kafka, 2013**: the ISR shrinks to the leader alone, then that leader is
  cut off. With min.insync.replicas=2 the lone leader refuses acks=all writes
  (NOT_ENOUGH_REPLICAS) instead of acknowledging records only it holds; once it is
  fenced no follower outside the ISR may lead (no unclean election), so when it comes
  back every acknowledged record is still there.
"""

from __future__ import annotations

import time
from pathlib import Path

from cluster_workload import AckedLog, check_acked, create_topic, leaders, producer, read_partitions

from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status

TOPIC = "isolated"


def partition_state(cluster: LocalCluster) -> dict[str, object]:
    status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
    state: dict[str, object] = status["topics"][TOPIC]["partitions"][0]
    return state


def wait_for(condition: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.2)
    return False


def test_a_lone_leader_in_the_isr_refuses_acks_all_and_loses_nothing_when_isolated(
    tmp_path: Path,
) -> None:
    # the quorum runs apart from the brokers, as ZooKeeper did: cutting brokers off
    # must not take the controllers with them
    cluster = LocalCluster.create(
        tmp_path, 3, ["min.insync.replicas=2", "replica.lag.time.max.ms=1500"], controllers=1
    )
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, 1, 3)
        acked = AckedLog()
        writer = producer(cluster.bootstrap, **{"message.timeout.ms": 4000})
        for number in range(200):
            writer.produce(
                TOPIC, value=f"before-{number}".encode(), partition=0, on_delivery=acked.on_delivery
            )
        assert writer.flush(30) == 0 and not acked.failed
        leader = leaders(cluster.bootstrap, TOPIC)[0]
        followers = [n for n in cluster.broker_ids if n != leader]

        # the followers stall: the ISR shrinks to the leader alone
        for node in followers:
            cluster.pause(node)
        try:
            assert wait_for(lambda: partition_state(cluster)["isr"] == [leader], 20)
            refused = AckedLog()
            for number in range(20):
                writer.produce(
                    TOPIC,
                    value=f"alone-{number}".encode(),
                    partition=0,
                    on_delivery=refused.on_delivery,
                )
            writer.flush(30)
            assert refused.acked == {}
            assert refused.failed and all(
                "NOT_ENOUGH_REPLICAS" in f or "timed out" in f.lower() for f in refused.failed
            ), refused.failed[:3]
            # now the leader is cut off too, and the followers come back
            cluster.pause(leader)
        finally:
            for node in followers:
                cluster.resume(node)
        try:
            # the followers were fenced while paused and are not in the ISR: nobody may lead
            assert wait_for(lambda: partition_state(cluster)["leader"] == -1, 30)
        finally:
            cluster.resume(leader)
        assert wait_for(lambda: partition_state(cluster)["leader"] == leader, 30)
        found = read_partitions(cluster.bootstrap, TOPIC, [0])
        check_acked(acked.acked, found)
        assert not any(value.startswith(b"alone-") for _, value in found[0])
    finally:
        cluster.stop()
