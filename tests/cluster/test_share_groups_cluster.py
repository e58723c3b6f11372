"""Share groups (KIP-932) on a 3-broker cluster of real processes, read by
confluent-kafka's share consumer: two consumers share the records, and what they
acknowledged is never delivered again when the leader of a partition (and of the
share state it kept) is killed and another replica takes over."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from cluster_workload import create_topic, leaders
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from eventplatform.testing import LocalCluster, wait_until

TOPIC = "jobs"
GROUP = "workers"
PARTITIONS = 2
RECORDS = 400
READ_TIMEOUT_S = 90.0


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for number in range(first, first + count):
        producer.produce(TOPIC, b"job-%d" % number, partition=number % PARTITIONS)
    assert producer.flush(30) == 0


def start_earliest(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.GROUP,
        GROUP,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def share_consumer(bootstrap: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    consumer.subscribe([TOPIC])
    return consumer


def drain(consumers: list[ShareConsumer], wanted: set[bytes], seen: Counter) -> None:
    """Poll every consumer (implicit acknowledgement: the next poll accepts what the
    last returned) until ``wanted`` has all been seen, then commit what is held."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    while not wanted <= set(seen) and time.monotonic() < deadline:
        for consumer in consumers:
            for message in consumer.poll(0.5):
                if message.error() is None:
                    seen[message.value()] += 1
    for consumer in consumers:
        consumer.commit_sync(30)
    missing = wanted - set(seen)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:3]}"


def test_acknowledged_records_are_not_delivered_again_after_a_leader_dies(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    consumers: list[ShareConsumer] = []
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        start_earliest(cluster.bootstrap)
        produce(cluster.bootstrap, 0, RECORDS // 2)
        consumers = [share_consumer(cluster.bootstrap) for _ in range(2)]
        before: Counter = Counter()
        drain(consumers, {b"job-%d" % n for n in range(RECORDS // 2)}, before)
        assert sum(before.values()) == RECORDS // 2, "nothing was delivered twice"

        victim = leaders(cluster.bootstrap, TOPIC)[0]
        cluster.kill(victim)
        assert wait_until(lambda: leaders(cluster.bootstrap, TOPIC)[0] != victim, 30)
        produce(cluster.bootstrap, RECORDS // 2, RECORDS // 2)
        after: Counter = Counter()
        drain(consumers, {b"job-%d" % n for n in range(RECORDS // 2, RECORDS)}, after)
        again = set(before) & set(after)
        assert not again, f"{len(again)} acknowledged records delivered again"
    finally:
        for consumer in consumers:
            consumer.close()
        cluster.stop()
