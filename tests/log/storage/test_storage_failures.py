"""A failing disk takes the log offline; it never leaves a log that lies.

The fake disk (``sim_disk``) stands behind the storage's own calls to the
operating system: a full directory takes a write part-way (a short write) and
refuses the next with ENOSPC; a failing one refuses fsyncs with EIO. Whatever
was appended before stays readable after a restart, and nothing of the batch
that failed is ever visible.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sim_disk import FakeDisk, fake_disk

from eventplatform.log.storage import KafkaStorageError, LogConfig, PartitionLog
from eventplatform.log.storage.partition_log import run_flush_jobs


def values(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    return [(record.offset, record.value) for record in log.iter_records()]


def _log_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def test_a_write_that_fills_the_disk_part_way_takes_the_log_offline_and_leaves_no_partial_batch(
    tmp_path: Path, make_batch
) -> None:
    disk = FakeDisk(random.Random(1))
    with fake_disk(disk):
        log = PartitionLog.open(tmp_path, LogConfig(flush_ms=0))
        log.append(make_batch(3, prefix="a"))
        log.append(make_batch(2, prefix="b"))
        size_before = _log_bytes(tmp_path)
        disk.fill(tmp_path, space_bytes=20)
        with pytest.raises(KafkaStorageError):
            log.append(make_batch(4, prefix="c", value_bytes=100))
        assert log.offline
        assert _log_bytes(tmp_path) == size_before, "the partial batch stayed in the file"
        disk.free(tmp_path)
        with pytest.raises(KafkaStorageError):
            log.append(make_batch(1, prefix="d"))  # offline until restart, even with space
        with pytest.raises(KafkaStorageError):
            log.read(0, 1 << 20)
        assert log.log_end_offset == 5
        log.close()
    reopened = PartitionLog.open(tmp_path)
    assert values(reopened) == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b0"), (4, b"b1")]
    assert reopened.append(make_batch(1, prefix="e")).base_offset == 5
    reopened.close()


def test_a_full_disk_refusing_the_whole_write_takes_the_log_offline(
    tmp_path: Path, make_batch
) -> None:
    disk = FakeDisk(random.Random(2))
    with fake_disk(disk):
        log = PartitionLog.open(tmp_path)
        log.append(make_batch(3))
        disk.fill(tmp_path, space_bytes=0)
        with pytest.raises(KafkaStorageError):
            log.append(make_batch(3))
        assert log.offline and disk.refused_writes == 1
        log.close()
    assert [offset for offset, _ in values(PartitionLog.open(tmp_path))] == [0, 1, 2]


def test_a_failed_fsync_in_the_flusher_takes_the_log_offline_and_is_never_retried(
    tmp_path: Path, clock, make_batch
) -> None:
    disk = FakeDisk(random.Random(3))
    with fake_disk(disk):
        log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000), clock_ms=clock)
        log.background_flush = True
        log.append(make_batch(3))
        clock.advance(1000)
        job = log.start_flush()
        assert job is not None
        disk.fail_fsyncs(tmp_path)
        errors = run_flush_jobs([job])
        assert isinstance(errors[0], OSError)
        log.finish_flush(job, errors[0])
        assert log.offline
        assert log.recovery_point == 0, "a failed fsync advanced the recovery point"
        disk.free(tmp_path)
        clock.advance(1000)
        with pytest.raises(KafkaStorageError):
            log.start_flush()  # no second fsync: the page cache state is unknown now
        log.close()
    assert not (tmp_path / ".clean_shutdown").exists(), "an offline log was closed as clean"


def test_a_close_whose_fsync_fails_releases_the_log_without_marking_it_clean(
    tmp_path: Path, make_batch
) -> None:
    disk = FakeDisk(random.Random(4))
    with fake_disk(disk):
        log = PartitionLog.open(tmp_path, LogConfig(flush_ms=60_000))
        log.append(make_batch(3))
        disk.fail_fsyncs(tmp_path)
        log.close()  # a shutdown goes on with the other logs
        assert log.closed and log.offline
    assert not (tmp_path / ".clean_shutdown").exists()
    reopened = PartitionLog.open(tmp_path)  # the lock was released; recovery runs
    assert [offset for offset, _ in values(reopened)] == [0, 1, 2]
    reopened.close()
