"""Fault-injection runs against a real 3-node cluster, checked by :mod:`fault_checker`.

One run, for one seed: a cluster of ``platform serve`` processes (every node
broker and controller, as ``platform cluster up`` lays it out), a topic with
replication factor 3 and ``min.insync.replicas=2``, idempotent confluent-kafka
producers at acks=all writing unique sequence-numbered values, a consumer
group member reading and committing, and a monitor that records every broker
the controller fences. The seeded :mod:`nemesis` hurts the cluster round
after round; after each round the cluster must heal (every broker live,
every ISR whole). At the end the producers flush, the log is read back from
offset 0, the cluster stops cleanly and each node's copy of each partition
is read from its files. :func:`fault_checker.check` gives the verdict.

``python tests/support/fault_run.py --seeds 6 --rounds 50`` (``make faults``)
runs several seeds and prints one summary line; ``--json`` keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nemesis
from cluster_workload import create_topic, read_partitions
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from fault_checker import History, Verdict, check

from eventplatform.log.storage.reader import PartitionReader
from eventplatform.log.storage.record_batch import decode_batch
from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status, healthy
from eventplatform.tools.errors import ToolError

TOPIC = "faults"
PARTITIONS = 3
PRODUCERS = 2
PRODUCE_INTERVAL_S = 0.004
"""Each producer's pause between records: about 250 records/s each."""
SETTLE_S = 1.0
"""Time between a healed round and the next fault, for the producers to make progress."""
HEAL_TIMEOUT_S = 60.0
MONITOR_INTERVAL_S = 0.3
COMMIT_INTERVAL_S = 1.0
FLUSH_TIMEOUT_S = 150.0
MESSAGE_TIMEOUT_MS = 120_000
DESCRIBE_ATTEMPTS = 50
SETTINGS = ("min.insync.replicas=2",)
CLIENT_LOG_LEVEL = 3
CLIENT_DEBUG_ENV = "FAULT_RUN_CLIENT_DEBUG"
"""Set to a directory to have each producer log librdkafka's idempotence, message and
protocol debug lines to ``<name>.log`` there: which answer each batch got. Off by default."""
CLIENT_DEBUG_CONTEXTS = "eos,msg,protocol"
"""librdkafka logs errors only: a run disconnects clients on purpose, hundreds of times."""


@dataclass
class Recorder:
    """What the clients saw, shared by their threads."""

    history: History = field(default_factory=History)
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: int = 0
    acked_at: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """partition → (sent, acknowledged) monotonic times, for failover times."""

    def delivery(self, sent: float) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, message: Message) -> None:
            with self.lock:
                partition, offset, value = message.partition(), message.offset(), message.value()
                if error is not None or partition is None or offset is None or value is None:
                    self.failed += 1
                    return
                self.history.acknowledged.append((partition, offset, value))
                self.acked_at.setdefault(partition, []).append((sent, time.monotonic()))

        return delivered

    def first_ack_after(self, partition: int, moment: float) -> float | None:
        with self.lock:
            times = [acked for sent, acked in self.acked_at.get(partition, []) if sent > moment]
        return min(times) if times else None


@dataclass
class RunResult:
    seed: int
    rounds: int
    acknowledged: int
    indeterminate: int
    failovers_s: list[float]
    verdict: Verdict
    faults: list[str]


def client_debug(name: str) -> dict[str, Any]:
    """The producer settings that log its debug lines to a file, when asked for."""
    directory = os.environ.get(CLIENT_DEBUG_ENV)
    if not directory:
        return {}
    logger = logging.getLogger(f"fault_run.{name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    if not logger.handlers:  # one file per producer name, over every seed of the run
        handler = logging.FileHandler(Path(directory) / f"{name}.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return {"debug": CLIENT_DEBUG_CONTEXTS, "logger": logger, "log_level": 7}


def produce(bootstrap: str, name: str, recorder: Recorder, stop: threading.Event) -> None:
    writer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1_000,
            "log_level": CLIENT_LOG_LEVEL,
        }
        | client_debug(name)
    )
    sequence = 0
    while not stop.is_set():
        value = f"{name}-{sequence}".encode()
        with recorder.lock:
            recorder.history.sent.add(value)
        writer.produce(
            TOPIC,
            value=value,
            partition=sequence % PARTITIONS,
            on_delivery=recorder.delivery(time.monotonic()),
        )
        writer.poll(0)
        sequence += 1
        time.sleep(PRODUCE_INTERVAL_S)
    writer.flush(FLUSH_TIMEOUT_S)


def consume(bootstrap: str, recorder: Recorder, stop: threading.Event) -> None:
    """A group member that reads everything, commits every second and asks what is committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fault-checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 10_000,
            "log_level": CLIENT_LOG_LEVEL,
        }
    )
    consumer.subscribe([TOPIC])
    history = recorder.history
    next_commit = time.monotonic() + COMMIT_INTERVAL_S
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                partition, offset, value = message.partition(), message.offset(), message.value()
                if partition is not None and offset is not None and value is not None:
                    with recorder.lock:
                        history.group_reads.append((partition, offset, value))
            if time.monotonic() >= next_commit:
                next_commit = time.monotonic() + COMMIT_INTERVAL_S
                _commit_and_ask(consumer, recorder)
    finally:
        consumer.close()


def _commit_and_ask(consumer: Consumer, recorder: Recorder) -> None:
    try:
        confirmed = consumer.commit(asynchronous=False) or []
    except KafkaException:
        confirmed = []  # nothing to commit, or the coordinator is moving: try again later
    with recorder.lock:
        for entry in confirmed:
            if entry.error is None and entry.offset >= 0:
                recorder.history.commits.append(("confirmed", entry.partition, entry.offset))
    try:
        assignment = consumer.assignment()
        reported = consumer.committed(assignment, timeout=5) if assignment else []
    except KafkaException:
        return
    with recorder.lock:
        for entry in reported:
            if entry.error is None and entry.offset >= 0:
                recorder.history.commits.append(("reported", entry.partition, entry.offset))


class FenceMonitor:
    """Polls the active controller; a broker fenced while the nemesis left it alone is noted."""

    def __init__(self, cluster: LocalCluster, recorder: Recorder) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.touched: set[int] = set()
        self.round = ""
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def start_round(self, label: str) -> None:
        with self.lock:
            self.touched = set()
            self.round = label

    def touch(self, node: int) -> None:
        with self.lock:
            self.touched.add(node)

    def run(self) -> None:
        while not self.stop.wait(MONITOR_INTERVAL_S):
            try:
                status = fetch_cluster_status(data_dir=self.cluster.directory, controllers=None)
            except ToolError:
                continue
            with self.lock:
                fenced = {b["broker"] for b in status["brokers"] if b["fenced"]}
                spurious = sorted(fenced - self.touched)
                label = self.round
            for broker in spurious:
                line = f"{label}: broker {broker} fenced by controller {status['controller']}"
                with self.recorder.lock:
                    if line not in self.recorder.history.spurious_fences:
                        self.recorder.history.spurious_fences.append(line)


def describe(cluster: LocalCluster) -> dict[str, Any]:
    """The active controller's view, waiting out an election."""
    for _ in range(DESCRIBE_ATTEMPTS):
        try:
            return fetch_cluster_status(data_dir=cluster.directory, controllers=None)
        except ToolError:
            time.sleep(0.2)
    raise AssertionError("no active controller answered")


def wait_healed(cluster: LocalCluster, timeout_s: float) -> dict[str, Any] | None:
    """None once the cluster is healthy; the last status seen if it is not in time."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
            if healthy(status):
                return None
        except ToolError as exc:
            status = {"error": str(exc)}
        time.sleep(0.2)
    return status


def nemesis_target(
    cluster: LocalCluster, monitor: FenceMonitor, kills: list[tuple[int, float]]
) -> nemesis.NemesisTarget:
    def leader_of(partition: int) -> int:
        leader: int = describe(cluster)["topics"][TOPIC]["partitions"][partition]["leader"]
        return leader

    def kill(node: int) -> None:
        monitor.touch(node)
        kills.append((node, time.monotonic()))
        cluster.kill(node)

    def pause(node: int) -> None:
        monitor.touch(node)
        cluster.pause(node)

    return nemesis.NemesisTarget(
        nodes=sorted(cluster.nodes),
        leader_of=leader_of,
        active_controller=lambda: int(describe(cluster)["controller"]),
        kill=kill,
        pause=pause,
        resume=cluster.resume,
        restart=lambda nodes: cluster.start(nodes),
        sleep=time.sleep,
    )


def run(seed: int, rounds: int, directory: Path, log: Callable[[str], None] = print) -> RunResult:
    """One seed's run in ``directory`` (a fresh cluster); see the module docstring."""
    cluster = LocalCluster.create(directory, 3, SETTINGS)
    cluster.start()
    recorder = Recorder()
    stop = threading.Event()
    monitor = FenceMonitor(cluster, recorder)
    threads: list[threading.Thread] = []
    faults = nemesis.schedule(seed, rounds, PARTITIONS)
    failovers: list[float] = []
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        threads = [
            threading.Thread(target=produce, args=(cluster.bootstrap, f"p{n}", recorder, stop))
            for n in range(PRODUCERS)
        ]
        threads.append(threading.Thread(target=consume, args=(cluster.bootstrap, recorder, stop)))
        threads.append(threading.Thread(target=monitor.run))
        for thread in threads:
            thread.start()
        time.sleep(SETTLE_S)
        for number, fault in enumerate(faults):
            _round(
                cluster,
                monitor,
                recorder,
                f"seed {seed} round {number}: {fault}",
                fault,
                failovers,
                log,
            )
        stop.set()
        monitor.stop.set()
        for thread in threads:
            thread.join(FLUSH_TIMEOUT_S + 30)
        history = recorder.history
        if (status := wait_healed(cluster, HEAL_TIMEOUT_S)) is not None:
            history.unhealed_rounds.append(f"seed {seed} at the end: {status}")
        history.log = read_partitions(cluster.bootstrap, TOPIC, range(PARTITIONS))
        cluster.stop()
        history.replicas = read_replicas(cluster)
        verdict = check(history)
        return RunResult(
            seed=seed,
            rounds=rounds,
            acknowledged=len(history.acknowledged),
            indeterminate=recorder.failed,
            failovers_s=failovers,
            verdict=verdict,
            faults=[str(fault) for fault in faults],
        )
    finally:
        stop.set()
        monitor.stop.set()
        cluster.stop()


def _round(
    cluster: LocalCluster,
    monitor: FenceMonitor,
    recorder: Recorder,
    label: str,
    fault: nemesis.Fault,
    failovers: list[float],
    log: Callable[[str], None],
) -> None:
    monitor.start_round(label)
    kills: list[tuple[int, float]] = []
    started = time.monotonic()
    victims = nemesis.apply(fault, nemesis_target(cluster, monitor, kills))
    status = wait_healed(cluster, HEAL_TIMEOUT_S)
    if status is not None:
        recorder.history.unhealed_rounds.append(f"{label}: {status}")
        for node in cluster.nodes:
            cluster.resume(node)
        cluster.start()
        if wait_healed(cluster, HEAL_TIMEOUT_S) is not None:
            raise AssertionError(f"{label}: the cluster did not heal, even after a restart")
    if fault.kind == "kill-leader" and kills:
        killed_at = kills[0][1]
        acknowledged = recorder.first_ack_after(fault.partition, killed_at)
        if acknowledged is not None:
            failovers.append(acknowledged - killed_at)
    log(f"{label}: victims {victims}, healed after {time.monotonic() - started:.1f} s")
    time.sleep(SETTLE_S)


def read_replicas(cluster: LocalCluster) -> dict[int, dict[int, list[tuple[int, bytes]]]]:
    """Each node's copy of each partition, read from its files (the node stopped)."""
    copies: dict[int, dict[int, list[tuple[int, bytes]]]] = {}
    for node in cluster.nodes:
        for partition in range(PARTITIONS):
            directory = cluster.directory / f"node-{node}" / f"{TOPIC}-{partition}"
            if not directory.exists():
                continue
            reader = PartitionReader(directory)
            start, end = reader.bounds()
            records: list[tuple[int, bytes]] = []
            for raw in reader.iter_batches(start, end):
                batch = decode_batch(raw.data)
                for record in batch.records:
                    if start <= record.offset < end and record.value is not None:
                        records.append((record.offset, bytes(record.value)))
            copies.setdefault(node, {})[partition] = records
    return copies


def summary(results: list[RunResult]) -> str:
    """The one line ``make faults`` prints."""
    total = Verdict()
    for result in results:
        total.merge(result.verdict)
    rounds = sum(r.rounds for r in results)
    acknowledged = sum(r.acknowledged for r in results)
    indeterminate = sum(r.indeterminate for r in results)
    failovers = sorted(f for r in results for f in r.failovers_s)
    counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in total.counts().items())
    line = (
        f"faults: {rounds} rounds over {len(results)} seeds, {acknowledged} acknowledged, "
        f"{indeterminate} indeterminate: {counts}"
    )
    if failovers:
        line += (
            f"; leader-kill failover median {statistics.median(failovers):.2f} s, "
            f"max {failovers[-1]:.2f} s over {len(failovers)} kills"
        )
    return line + ("; PASS" if total.ok else "; FAIL")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="how many seeds (1, 2, ...)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=50, help="rounds per seed")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    arguments = parser.parse_args(argv)
    results = []
    log = (lambda line: None) if arguments.quiet else (lambda line: print(line, flush=True))
    for seed in range(arguments.first_seed, arguments.first_seed + arguments.seeds):
        scratch = Path(tempfile.mkdtemp(prefix=f"faults-{seed}-"))
        result = run(seed, arguments.rounds, scratch, log)
        results.append(result)
        if result.verdict.ok:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"seed {seed}: {result.verdict.describe()}\nits nodes' logs are kept in {scratch}")
    if arguments.json:
        figures = [
            {
                "seed": r.seed,
                "rounds": r.rounds,
                "acknowledged": r.acknowledged,
                "indeterminate": r.indeterminate,
                "failovers_s": r.failovers_s,
                "counts": r.verdict.counts(),
                "examples": r.verdict.examples,
                "faults": r.faults,
            }
            for r in results
        ]
        arguments.json.write_text(json.dumps(figures, indent=2))
    print(summary(results), flush=True)
    return 0 if all(r.verdict.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
