"""The log's ends, as the wait-until-applied API and the status commands read them,
through the death of a partition's leader: asked over and over from the moment it dies,
every answer comes (librdkafka destroys its handle of the dead broker when the cluster
fences it, which fails a request waiting on it; that is asked again)."""

from __future__ import annotations

import time
from pathlib import Path

from cluster_workload import create_topic, leaders
from confluent_kafka import Producer

from eventplatform.projections.kafka import log_ends
from eventplatform.testing import LocalCluster

TOPIC = "status"
PARTITIONS = 3
RECORDS = 30
WATCH_S = 10.0


def test_log_ends_answer_through_a_leaders_death(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for number in range(RECORDS):
            producer.produce(TOPIC, b"%d" % number, partition=number % PARTITIONS)
        assert producer.flush(30) == 0
        expected = {(TOPIC, p): (0, RECORDS // PARTITIONS) for p in range(PARTITIONS)}
        assert log_ends(cluster.bootstrap, [TOPIC]) == expected
        cluster.kill(leaders(cluster.bootstrap, TOPIC)[0])
        answers = 0
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            assert log_ends(cluster.bootstrap, [TOPIC]) == expected
            answers += 1
        assert answers > 0
    finally:
        cluster.stop()
