"""A real cluster under faults: acks=all idempotent producers, the checks that follow.

:class:`AckedLog` keeps what the producers were told (partition, offset,
value per acknowledged record); :func:`read_partitions` reads every
partition back from the start to its high watermark; :func:`check_acked`
holds the log to the acknowledgements: each acknowledged record at its
offset, each value once, and each producer's values in order per
partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from fault_checker import History, check

from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status, wait_healthy

READ_TIMEOUT_S = 60.0
HEAL_TIMEOUT_S = 60.0


@dataclass
class AckedLog:
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    timings: list[tuple[int, float, float]] = field(default_factory=list)
    """(partition, sent, acknowledged) per acknowledged record, monotonic seconds."""

    def callback(self) -> Callable[[KafkaError | None, Message], None]:
        """A delivery callback that also times the record from now to its acknowledgement."""
        sent = time.monotonic()

        def delivered(error: KafkaError | None, message: Message) -> None:
            self.on_delivery(error, message)
            if error is None and message.partition() is not None:
                with self.lock:
                    self.timings.append((message.partition() or 0, sent, time.monotonic()))

        return delivered

    def first_acknowledged(self, partition: int, sent_after: float) -> float | None:
        """When the first record sent after ``sent_after`` to ``partition`` was acknowledged."""
        with self.lock:
            times = [a for p, s, a in self.timings if p == partition and s > sent_after]
        return min(times) if times else None

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        try:
            self._record(error, message)
        except Exception as exc:  # a callback must not raise into the client
            self.failed.append(f"the delivery callback failed: {exc!r}")

    def _record(self, error: KafkaError | None, message: Message) -> None:
        with self.lock:
            if error is not None:
                self.failed.append(str(error))
                return
            partition, offset, value = message.partition(), message.offset(), message.value()
            if partition is None or offset is None or not isinstance(value, bytes):
                self.failed.append(f"acknowledged without a position: {partition} {offset}")
                return
            self.acked[(partition, offset)] = value


def producer(bootstrap: str, **extra: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120_000,
        "retry.backoff.ms": 50,
        "topic.metadata.refresh.interval.ms": 1_000,
    }
    config.update(extra)
    return Producer(config)


def create_topic(
    bootstrap: str, name: str, partitions: int, replication: int, **configs: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=replication, config=configs
    )
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(name, timeout=10).topics[name]
        if metadata.error is None and all(p.leader >= 0 for p in metadata.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} has no leaders")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in metadata.partitions.values()}


def read_partitions(
    bootstrap: str, topic: str, partitions: Iterable[int]
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of each partition, from the start up to its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "verify",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        ends = {}
        for partition in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
            ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(done) < len(ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            value = message.value()
            assert isinstance(value, bytes)
            found[partition].append((offset, value))
            if offset + 1 >= ends[partition]:
                done.add(partition)
        assert len(done) == len(ends), f"read {len(done)} of {len(ends)} partitions in time"
        return found
    finally:
        consumer.close()


def check_acked(
    acked: dict[tuple[int, int], bytes], found: dict[int, list[tuple[int, bytes]]]
) -> None:
    """Every acknowledged record is at its offset; no value twice; each producer's values
    (``<producer>-<number>``) in order per partition; no offset missing."""
    history = History(
        acknowledged=[(p, offset, value) for (p, offset), value in acked.items()],
        sent={value for records in found.values() for _, value in records} | set(acked.values()),
        log=found,
        log_start={p: records[0][0] if records else 0 for p, records in found.items()},
    )
    verdict = check(history)
    assert verdict.ok, verdict.describe()


def wait_healed(cluster: LocalCluster) -> None:
    """Until every broker is live and every partition's ISR is whole again."""
    if not wait_healthy(cluster, HEAL_TIMEOUT_S):
        status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
        raise AssertionError(f"the cluster did not heal:\n{status}")
