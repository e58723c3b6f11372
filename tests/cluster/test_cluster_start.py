"""A node says it serves only once it has joined its cluster, so whoever waits for that
line (LocalCluster.start, ``platform cluster up``, the test fixtures) finds every broker
in Metadata at once."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from eventplatform.testing import LocalCluster


def test_a_started_cluster_lists_every_broker_at_once(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path / "cluster", 3)
    cluster.start()
    try:
        for node in reversed(cluster.nodes.values()):  # the last started first
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}"})
            brokers = admin.list_topics(timeout=10).brokers
            assert sorted(brokers) == [1, 2, 3], (node.node_id, brokers)
    finally:
        cluster.stop()
