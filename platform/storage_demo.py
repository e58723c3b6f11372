"""A storage-engine demo: append a million records, read them back, report rates."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from eventplatform.log.storage import LogConfig, PartitionLog, Record
from eventplatform.log.storage.record_batch import encode_batch, read_offset_and_length

RECORDS_PER_BATCH = 150  # about 16 KB of 100-byte records


def run_storage_demo(
    directory: Path, *, records: int, record_bytes: int, echo: Callable[[str], None]
) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    log = PartitionLog.open(directory, LogConfig(segment_bytes=256 * 1024 * 1024))
    value = b"x" * record_bytes
    now_ms = int(time.time() * 1000)
    template = encode_batch(
        [Record(i, now_ms, f"key-{i % 1000}".encode(), value) for i in range(RECORDS_PER_BATCH)]
    )
    batches = -(-records // RECORDS_PER_BATCH)
    started = time.perf_counter()
    for _ in range(batches):
        log.append(template)
    log.flush()
    append_seconds = time.perf_counter() - started
    total_bytes = batches * len(template)
    echo(
        f"appended {batches * RECORDS_PER_BATCH:,} records ({total_bytes / 1e6:.1f} MB) "
        f"in {append_seconds:.2f}s: {total_bytes / 1e6 / append_seconds:.0f} MB/s, "
        f"{batches * RECORDS_PER_BATCH / append_seconds:,.0f} records/s"
    )
    started = time.perf_counter()
    offset, read_bytes, read_records = 0, 0, 0
    while (found := log.read(offset, 1024 * 1024)) is not None:
        data = found.read_bytes()
        read_bytes += len(data)
        position = 0
        while position < len(data):
            base, size = read_offset_and_length(data, position)
            position += size
            read_records += RECORDS_PER_BATCH
            offset = base + RECORDS_PER_BATCH
    read_seconds = time.perf_counter() - started
    echo(
        f"read back {read_records:,} records ({read_bytes / 1e6:.1f} MB) in {read_seconds:.2f}s: "
        f"{read_bytes / 1e6 / read_seconds:.0f} MB/s"
    )
    decoded = sum(len(batch.records) for batch in log.iter_batches(0, RECORDS_PER_BATCH * 10))
    echo(
        f"decoded the first {decoded:,} records in full; log end offset {log.log_end_offset:,}, "
        f"{len(log.segments)} segments in {directory}"
    )
    log.close()
