"""Broker benchmark: confluent-kafka clients in separate processes against ``platform serve``.

Three measurements, in one run, against one broker process on loopback with
a fresh data directory that is deleted at the end:

1. **Produce throughput** of 100-byte and 1 KB records at acks=1: one
   producer process (librdkafka, ``linger.ms=5``, 1 MB batches, no
   compression) sends a fixed count to a new one-partition topic as fast as
   it can and waits for every delivery report. Records/s and MB/s of record
   values, and the broker's CPU seconds per 100 MB (from /proc).
2. **Consume throughput** from the page cache: a consumer process reads the
   topic just written, from offset 0 to the end, with large fetches.
3. **End-to-end latency** at a fixed rate: a producer process sends 1 KB
   records at 5,000 per second (each carrying its send time), a consumer
   process receives them; latency is receive time minus send time, both on
   this machine's clock. The first second is a warm-up and not counted.
   Percentiles p50, p99 and p99.9.

Each throughput measurement is repeated (``--repetitions``) with a new topic
each time; medians and min-max spreads are reported, and each median is set
against the goal for this machine (ratio = measured / goal).

Run ``python -m bench.broker --quick`` for a smoke run of about a minute.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.clients import connected_consumer, send_all
from bench.harness import (
    MEGABYTE,
    Deadline,
    Spread,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
)

GOAL_PRODUCE_MB_S = 50.0
GOAL_CONSUME_MB_S = 150.0
GOAL_LATENCY_P99_MS = 10.0
LATENCY_RATE_PER_S = 5_000
LATENCY_RECORD_BYTES = 1000
WARMUP_S = 1.0
STEP_TIMEOUT_S = 300.0
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Plan:
    repetitions: int
    records_1kb: int
    records_100b: int
    latency_seconds: float


FULL = Plan(repetitions=3, records_1kb=1_000_000, records_100b=3_000_000, latency_seconds=30.0)
QUICK = Plan(repetitions=2, records_1kb=100_000, records_100b=300_000, latency_seconds=8.0)


@dataclass(frozen=True)
class Throughput:
    records: int
    value_bytes: int
    seconds: float
    broker_cpu_seconds: float

    @property
    def megabytes_per_second(self) -> float:
        return self.value_bytes / MEGABYTE / self.seconds

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds

    @property
    def broker_cpu_seconds_per_100_mb(self) -> float:
        return self.broker_cpu_seconds / (self.value_bytes / (100 * MEGABYTE))


# ---------------------------------------------------------------- broker process


class Broker:
    """``platform serve`` on a loopback port (a free one unless ``port`` is given), in its own
    process.

    ``start_seconds`` is the time from spawning the process to reading its "serving on"
    line, which it prints once every partition is open (recovered, after a crash).
    ``executable`` is the ``platform`` command to run (this interpreter's by default).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        start_timeout_s: float = START_TIMEOUT_S,
        executable: Path | None = None,
    ) -> None:
        executable = executable or Path(sys.executable).with_name("platform")
        self.spawned_at = time.monotonic()
        self.process = subprocess.Popen(
            [
                str(executable),
                "serve",
                "--data-dir",
                str(data_dir),
                "--listen",
                f"127.0.0.1:{port}",
                "--override",
                "auto.create.topics.enable=true",
                "--override",
                "group.initial.rebalance.delay.ms=0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.port = self._wait_for_port(start_timeout_s)
        self.start_seconds = time.monotonic() - self.spawned_at
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for_port(self, timeout_s: float) -> int:
        assert self.process.stdout is not None
        deadline = Deadline(timeout_s)
        while not deadline.passed():
            line = self.process.stdout.readline()
            if not line:
                break
            if "serving on" in line:
                return int(line.split("serving on ", 1)[1].split()[0].rsplit(":", 1)[1])
        self.process.kill()
        raise SystemExit("the broker did not start")

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for _ in self.process.stdout:
            pass

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def rss_bytes(self) -> int:
        """Resident set size (VmRSS in ``/proc/<pid>/status``)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise SystemExit("the broker's /proc status has no VmRSS line")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, so data not yet fsynced stays only in the page cache."""
        self.process.kill()
        self.process.wait(60)


# ---------------------------------------------------------------- client processes


def produce_worker(
    bootstrap: str, topic: str, value_bytes: int, count: int, acks: int = 1, barrier: Any = None
) -> float:
    """Send ``count`` records as fast as librdkafka takes them; seconds until all acked.

    With a ``barrier`` shared by several client processes, the clock starts once all of
    them are connected and warmed up, so the slowest one's seconds cover the whole step.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = b"x" * value_bytes
    failures = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    producer.produce(topic, b"warm-up", on_delivery=delivered)
    producer.flush(STEP_TIMEOUT_S)
    if barrier is not None:
        barrier.wait(STEP_TIMEOUT_S)
    started = time.perf_counter()
    send_all(producer, topic, value, count, delivered, Deadline(STEP_TIMEOUT_S))
    if producer.flush(STEP_TIMEOUT_S) != 0 or failures:
        raise SystemExit(f"produce failed: {failures[:3]}")
    return time.perf_counter() - started


def consume_worker(
    bootstrap: str,
    topic: str,
    count: int,
    assignments: Sequence[tuple[int, int]] = ((0, 1),),
    barrier: Any = None,
) -> float:
    """Read ``count`` records; seconds from first fetch to last.

    ``assignments`` are (partition, first offset) pairs, read together; by default
    partition 0 after the warm-up record. With a ``barrier`` shared by several client
    processes, the partitions are assigned (and the clock starts) once all are connected.
    """
    from confluent_kafka import TopicPartition

    consumer = connected_consumer(bootstrap, topic)
    if barrier is not None:
        barrier.wait(STEP_TIMEOUT_S)
    consumer.assign([TopicPartition(topic, partition, offset) for partition, offset in assignments])
    received = 0
    deadline = Deadline(STEP_TIMEOUT_S)
    started = time.perf_counter()
    while received < count and not deadline.passed():
        # Ask for no more than remain: consume() waits its timeout for a full chunk.
        for message in consumer.consume(min(10_000, count - received), 1.0):
            if message.error() is None:
                received += 1
    seconds = time.perf_counter() - started
    consumer.close()
    if received < count:
        raise SystemExit(f"consumed {received} of {count} records")
    return seconds


def latency_consumer(bootstrap: str, topic: str, seconds: float, ready: Any, results: Any) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    consumer.consume(1, 1.0)
    ready.set()
    latencies_us = []
    deadline = Deadline(seconds + 10)
    warm_until_ns = time.time_ns() + int(WARMUP_S * 1e9)
    while not deadline.passed():
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            now_ns = time.time_ns()
            value = message.value()
            if value == b"stop":
                break
            sent_ns = int.from_bytes(value[:8], "big")
            if sent_ns >= warm_until_ns:
                latencies_us.append((now_ns - sent_ns) / 1000)
    consumer.close()
    results.put(latencies_us)


def latency_producer(bootstrap: str, topic: str, seconds: float, linger_ms: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": linger_ms})
    padding = b"x" * (LATENCY_RECORD_BYTES - 8)
    interval = 1 / LATENCY_RATE_PER_S
    total = int(seconds * LATENCY_RATE_PER_S)
    started = time.perf_counter()
    for index in range(total):
        delay = started + index * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, time.time_ns().to_bytes(8, "big") + padding)
        producer.poll(0)
    producer.produce(topic, b"stop")
    producer.flush(STEP_TIMEOUT_S)
    return total


# ---------------------------------------------------------------- measurements


def run_in_process(function: Any, *arguments: Any) -> Any:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, arguments)


def measure_throughput(
    broker: Broker, value_bytes: int, count: int, tag: str
) -> tuple[Throughput, Throughput]:
    topic = f"bench-{tag}-{value_bytes}b"
    cpu_before = broker.cpu_seconds()
    produce_seconds = run_in_process(produce_worker, broker.bootstrap, topic, value_bytes, count)
    cpu_produce = broker.cpu_seconds() - cpu_before
    consume_seconds = run_in_process(consume_worker, broker.bootstrap, topic, count)
    cpu_consume = broker.cpu_seconds() - cpu_before - cpu_produce
    size = value_bytes * count
    return (
        Throughput(count, size, produce_seconds, cpu_produce),
        Throughput(count, size, consume_seconds, cpu_consume),
    )


def measure_latency(broker: Broker, seconds: float, linger_ms: int) -> list[float]:
    topic = f"bench-latency-{linger_ms}"
    run_in_process(produce_worker, broker.bootstrap, topic, 10, 1)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    results = context.Queue()
    consumer = context.Process(
        target=latency_consumer, args=(broker.bootstrap, topic, seconds, ready, results)
    )
    consumer.start()
    if not ready.wait(START_TIMEOUT_S):
        consumer.kill()
        raise SystemExit("latency consumer did not start")
    run_in_process(latency_producer, broker.bootstrap, topic, seconds, linger_ms)
    latencies: list[float] = results.get(timeout=STEP_TIMEOUT_S)
    consumer.join(30)
    return latencies


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# ---------------------------------------------------------------- report


def report(results: dict[str, Any]) -> str:
    rows = [["measurement", "records/s median (min-max)", "MB/s median (min-max)", "goal", "ratio"]]
    for key, label, goal in (
        ("produce_1000", "produce 1 KB, acks=1", GOAL_PRODUCE_MB_S),
        ("produce_100", "produce 100 B, acks=1", None),
        ("consume_1000", "consume 1 KB (page cache)", GOAL_CONSUME_MB_S),
        ("consume_100", "consume 100 B (page cache)", None),
    ):
        samples = [Throughput(**item) for item in results[key]]
        rate = Spread.of([sample.records_per_second for sample in samples])
        speed = Spread.of([sample.megabytes_per_second for sample in samples])
        rows.append(
            [
                label,
                format_spread(rate),
                format_spread(speed, 1),
                f">= {goal:.0f} MB/s" if goal else "-",
                f"{speed.median / goal:.2f}" if goal else "-",
            ]
        )
    cpu_rows = [["measurement", "broker CPU s per 100 MB, median"]]
    for key in ("produce_1000", "produce_100", "consume_1000", "consume_100"):
        samples = [Throughput(**item) for item in results[key]]
        cpu = statistics.median(sample.broker_cpu_seconds_per_100_mb for sample in samples)
        cpu_rows.append([key.replace("_", " ") + " B", f"{cpu:.2f}"])
    latency = results["latency"]
    latency_rows = [
        [
            "rate",
            "linger.ms",
            "records",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "p99 goal",
            "ratio",
        ],
        [
            f"{LATENCY_RATE_PER_S}/s of 1 KB",
            str(latency["linger_ms"]),
            str(latency["count"]),
            f"{latency['p50_ms']:.2f}",
            f"{latency['p99_ms']:.2f}",
            f"{latency['p999_ms']:.2f}",
            f"{latency['max_ms']:.2f}",
            f"< {GOAL_LATENCY_P99_MS:.0f} ms",
            f"{latency['p99_ms'] / GOAL_LATENCY_P99_MS:.2f}",
        ],
    ]
    return "\n\n".join(
        [markdown_table(rows), markdown_table(cpu_rows), markdown_table(latency_rows)]
    )


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the broker data")
    parser.add_argument(
        "--linger-ms", type=int, default=1, help="producer linger in the latency run"
    )
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    arguments = parser.parse_args(argv)
    plan = QUICK if arguments.quick else FULL
    root = Path(tempfile.mkdtemp(prefix="bench-broker-", dir=arguments.data_dir))
    broker = Broker(root / "data")
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(root)}
    try:
        for value_bytes, count in ((1000, plan.records_1kb), (100, plan.records_100b)):
            for repetition in range(plan.repetitions):
                progress(f"throughput {value_bytes} B, repetition {repetition + 1}")
                produced, consumed = measure_throughput(
                    broker, value_bytes, count, f"r{repetition}"
                )
                results.setdefault(f"produce_{value_bytes}", []).append(asdict(produced))
                results.setdefault(f"consume_{value_bytes}", []).append(asdict(consumed))
                progress(
                    f"  produce {produced.megabytes_per_second:.1f} MB/s, "
                    f"consume {consumed.megabytes_per_second:.1f} MB/s"
                )
        progress(f"latency at {LATENCY_RATE_PER_S}/s for {plan.latency_seconds:.0f} s")
        latencies_us = measure_latency(broker, plan.latency_seconds, arguments.linger_ms)
        results["latency"] = {
            "linger_ms": arguments.linger_ms,
            "count": len(latencies_us),
            "p50_ms": percentile(latencies_us, 0.50) / 1000,
            "p99_ms": percentile(latencies_us, 0.99) / 1000,
            "p999_ms": percentile(latencies_us, 0.999) / 1000,
            "max_ms": max(latencies_us) / 1000,
        }
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    results["command"] = invocation(__file__, argv)
    print(f"command: {results['command']}\n")
    print(report(results))
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
