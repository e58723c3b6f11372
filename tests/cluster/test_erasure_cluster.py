"""Erasure on a 3-broker cluster of real processes: the records go from every replica's
files and from every read, whether the leader is killed while the erasure is under
way or a follower is down when it is committed, and the records around them stay
where they were."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from cluster_workload import create_topic, leaders, wait_healed
from confluent_kafka import Consumer, Producer, TopicPartition

from eventplatform.events.log_client import LogClient
from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.testing import LocalCluster, wait_until

TOPIC = "app-logs"
SECRET = b"password=hunter2-s3cr3t"
LINES = 300
ERASE_TIMEOUT_MS = 20_000
FILES_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 60.0


def line(number: int) -> bytes:
    return b"login ok " + SECRET if number % 9 == 4 else b"line %d" % number


def write_lines(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for number in range(LINES):
        producer.produce(TOPIC, line(number), key=b"host-%d" % (number % 4), partition=0)
        if number % 50 == 49:
            producer.flush(30)
    assert producer.flush(30) == 0


def read_all(bootstrap: str) -> list[tuple[int, bytes | None, list[tuple[str, bytes]]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "audit", "enable.auto.commit": False}
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=20)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        found: list[tuple[int, bytes | None, list[tuple[str, bytes]]]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (not found or found[-1][0] + 1 < end) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            offset = message.offset()
            assert offset is not None
            found.append((offset, message.value(), list(message.headers() or [])))
        assert found and found[-1][0] + 1 == end, f"read {len(found)} of {end} records"
        return found
    finally:
        consumer.close()


def files_hold(cluster: LocalCluster, node: int, text: bytes) -> bool:
    paths = (cluster.directory / f"node-{node}" / f"{TOPIC}-0").glob("*.log")
    return any(text in path.read_bytes() for path in paths)


def check_erased(cluster: LocalCluster, doomed: list[int], nodes: list[int]) -> None:
    """A consumer from offset 0 reads every record, the erased ones empty, and the
    files of ``nodes`` hold the secret no more (each erases on its own, bounded)."""
    records = read_all(cluster.bootstrap)
    assert [offset for offset, _, _ in records] == list(range(LINES))
    for offset, value, headers in records:
        if offset in doomed:
            assert (value, headers) == (None, [(ERASED_HEADER, b"")]), offset
        else:
            assert value == line(offset)
    for node in nodes:
        erased = wait_until(lambda n=node: not files_hold(cluster, n, SECRET), FILES_TIMEOUT_S)
        assert erased, f"node {node}'s files still hold the secret:\n{cluster.tail(node)}"


@pytest.mark.parametrize("kill_after_s", [0.02, 0.3])
def test_an_erasure_survives_a_leader_killed_while_it_runs(
    tmp_path: Path, kill_after_s: float
) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, 1, 3, **{"segment.bytes": "4096"})
        write_lines(cluster.bootstrap)
        doomed = [n for n in range(LINES) if SECRET in line(n)]
        victim = leaders(cluster.bootstrap, TOPIC)[0]
        answers: list[int] = []

        def erase() -> None:
            with LogClient(cluster.bootstrap, request_timeout_s=30, attempts=40) as client:
                answer = client.erase_records(TOPIC, 0, doomed, timeout_ms=ERASE_TIMEOUT_MS)
                answers.append(answer.body["erased"])

        worker = threading.Thread(target=erase, daemon=True)
        worker.start()
        time.sleep(kill_after_s)
        cluster.kill(victim)
        worker.join(120)
        assert answers == [len(doomed)]
        assert wait_until(lambda: leaders(cluster.bootstrap, TOPIC)[0] != victim, 30)
        check_erased(cluster, doomed, [n for n in cluster.nodes if n != victim])
        cluster.start([victim])
        wait_healed(cluster)
        check_erased(cluster, doomed, list(cluster.nodes))
    finally:
        cluster.stop()


def test_a_follower_down_at_the_erasure_erases_when_it_is_back(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, 1, 3, **{"segment.bytes": "4096"})
        write_lines(cluster.bootstrap)
        doomed = [n for n in range(LINES) if SECRET in line(n)]
        leader = leaders(cluster.bootstrap, TOPIC)[0]
        follower = next(n for n in cluster.nodes if n != leader)
        cluster.kill(follower)
        assert files_hold(cluster, follower, SECRET)
        with LogClient(cluster.bootstrap, request_timeout_s=30) as client:
            answer = client.erase_records(TOPIC, 0, doomed, timeout_ms=ERASE_TIMEOUT_MS)
        assert answer.body["erased"] == len(doomed)
        cluster.start([follower])
        wait_healed(cluster)
        cluster.kill(leader)  # the follower that was down may lead now
        assert wait_until(lambda: leaders(cluster.bootstrap, TOPIC)[0] != leader, 30)
        check_erased(cluster, doomed, list(cluster.nodes))
    finally:
        cluster.stop()
