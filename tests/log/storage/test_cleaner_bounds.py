"""Compaction within a memory bound: a decompression bomb on a compacted topic."""

from __future__ import annotations

import logging
import random
import threading
import tracemalloc
from pathlib import Path

from eventplatform.log.storage import Cleaner, Compression, LogConfig, PartitionLog, Record
from eventplatform.log.storage.record_batch import (
    CRC_START,
    check_keys_present,
    encode_batch,
    parse_header,
)

BOMB_VALUE_BYTES = 8 * 1024 * 1024
BOMB_RECORDS = 24
"""24 records of 8 MiB of zeros: 192 MiB inflated, a few KiB compressed."""
CLEANING_PEAK_BYTES_MAX = 64 * 1024 * 1024
START_MS = 1_700_000_000_000


def bomb_batch(codec: Compression = Compression.ZSTD) -> bytes:
    value = bytes(BOMB_VALUE_BYTES)
    records = [Record(i, START_MS, b"bomb-%d" % i, value) for i in range(BOMB_RECORDS)]
    return encode_batch(records, base_offset=0, compression=codec)


def keyed_batch(pairs: list[tuple[bytes, bytes | None]], codec: Compression) -> bytes:
    records = [Record(i, START_MS, key, value) for i, (key, value) in enumerate(pairs)]
    return encode_batch(records, base_offset=0, compression=codec)


def write_keys(log: PartitionLog, rng: random.Random, batches: int) -> None:
    for number in range(batches):
        pairs = [
            (b"key-%d" % rng.randint(0, 9), b"value-%d-%d" % (number, index))
            for index in range(rng.randint(1, 4))
        ]
        log.append(keyed_batch(pairs, rng.choice(list(Compression))))


def test_a_decompression_bomb_is_cleaned_within_a_memory_bound_and_kept_whole(
    tmp_path: Path, caplog
) -> None:
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": 16384, "file.delete.delay.ms": 0}
    )
    log = PartitionLog.open(tmp_path, config)
    rng = random.Random(3)
    write_keys(log, rng, 30)
    bomb = bomb_batch()
    assert len(bomb) < 64 * 1024
    bomb_offset = log.append(bomb).base_offset
    write_keys(log, rng, 30)
    log.roll()
    before = {record.key: record.value for record in log.iter_records()}

    caplog.set_level(logging.WARNING)
    tracemalloc.start()
    try:
        stats = Cleaner().compact(log)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < CLEANING_PEAK_BYTES_MAX, f"cleaning held {peak_bytes >> 20} MiB"

    assert stats is not None and stats.records_removed > 0
    # The bomb is kept as it was, CRC-covered bytes and all; everything else is compacted.
    found = log.read(bomb_offset, 1)
    assert found is not None and found.first_offset == bomb_offset
    assert found.read_bytes()[CRC_START:] == bomb[CRC_START:]
    survivors = [record for record in log.iter_records() if not record.key.startswith(b"bomb")]
    assert len({record.key for record in survivors}) == len(survivors)
    assert {record.key: record.value for record in survivors} == {
        key: value for key, value in before.items() if not key.startswith(b"bomb")
    }
    assert "decompression" in caplog.text


# ---------------------------------------------------------------- the handoff between threads


def compacted_log(directory: Path) -> PartitionLog:
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": 2048, "file.delete.delay.ms": 0}
    )
    log = PartitionLog.open(directory, config)
    write_keys(log, random.Random(5), 120)
    return log


def test_appends_and_reads_go_on_while_a_compaction_job_runs_in_another_thread(
    tmp_path: Path,
) -> None:
    log = compacted_log(tmp_path)
    cleaner = Cleaner()
    job = cleaner.prepare_compaction(log)
    assert job is not None
    worker = threading.Thread(target=cleaner.run_compaction, args=(job,))
    worker.start()
    appended = 0
    while worker.is_alive() or appended < 20:
        log.append(keyed_batch([(b"late-%d" % appended, b"v")], Compression.NONE))
        appended += 1
        assert [record.key for record in log.iter_records()][-1] == b"late-%d" % (appended - 1)
    worker.join()
    before = {record.key: record.value for record in log.iter_records()}
    stats = cleaner.finish_compaction(log, job)
    assert stats is not None and stats.records_removed > 0
    after = list(log.iter_records())
    assert {record.key: record.value for record in after} == before
    offsets = [record.offset for record in after]
    assert offsets == sorted(set(offsets))
    assert log.log_end_offset == offsets[-1] + 1


def test_a_truncation_while_a_compaction_job_runs_drops_the_pass(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    cleaner = Cleaner()
    job = cleaner.prepare_compaction(log)
    assert job is not None
    cleaner.run_compaction(job)
    cleaned_files = sorted(path.name for path in tmp_path.glob("*.cleaned"))
    assert cleaned_files
    cut = list(log.segments)[2].base_offset + 1
    log.truncate_to(cut)
    expected = [(record.offset, record.value) for record in log.iter_records()]
    assert cleaner.finish_compaction(log, job) is None
    assert [(record.offset, record.value) for record in log.iter_records()] == expected
    assert log.log_end_offset <= cut
    assert not list(tmp_path.glob("*.cleaned"))
    log.close()
    reopened = PartitionLog.open(tmp_path, log.config)
    assert [(record.offset, record.value) for record in reopened.iter_records()] == expected


def test_checking_keys_of_a_produced_bomb_holds_one_record_not_the_whole_batch() -> None:
    """A compacted topic's produce check decodes every record: it streams them."""
    bomb = bomb_batch(Compression.GZIP)
    tracemalloc.start()
    try:
        check_keys_present(bomb, parse_header(bomb))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 2 * BOMB_VALUE_BYTES + 4 * 1024 * 1024, f"{peak_bytes >> 20} MiB"
