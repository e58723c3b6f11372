"""A 3-broker cluster of real processes under faults: leaders killed (SIGKILL) over and
over, and paused (SIGSTOP) long enough to be fenced before they resume (SIGCONT), while
idempotent producers write at acks=all with min.insync.replicas=2. Every acknowledged
record must be readable exactly once, in order per partition; a consumer group must
read every offset; and each failover (kill to the first acknowledged produce on a
partition the victim led) must take at most the failure-detection timeout (the broker
session, which triggers the election) plus 5 s.

The pause-then-kill rounds are the failure mode Jepsen found on Redpanda in 2022
(duplicates from an idempotent producer when a paused leader comes back and another is
killed): no value may appear twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cluster_workload import (
    AckedLog,
    check_acked,
    create_topic,
    leaders,
    producer,
    read_partitions,
    wait_healed,
)
from confluent_kafka import Consumer

from eventplatform.testing import LocalCluster

TOPIC = "chaos"
PARTITIONS = 3
ROUNDS = 4
PAUSE_S = 5.0
SESSION_TIMEOUT_S = 3.0
FAILOVER_BOUND_S = SESSION_TIMEOUT_S + 5.0
PRODUCE_INTERVAL_S = 0.003
PRODUCE_MAX = 200_000


def test_killed_and_paused_leaders_lose_no_acknowledged_record(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        acked = AckedLog()
        stop = threading.Event()

        def produce() -> None:
            writer = producer(cluster.bootstrap)
            for number in range(PRODUCE_MAX):
                if stop.is_set():
                    break
                writer.produce(
                    TOPIC,
                    value=f"main-{number}".encode(),
                    partition=number % PARTITIONS,
                    on_delivery=acked.callback(),
                )
                writer.poll(0)
                time.sleep(PRODUCE_INTERVAL_S)
            assert writer.flush(150) == 0

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        failovers = []
        try:
            time.sleep(2.0)
            for round_number in range(ROUNDS):
                victim = leaders(cluster.bootstrap, TOPIC)[0]
                if round_number % 2 == 1:
                    # paused past its session: fenced, replaced, then back as a stale leader
                    cluster.pause(victim)
                    time.sleep(PAUSE_S)
                    cluster.resume(victim)
                    time.sleep(1.0)
                    victim = leaders(cluster.bootstrap, TOPIC)[0]
                killed_at = time.monotonic()
                cluster.kill(victim)
                deadline = time.monotonic() + FAILOVER_BOUND_S + 30
                while time.monotonic() < deadline:
                    acknowledged = acked.first_acknowledged(0, killed_at)
                    if acknowledged is not None:
                        break
                    time.sleep(0.05)
                assert acknowledged is not None, f"round {round_number}: no acknowledgement"
                failovers.append(acknowledged - killed_at)
                print(f"round {round_number}: killed {victim}, failover {failovers[-1]:.2f} s")
                cluster.start([victim])
                wait_healed(cluster)
        finally:
            stop.set()
            thread.join(180)
        assert not thread.is_alive()
        assert acked.failed == []
        assert len(acked.acked) > 1000
        found = read_partitions(cluster.bootstrap, TOPIC, range(PARTITIONS))
        check_acked(acked.acked, found)
        assert max(failovers) <= FAILOVER_BOUND_S, failovers

        # a consumer group reads every offset of every partition, with no gaps
        group = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        seen: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        total = sum(len(records) for records in found.values())
        group.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
            message = group.poll(0.5)
            if message is not None and message.error() is None:
                seen[message.partition()].add(message.offset())
        group.commit(asynchronous=False)
        group.close()
        for partition, records in found.items():
            assert seen[partition] == {offset for offset, _ in records}
    finally:
        cluster.stop()
