"""Storage engine benchmark: PartitionLog against plain file I/O on the same disk.

Three measurements, in one run, in one fresh folder that is deleted at the end:

1. **Append.** ``PartitionLog.append`` of batches of 100-byte records (about
   16 KiB and 1 MiB per batch) against ``os.write`` of the same bytes, in the
   same chunk sizes, to a plain ``O_APPEND`` file in the same folder. Each
   repetition fills a new log and a new raw file with the same total, in
   alternating slices (log, raw, log, raw, ...). Neither side fsyncs inside
   the timed loops (the log's periodic flush is disabled), so this is
   page-cache throughput; both files are fsynced and deleted, untimed, at the
   end of each repetition so every repetition starts from the same state.
2. **Sequential read.** ``PartitionLog.read(offset, 1 MiB)`` followed by
   ``SegmentSlice.read_bytes()`` (an ``os.pread`` of the slice into user
   space) against ``os.pread`` of the same segment file in 1 MiB chunks. The
   data is in the page cache.
3. **Growth.** One log is appended to up to 5 GB; at about 2 %, 10 %, 20 %,
   50 % and 100 % of that size a window of appends is timed (alternating with
   raw writes of the same size), then random reads at earlier offsets and a
   sequential read of the tail, to show that the rates stay flat as the log
   grows.

Run ``python -m bench.storage --quick`` for a smoke run of well under a minute.
The machine this runs on is usually shared: medians and min-max spreads are
reported, and ratios are taken between runs that were adjacent in time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import (
    GIB,
    GIGABYTE,
    KIB,
    MEGABYTE,
    MIB,
    Deadline,
    Sample,
    Spread,
    Stopwatch,
    check_free_space,
    describe_bytes,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
    text_table,
)
from eventplatform.log.storage import LogConfig, PartitionLog, Record
from eventplatform.log.storage.record_batch import encode_batch

RECORD_VALUE_BYTES = 100
BATCH_TARGETS_BYTES = (16 * KIB, MIB)
READ_CHUNK_BYTES = MIB
BASE_TIMESTAMP_MS = 1_700_000_000_000
FLUSH_NEVER_MS = 2**62
MAX_MESSAGE_BYTES = 8 * MIB
FILL_FLUSH_EVERY_BYTES = 512 * MIB
DEADLINE_CHECK_EVERY = 64
GROWTH_FRACTIONS = (0.02, 0.1, 0.2, 0.5, 1.0)
GROWTH_ALTERNATIONS = 4
RANDOM_SEED = 20_240_601
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_PARENT = REPOSITORY_ROOT / ".eventplatform" / "bench"


@dataclass(frozen=True)
class Settings:
    """How much to write and read; ``--quick`` shrinks everything."""

    repetitions: int
    append_total_bytes: int
    append_slice_bytes: int
    read_total_bytes: int
    growth_target_bytes: int
    growth_window_bytes: int
    random_reads: int
    tail_read_bytes: int
    free_bytes_min: int
    loop_seconds_max: float
    growth_seconds_max: float


FULL = Settings(
    repetitions=7,
    append_total_bytes=GIB,
    append_slice_bytes=64 * MIB,
    read_total_bytes=GIB,
    growth_target_bytes=5 * GIGABYTE,
    growth_window_bytes=256 * MIB,
    random_reads=500,
    tail_read_bytes=256 * MIB,
    free_bytes_min=15 * GIGABYTE,
    loop_seconds_max=120.0,
    growth_seconds_max=1800.0,
)
QUICK = Settings(
    repetitions=3,
    append_total_bytes=32 * MIB,
    append_slice_bytes=8 * MIB,
    read_total_bytes=32 * MIB,
    growth_target_bytes=100 * MEGABYTE,
    growth_window_bytes=8 * MIB,
    random_reads=100,
    tail_read_bytes=8 * MIB,
    free_bytes_min=2 * GIGABYTE,
    loop_seconds_max=10.0,
    growth_seconds_max=30.0,
)


@dataclass(frozen=True)
class Batch:
    """One encoded producer batch, appended over and over."""

    payload: bytes
    records: int

    @property
    def size_bytes(self) -> int:
        return len(self.payload)


@dataclass(frozen=True)
class Comparison:
    """Alternating log and raw samples of one workload; ratios pair adjacent runs."""

    name: str
    log: list[Sample]
    raw: list[Sample]

    @property
    def log_megabytes_per_second(self) -> Spread:
        return Spread.of([sample.megabytes_per_second for sample in self.log])

    @property
    def raw_megabytes_per_second(self) -> Spread:
        return Spread.of([sample.megabytes_per_second for sample in self.raw])

    @property
    def log_records_per_second(self) -> Spread:
        return Spread.of([sample.records_per_second for sample in self.log])

    @property
    def paired_ratio(self) -> Spread:
        return Spread.of(
            [
                log.megabytes_per_second / raw.megabytes_per_second
                for log, raw in zip(self.log, self.raw, strict=True)
            ]
        )

    @property
    def paired_cpu_ratio(self) -> Spread:
        return Spread.of(
            [
                log.megabytes_per_cpu_second / raw.megabytes_per_cpu_second
                for log, raw in zip(self.log, self.raw, strict=True)
            ]
        )

    @property
    def ratio_of_medians(self) -> float:
        return self.log_megabytes_per_second.median / self.raw_megabytes_per_second.median

    @property
    def ratio_of_best(self) -> float:
        return self.log_megabytes_per_second.maximum / self.raw_megabytes_per_second.maximum

    @property
    def truncated(self) -> bool:
        return any(sample.truncated for sample in self.log + self.raw)


@dataclass(frozen=True)
class GrowthPoint:
    """Rates measured when the log held ``log_bytes``."""

    log_bytes: int
    segments: int
    appends: Comparison
    random_read_microseconds: list[float]
    random_read: Sample
    tail_read: Sample


@dataclass
class Report:
    command: str
    date: str
    quick: bool
    settings: Settings
    machine: dict[str, str]
    appends: list[Comparison] = field(default_factory=list)
    reads: list[Comparison] = field(default_factory=list)
    growth: list[GrowthPoint] = field(default_factory=list)


# ---------------------------------------------------------------- workloads


def build_batch(target_bytes: int) -> Batch:
    """A batch of 100-byte random values, no keys, as large as fits in ``target_bytes``."""
    generator = random.Random(RANDOM_SEED)

    def records(count: int) -> list[Record]:
        return [
            Record(index, BASE_TIMESTAMP_MS + index, None, generator.randbytes(RECORD_VALUE_BYTES))
            for index in range(count)
        ]

    one_record_bytes = len(encode_batch(records(2))) - len(encode_batch(records(1)))
    count = max(1, target_bytes // one_record_bytes)
    payload = encode_batch(records(count))
    while len(payload) > target_bytes and count > 1:
        count -= 1
        payload = encode_batch(records(count))
    return Batch(payload, count)


def log_config() -> LogConfig:
    """Defaults, except room for 1 MiB batches and no periodic fsync in the timed loops."""
    return LogConfig(max_message_bytes=MAX_MESSAGE_BYTES, flush_ms=FLUSH_NEVER_MS)


def append_to_log(log: PartitionLog, batch: Batch, count: int, deadline: Deadline) -> Sample:
    """Time ``count`` appends of ``batch``; no fsync inside the loop."""
    append = log.append
    payload = batch.payload
    done = 0
    stopwatch = Stopwatch()
    for done in range(1, count + 1):
        append(payload)
        if done % DEADLINE_CHECK_EVERY == 0 and deadline.passed():
            break
    seconds, cpu_seconds = stopwatch.elapsed()
    return Sample(done * batch.size_bytes, done * batch.records, seconds, cpu_seconds, done < count)


def write_raw(descriptor: int, batch: Batch, count: int, deadline: Deadline) -> Sample:
    """Time ``count`` ``os.write`` calls of the batch's bytes; the raw twin of append_to_log."""
    write = os.write
    payload = batch.payload
    done = 0
    stopwatch = Stopwatch()
    for done in range(1, count + 1):
        write(descriptor, payload)
        if done % DEADLINE_CHECK_EVERY == 0 and deadline.passed():
            break
    seconds, cpu_seconds = stopwatch.elapsed()
    return Sample(done * batch.size_bytes, done * batch.records, seconds, cpu_seconds, done < count)


def alternate(
    log: PartitionLog,
    descriptor: int,
    batch: Batch,
    *,
    batches_per_slice: int,
    slices: int,
    deadline: Deadline,
) -> tuple[list[Sample], list[Sample]]:
    """Alternate slices of log appends and raw writes (log, raw, log, raw, ...).

    Slices next to each other in time see the same machine, which matters
    here: page-cache writes on this VM slow down several-fold for seconds at
    a time. Stops after a whole pair once ``deadline`` passes.
    """
    log_samples: list[Sample] = []
    raw_samples: list[Sample] = []
    for _ in range(slices):
        log_samples.append(append_to_log(log, batch, batches_per_slice, deadline))
        raw_samples.append(write_raw(descriptor, batch, batches_per_slice, deadline))
        if deadline.passed():
            break
    return log_samples, raw_samples


def combine(samples: list[Sample]) -> Sample:
    return Sample(
        sum(sample.size_bytes for sample in samples),
        sum(sample.records for sample in samples),
        sum(sample.seconds for sample in samples),
        sum(sample.cpu_seconds for sample in samples),
        any(sample.truncated for sample in samples),
    )


def open_raw_file(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)


def append_repetition(
    run_directory: Path, name: str, batch: Batch, settings: Settings
) -> tuple[Sample, Sample]:
    """Fill a new log and a new raw file in alternating slices; fsync and delete both untimed."""
    directory = run_directory / name
    raw_path = run_directory / f"{name}.raw"
    batches = settings.append_total_bytes // batch.size_bytes
    slices = max(1, min(batches, settings.append_total_bytes // settings.append_slice_bytes))
    log = PartitionLog.open(directory, log_config())
    descriptor = open_raw_file(raw_path)
    try:
        log_samples, raw_samples = alternate(
            log,
            descriptor,
            batch,
            batches_per_slice=batches // slices,
            slices=slices,
            deadline=Deadline(2 * settings.loop_seconds_max),
        )
        os.fsync(descriptor)
    finally:
        log.close()
        os.close(descriptor)
        shutil.rmtree(directory)
        raw_path.unlink()
    return combine(log_samples), combine(raw_samples)


def compare_appends(run_directory: Path, settings: Settings, target_bytes: int) -> Comparison:
    batch = build_batch(target_bytes)
    log_samples: list[Sample] = []
    raw_samples: list[Sample] = []
    for repetition in range(settings.repetitions):
        name = f"append-{target_bytes}-{repetition}"
        log_sample, raw_sample = append_repetition(run_directory, name, batch, settings)
        log_samples.append(log_sample)
        raw_samples.append(raw_sample)
        progress(
            f"append {describe_bytes(batch.size_bytes)} batches, repetition {repetition + 1}: "
            f"log {log_sample.megabytes_per_second:.0f} MB/s, "
            f"raw {raw_sample.megabytes_per_second:.0f} MB/s"
        )
    name = f"{batch.size_bytes:,}-byte batches ({batch.records:,} records)"
    return Comparison(name, log_samples, raw_samples)


def read_log_sequentially(
    log: PartitionLog, batch: Batch, *, start_offset: int, deadline: Deadline
) -> Sample:
    """Read from ``start_offset`` to the log end in 1 MiB slices, each ``pread`` into memory.

    Every batch has the same size, so the next offset follows from the slice
    length; the slice's first offset is checked against it on every read.
    """
    offset = start_offset
    end_offset = log.log_end_offset
    total_bytes = 0
    reads_max = (log.size_bytes // batch.size_bytes) + 1
    truncated = False
    stopwatch = Stopwatch()
    for reads in range(1, reads_max + 1):
        found = log.read(offset, READ_CHUNK_BYTES)
        if found is None:
            break
        if found.first_offset != offset or found.length % batch.size_bytes:
            raise RuntimeError(f"read at {offset} returned an unexpected slice {found}")
        total_bytes += len(found.read_bytes())
        offset += found.length // batch.size_bytes * batch.records
        if offset >= end_offset:
            break
        if reads % DEADLINE_CHECK_EVERY == 0 and deadline.passed():
            truncated = True
            break
    seconds, cpu_seconds = stopwatch.elapsed()
    return Sample(total_bytes, offset - start_offset, seconds, cpu_seconds, truncated)


def read_raw_sequentially(path: Path, batch: Batch, deadline: Deadline) -> Sample:
    """``os.pread`` the whole file in 1 MiB chunks; the raw twin of read_log_sequentially."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        size_bytes = os.fstat(descriptor).st_size
        position = 0
        reads = 0
        stopwatch = Stopwatch()
        while position < size_bytes:
            chunk_bytes = len(os.pread(descriptor, READ_CHUNK_BYTES, position))
            if not chunk_bytes:
                break
            position += chunk_bytes
            reads += 1
            if reads % DEADLINE_CHECK_EVERY == 0 and deadline.passed():
                break
        seconds, cpu_seconds = stopwatch.elapsed()
    finally:
        os.close(descriptor)
    records = position // batch.size_bytes * batch.records
    return Sample(position, records, seconds, cpu_seconds, position < size_bytes)


def fill_log(log: PartitionLog, batch: Batch, target_bytes: int, deadline: Deadline) -> None:
    """Append untimed until the log holds ``target_bytes``, fsyncing every 512 MiB."""
    appends_max = max(0, target_bytes - log.size_bytes) // batch.size_bytes + 1
    since_flush_bytes = 0
    for _ in range(appends_max):
        if log.size_bytes + batch.size_bytes > target_bytes:
            return
        log.append(batch.payload)
        since_flush_bytes += batch.size_bytes
        if since_flush_bytes >= FILL_FLUSH_EVERY_BYTES:
            log.flush()
            since_flush_bytes = 0
            if deadline.passed():
                raise TimeoutError("filling the growth log took longer than its time limit")


def compare_reads(run_directory: Path, settings: Settings) -> Comparison:
    """Sequential reads of one page-cached segment through the slice API and through pread."""
    batch = build_batch(BATCH_TARGETS_BYTES[0])
    directory = run_directory / "read"
    log = PartitionLog.open(directory, log_config())
    try:
        fill_log(log, batch, settings.read_total_bytes, Deadline(settings.growth_seconds_max))
        log.flush()
        segment_path = log.active_segment.log_path
        read_raw_sequentially(segment_path, batch, Deadline(settings.loop_seconds_max))
        log_samples: list[Sample] = []
        raw_samples: list[Sample] = []
        for repetition in range(settings.repetitions):
            deadline = Deadline(settings.loop_seconds_max)
            log_samples.append(read_log_sequentially(log, batch, start_offset=0, deadline=deadline))
            raw_deadline = Deadline(settings.loop_seconds_max)
            raw_samples.append(read_raw_sequentially(segment_path, batch, raw_deadline))
            progress(
                f"sequential read, repetition {repetition + 1}: "
                f"log {log_samples[-1].megabytes_per_second:.0f} MB/s, "
                f"raw {raw_samples[-1].megabytes_per_second:.0f} MB/s"
            )
    finally:
        log.close()
        shutil.rmtree(directory)
    name = f"1 MiB reads of {batch.size_bytes:,}-byte batches"
    return Comparison(name, log_samples, raw_samples)


def random_reads(log: PartitionLog, count: int, deadline: Deadline) -> tuple[Sample, list[float]]:
    """``count`` 1 MiB reads at uniformly random earlier offsets; returns the latencies too."""
    generator = random.Random(RANDOM_SEED + log.log_end_offset)
    offsets = [generator.randrange(log.log_start_offset, log.log_end_offset) for _ in range(count)]
    latencies_microseconds: list[float] = []
    total_bytes = 0
    stopwatch = Stopwatch()
    for offset in offsets:
        before = time.perf_counter_ns()
        found = log.read(offset, READ_CHUNK_BYTES)
        if found is None:
            raise RuntimeError(f"no data at offset {offset} below the log end")
        total_bytes += len(found.read_bytes())
        latencies_microseconds.append((time.perf_counter_ns() - before) / 1000)
        if deadline.passed():
            break
    seconds, cpu_seconds = stopwatch.elapsed()
    truncated = len(latencies_microseconds) < count
    sample = Sample(total_bytes, len(latencies_microseconds), seconds, cpu_seconds, truncated)
    return sample, latencies_microseconds


def measure_growth_point(
    log: PartitionLog, run_directory: Path, batch: Batch, settings: Settings, *, window_bytes: int
) -> GrowthPoint:
    """Time a window of appends against raw writes, then random reads and a tail read."""
    log.flush()
    appends = compare_window_appends(log, run_directory, batch, settings, window_bytes)
    reads, latencies = random_reads(log, settings.random_reads, Deadline(settings.loop_seconds_max))
    tail_batches = settings.tail_read_bytes // batch.size_bytes
    tail_start = max(log.log_start_offset, log.log_end_offset - tail_batches * batch.records)
    tail = read_log_sequentially(
        log, batch, start_offset=tail_start, deadline=Deadline(settings.loop_seconds_max)
    )
    return GrowthPoint(log.size_bytes, len(log.segments), appends, latencies, reads, tail)


def compare_window_appends(
    log: PartitionLog, run_directory: Path, batch: Batch, settings: Settings, window_bytes: int
) -> Comparison:
    """Appends to the growing log alternating with raw writes, ``window_bytes`` per side."""
    raw_path = run_directory / "growth-raw.bin"
    descriptor = open_raw_file(raw_path)
    try:
        log_samples, raw_samples = alternate(
            log,
            descriptor,
            batch,
            batches_per_slice=max(1, window_bytes // GROWTH_ALTERNATIONS // batch.size_bytes),
            slices=GROWTH_ALTERNATIONS,
            deadline=Deadline(2 * settings.loop_seconds_max),
        )
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
        raw_path.unlink()
    return Comparison(f"window of {describe_bytes(window_bytes)}", log_samples, raw_samples)


def run_growth(run_directory: Path, settings: Settings) -> list[GrowthPoint]:
    batch = build_batch(BATCH_TARGETS_BYTES[0])
    directory = run_directory / "growth"
    deadline = Deadline(settings.growth_seconds_max)
    points: list[GrowthPoint] = []
    log = PartitionLog.open(directory, log_config())
    try:
        for fraction in GROWTH_FRACTIONS:
            checkpoint_bytes = int(settings.growth_target_bytes * fraction)
            window_bytes = min(settings.growth_window_bytes, checkpoint_bytes // 2)
            fill_log(log, batch, checkpoint_bytes - window_bytes, deadline)
            point = measure_growth_point(
                log, run_directory, batch, settings, window_bytes=window_bytes
            )
            points.append(point)
            progress(
                f"growth at {describe_bytes(point.log_bytes)}: "
                f"append {point.appends.log_megabytes_per_second.median:.0f} MB/s, "
                f"random read median {statistics.median(point.random_read_microseconds):.0f} µs, "
                f"tail read {point.tail_read.megabytes_per_second:.0f} MB/s"
            )
            if deadline.passed():
                progress("growth stopped early: time limit reached")
                break
    finally:
        log.close()
        shutil.rmtree(directory)
    return points


# ---------------------------------------------------------------- environment


# ---------------------------------------------------------------- output


def comparison_rows(comparisons: list[Comparison], unit: str) -> list[list[str]]:
    rows = []
    for comparison in comparisons:
        rows.append(
            [
                comparison.name + (" (cut by time limit)" if comparison.truncated else ""),
                format_spread(comparison.log_megabytes_per_second),
                format_spread(comparison.raw_megabytes_per_second),
                format_spread(comparison.log_records_per_second),
                f"{comparison.ratio_of_medians:.2f}",
                f"{comparison.ratio_of_best:.2f}",
                format_spread(comparison.paired_ratio, 2),
                format_spread(comparison.paired_cpu_ratio, 2),
            ]
        )
    header = [
        "workload",
        f"log {unit} MB/s",
        f"raw {unit} MB/s",
        "log records/s",
        "ratio of medians",
        "ratio of best runs",
        "paired ratio log/raw",
        "paired ratio by CPU time",
    ]
    return [header, *rows]


def growth_rows(points: list[GrowthPoint]) -> list[list[str]]:
    header = [
        "log size",
        "segments",
        "append MB/s",
        "raw write MB/s",
        "paired ratio log/raw",
        "paired ratio by CPU time",
        "random 1 MiB read µs (median / p99)",
        "random read MB/s",
        "tail read MB/s",
    ]
    rows = [header]
    for point in points:
        latencies = sorted(point.random_read_microseconds)
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        rows.append(
            [
                f"{point.log_bytes / MEGABYTE:,.0f} MB",
                str(point.segments),
                format_spread(point.appends.log_megabytes_per_second),
                format_spread(point.appends.raw_megabytes_per_second),
                format_spread(point.appends.paired_ratio, 2),
                format_spread(point.appends.paired_cpu_ratio, 2),
                f"{statistics.median(latencies):,.0f} / {p99:,.0f}",
                f"{point.random_read.megabytes_per_second:,.0f}",
                f"{point.tail_read.megabytes_per_second:,.0f}",
            ]
        )
    return rows


def method_notes(report: Report) -> list[str]:
    settings = report.settings
    return [
        f"- Records: {RECORD_VALUE_BYTES}-byte random values, no key, no compression, "
        "CreateTime timestamps; the same encoded batch is appended over and over "
        "(the log copies it and stamps offsets into the copy).",
        f"- Append: {settings.repetitions} repetitions; each fills a new log and a new raw file "
        f"with {describe_bytes(settings.append_total_bytes)} apiece, in alternating slices of "
        f"{describe_bytes(settings.append_slice_bytes)} (log, raw, log, raw, ...). "
        "Raw = `os.write` of the same bytes in the same chunk sizes to an `O_APPEND` file "
        "in the same folder. **Page-cache throughput: no fsync inside either timed loop** "
        "(the log's periodic flush is disabled with `flush.ms`); at the end of each repetition "
        "both files are fsynced and deleted, untimed.",
        "- Sequential read: `PartitionLog.read(offset, 1 MiB)` then `SegmentSlice.read_bytes()` "
        "(`os.pread` of the slice) against `os.pread` of the same segment file in 1 MiB chunks, "
        f"{describe_bytes(settings.read_total_bytes)} per pass, after a warm-up pass, "
        "so the data is in the page cache.",
        f"- Growth: one log appended to {settings.growth_target_bytes / GIGABYTE:g} GB with "
        "16 KiB batches and default 1 GiB segments, fsynced every 512 MiB while filling. "
        f"At each size (S): up to {describe_bytes(settings.growth_window_bytes)} "
        "(at most S/2) of timed appends ending at S, "
        f"in {GROWTH_ALTERNATIONS} parts alternating with raw writes of the same size, "
        "after an fsync; then "
        f"{settings.random_reads} reads of 1 MiB at uniformly random earlier offsets, "
        f"and a sequential read of the last {describe_bytes(settings.tail_read_bytes)} "
        "(or the whole log when smaller), all through the slice API.",
        "- MB = 10^6 bytes. Cells are median (min-max). The paired ratio divides each log run "
        "by the raw run right after it; the CPU-time ratio does the same with rates computed "
        "from this process's user + system time, which other jobs on the machine disturb less. "
        "The ratio of best runs divides the fastest log run by the fastest raw run.",
        "- The machine is shared with other jobs and noisy; compare ratios rather than "
        "absolute numbers.",
    ]


def render_markdown(report: Report) -> str:
    machine = "\n\n".join(f"$ {name}\n{value}" for name, value in report.machine.items())
    parts = [
        "## Storage engine (bench/storage.py)",
        f"Command: `{report.command}`  \nDate: {report.date}"
        + ("  \nMode: --quick" if report.quick else ""),
        f"Machine:\n\n```\n{machine}\n```",
        "Method:\n\n" + "\n".join(method_notes(report)),
        "### Append (page cache, no fsync in the loop)\n\n"
        + markdown_table(comparison_rows(report.appends, "append")),
        "### Sequential read (slice + pread vs pread, page cache)\n\n"
        + markdown_table(comparison_rows(report.reads, "read")),
        "### Growth (16 KiB batches)\n\n" + markdown_table(growth_rows(report.growth)),
    ]
    return "\n\n".join(parts) + "\n"


def render_text(report: Report) -> str:
    parts = [
        "Append (page cache, no fsync in the timed loop)",
        text_table(comparison_rows(report.appends, "append")),
        "",
        "Sequential read (PartitionLog.read + SegmentSlice.read_bytes vs os.pread, page cache)",
        text_table(comparison_rows(report.reads, "read")),
        "",
        "Growth",
        text_table(growth_rows(report.growth)),
    ]
    return "\n".join(parts)


def report_json(report: Report) -> dict[str, object]:
    data = asdict(report)
    data["summary"] = {
        "appends": [summary_of(comparison) for comparison in report.appends],
        "reads": [summary_of(comparison) for comparison in report.reads],
    }
    return data


def summary_of(comparison: Comparison) -> dict[str, object]:
    return {
        "name": comparison.name,
        "log_megabytes_per_second": asdict(comparison.log_megabytes_per_second),
        "raw_megabytes_per_second": asdict(comparison.raw_megabytes_per_second),
        "log_records_per_second": asdict(comparison.log_records_per_second),
        "ratio_of_medians": comparison.ratio_of_medians,
        "ratio_of_best": comparison.ratio_of_best,
        "paired_ratio": asdict(comparison.paired_ratio),
        "paired_cpu_ratio": asdict(comparison.paired_cpu_ratio),
    }


# ---------------------------------------------------------------- entry point


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short smoke run (under a minute)")
    parser.add_argument(
        "--data-dir", type=Path, help="parent folder for the run's fresh data folder"
    )
    parser.add_argument("--output-json", type=Path, help="write every sample and summary here")
    parser.add_argument("--output-markdown", type=Path, help="write the markdown section here")
    parser.add_argument("--free-gb-min", type=float, help="refuse to run below this free space")
    parser.add_argument(
        "--skip",
        action="append",
        choices=("append", "read", "growth"),
        default=[],
        help="leave out a part (repeatable)",
    )
    return parser.parse_args(list(argv))


def run(arguments: argparse.Namespace, run_directory: Path, report: Report) -> None:
    settings = report.settings
    if "append" not in arguments.skip:
        for target_bytes in BATCH_TARGETS_BYTES:
            report.appends.append(compare_appends(run_directory, settings, target_bytes))
    if "read" not in arguments.skip:
        report.reads.append(compare_reads(run_directory, settings))
    if "growth" not in arguments.skip:
        report.growth.extend(run_growth(run_directory, settings))


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    settings = QUICK if arguments.quick else FULL
    if arguments.free_gb_min is not None:
        settings = replace(settings, free_bytes_min=int(arguments.free_gb_min * GIGABYTE))
    parent: Path = arguments.data_dir or DEFAULT_DATA_PARENT
    parent.mkdir(parents=True, exist_ok=True)
    check_free_space(parent, settings.free_bytes_min)
    run_directory = Path(tempfile.mkdtemp(prefix="storage-", dir=parent))
    report = Report(
        command=invocation(__file__, sys.argv[1:] if argv is None else argv),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        quick=arguments.quick,
        settings=settings,
        machine=describe_machine(parent),
    )
    progress(f"data in {run_directory}")
    try:
        run(arguments, run_directory, report)
    finally:
        shutil.rmtree(run_directory, ignore_errors=True)
        progress(f"deleted {run_directory}")
    print(render_text(report))
    markdown = render_markdown(report)
    if arguments.output_markdown:
        arguments.output_markdown.write_text(markdown)
    else:
        print("\n" + markdown)
    if arguments.output_json:
        arguments.output_json.write_text(json.dumps(report_json(report), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
