"""Scaling benchmark: how one ``platform serve`` broker behaves as partitions and data grow.

Four measurements, each against ``platform serve`` processes on loopback with
fresh data directories, driven by confluent-kafka (librdkafka) clients in
separate spawned processes:

1. **Throughput with 1, 10 and 100 partitions.** Two producer processes
   (acks=1, 1 KB values, no key, ``linger.ms=5``, 1 MB batches) send a fixed
   count to a new topic with N partitions; then two consumer processes read
   all of it back from the page cache, the partitions dealt between them (the
   one partition's offsets cut in halves), so every partition count gets the
   same client parallelism. The processes of a step start their clocks
   together at a barrier, once all are connected, so a step's time is its
   slowest process's. Records/s and MB/s of values, and the broker's CPU per
   100 MB produced (from ``/proc/<pid>/stat``).
2. **Memory of 1,000 idle partitions.** A fresh broker's resident set
   (``VmRSS``), open files and memory mappings before and after CreateTopics of
   10 topics of 100 partitions, once the resident set has settled; the delta
   per partition; and its CPU with no client connected, over a few seconds.
3. **Rates against retained data.** Two one-partition topics (default 1 GiB
   segments) are filled, one with 100 MB and one with 10 GB of the same 1 KB
   records, as fast as two producer processes go (the fill is timed too).
   Then, alternating between the topics, a further fixed count is produced at
   the tail, and a fixed count is consumed from the tail region and from
   offset 0 (the oldest data). Constant rates mean nothing in the append,
   index or segment lookups grows with the log.
4. **Restart after SIGKILL with 10 GB on disk.** Right after a produce is
   acknowledged (so the tail is not yet fsynced), the broker holding the
   10 GB topic is killed and restarted on the same data directory and port.
   Timed from the spawn: its "serving on" line, the acknowledgement of a
   produce at acks=1, and the fetch of the last record acknowledged before the
   kill (both clients wait, retrying every 10-100 ms, from before the spawn).
   The log end after the restart must not be below the acknowledged end.

Client processes are spawned once and reused (spawning one costs about a
second here, mostly importing the bench harness). The machine is shared and
noisy: repeated steps report medians with min-max spreads. Run
``python -m bench.scaling --quick`` for a smoke run of under 35 s (20 MB
against 500 MB retained); the full run takes about 3 minutes on a 2-core VM
(8 at most) and needs 25 GB free.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.broker import Broker, Throughput, consume_worker, produce_worker
from bench.harness import (
    GIGABYTE,
    MEGABYTE,
    MIB,
    Deadline,
    check_free_space,
    command_output,
    describe_machine,
    invocation,
    progress,
)
from bench.scaling_clients import (
    CLIENT_PROCESSES,
    CONSUMERS,
    PRODUCERS,
    RESTART_TIMEOUT_S,
    ClientPool,
    StallProbe,
    create_topics,
    end_offsets,
    restart_probe,
    wait_result,
)
from bench.scaling_report import scaling_markdown
from eventplatform.log.storage.files import (
    LOG_SUFFIX,
    parse_base_offset,
    read_checkpoint,
    segment_path,
)

VALUE_BYTES = 1000
SECTION_TIMEOUT_S = 900.0
SETTLE_TIMEOUT_S = 30.0
SETTLE_INTERVAL_S = 0.5
SETTLE_CHANGE_MAX = 0.01


@dataclass(frozen=True)
class ScalingPlan:
    repetitions: int
    """Of each throughput step."""
    retained_repetitions: int
    """Of each retained-data step (short ones: the small topic bounds what is read)."""
    throughput_records: int
    partition_counts: tuple[int, ...]
    idle_topics: int
    idle_partitions_per_topic: int
    settle_seconds: float
    """At least this long before reading the resident set (longer until it stops moving)."""
    idle_cpu_seconds: float
    retained_small_bytes: int
    retained_large_bytes: int
    tail_produce_records: int
    consume_records: int
    """Read from the tail and from the oldest data; at most the small topic's records."""
    restarts: int
    restart_produce_records: int
    """Produced (and acknowledged) right before each kill."""
    free_bytes_min: int


SCALING_FULL = ScalingPlan(
    repetitions=3,
    retained_repetitions=5,
    throughput_records=500_000,
    partition_counts=(1, 10, 100),
    idle_topics=10,
    idle_partitions_per_topic=100,
    settle_seconds=3.0,
    idle_cpu_seconds=5.0,
    retained_small_bytes=100 * MEGABYTE,
    retained_large_bytes=10 * GIGABYTE,
    tail_produce_records=200_000,
    consume_records=100_000,
    restarts=3,
    restart_produce_records=100_000,
    free_bytes_min=25 * GIGABYTE,
)
SCALING_QUICK = ScalingPlan(
    repetitions=1,
    retained_repetitions=1,
    throughput_records=30_000,
    partition_counts=(1, 10, 100),
    idle_topics=10,
    idle_partitions_per_topic=100,
    settle_seconds=0.5,
    idle_cpu_seconds=1.0,
    retained_small_bytes=20 * MEGABYTE,
    retained_large_bytes=500 * MEGABYTE,
    tail_produce_records=10_000,
    consume_records=10_000,
    restarts=1,
    restart_produce_records=10_000,
    free_bytes_min=2 * GIGABYTE,
)


# ---------------------------------------------------------------- steps


def shares(count: int, parts: int) -> list[int]:
    """``count`` split into ``parts`` near-equal whole shares."""
    return [count // parts + (1 if index < count % parts else 0) for index in range(parts)]


def produce_step(pool: ClientPool, broker: Broker, topic: str, count: int) -> Throughput:
    """``count`` 1 KB records from PRODUCERS processes that start together."""
    cpu_before = broker.cpu_seconds()
    seconds = pool.run(
        produce_worker,
        [(broker.bootstrap, topic, VALUE_BYTES, share, 1) for share in shares(count, PRODUCERS)],
    )
    cpu = broker.cpu_seconds() - cpu_before
    return Throughput(count, count * VALUE_BYTES, max(seconds), cpu)


def split_for_consumers(ends: Sequence[int]) -> list[list[tuple[int, int, int]]]:
    """Every offset of every partition, as (partition, first, end) ranges for CONSUMERS
    processes: whole partitions dealt round-robin, or, with fewer partitions than
    consumers, each partition's offsets cut into consecutive pieces (one per consumer)."""
    if len(ends) >= CONSUMERS:
        return [
            [(partition, 0, ends[partition]) for partition in range(first, len(ends), CONSUMERS)]
            for first in range(CONSUMERS)
        ]
    return [
        [
            (partition, end * piece // CONSUMERS, end * (piece + 1) // CONSUMERS)
            for partition, end in enumerate(ends)
        ]
        for piece in range(CONSUMERS)
    ]


def consume_step(
    pool: ClientPool,
    broker: Broker,
    topic: str,
    ranges: Sequence[Sequence[tuple[int, int, int]]],
) -> Throughput:
    """One consumer process per list of (partition, first offset, end offset) ranges."""
    arguments = [
        (
            broker.bootstrap,
            topic,
            sum(end - first for _, first, end in group),
            [(partition, first) for partition, first, _ in group],
        )
        for group in ranges
    ]
    records = sum(argument[2] for argument in arguments)
    cpu_before = broker.cpu_seconds()
    seconds = pool.run(consume_worker, arguments)
    cpu = broker.cpu_seconds() - cpu_before
    return Throughput(records, records * VALUE_BYTES, max(seconds), cpu)


def page_cache_fraction(path: Path) -> float | None:
    """The share of ``path`` in the page cache (``fincore``), or None if unknown."""
    fields = command_output(
        ["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", str(path)]
    )
    try:
        resident, size = (int(field) for field in fields.split())
    except ValueError:
        return None
    return resident / size if size else None


def oldest_segment(partition_directory: Path) -> Path:
    return segment_path(partition_directory, 0, LOG_SUFFIX)


def bytes_to_recheck(partition_directory: Path) -> tuple[int, int]:
    """(recovery point, bytes of the segments from the one holding it): what a restart
    after a crash re-reads with CRC checks."""
    checkpoint = read_checkpoint(partition_directory) or {"recovery_point": 0}
    recovery_point = checkpoint["recovery_point"]
    segments = sorted(
        (base, path.stat().st_size)
        for path in partition_directory.iterdir()
        if path.name.endswith(LOG_SUFFIX) and (base := parse_base_offset(path.name)) is not None
    )
    holder = max((base for base, _ in segments if base <= recovery_point), default=0)
    return recovery_point, sum(size for base, size in segments if base >= holder)


# ---------------------------------------------------------------- 1. throughput


def measure_throughput(pool: ClientPool, root: Path, plan: ScalingPlan) -> dict[str, Any]:
    """Alternates the partition counts within each repetition, so slow stretches of the
    shared machine fall on all of them."""
    results: dict[str, Any] = {
        str(count): {"produce": [], "consume": []} for count in plan.partition_counts
    }
    data_dir = root / "throughput"
    broker = Broker(data_dir)
    deadline = Deadline(SECTION_TIMEOUT_S)
    try:
        for repetition in range(plan.repetitions):
            if deadline.passed():
                progress("throughput: out of time, stopping early")
                break
            for partitions in plan.partition_counts:
                topic = f"throughput-{partitions}p-r{repetition}"
                create_topics(broker.bootstrap, [topic], partitions)
                produced = produce_step(pool, broker, topic, plan.throughput_records)
                ends = end_offsets(broker.bootstrap, topic, partitions)
                consumed = consume_step(pool, broker, topic, split_for_consumers(ends))
                results[str(partitions)]["produce"].append(asdict(produced))
                results[str(partitions)]["consume"].append(asdict(consumed))
                progress(
                    f"  {partitions} partitions, repetition {repetition + 1}: produce "
                    f"{produced.megabytes_per_second:.0f} MB/s, consume "
                    f"{consumed.megabytes_per_second:.0f} MB/s"
                )
    finally:
        broker.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    return results


# ---------------------------------------------------------------- 2. idle partitions


def broker_footprint(broker: Broker) -> dict[str, int]:
    pid = broker.process.pid
    return {
        "rss_bytes": broker.rss_bytes(),
        "open_files": len(list(Path(f"/proc/{pid}/fd").iterdir())),
        "mappings": len(Path(f"/proc/{pid}/maps").read_text().splitlines()),
    }


def wait_settled(broker: Broker, seconds_min: float) -> None:
    """Sleep ``seconds_min``, then until the resident set moves less than 1 % in 0.5 s."""
    time.sleep(seconds_min)
    deadline = Deadline(SETTLE_TIMEOUT_S)
    previous = broker.rss_bytes()
    while not deadline.passed():
        time.sleep(SETTLE_INTERVAL_S)
        current = broker.rss_bytes()
        if abs(current - previous) <= SETTLE_CHANGE_MAX * previous:
            return
        previous = current


def idle_cpu_percent(broker: Broker, seconds: float) -> float:
    started, cpu_before = time.monotonic(), broker.cpu_seconds()
    time.sleep(seconds)
    return 100 * (broker.cpu_seconds() - cpu_before) / (time.monotonic() - started)


def measure_idle_partitions(root: Path, plan: ScalingPlan) -> dict[str, Any]:
    data_dir = root / "idle"
    broker = Broker(data_dir)
    try:
        wait_settled(broker, plan.settle_seconds)
        before = broker_footprint(broker)
        cpu_before = idle_cpu_percent(broker, plan.idle_cpu_seconds)
        names = [f"idle-{index}" for index in range(plan.idle_topics)]
        started = time.monotonic()
        with StallProbe(broker.bootstrap) as probe:
            create_topics(broker.bootstrap, names, plan.idle_partitions_per_topic)
        create_seconds = time.monotonic() - started
        wait_settled(broker, plan.settle_seconds)
        after = broker_footprint(broker)
        cpu_after = idle_cpu_percent(broker, plan.idle_cpu_seconds)
    finally:
        broker.kill()  # a clean shutdown would fsync a thousand empty logs for nothing
        shutil.rmtree(data_dir, ignore_errors=True)
    partitions = plan.idle_topics * plan.idle_partitions_per_topic
    progress(
        f"  {partitions} partitions: RSS {before['rss_bytes'] / MIB:.0f} -> "
        f"{after['rss_bytes'] / MIB:.0f} MiB, idle CPU {cpu_before:.1f} -> {cpu_after:.1f} %"
    )
    return {
        "partitions": partitions,
        "create_seconds": create_seconds,
        "create_longest_wait_s": probe.longest_s,
        "create_probe_requests": probe.requests,
        "before": {**before, "idle_cpu_percent": cpu_before},
        "after": {**after, "idle_cpu_percent": cpu_after},
        "idle_cpu_seconds": plan.idle_cpu_seconds,
    }


# ---------------------------------------------------------------- 3. retained data


def fill(pool: ClientPool, broker: Broker, topic: str, size_bytes: int) -> float:
    create_topics(broker.bootstrap, [topic], 1)
    started = time.monotonic()
    produce_step(pool, broker, topic, size_bytes // VALUE_BYTES)
    seconds = time.monotonic() - started
    progress(f"  filled {topic}: {size_bytes / MEGABYTE:,.0f} MB in {seconds:.1f} s")
    return seconds


def measure_retained(
    pool: ClientPool, brokers: list[Broker], data_dir: Path, plan: ScalingPlan
) -> dict[str, Any]:
    """Start a broker (appended to ``brokers``), fill both topics, then alternate between
    them: produce at the tail, read the tail region, read the oldest data."""
    broker = Broker(data_dir)
    brokers.append(broker)
    sizes = {"small": plan.retained_small_bytes, "large": plan.retained_large_bytes}
    results: dict[str, Any] = {}
    for label, size_bytes in sizes.items():
        seconds = fill(pool, broker, f"retained-{label}", size_bytes)
        results[label] = {
            "retained_bytes": size_bytes,
            "fill_seconds": seconds,
            "produce": [],
            "consume_tail": [],
            "consume_oldest": [],
            "oldest_cached": [],
        }
    count = plan.consume_records
    deadline = Deadline(SECTION_TIMEOUT_S)
    for repetition in range(plan.retained_repetitions):
        if deadline.passed():
            progress("retained data: out of time, stopping early")
            break
        for label, entry in results.items():
            topic = f"retained-{label}"
            produced = produce_step(pool, broker, topic, plan.tail_produce_records)
            end = end_offsets(broker.bootstrap, topic, 1)[0]
            tail = consume_step(pool, broker, topic, [[(0, end - count, end)]])
            entry["oldest_cached"].append(
                page_cache_fraction(oldest_segment(data_dir / f"{topic}-0"))
            )
            oldest = consume_step(pool, broker, topic, [[(0, 0, count)]])
            entry["produce"].append(asdict(produced))
            entry["consume_tail"].append(asdict(tail))
            entry["consume_oldest"].append(asdict(oldest))
            progress(
                f"  {label}, repetition {repetition + 1}: produce "
                f"{produced.megabytes_per_second:.0f} MB/s, tail "
                f"{tail.megabytes_per_second:.0f} MB/s, oldest "
                f"{oldest.megabytes_per_second:.0f} MB/s"
            )
    return results


# ---------------------------------------------------------------- 4. restart


def restart_once(
    pool: ClientPool, broker: Broker, data_dir: Path, topic: str, count: int
) -> tuple[dict[str, Any], Broker]:
    """Produce, SIGKILL right after the last acknowledgement, restart on the same data
    directory and port; returns the timings and the new broker."""
    produce_step(pool, broker, topic, count)
    acknowledged_end = end_offsets(broker.bootstrap, topic, 1)[0]
    broker.kill()
    recovery_point, recheck_bytes = bytes_to_recheck(data_dir / f"{topic}-0")
    probe = pool.start(restart_probe, broker.bootstrap, topic, acknowledged_end - 1)
    restarted = Broker(data_dir, port=broker.port, start_timeout_s=RESTART_TIMEOUT_S)
    try:
        outcome = wait_result(probe, RESTART_TIMEOUT_S + 30)
    except BaseException:
        restarted.kill()
        raise

    def since_spawn(moment: float | None) -> float | None:
        return None if moment is None else moment - restarted.spawned_at

    recovered_end = outcome["recovered_end"]
    run = {
        "retained_bytes": sum(
            path.stat().st_size for path in (data_dir / f"{topic}-0").glob(f"*{LOG_SUFFIX}")
        ),
        "recovery_point": recovery_point,
        "recheck_bytes": recheck_bytes,
        "serving_seconds": restarted.start_seconds,
        "produce_seconds": since_spawn(outcome["acknowledged_at"]),
        "fetch_seconds": since_spawn(outcome["fetched_at"]),
        "acknowledged_end": acknowledged_end,
        "recovered_end": recovered_end,
        "high_watermark": outcome["high_watermark"],
        "lost": None if recovered_end is None else max(0, acknowledged_end - recovered_end),
    }
    return run, restarted


def describe_restart(run: dict[str, Any]) -> str:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f} s"

    return (
        f"serving {seconds(run['serving_seconds'])}, produce acked "
        f"{seconds(run['produce_seconds'])}, last record fetched {seconds(run['fetch_seconds'])}, "
        f"re-checked {run['recheck_bytes'] / GIGABYTE:.2f} GB, lost {run['lost']}"
    )


# ---------------------------------------------------------------- the section


def measure_restarts(
    pool: ClientPool, brokers: list[Broker], data_dir: Path, plan: ScalingPlan
) -> list[dict[str, Any]]:
    """Kill and restart the last of ``brokers`` ``plan.restarts`` times; each restarted
    broker is appended, so the caller can kill whichever is alive."""
    runs = []
    deadline = Deadline(SECTION_TIMEOUT_S)
    for restart in range(plan.restarts):
        if deadline.passed():
            progress("restart: out of time, stopping early")
            break
        run, restarted = restart_once(
            pool, brokers[-1], data_dir, "retained-large", plan.restart_produce_records
        )
        brokers.append(restarted)
        runs.append(run)
        progress(f"  restart {restart + 1}: {describe_restart(run)}")
    return runs


def _timed(results: dict[str, Any], name: str, measure: Callable[[], Any]) -> None:
    progress(f"scaling: {name.replace('_', ' ')}")
    started = time.monotonic()
    results[name] = measure()
    results["seconds"][name] = time.monotonic() - started


def run_scaling(plan: ScalingPlan, scratch: Path) -> dict[str, Any]:
    """All four measurements with brokers under ``scratch``; their data is deleted as soon
    as each is done, but ``scratch`` itself is left for the caller."""
    check_free_space(scratch, plan.free_bytes_min)
    started = time.monotonic()
    results: dict[str, Any] = {
        "plan": asdict(plan),
        "clients": {"producers": PRODUCERS, "consumers": CONSUMERS},
        "seconds": {},
    }
    with ClientPool(CLIENT_PROCESSES) as pool:
        _timed(results, "throughput", lambda: measure_throughput(pool, scratch, plan))
        _timed(results, "idle_partitions", lambda: measure_idle_partitions(scratch, plan))
        data_dir = scratch / "retained"
        brokers: list[Broker] = []
        try:
            _timed(
                results,
                "retained",
                lambda: measure_retained(pool, brokers, data_dir, plan),
            )
            _timed(results, "restart", lambda: measure_restarts(pool, brokers, data_dir, plan))
        finally:
            for broker in brokers:
                broker.kill()  # no clean shutdown: it would fsync gigabytes about to go
            shutil.rmtree(data_dir, ignore_errors=True)
    results["seconds"]["total"] = time.monotonic() - started
    return results


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about 35 s")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the broker data")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    parser.add_argument("--free-gb-min", type=float, help="refuse to run below this free space")
    arguments = parser.parse_args(argv)
    plan = SCALING_QUICK if arguments.quick else SCALING_FULL
    if arguments.free_gb_min is not None:
        plan = replace(plan, free_bytes_min=int(arguments.free_gb_min * GIGABYTE))
    scratch = Path(tempfile.mkdtemp(prefix="bench-scaling-", dir=arguments.data_dir))
    try:
        results = run_scaling(plan, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["command"] = invocation(__file__, argv)
    results["machine"] = describe_machine(scratch.parent)
    print(f"command: {results['command']}\n")
    print(scaling_markdown(results))
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
