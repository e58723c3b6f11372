"""Replication benchmark: a 3-node cluster of ``platform serve`` processes on loopback.

Two measurements, in one run, against one local cluster (every node broker
and controller, as ``platform cluster up`` lays it out) in a fresh
directory that is deleted at the end:

1. **The cost of replication.** One producer process (librdkafka,
   ``linger.ms=5``, 1 MB batches) sends a fixed count of 100-byte records
   to a one-partition topic and waits for every acknowledgement: once to a
   topic with replication factor 1 at acks=1, once to one with replication
   factor 3 and ``min.insync.replicas=2`` at acks=all, alternating, for
   ``--repetitions`` rounds. The ratio of the medians is the cost of
   synchronous 3x replication (Kafka's published figure is about 0.51).
2. **Failover time.** An idempotent acks=all producer writes to the three
   partitions of a 3-way replicated topic at a steady rate, each partition
   led by its preferred replica (a different node for each). ``--kills``
   times a node is killed (SIGKILL): every other kill the active controller,
   and in between another node, so both paths are measured, the second one
   with a new controller to elect first. Each failover is the time from the
   kill to the acknowledgement of the first record sent after it to the
   partition the victim led. After each kill the node restarts, the ISR
   heals and the leaders move back to their preferred replicas
   (``leader.imbalance.check.interval.seconds=1``) before the next. The
   producer refreshes its metadata every second
   (``topic.metadata.refresh.interval.ms=1000``).

The cluster's failure detection is ``broker.session.timeout.ms=3000``
(``platform cluster up``'s setting). Run with ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.broker import produce_worker, run_in_process
from bench.harness import (
    Deadline,
    Spread,
    describe_machine,
    format_spread,
    markdown_table,
    progress,
)
from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status, wait_healthy

KAFKA_RATIO = 0.51
RECORD_BYTES = 100
FAILOVER_RATE_PER_S = 500
HEAL_TIMEOUT_S = 120.0
FAILOVER_TIMEOUT_S = 60.0
FAILOVER_GOAL_S = 5.0
"""The session (3 s) plus 2 s: a run with a slower failover keeps its cluster's files and
node logs, and says where, so the slow kill can be read."""
METADATA_REFRESH_MS = 1_000
SETTINGS = ("leader.imbalance.check.interval.seconds=1",)
"""Leaders go back to their preferred replicas a second after they are in the ISR again."""
"""The failover producer refreshes metadata every second, as the cluster tests' producers do."""


@dataclass(frozen=True)
class Plan:
    repetitions: int
    records: int
    kills: int


FULL = Plan(repetitions=3, records=2_000_000, kills=20)
QUICK = Plan(repetitions=1, records=50_000, kills=3)


def create_topic(
    bootstrap: str, name: str, replication: int, partitions: int = 1, **configs: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=replication, config=configs
    )
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)


def describe(cluster: LocalCluster) -> dict[str, Any]:
    return fetch_cluster_status(data_dir=cluster.directory, controllers=None)


def wait_healed(cluster: LocalCluster, topic: str) -> None:
    """Until every broker is live, every ISR whole and every partition of ``topic`` led by
    its preferred replica."""
    deadline = Deadline(HEAL_TIMEOUT_S)
    if not wait_healthy(cluster, HEAL_TIMEOUT_S):
        raise SystemExit("the cluster did not heal in time")
    while not deadline.passed():
        partitions = describe(cluster)["topics"][topic]["partitions"]
        if all(state["leader"] == state["replicas"][0] for state in partitions):
            return
        time.sleep(0.1)
    raise SystemExit("the leaders did not move back to their preferred replicas in time")


# ---------------------------------------------------------------- measurements


def measure_throughput(cluster: LocalCluster, plan: Plan) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"rf1_acks1": [], "rf3_acks_all": []}
    for repetition in range(plan.repetitions):
        for key, replication, acks in (("rf1_acks1", 1, 1), ("rf3_acks_all", 3, -1)):
            topic = f"throughput-{key}-{repetition}"
            create_topic(
                cluster.bootstrap,
                topic,
                replication,
                **{"min.insync.replicas": "2"} if replication == 3 else {},
            )
            seconds = run_in_process(
                produce_worker, cluster.bootstrap, topic, RECORD_BYTES, plan.records, acks
            )
            rates[key].append(plan.records / seconds)
            progress(
                f"  {key} repetition {repetition + 1}: {plan.records / seconds:,.0f} records/s"
            )
    return rates


class TimedProducer:
    """An idempotent acks=all producer at a steady rate over ``partitions`` partitions in
    turn, timing each acknowledgement."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 1,
                "retry.backoff.ms": 50,
                "message.timeout.ms": 120_000,
                "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
            }
        )
        self.topic = topic
        self.partitions = partitions
        self.lock = threading.Lock()
        self.acknowledged: list[tuple[int, float, float]] = []
        """(partition, sent, acknowledged) monotonic times."""
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        number = 0
        while not self.stop.is_set():
            sent = time.monotonic()
            partition = number % self.partitions

            def delivered(
                error: Any, _message: Any, sent: float = sent, partition: int = partition
            ) -> None:
                with self.lock:
                    if error is None:
                        self.acknowledged.append((partition, sent, time.monotonic()))
                    else:
                        self.failures.append(str(error))

            self.producer.produce(
                self.topic, f"r-{number}".encode(), partition=partition, on_delivery=delivered
            )
            number += 1
            self.producer.poll(0)
            time.sleep(1 / FAILOVER_RATE_PER_S)
        self.producer.flush(FAILOVER_TIMEOUT_S)

    def first_after(self, partition: int, moment: float) -> float | None:
        with self.lock:
            times = [a for p, sent, a in self.acknowledged if p == partition and sent > moment]
        return min(times) if times else None


def measure_failover(cluster: LocalCluster, plan: Plan) -> tuple[list[float], list[bool]]:
    """Each kill's failover time, and whether its victim was the active controller too
    (the quorum then elects a new one, which gives every broker a full session)."""
    topic = "failover"
    nodes = len(cluster.nodes)
    create_topic(cluster.bootstrap, topic, 3, nodes, **{"min.insync.replicas": "2"})
    wait_healed(cluster, topic)
    producer = TimedProducer(cluster.bootstrap, topic, nodes)
    producer.thread.start()
    failovers = []
    controllers = []
    try:
        time.sleep(2.0)
        for kill in range(plan.kills):
            status = describe(cluster)
            led = {
                state["leader"]: index
                for index, state in enumerate(status["topics"][topic]["partitions"])
            }
            controller = int(status["controller"])
            others = sorted(node for node in led if node != controller)
            victim = controller if kill % 2 == 0 else others[(kill // 2) % len(others)]
            partition = led[victim]
            controllers.append(victim == controller)
            killed_at = time.monotonic()
            cluster.kill(victim)
            deadline = Deadline(FAILOVER_TIMEOUT_S)
            acknowledged = producer.first_after(partition, killed_at)
            while acknowledged is None and not deadline.passed():
                time.sleep(0.02)
                acknowledged = producer.first_after(partition, killed_at)
            if acknowledged is None:
                raise SystemExit(f"kill {kill + 1}: no acknowledgement after the kill")
            failovers.append(acknowledged - killed_at)
            role = ", the active controller" if controllers[-1] else ""
            progress(
                f"  kill {kill + 1} (node {victim}{role}, partition {partition}): "
                f"failover {failovers[-1]:.2f} s"
            )
            cluster.start([victim])
            wait_healed(cluster, topic)
    finally:
        producer.stop.set()
        producer.thread.join(FAILOVER_TIMEOUT_S + 10)
    if producer.failures:
        raise SystemExit(f"the producer failed: {producer.failures[:3]}")
    return failovers, controllers


# ---------------------------------------------------------------- report


def report(results: dict[str, Any]) -> str:
    tables = []
    if "throughput" in results:
        tables.append(throughput_table(results["throughput"]))
    if "failovers" in results:
        tables.append(failover_table(results["failovers"], results["controller_kills"]))
    return "\n\n".join(tables)


def throughput_table(throughput: dict[str, list[float]]) -> str:
    rf1 = Spread.of(throughput["rf1_acks1"])
    rf3 = Spread.of(throughput["rf3_acks_all"])
    return markdown_table(
        [
            ["topic, acks", "records/s median (min-max)", "MB/s of values, median"],
            ["RF=1, acks=1", format_spread(rf1), f"{rf1.median * RECORD_BYTES / 1e6:.2f}"],
            ["RF=3, acks=all", format_spread(rf3), f"{rf3.median * RECORD_BYTES / 1e6:.2f}"],
            [
                "ratio RF=3 acks=all / RF=1 acks=1",
                f"{rf3.median / rf1.median:.2f}",
                f"Kafka's figure: about {KAFKA_RATIO}",
            ],
        ]
    )


def failover_table(failovers: list[float], controller_kills: list[bool]) -> str:
    rows = [["kills", "failover median s", "max s", "min s"]]
    pairs = list(zip(failovers, controller_kills, strict=True))
    groups = [
        ("all", failovers),
        ("of the active controller", [time for time, controller in pairs if controller]),
        ("of another node", [time for time, controller in pairs if not controller]),
    ]
    for label, times in groups:
        if times:
            rows.append(
                [
                    f"{len(times)} ({label})",
                    f"{statistics.median(times):.2f}",
                    f"{max(times):.2f}",
                    f"{min(times):.2f}",
                ]
            )
    return markdown_table(rows)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the cluster")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    parser.add_argument(
        "--only", choices=("throughput", "failover"), default=None, help="one measurement"
    )
    arguments = parser.parse_args(argv)
    plan = QUICK if arguments.quick else FULL
    root = Path(tempfile.mkdtemp(prefix="bench-replication-", dir=arguments.data_dir))
    cluster = LocalCluster.create(root / "cluster", 3, SETTINGS)
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(root)}
    try:
        progress("starting a 3-node cluster")
        cluster.start()
        if arguments.only != "failover":
            progress(f"throughput, {plan.records:,} records of {RECORD_BYTES} B per run")
            results["throughput"] = measure_throughput(cluster, plan)
        if arguments.only != "throughput":
            progress(f"failover, {plan.kills} kills")
            results["failovers"], results["controller_kills"] = measure_failover(cluster, plan)
    finally:
        cluster.stop()
        if max(results.get("failovers") or [0.0]) > FAILOVER_GOAL_S:
            progress(f"a failover took over {FAILOVER_GOAL_S} s: the node logs are kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(results, indent=2))
    print(report(results))


if __name__ == "__main__":
    main(sys.argv[1:])
