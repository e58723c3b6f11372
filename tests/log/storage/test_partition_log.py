"""PartitionLog: appends, reads, rolls, timestamps, truncation, limits and reopening."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from eventplatform.log.storage import (
    Compression,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    Record,
    RecordTooLargeError,
    StorageError,
)
from eventplatform.log.storage.files import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE
from eventplatform.log.storage.partition_log import run_flush_jobs
from eventplatform.log.storage.record_batch import decode_record_set, encode_batch, parse_header


def values(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    return [(record.offset, record.value) for record in log.iter_records(start)]


def test_append_assigns_consecutive_offsets_and_reads_back(
    tmp_path: Path, clock, make_batch
) -> None:
    log = PartitionLog.open(tmp_path, clock_ms=clock)
    first = log.append(make_batch(3, prefix="a"))
    second = log.append(make_batch(2, prefix="b"), leader_epoch=7)
    assert (first.base_offset, first.last_offset, first.records) == (0, 2, 3)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert first.append_time_ms == -1
    assert log.log_end_offset == 5
    assert values(log) == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b0"), (4, b"b1")]
    stored = decode_record_set(log.read(3, 1 << 20).read_bytes())
    assert stored[0].header.partition_leader_epoch == 7
    assert stored[0].header.base_offset == 3


def test_compressed_batches_stay_compressed_on_disk(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path)
    for codec in Compression:
        log.append(make_batch(50, prefix=codec.name, compression=codec, value_bytes=100))
    headers = [batch.header for batch in log.iter_batches()]
    assert [header.compression for header in headers] == list(Compression)
    assert [record.value[:6] for record in log.iter_records(200, 201)] == [b"ZSTD0x"]


def test_read_returns_whole_batches_bounded_by_max_bytes(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(index_interval_bytes=1))
    batch = make_batch(10, value_bytes=100)
    for _ in range(20):
        log.append(batch)
    size = len(batch)
    found = log.read(25, size * 3 + size // 2)
    assert found is not None
    assert found.length == size * 3
    headers = [batch.header for batch in decode_record_set(found.read_bytes())]
    assert [header.base_offset for header in headers] == [20, 30, 40]
    assert found.first_offset == 20


def test_first_batch_is_returned_whole_even_past_max_bytes(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path)
    batch = make_batch(10, value_bytes=1000)
    log.append(batch)
    log.append(batch)
    found = log.read(0, 1)
    assert found is not None
    assert found.length == len(batch)


def test_read_never_passes_max_offset(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(index_interval_bytes=1))
    for _ in range(5):
        log.append(make_batch(4))
    found = log.read(0, 1 << 20, max_offset=8)
    assert [b.header.last_offset for b in decode_record_set(found.read_bytes())] == [3, 7]
    assert log.read(8, 1 << 20, max_offset=8) is None
    assert log.read(20, 1 << 20) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)


def test_reads_cross_segment_boundaries(tmp_path: Path, make_batch) -> None:
    batch = make_batch(5, value_bytes=50)
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=len(batch) * 3))
    for _ in range(10):
        log.append(batch)
    assert len(log.segments) == 4
    assert [offset for offset, _ in values(log)] == list(range(50))
    found = log.read(15, 1 << 20)
    assert found.first_offset == 15


def test_segment_rolls_on_age(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(segment_ms=1000), clock_ms=clock)
    log.append(make_batch())
    clock.advance(999)
    log.append(make_batch())
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(make_batch())
    assert [segment.base_offset for segment in log.segments] == [0, 6]


def test_files_are_named_by_twenty_digit_base_offset(tmp_path: Path, make_batch) -> None:
    batch = make_batch(5)
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=len(batch)))
    log.append(batch)
    log.append(batch)
    log.close()
    names = sorted(path.name for path in tmp_path.iterdir() if path.name[0].isdigit())
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000005.index",
        "00000000000000000005.log",
        "00000000000000000005.timeindex",
    ]


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=400, index_interval_bytes=1))
    for step in range(10):
        log.append(make_batch(3, timestamp=1000 * step))  # timestamps 1000*step + 0..2
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(2) == (2, 2)
    assert log.offset_for_timestamp(3) == (3, 1000)
    assert log.offset_for_timestamp(5001) == (16, 5001)
    assert log.offset_for_timestamp(9002) == (29, 9002)
    assert log.offset_for_timestamp(9003) is None
    log.close()
    reopened = PartitionLog.open(tmp_path, LogConfig(segment_bytes=400, index_interval_bytes=1))
    assert reopened.offset_for_timestamp(5001) == (16, 5001)


def test_log_append_time_overrides_record_timestamps(tmp_path: Path, clock, make_batch) -> None:
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    info = log.append(make_batch(3, timestamp=5))
    assert info.append_time_ms == clock.now_ms
    assert {record.timestamp for record in log.iter_records()} == {clock.now_ms}


def test_create_time_timestamps_outside_the_topic_bounds_are_refused_as_invalid_timestamp(
    tmp_path: Path, clock, make_batch
) -> None:
    hour_ms = 3_600_000
    config = LogConfig(
        message_timestamp_before_max_ms=hour_ms, message_timestamp_after_max_ms=hour_ms
    )
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for timestamp in (clock.now_ms - hour_ms - 10, clock.now_ms + hour_ms + 1):
        with pytest.raises(StorageError, match=r"message\.timestamp") as raised:
            log.append(make_batch(3, timestamp=timestamp))
        assert raised.value.kafka_error_code == 32  # INVALID_TIMESTAMP
    assert log.log_end_offset == 0
    log.append(make_batch(3, timestamp=clock.now_ms - hour_ms))
    log.append(make_batch(1, timestamp=clock.now_ms + hour_ms))
    assert log.log_end_offset == 4
    log.update_config(dataclasses.replace(config, message_timestamp_type="LogAppendTime"))
    log.append(make_batch(1, timestamp=5))
    assert log.log_end_offset == 5


def test_batches_over_max_message_bytes_are_refused(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(max_message_bytes=500))
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes 500"):
        log.append(make_batch(10, value_bytes=100))
    assert log.log_end_offset == 0
    log.append(make_batch(1))
    assert log.log_end_offset == 1


def test_compacted_topic_refuses_records_without_key(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(cleanup_policy=frozenset({"compact"})))
    with pytest.raises(InvalidRecordError, match="key"):
        log.append(make_batch(2, keys=[b"a", None]))
    assert log.log_end_offset == 0


def test_truncate_to_removes_batches_and_later_segments(tmp_path: Path, make_batch) -> None:
    batch = make_batch(5)
    log = PartitionLog.open(
        tmp_path, LogConfig(segment_bytes=len(batch) * 2, file_delete_delay_ms=0)
    )
    for _ in range(6):
        log.append(batch)
    assert len(log.segments) == 3
    log.truncate_to(12)  # inside the batch 10..14: the whole batch goes
    assert log.log_end_offset == 10
    assert [segment.base_offset for segment in log.segments] == [0, 10]
    log.append(make_batch(2, prefix="new"))
    assert values(log, 9)[-3:] == [(9, b"v4"), (10, b"new0"), (11, b"new1")]
    log.truncate_to(0)
    assert log.log_end_offset == 0
    assert list(log.iter_records()) == []


def test_clean_reopen_keeps_everything_and_leaves_marker_only_while_closed(
    tmp_path: Path, make_batch
) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=300))
    for _ in range(10):
        log.append(make_batch(3))
    before = values(log)
    log.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = PartitionLog.open(tmp_path, LogConfig(segment_bytes=300))
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert reopened.opened_cleanly
    assert values(reopened) == before
    assert reopened.append(make_batch(1)).base_offset == 30


def test_flush_messages_advances_the_recovery_point(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_messages=5), clock_ms=clock)
    log.append(make_batch(3))
    assert log.recovery_point == 0
    log.append(make_batch(3))
    assert log.recovery_point == 6


def test_flush_ms_triggers_a_periodic_flush(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000), clock_ms=clock)
    log.append(make_batch(3))
    assert log.recovery_point == 0
    clock.advance(1000)
    log.flush_if_due()
    assert log.recovery_point == 3


def test_a_background_flush_leaves_the_append_path_alone(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000), clock_ms=clock)
    log.background_flush = True
    log.append(make_batch(3))
    clock.advance(1000)
    log.append(make_batch(3))
    assert log.recovery_point == 0, "the append fsynced although a flusher owns flush.ms"
    job = log.start_flush()
    assert job is not None and job.end_offset == 6
    assert log.start_flush() is None, "a second job before the interval passed again"
    log.append(make_batch(2))
    run_flush_jobs([job])
    log.finish_flush(job)
    assert log.recovery_point == 6, "the job covers only what was appended before it"


def test_a_background_flush_survives_a_roll_and_a_deleted_segment(
    tmp_path: Path, clock, make_batch
) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000, segment_bytes=400), clock_ms=clock)
    log.background_flush = True
    for _ in range(6):
        log.append(make_batch(3))
    clock.advance(1000)
    job = log.start_flush()
    assert job is not None and len(job.descriptors) >= 6, "each segment gives three files"
    log.roll()
    log.advance_log_start_offset(log.log_end_offset)
    log.delete_segments(list(log.segments)[:-1])
    log.delete_expired_files(force=True)
    run_flush_jobs([job])
    log.finish_flush(job)
    assert log.recovery_point == 18


def test_a_truncation_during_a_background_flush_keeps_the_recovery_point(
    tmp_path: Path, clock, make_batch
) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000), clock_ms=clock)
    log.background_flush = True
    log.append(make_batch(5))
    clock.advance(1000)
    job = log.start_flush()
    assert job is not None
    log.truncate_to(2)
    log.append(make_batch(5))
    run_flush_jobs([job])
    log.finish_flush(job)
    assert log.recovery_point == 0, "offsets rewritten after the job started were claimed durable"


def test_flush_ms_zero_still_fsyncs_each_append(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=0), clock_ms=clock)
    log.background_flush = True
    log.append(make_batch(3))
    assert log.recovery_point == 3


def test_closed_log_refuses_work(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(make_batch())


def test_stamped_batch_header_matches_the_assigned_offsets(tmp_path: Path, make_batch) -> None:
    log = PartitionLog.open(tmp_path)
    log.append(make_batch(4))
    found = log.read(0, 1 << 20)
    header = parse_header(found.read_bytes())
    assert (header.base_offset, header.last_offset, header.records_count) == (0, 3, 4)


def test_producers_may_not_set_cleaner_only_attributes(tmp_path: Path, make_batch) -> None:
    import struct

    from crc32c import crc32c

    from eventplatform.log.storage import UnsupportedCompressionError
    from eventplatform.log.storage.record_batch import CRC_START

    log = PartitionLog.open(tmp_path)
    for attributes, error in ((0x0006, UnsupportedCompressionError), (0x0040, InvalidRecordError)):
        batch = bytearray(make_batch(2))
        struct.pack_into(">h", batch, 21, attributes)
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
        with pytest.raises(error):
            log.append(batch)
    assert log.log_end_offset == 0


def test_truncating_into_the_batch_holding_the_log_start_restarts_the_log(
    tmp_path: Path, make_batch
) -> None:
    log = PartitionLog.open(tmp_path)
    log.append(make_batch(10))
    log.advance_log_start_offset(5)
    log.truncate_to(7)
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert log.append(make_batch(1)).base_offset == 7


def test_a_directory_is_opened_by_one_log_at_a_time(tmp_path: Path) -> None:
    from eventplatform.log.storage import LogLockedError

    log = PartitionLog.open(tmp_path)
    with pytest.raises(LogLockedError):
        PartitionLog.open(tmp_path)
    log.close()
    PartitionLog.open(tmp_path).close()


def test_compacted_topic_checks_keys_inside_compressed_batches(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(cleanup_policy=frozenset({"compact"})))
    keyed = [Record(index, 1000, b"k%d" % index, b"v", ()) for index in range(50)]
    keyless = [*keyed[:49], Record(49, 1000, None, b"v", ())]
    log.append(encode_batch(keyed, base_offset=0, compression=Compression.ZSTD))
    with pytest.raises(InvalidRecordError, match="key"):
        log.append(encode_batch(keyless, base_offset=0, compression=Compression.ZSTD))
    assert log.log_end_offset == 50


def test_compacted_topic_refuses_offset_deltas_that_skip(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(cleanup_policy=frozenset({"compact"})))
    records = [Record(0, 1000, b"a", b"v", ()), Record(2, 1000, b"b", b"v", ())]
    batch = encode_batch(records, base_offset=0, last_offset_delta=1)
    with pytest.raises(InvalidRecordError, match="offset delta"):
        log.append(batch)
    assert log.log_end_offset == 0


def fsyncs_of(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each ``os.fsync`` from now on covers: "directory" or "file"."""
    calls: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        is_directory = stat.S_ISDIR(os.fstat(descriptor).st_mode)
        calls.append("directory" if is_directory else "file")
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_new_log_is_created_without_an_fsync_and_its_first_flush_syncs_the_directory(
    tmp_path: Path, clock, make_batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = fsyncs_of(monkeypatch)
    log = PartitionLog.open(tmp_path / "new-0", LogConfig(flush_ms=1000), clock_ms=clock)
    assert fsyncs == [], "creating an empty log waited on the disk"
    assert not (tmp_path / "new-0" / CHECKPOINT_FILE).exists()
    log.append(make_batch(3))
    clock.advance(1000)
    log.flush_if_due()
    assert log.recovery_point == 3
    assert "directory" in fsyncs, "the first segment's entries were never made durable"


def test_a_new_logs_first_background_flush_syncs_its_directory(
    tmp_path: Path, clock, make_batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = fsyncs_of(monkeypatch)
    log = PartitionLog.open(tmp_path / "new-0", LogConfig(flush_ms=1000), clock_ms=clock)
    log.background_flush = True
    log.append(make_batch(3))
    clock.advance(1000)
    job = log.start_flush()
    assert job is not None
    run_flush_jobs([job])
    log.finish_flush(job)
    assert "directory" in fsyncs
    log.append(make_batch(3))
    clock.advance(1000)
    fsyncs.clear()
    second = log.start_flush()
    assert second is not None
    run_flush_jobs([second])
    assert fsyncs and "directory" not in fsyncs, "the directory is fsynced once, not every flush"


def test_a_new_log_closed_and_reopened_keeps_its_records_and_checkpoint(
    tmp_path: Path, clock, make_batch
) -> None:
    log = PartitionLog.open(tmp_path / "new-0", LogConfig(), clock_ms=clock)
    log.append(make_batch(4))
    log.close()
    assert (tmp_path / "new-0" / CHECKPOINT_FILE).exists()
    reopened = PartitionLog.open(tmp_path / "new-0", LogConfig(), clock_ms=clock)
    assert reopened.log_end_offset == 4 and reopened.recovery_point == 4
    reopened.close()
