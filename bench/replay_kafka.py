"""The replay's Kafka read path: records per second of one chunk read through it, with
librdkafka's default ``fetch.queue.backoff.ms`` (1 s) and with the path's own (10 ms).

One ``platform serve`` broker on loopback holds a one-partition topic of small records
(100 B values by default, produced once by confluent-kafka). Each run reads the whole
partition as one chunk with ``read_chunk`` on the Kafka path (a confluent-kafka consumer,
the records turned into Arrow batches) in this process; the two settings alternate, so slow
stretches of the shared machine fall on both. Reported: the median and min-max of the
records per second, and the ratio of the medians.

``python -m bench.replay_kafka`` takes about a minute; ``--records`` and ``--repeat``
change the plan, ``--json`` writes the raw runs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.clients import kafka_produce
from bench.harness import (
    Deadline,
    Spread,
    format_spread,
    invocation,
    markdown_table,
    progress,
    write_results,
)
from bench.peers import OurBroker
from eventplatform.spark_projections.offsets import OffsetRange, ReadOptions, parse_options
from eventplatform.spark_projections.read_paths import FETCH_QUEUE_BACKOFF_MS, read_chunk

TOPIC = "replay-kafka"
RUN_TIMEOUT_S = 900.0
LIBRDKAFKA_DEFAULT_BACKOFF_MS = 1000
SETTINGS = {
    "librdkafka's default (fetch.queue.backoff.ms=1000)": {
        "kafka.fetch.queue.backoff.ms": str(LIBRDKAFKA_DEFAULT_BACKOFF_MS)
    },
    f"the read path's (fetch.queue.backoff.ms={FETCH_QUEUE_BACKOFF_MS})": {},
}


@dataclass(frozen=True)
class Run:
    setting: str
    repetition: int
    records: int
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds


def read_all(options: ReadOptions, records: int) -> int:
    chunk = OffsetRange(TOPIC, 0, 0, records)
    return sum(batch.num_rows for batch in read_chunk(options, chunk))


def measure(bootstrap: str, records: int, repeat: int) -> list[Run]:
    deadline = Deadline(RUN_TIMEOUT_S)
    runs = []
    for repetition in range(repeat):
        for setting, extra in SETTINGS.items():
            if deadline.passed():
                progress("out of time, stopping early")
                return runs
            options = parse_options(
                {"topics": TOPIC, "bootstrap.servers": bootstrap, "readPath": "kafka", **extra}
            )
            started = time.perf_counter()
            read = read_all(options, records)
            seconds = time.perf_counter() - started
            if read != records:
                raise SystemExit(f"{setting}: read {read:,} records, expected {records:,}")
            runs.append(Run(setting, repetition, records, seconds))
            progress(f"{setting}, run {repetition + 1}: {records / seconds:,.0f} records/s")
    return runs


def report(runs: Sequence[Run], command: str, value_bytes: int) -> str:
    medians = {}
    rows = [["consumer setting", "records/s", "MB/s of values"]]
    for setting in SETTINGS:
        rates = [run.records_per_second for run in runs if run.setting == setting]
        if not rates:
            continue
        medians[setting] = statistics.median(rates)
        megabytes = [rate * value_bytes / 1e6 for rate in rates]
        rows.append(
            [setting, format_spread(Spread.of(rates)), format_spread(Spread.of(megabytes), 1)]
        )
    default, ours = (medians.get(setting) for setting in SETTINGS)
    ratio = f"\n\nRatio of the medians, the read path's / the default: {ours / default:.2f}"
    return (
        f"Command: `{command}`\n\n{markdown_table(rows)}"
        + (ratio if default and ours else "")
        + "\n"
    )


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=600_000, help="records in the topic")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each setting")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    arguments = parser.parse_args(argv)
    if arguments.records < 1 or arguments.repeat < 1 or arguments.value_bytes < 1:
        raise SystemExit("--records, --value-bytes and --repeat must be positive")
    scratch = Path(tempfile.mkdtemp(prefix="bench-replay-kafka-", dir=arguments.data_dir))
    broker = OurBroker(1)
    try:
        broker.start(scratch)
        broker.create([TOPIC])
        progress(f"producing {arguments.records:,} records of {arguments.value_bytes} B")
        barrier = multiprocessing.get_context("spawn").Barrier(1)
        # The producer's warm-up record comes first: the topic holds records + 1.
        kafka_produce(broker.endpoint, TOPIC, arguments.value_bytes, arguments.records - 1, barrier)
        runs = measure(broker.endpoint["bootstrap"], arguments.records, arguments.repeat)
    finally:
        broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    command = invocation(__file__, argv)
    print(report(runs, command, arguments.value_bytes))
    write_results(arguments.json, command, runs)


if __name__ == "__main__":
    main(sys.argv[1:])
