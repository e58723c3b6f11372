"""Replay benchmark: a Spark rebuild of a projection against the streaming runner, same events.

The workload is the page-view projection of ``bench/projections.py`` (see
``harness``). ``--events`` ``PageViewed`` events (default 5,000,000) are
produced once, by the project's ``EventProducer`` without compression, to a
topic of ``--partitions`` partitions on a ``platform serve`` broker started
for the run (fresh data directory, deleted at the end). Then, on those events:

* **count**: ``spark.read.format("eventlog")`` over every event with
  ``dataDir`` (the direct segment read path), ``.count()``, on ``local[2]``;
  and the same count over an empty range (each partition from its high
  watermark), which is what Spark costs per query before any record.
* **runner**: one ``ProjectionRunner`` at batch size 1000 re-consumes the
  topic from the broker into a fresh database, timed as ``bench/projections.py``
  times it: from the group's assignment to the commit of the last event.
  ``--runner-events K`` stops it after the first K events (its rate over
  them then stands for the whole run; the report says so).
* **rebuild**: ``plan_ranges`` and ``rebuild(..., from_start=True)`` of the same
  projection into a fresh database with Spark ``local[2]``, timed end to end:
  planning, the scan for corrections, the pre-merge, the shuffle, the writes
  and the swap. Both tables are then compared with the runner's, row for
  row (by digest), when the runner applied every event.

Runner and rebuild alternate, ``--rebuild-repeat`` times; counts run
``--repeat`` times. Medians are reported, and the ratio of the rebuild's
median events/s to the runner's.

Spark's event log goes to the scratch directory (uncompressed), and the
report lists each Spark job of each rebuild with its duration.

``--phases`` (``--phase-repeat`` times) also times the steps of the read
path and of the rebuild on the same events: the data source's partition
function (``read_chunk``) called in this process, on one core and without
Spark; a count of the same rows from a source whose workers only re-yield
one decoded sample (``bench_repeated``: what Spark costs to take the rows
in); and, over the rebuild's own chunks, Spark jobs that only read them,
that scan them for corrections (the rebuild's first job), and that read and
pre-merge them (its second job, without the shuffle and the writes). The
same pre-merge also runs fed through the ``eventlog`` DataFrame and
``mapInArrow``, as rebuilds did before they read their chunks themselves.

Spark's Python workers import this workload from ``bench.harness``, so the repository
root goes on their ``PYTHONPATH``; they run this interpreter (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import select

from bench.harness import (
    Deadline,
    Spread,
    describe_bytes,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    metadata,
    page_stats,
    page_view_chunks,
    page_view_projection,
    progress,
    user_stats,
)
from bench.projections import POSTGRES_ADMIN_DEFAULT, fresh_database, run_eventplatform
from bench.replay_sources import (
    NUMPY_COUNT_STEP,
    REPEATED_STEP,
    NumpyDecoded,
    RepeatedBatches,
)
from eventplatform.events import EventProducer, EventRef
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.migrate import upgrade
from eventplatform.spark_projections.offsets import parse_options
from eventplatform.spark_projections.offsets import plan as read_plan
from eventplatform.spark_projections.read_paths import read_chunk
from eventplatform.testing import BrokerProcess

EVENTS_DEFAULT = 5_000_000
PARTITIONS_DEFAULT = 4
REPEAT_DEFAULT = 3
REBUILD_REPEAT_DEFAULT = 1
BATCH_SIZE = 1000
MASTER = "local[2]"
GOAL_RATIO = 3.0
GOAL_COUNT_PER_S = 1_000_000
REPOSITORY = Path(__file__).resolve().parent.parent
PRODUCE_CHUNK = 20_000
PRODUCE_IN_FLIGHT = 4
PRODUCER_CONFIG = {"compression.type": "none", "linger.ms": 20, "batch.size": 1_000_000}
PRODUCE_TIMEOUT_S = 1800.0
SPARK_JOB_TIMEOUT_S = 1800.0
RUN_TIMEOUT_S = 4 * 3600.0
BYTES_PER_EVENT = 400
"""Room per event: about 340 bytes of segment data, plus index files and two databases."""
SPARK_SETTINGS = {"spark.ui.showConsoleProgress": "false"}
TOPIC = "benchviews"
WARM_UP_OFFSETS = 10_000
"""The warm-up count reads each partition up to this offset."""

# ---------------------------------------------------------------- producing


def produce(bootstrap: str, events: int) -> float:
    """Append ``events`` page views; returns the seconds it took."""
    deadline = Deadline(PRODUCE_TIMEOUT_S)
    started = time.perf_counter()
    produced = 0
    with EventProducer(bootstrap, config=PRODUCER_CONFIG) as producer:
        in_flight: list[Future[list[EventRef]]] = []
        for chunk in page_view_chunks(events, PRODUCE_CHUNK):
            if deadline.passed():
                raise SystemExit(f"producing ran out of time after {produced:,} events")
            in_flight.append(producer.submit(chunk))
            produced += len(chunk)
            if len(in_flight) >= PRODUCE_IN_FLIGHT:
                in_flight.pop(0).result(timeout=PRODUCE_TIMEOUT_S)
            if produced % 500_000 < PRODUCE_CHUNK:
                progress(f"produced {produced:,} events")
        for future in in_flight:
            future.result(timeout=PRODUCE_TIMEOUT_S)
    return time.perf_counter() - started


# ---------------------------------------------------------------- Spark


def start_spark(settings: dict[str, str], event_dir: Path) -> Any:
    """``local[2]``, with an uncompressed event log in ``event_dir`` (for the jobs' times)."""
    from eventplatform.spark_projections.session import spark_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [str(REPOSITORY), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    event_dir.mkdir(parents=True, exist_ok=True)
    event_log = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_dir.as_uri(),
        "spark.eventLog.compress": "false",
    }
    session = spark_session(
        MASTER, {**SPARK_SETTINGS, **event_log, **settings}, app_name="bench-replay"
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RepeatedBatches)
    session.dataSource.register(NumpyDecoded)
    return session


@contextmanager
def job_deadline(spark: Any, seconds: float) -> Iterator[None]:
    """Cancel every Spark job still running after ``seconds`` (the job then raises)."""
    timer = threading.Timer(seconds, spark.sparkContext.cancelAllJobs)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def eventlog(spark: Any, options: dict[str, str], source: str = "eventlog") -> Any:
    reader = spark.read.format(source)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@dataclass(frozen=True)
class Sample:
    """One timed step: ``events`` in ``seconds`` (``cpu_seconds``: this process, runner only)."""

    step: str
    database: str
    events: int
    seconds: float
    cpu_seconds: float | None = None
    note: str = ""

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds


def time_count(
    spark: Any, options: dict[str, str], step: str, expected: int, source: str = "eventlog"
) -> Sample:
    with job_deadline(spark, SPARK_JOB_TIMEOUT_S):
        started = time.perf_counter()
        counted = eventlog(spark, options, source).count()
        seconds = time.perf_counter() - started
    if counted != expected:
        raise SystemExit(f"{step}: counted {counted:,} events, expected {expected:,}")
    return Sample(step, "-", counted, seconds)


# ---------------------------------------------------------------- runner and rebuild


def prepare(url: str) -> None:
    engine = create_store_engine(url)
    try:
        upgrade(engine)
        metadata.create_all(engine)
    finally:
        engine.dispose()


def table_digest(url: str) -> str:
    """SHA-256 of every row of both tables, in key order."""
    engine = create_store_engine(url)
    digest = hashlib.sha256()
    try:
        with engine.connect() as connection:
            for table in (page_stats, user_stats):
                query = select(table).order_by(*table.primary_key.columns)
                for row in connection.execute(query):
                    digest.update(repr(tuple(row)).encode())
    finally:
        engine.dispose()
    return digest.hexdigest()


def run_runner(
    database: str, admin_url: str, scratch: Path, bootstrap: str, events: int, note: str
) -> tuple[Sample, str]:
    with fresh_database(database, admin_url, scratch) as url:
        prepare(url)
        measured = run_eventplatform(url, database, bootstrap, BATCH_SIZE, events)
        digest = table_digest(url)
    sample = Sample(
        "runner", database, measured.events, measured.seconds, measured.cpu_seconds, note
    )
    return sample, digest


def run_rebuild(
    spark: Any, database: str, admin_url: str, scratch: Path, options: dict[str, str], events: int
) -> tuple[Sample, str, tuple[float, float]]:
    """The rebuild's sample, the digest of its tables, and when it ran (epoch seconds)."""
    from eventplatform.spark_projections.replay import ReplayRequest, plan_ranges, rebuild

    projection = page_view_projection(f"bench-replay-{uuid.uuid4().hex[:10]}")
    with fresh_database(database, admin_url, scratch) as url:
        prepare(url)
        with job_deadline(spark, SPARK_JOB_TIMEOUT_S):
            window_start = time.time()
            started = time.perf_counter()
            ranges = plan_ranges(projection, url, options, ReplayRequest())
            summary = rebuild(spark, projection, url, ranges, options, from_start=True)
            seconds = time.perf_counter() - started
            window = (window_start, time.time())
        digest = table_digest(url)
    if summary.events_read != events or summary.events_applied != events:
        raise SystemExit(
            f"rebuild read {summary.events_read:,} and applied {summary.events_applied:,} "
            f"events, expected {events:,}"
        )
    note = f"{summary.rows_written:,} rows written; rebuild's own clock {summary.seconds:.1f} s"
    return Sample("rebuild", database, events, seconds, note=note), digest, window


# ---------------------------------------------------------------- phases of the read path


def direct_decode(options: dict[str, str], events: int) -> Sample:
    """The data source's partition function, called here for every chunk: one core."""
    read_options = parse_options(options)
    started = time.perf_counter()
    rows = 0
    for chunk in read_plan(read_options).chunks:
        for batch in read_chunk(read_options, chunk):
            rows += batch.num_rows
    seconds = time.perf_counter() - started
    if rows != events:
        raise SystemExit(f"direct decode read {rows:,} rows, expected {events:,}")
    return Sample("read_chunk in this process (1 core, no Spark)", "-", rows, seconds)


def replay_input(spark: Any, options: dict[str, str]) -> Any:
    """The rebuild's input over every event (its chunks, as ``rebuild`` plans them)."""
    from eventplatform.spark_projections.replay import range_of
    from eventplatform.spark_projections.replay_input import ReplayInput

    ranges = [range_of(item) for item in read_plan(options).partitions]
    return ReplayInput.of(spark, ranges, options)


def read_only(options: Any) -> Callable[[Iterator[Any]], Iterator[int]]:
    """``mapPartitions`` over the rebuild's chunks: read them, count the records."""

    def run(chunks: Iterator[Any]) -> Iterator[int]:
        yield sum(batch.num_rows for chunk in chunks for batch in read_chunk(options, chunk))

    return run


def premerged_events(partials: Iterator[Any]) -> Iterator[int]:
    """Of the pre-merge's partials, the events they hold (its count partials)."""
    import pickle

    from eventplatform.spark_projections import execute

    yield sum(pickle.loads(p[3]) for p in partials if p[0] == execute.COUNT)


def premerge_arrow(job: Any) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``mapInArrow``: the pre-merge fed through the DataFrame, its events counted."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:

        from eventplatform.spark_projections import execute

        events = next(premerged_events(execute.premerge(job, batches)))
        yield pa.RecordBatch.from_pydict({"rows": [events]})

    return run


def measure_phases(
    spark: Any, options: dict[str, str], events: int, repeat: int, deadline: Deadline
) -> list[Sample]:
    from pyspark.sql import functions as sql

    from eventplatform.events import Correction
    from eventplatform.spark_projections import execute

    source = replay_input(spark, options)

    def premerge_job() -> Any:
        group = f"bench-replay-{uuid.uuid4().hex[:10]}"
        return execute.PartialsJob(page_view_projection(group), {}, frozenset())

    def scan() -> int:
        source.corrections(spark, Correction.event_type)
        return events  # the scan reads them all; none is a correction

    def fused() -> int:
        job = premerge_job()
        premerged = source.rdd(spark).mapPartitions(execute.premerge_chunks(job, source.options))
        return int(premerged.mapPartitions(premerged_events).sum())

    def through_dataframe() -> int:
        frame = eventlog(spark, options).select(*execute.PREMERGE_COLUMNS)
        counted = frame.mapInArrow(premerge_arrow(premerge_job()), "rows long")
        return int(counted.agg(sql.sum("rows")).collect()[0][0])

    steps: list[tuple[str, Callable[[], int]]] = [
        (
            "read the chunks in the rebuild's workers (records counted)",
            lambda: int(source.rdd(spark).mapPartitions(read_only(source.options)).sum()),
        ),
        ("scan for corrections (the rebuild's first job)", scan),
        ("read and pre-merge in the same workers (the rebuild's second job)", fused),
        (
            "pre-merge fed through the eventlog DataFrame and mapInArrow (5 columns)",
            through_dataframe,
        ),
    ]
    samples = []
    for repetition in range(repeat):
        if deadline.passed():
            break
        done = [
            direct_decode(options, events),
            time_count(spark, options, REPEATED_STEP, events, source="bench_repeated"),
        ]
        for step, job in steps:
            with job_deadline(spark, SPARK_JOB_TIMEOUT_S):
                started = time.perf_counter()
                counted = job()
                seconds = time.perf_counter() - started
            if counted != events:
                raise SystemExit(f"{step}: {counted:,} events, expected {events:,}")
            done.append(Sample(step, "-", events, seconds))
        for sample in done:
            progress(
                f"phase {repetition + 1}: {sample.step}: {sample.seconds:.1f} s, "
                f"{sample.events_per_second:,.0f} events/s"
            )
        samples += done
    return samples


# ---------------------------------------------------------------- Spark's jobs of a rebuild


@dataclass(frozen=True)
class Window:
    """When one rebuild ran (epoch seconds), and into which database."""

    database: str
    start: float
    end: float


def spark_jobs(event_dir: Path, windows: Sequence[Window]) -> list[dict[str, Any]]:
    """From Spark's event log, the jobs that ran inside each rebuild's window."""
    jobs: dict[int, dict[str, Any]] = {}
    stages: dict[int, str] = {}
    for path in sorted(event_dir.rglob("events_*")):  # Spark 4: <dir>/eventlog_v2_<app>/
        with path.open() as lines:
            for line in lines:
                event = json.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerStageSubmitted":
                    info = event["Stage Info"]
                    stages[info["Stage ID"]] = re.sub(r"\S*/", "", info["Stage Name"])
                elif kind == "SparkListenerJobStart":
                    jobs[event["Job ID"]] = {
                        "started": event["Submission Time"] / 1000,
                        "stages": event["Stage IDs"],
                    }
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                    jobs[event["Job ID"]]["ended"] = event["Completion Time"] / 1000
    found = []
    for number, window in enumerate(windows, 1):
        for job_id, job in sorted(jobs.items()):
            if window.start <= job["started"] and job.get("ended", window.end + 1) <= window.end:
                names = [stages.get(stage, "?") for stage in job["stages"] if stage in stages]
                found.append(
                    {
                        "rebuild": number,
                        "database": window.database,
                        "job": job_id,
                        "stages": names,
                        "offset_s": job["started"] - window.start,
                        "seconds": job["ended"] - job["started"],
                    }
                )
    return found


def jobs_table(jobs: Sequence[dict[str, Any]], windows: Sequence[Window]) -> str:
    rows = [["rebuild", "Spark job (its stages)", "starts at s", "seconds", "share"]]
    for job in jobs:
        window = windows[job["rebuild"] - 1]
        rows.append(
            [
                f"{job['rebuild']} ({job['database']})",
                " / ".join(job["stages"]),
                f"{job['offset_s']:.1f}",
                f"{job['seconds']:.1f}",
                f"{job['seconds'] / (window.end - window.start):.0%}",
            ]
        )
    return markdown_table(rows)


# ---------------------------------------------------------------- report


def rates(samples: Sequence[Sample], step: str, database: str = "-") -> list[float]:
    return [s.events_per_second for s in samples if (s.step, s.database) == (step, database)]


def report(samples: Sequence[Sample], databases: Sequence[str]) -> tuple[str, list[str]]:
    rows = [
        [
            "measurement",
            "database",
            "events",
            "seconds median (min-max)",
            "events/s median (min-max)",
            "runs",
            "goal",
            "met?",
        ]
    ]
    keys = dict.fromkeys((s.step, s.database, s.events) for s in samples)
    for step, database, events in keys:
        group = [s for s in samples if (s.step, s.database, s.events) == (step, database, events)]
        seconds = Spread.of([s.seconds for s in group])
        rate = Spread.of([s.events_per_second for s in group])
        goal = f">= {GOAL_COUNT_PER_S:,}/s" if step == "count" else "-"
        met = ("yes" if rate.median >= GOAL_COUNT_PER_S else "no") if step == "count" else "-"
        rows.append(
            [
                step,
                database,
                f"{events:,}",
                format_spread(seconds, 2),
                format_spread(rate) if events else "-",
                str(len(group)),
                goal,
                met,
            ]
        )
    lines = []
    for database in databases:
        runner, spark = rates(samples, "runner", database), rates(samples, "rebuild", database)
        if runner and spark:
            ratio = statistics.median(spark) / statistics.median(runner)
            lines.append(
                f"rebuild / runner on {database}: {ratio:.2f} "
                f"({statistics.median(spark):,.0f} / {statistics.median(runner):,.0f} events/s; "
                f"goal >= {GOAL_RATIO:.0f}: {'met' if ratio >= GOAL_RATIO else 'not met'})"
            )
    count, numpy_count = rates(samples, "count"), rates(samples, NUMPY_COUNT_STEP)
    if count and numpy_count:
        lines.append(
            f"count, compiled / NumPy decoder: "
            f"{statistics.median(count) / statistics.median(numpy_count):.2f} "
            f"({statistics.median(count):,.0f} / {statistics.median(numpy_count):,.0f} events/s)"
        )
    return markdown_table(rows), lines


def versions() -> dict[str, str]:
    import pyarrow
    import pyspark

    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=False, timeout=30
        ).stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        java = f"(java -version failed: {exc})"
    return {"java": java, "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__}


# ---------------------------------------------------------------- main


@dataclass(frozen=True)
class Plan:
    events: int
    runner_events: int
    partitions: int
    repeat: int
    rebuild_repeat: int
    databases: tuple[str, ...]
    phase_repeat: int
    spark_settings: dict[str, str]


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=EVENTS_DEFAULT, help="events produced")
    parser.add_argument(
        "--runner-events",
        type=int,
        default=None,
        help="stop the runner after this many events (default: all of them)",
    )
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument("--repeat", type=int, default=REPEAT_DEFAULT, help="runs of each count")
    parser.add_argument(
        "--rebuild-repeat",
        type=int,
        default=REBUILD_REPEAT_DEFAULT,
        help="runs of the runner and of the rebuild, alternating",
    )
    parser.add_argument(
        "--database", choices=("sqlite", "postgresql"), action="append", default=None
    )
    parser.add_argument(
        "--postgres",
        default=POSTGRES_ADMIN_DEFAULT,
        help="admin URL of the PostgreSQL server; fresh databases are made and dropped there",
    )
    parser.add_argument("--skip-runner", action="store_true", help="only Spark")
    parser.add_argument("--skip-rebuild", action="store_true", help="no runner or rebuild")
    parser.add_argument("--phases", action="store_true", help="also time the read path's steps")
    parser.add_argument("--phase-repeat", type=int, default=1, help="runs of each phase")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    return parser.parse_args(argv)


def spark_settings(pairs: Sequence[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--spark-conf {pair!r} is not KEY=VALUE")
        settings[key] = value
    return settings


def measure(
    plan: Plan, spark: Any, broker: BrokerProcess, admin_url: str, scratch: Path
) -> tuple[list[Sample], list[Window]]:
    """Every sample, and when each rebuild ran."""
    deadline = Deadline(RUN_TIMEOUT_S)
    direct = {"topics": TOPIC, "dataDir": str(broker.data_dir), "readPath": "direct"}
    empty = {**direct, "startingOffsets": "latest"}
    samples: list[Sample] = []
    windows: list[Window] = []
    # Warm-up, not timed: the first query starts Spark's Python workers and JIT.
    time_count(spark, empty, "warm-up", 0)
    ends = {
        str(partition): min(high, WARM_UP_OFFSETS)
        for (_, partition), (_, high) in read_plan(direct).bounds().items()
    }
    eventlog(spark, {**direct, "endingOffsets": json.dumps({TOPIC: ends})}).count()
    for repetition in range(plan.repeat):
        if deadline.passed():
            break
        samples.append(time_count(spark, empty, "empty range (Spark's cost per query)", 0))
        samples.append(time_count(spark, direct, "count", plan.events))
        samples.append(
            time_count(spark, direct, NUMPY_COUNT_STEP, plan.events, source="eventlog_numpy")
        )
        progress(
            f"count {repetition + 1}: {samples[-2].events_per_second:,.0f} events/s, "
            f"NumPy decoder {samples[-1].events_per_second:,.0f} "
            f"(empty range {samples[-3].seconds:.2f} s)"
        )
    if plan.phase_repeat:
        samples += measure_phases(spark, direct, plan.events, plan.phase_repeat, deadline)
    replay_options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    for database in plan.databases:
        for repetition in range(plan.rebuild_repeat):
            if deadline.passed():
                break
            runner_digest = None
            if plan.runner_events:
                partial = plan.runner_events < plan.events
                note = f"first {plan.runner_events:,} of {plan.events:,} events" if partial else ""
                sample, digest = run_runner(
                    database, admin_url, scratch, broker.bootstrap, plan.runner_events, note
                )
                samples.append(sample)
                runner_digest = None if partial else digest
                progress(
                    f"runner {database} {repetition + 1}: {sample.events:,} events, "
                    f"{sample.events_per_second:,.0f} events/s"
                )
            sample, digest, window = run_rebuild(
                spark, database, admin_url, scratch, replay_options, plan.events
            )
            windows.append(Window(database, *window))
            if runner_digest is not None and digest != runner_digest:
                raise SystemExit(f"{database}: the rebuilt tables differ from the runner's")
            same = "; tables equal the runner's" if runner_digest is not None else ""
            samples.append(replace(sample, note=sample.note + same))
            progress(
                f"rebuild {database} {repetition + 1}: {sample.seconds:.1f} s, "
                f"{sample.events_per_second:,.0f} events/s{same}"
            )
    return samples, windows


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    runner_events = 0 if arguments.skip_runner or arguments.skip_rebuild else arguments.events
    if arguments.runner_events is not None and runner_events:
        runner_events = min(arguments.runner_events, arguments.events)
    plan = Plan(
        events=arguments.events,
        runner_events=runner_events,
        partitions=arguments.partitions,
        repeat=arguments.repeat,
        rebuild_repeat=0 if arguments.skip_rebuild else arguments.rebuild_repeat,
        databases=tuple(arguments.database or ("sqlite",)),
        phase_repeat=arguments.phase_repeat if arguments.phases else 0,
        spark_settings=spark_settings(arguments.spark_conf),
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-replay-", dir=arguments.data_dir))
    results: dict[str, Any] = {
        "plan": asdict(plan),
        "machine": {**describe_machine(scratch), **versions()},
    }
    broker = BrokerProcess(
        scratch / "log",
        overrides=[f"num.partitions={plan.partitions}", "group.initial.rebalance.delay.ms=0"],
    )
    spark = None
    try:
        free_bytes = shutil.disk_usage(scratch).free
        if free_bytes < plan.events * BYTES_PER_EVENT:
            raise SystemExit(
                f"refusing to run: {scratch} has {describe_bytes(free_bytes)} free, "
                f"{plan.events:,} events want {describe_bytes(plan.events * BYTES_PER_EVENT)}"
            )
        broker.start()
        progress(f"producing {plan.events:,} events to {plan.partitions} partitions")
        produce_seconds = produce(broker.bootstrap, plan.events)
        results["produce_seconds"] = produce_seconds
        progress(f"produced in {produce_seconds:.0f} s")
        spark = start_spark(plan.spark_settings, scratch / "spark-events")
        samples, windows = measure(plan, spark, broker, arguments.postgres, scratch)
        spark.stop()
        spark = None
        jobs = spark_jobs(scratch / "spark-events", windows)
    finally:
        if spark is not None:
            spark.stop()
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    results["samples"] = [asdict(sample) for sample in samples]
    results["rebuild_jobs"] = jobs
    results["command"] = invocation(__file__, argv)
    table, ratios = report(samples, plan.databases)
    results["ratios"] = ratios
    print(f"command: {results['command']}\n")
    print(table)
    for line in ratios:
        print(f"\n{line}")
    notes = sorted({f"{s.step} {s.database}: {s.note}" for s in samples if s.note})
    for line in notes:
        print(f"\n{line}")
    if jobs:
        print(f"\nSpark jobs of each rebuild:\n\n{jobs_table(jobs, windows)}")
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
