"""Batch cost benchmark: the CPU a projection runner's thread spends on one batch of N
events, on SQLite and on PostgreSQL, split into a fixed part and a part per event.

Why it exists: a runner that keeps up with a few hundred events a second applies
small batches, and what a batch costs whatever its size (the transaction, the
checkpoints' compare-and-set, a statement per table, the commit) then decides its
CPU per event. The read-your-writes benchmark measures that inside a busy process
(a producer and 32 request threads beside the runner), where the figures move with
the machine; this one measures the batch alone.

The projection is read-your-writes' (``bench/read_your_writes.py``): each
``OrderPlaced`` event writes a row of ``bench_ryw_orders`` and merges into its
customer's row of ``bench_ryw_customers`` (a ``Max`` column, so an event index entry
too). The events are encoded by the SDK's codec, as the log holds them, and handed
to :meth:`ProjectionRunner.apply`, the runner's whole batch path (planning,
decoding, pre-merging, the store transaction and its commit). The runner is a real
one against a ``platform serve`` broker started for the run, but the records do not
come through its consumer: that part of a poll is not measured.

For each database (a fresh SQLite file, or a fresh PostgreSQL database made and
dropped on ``--postgres``) and each batch size, ``--batches`` batches run (fewer for
large sizes: at most ``--events`` events per size), and the thread CPU time
(``time.thread_time``) of each is noted. Reported: the median CPU per batch and per
event, and the fixed cost F of a batch and the cost c of an event that fit the
medians best (least squares of the cost per event, F / N + c).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import BrokerProcess, describe_machine, invocation, markdown_table, progress
from bench.projections import POSTGRES_ADMIN_DEFAULT, fresh_database
from bench.read_your_writes import metadata, order_placed_class, order_projection
from eventplatform.events import Envelope, Position, encode
from eventplatform.projections.batch import Record
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.runner import ProjectionRunner
from eventplatform.projections.store import ProjectionStore

SIZES = (1, 4, 16, 64, 256, 1000)
BATCHES_DEFAULT = 300
EVENTS_PER_SIZE_MAX = 20_000
QUICK_BATCHES = 20
QUICK_SIZES = (1, 16, 256)
CUSTOMERS = 1000
SEED = 7


class Batches:
    """Encoded records for a topic of one partition, in log order, a batch at a time."""

    def __init__(self, event_class: Any) -> None:
        self.event_class = event_class
        self.topic = event_class.event_topic
        self.offset = 0
        self.random = random.Random(SEED)

    def next(self, size: int) -> list[Record]:
        records = []
        for _ in range(size):
            event = self.event_class(
                order_id=uuid.uuid4().hex,
                customer_id=f"customer-{self.random.randrange(CUSTOMERS)}",
                amount_cents=self.random.randrange(1, 100_000),
            )
            encoded = encode(Envelope(event))
            position = Position(self.topic, 0, self.offset)
            records.append(Record(position, encoded.value, encoded.headers))
            self.offset += 1
        return records


def measure(
    bootstrap: str, url: str, sizes: Sequence[int], batches: int, events_max: int
) -> dict[int, list[float]]:
    """Thread CPU seconds of each batch, by batch size."""
    event_class = order_placed_class(f"benchbatch-{uuid.uuid4().hex[:6]}")
    engine = create_store_engine(url)
    try:
        upgrade(engine)
        metadata.create_all(engine)
        store = ProjectionStore(engine, order_projection(event_class, f"batchcost-{uuid.uuid4()}"))
        runner = ProjectionRunner(store, bootstrap)
        source = Batches(event_class)
        runner.expected[(source.topic, 0)] = None
        try:
            runner.apply(source.next(1))  # the checkpoint row, the statements prepared
            costs: dict[int, list[float]] = {}
            for size in sizes:
                count = max(3, min(batches, events_max // size))
                prepared = [source.next(size) for _ in range(count)]
                costs[size] = []
                for records in prepared:
                    started = time.thread_time()
                    runner.apply(records)
                    costs[size].append(time.thread_time() - started)
            return costs
        finally:
            runner.close()
    finally:
        engine.dispose()


def fitted(medians: dict[int, float]) -> tuple[float, float]:
    """The fixed cost F and the cost per event c of ``seconds = F + c * size``, fitted by
    least squares to the cost per event, ``F / size + c``, so that each size weighs
    alike (fitting the cost per batch would let the largest batches decide alone)."""
    xs = [1 / size for size in medians]
    ys = [seconds / size for size, seconds in medians.items()]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    fixed = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return fixed, mean_y - fixed * mean_x


def report(results: dict[str, dict[int, list[float]]]) -> str:
    rows = [["database", "batch size", "batches", "CPU µs per batch", "CPU µs per event"]]
    lines = []
    for database, costs in results.items():
        medians = {size: statistics.median(values) for size, values in costs.items()}
        for size, median in medians.items():
            rows.append(
                [
                    database,
                    f"{size:,}",
                    f"{len(costs[size]):,}",
                    f"{median * 1e6:,.0f}",
                    f"{median * 1e6 / size:,.1f}",
                ]
            )
        if len(medians) > 1:
            fixed, per_event = fitted(medians)
            lines.append(
                f"{database}: a batch costs about {fixed * 1e6:,.0f} µs plus "
                f"{per_event * 1e6:,.1f} µs per event (least squares over the medians per event)"
            )
    return markdown_table(rows) + "\n\n" + "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database", choices=("sqlite", "postgresql"), action="append", default=None
    )
    parser.add_argument("--size", type=int, action="append", default=None, help="batch sizes")
    parser.add_argument("--batches", type=int, default=BATCHES_DEFAULT, help="batches per size")
    parser.add_argument(
        "--events", type=int, default=EVENTS_PER_SIZE_MAX, help="events per size at most"
    )
    parser.add_argument("--postgres", default=POSTGRES_ADMIN_DEFAULT)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few batches")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    arguments = parser.parse_args(argv)
    sizes = tuple(arguments.size or (QUICK_SIZES if arguments.quick else SIZES))
    batches = QUICK_BATCHES if arguments.quick else arguments.batches
    databases = tuple(arguments.database or ("sqlite", "postgresql"))
    scratch = Path(tempfile.mkdtemp(prefix="bench-batch-cost-", dir=arguments.data_dir))
    broker = BrokerProcess(scratch / "log")
    broker.start()
    results: dict[str, dict[int, list[float]]] = {}
    try:
        for database in databases:
            progress(f"{database}: batches of {', '.join(map(str, sizes))}")
            with fresh_database(database, arguments.postgres, scratch) as url:
                results[database] = measure(broker.bootstrap, url, sizes, batches, arguments.events)
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    command = invocation(__file__, argv)
    print(f"command: {command}\n")
    print(report(results))
    if arguments.json:
        document = {
            "command": command,
            "machine": describe_machine(Path(tempfile.gettempdir())),
            "cpu_s": {db: {str(k): v for k, v in c.items()} for db, c in results.items()},
        }
        arguments.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
