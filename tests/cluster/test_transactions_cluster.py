"""Transactions on a 3-broker cluster of real processes, with confluent-kafka: the
transaction coordinator is killed in the middle of a transaction that spans partitions
led by different brokers, and the producer still commits it whole through the new
coordinator; then a partition leader is killed, and the new leader serves the same
committed and aborted records to read_committed consumers."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from cluster_workload import create_topic, leaders
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from eventplatform.log.groups.records import partition_for
from eventplatform.log.transactions.records import TRANSACTION_STATE_TOPIC
from eventplatform.testing import LocalCluster, wait_until

TOPIC = "payments"
PARTITIONS = 3
TXN_TIMEOUT_S = 90.0
READ_TIMEOUT_S = 60.0
STATE_PARTITIONS = 5


def coordinator_of(bootstrap: str, tid: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(TRANSACTION_STATE_TOPIC, timeout=10).topics[
        TRANSACTION_STATE_TOPIC
    ]
    index = partition_for(tid, len(metadata.partitions))
    return metadata.partitions[index].leader


def read_committed(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"audit-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                continue
            ended.discard(message.partition())
            values.append(message.value())
        assert len(ended) == PARTITIONS, "the partitions' ends were not all reached"
        return sorted(values)
    finally:
        consumer.close()


def test_a_transaction_outlives_its_coordinator_and_its_partition_leader(tmp_path: Path) -> None:
    overrides = [
        "min.insync.replicas=2",
        f"transaction.state.log.num.partitions={STATE_PARTITIONS}",
    ]
    cluster = LocalCluster.create(tmp_path, 3, overrides)
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        tid = "payments-writer"
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "transactional.id": tid,
                "transaction.timeout.ms": 120_000,
                "acks": "all",
            }
        )
        producer.init_transactions(TXN_TIMEOUT_S)
        producer.begin_transaction()
        for n in range(30):
            producer.produce(TOPIC, b"aborted-%d" % n, partition=n % PARTITIONS)
        producer.abort_transaction(TXN_TIMEOUT_S)

        producer.begin_transaction()
        for n in range(30):
            producer.produce(TOPIC, b"paid-%02d" % n, partition=n % PARTITIONS)
        producer.flush(TXN_TIMEOUT_S)
        victim = coordinator_of(cluster.bootstrap, tid)
        cluster.kill(victim)
        assert wait_until(lambda: coordinator_of(cluster.bootstrap, tid) != victim, 30)
        producer.commit_transaction(TXN_TIMEOUT_S)
        expected = sorted(b"paid-%02d" % n for n in range(30))
        assert read_committed(cluster.bootstrap) == expected

        cluster.start([victim])
        assert wait_until(lambda: -1 not in leaders(cluster.bootstrap, TOPIC).values(), 30)
        leader = leaders(cluster.bootstrap, TOPIC)[0]
        cluster.kill(leader)
        assert wait_until(lambda: leaders(cluster.bootstrap, TOPIC)[0] not in (leader, -1), 30)
        assert read_committed(cluster.bootstrap) == expected
    finally:
        cluster.stop()
