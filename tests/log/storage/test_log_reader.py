"""PartitionReader: lock-free reads of a partition directory that a live log owns."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventplatform.log.storage import Compression, CorruptRecordError, LogConfig, PartitionLog
from eventplatform.log.storage.files import (
    CHECKPOINT_FILE,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    segment_path,
    write_checkpoint,
)
from eventplatform.log.storage.reader import LogBounds, PartitionReader
from eventplatform.log.storage.record_batch import Record, decode_batch, encode_batch

BatchFactory = Callable[..., bytes]
SMALL_SEGMENTS = LogConfig(segment_bytes=4_000, index_interval_bytes=300)


def fill(log: PartitionLog, make_batch: BatchFactory, batches: int, count: int = 5) -> None:
    for index in range(batches):
        log.append(make_batch(count, prefix=f"b{index}-", value_bytes=40))


def offsets_of(reader: PartitionReader, start: int, end: int) -> list[int]:
    found = []
    for batch in reader.iter_batches(start, end):
        for record in decode_batch(batch.data).records:
            if start <= record.offset < end:
                found.append(record.offset)
    return found


@pytest.fixture
def live_log(tmp_path: Path, clock: Any, make_batch: BatchFactory) -> PartitionLog:
    log = PartitionLog.open(tmp_path / "topic-0", SMALL_SEGMENTS, clock_ms=clock)
    fill(log, make_batch, 60)
    return log


def test_reads_every_range_of_a_live_log_across_segments(live_log: PartitionLog) -> None:
    reader = PartitionReader(live_log.directory)
    assert len(reader.segment_bases()) >= 5
    assert reader.bounds() == LogBounds(0, live_log.log_end_offset)
    end = live_log.log_end_offset
    for start, stop in [(0, end), (7, 8), (133, 271), (end - 1, end), (5, 5)]:
        expected = [record.offset for record in live_log.iter_records(start, stop)]
        assert offsets_of(reader, start, stop) == expected
    # Batches come back whole and in order, with their position in their segment file.
    batches = list(reader.iter_batches(0, end))
    assert [batch.header.base_offset for batch in batches] == list(range(0, end, 5))
    for batch in batches:
        with open(batch.path, "rb") as handle:
            handle.seek(batch.header.position)
            assert handle.read(batch.header.size_bytes) == bytes(batch.data)


def test_a_torn_tail_is_not_there_yet(live_log: PartitionLog, make_batch: BatchFactory) -> None:
    reader = PartitionReader(live_log.directory)
    end = live_log.log_end_offset
    active = segment_path(live_log.directory, live_log.active_segment.base_offset, LOG_SUFFIX)
    whole = bytearray(make_batch(4, value_bytes=100))
    struct.pack_into(">q", whole, 0, end)
    for torn in (whole[:30], whole[:70], whole[:-1]):  # header cut short, then the body
        with open(active, "ab") as handle:
            handle.write(torn)
        assert reader.bounds() == LogBounds(0, end)
        assert offsets_of(reader, end - 3, end + 4) == [end - 3, end - 2, end - 1]
        with open(active, "r+b") as handle:
            handle.truncate(active.stat().st_size - len(torn))
    with open(active, "ab") as handle:
        handle.write(whole)  # the writer finished: now the batch counts
    assert reader.bounds() == LogBounds(0, end + 4)
    assert offsets_of(reader, end - 1, end + 4) == list(range(end - 1, end + 4))


def test_a_bad_crc_in_the_middle_names_the_file_and_byte(live_log: PartitionLog) -> None:
    reader = PartitionReader(live_log.directory)
    [victim] = [b for b in reader.iter_batches(0, 200) if b.header.base_offset == 100]
    live_log.close()
    with open(victim.path, "r+b") as handle:
        handle.seek(victim.header.position + 70)
        byte = handle.read(1)
        handle.seek(victim.header.position + 70)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError) as caught:
        offsets_of(reader, 90, 120)
    assert str(victim.path) in str(caught.value)
    assert f"byte {victim.header.position}" in str(caught.value)
    assert "CRC" in str(caught.value)
    assert offsets_of(reader, 0, 100) == list(range(100))  # before the damage reads fine


def test_an_incomplete_batch_in_a_sealed_segment_is_corrupt(live_log: PartitionLog) -> None:
    reader = PartitionReader(live_log.directory)
    first = reader.segment_bases()[0]
    path = segment_path(live_log.directory, first, LOG_SUFFIX)
    live_log.close()
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 10)
    with pytest.raises(CorruptRecordError, match="incomplete"):
        offsets_of(reader, 0, 1_000)


def test_log_start_is_the_checkpoint_or_the_first_segment(live_log: PartitionLog) -> None:
    reader = PartitionReader(live_log.directory)
    end = live_log.log_end_offset
    live_log.advance_log_start_offset(42)  # DeleteRecords: a checkpoint inside a segment
    assert reader.bounds() == LogBounds(42, end)
    bases = reader.segment_bases()
    live_log.delete_segments([live_log.segments.first, *list(live_log.segments)[1:3]])
    live_log.delete_expired_files(force=True)
    # A checkpoint that lags behind deleted segments: the first live segment bounds it.
    write_checkpoint(
        live_log.directory, {"log_start_offset": 42, "recovery_point": 0, "cleaner_offset": 0}
    )
    assert reader.segment_bases() == bases[3:]
    assert reader.bounds() == LogBounds(bases[3], end)
    (live_log.directory / CHECKPOINT_FILE).unlink()
    assert reader.bounds() == LogBounds(bases[3], end)


def test_suffixed_segments_are_not_live(live_log: PartitionLog) -> None:
    reader = PartitionReader(live_log.directory)
    bases = reader.segment_bases()
    for suffix in (".cleaned", ".swap", DELETED_SUFFIX):
        path = segment_path(live_log.directory, 10**6, LOG_SUFFIX, suffix)
        path.write_bytes(b"not a segment")
    assert reader.segment_bases() == bases


def test_a_segment_that_vanishes_mid_read_is_skipped_after_relisting(
    live_log: PartitionLog,
) -> None:
    reader = PartitionReader(live_log.directory)
    bases = reader.segment_bases()
    end = live_log.log_end_offset
    batches = reader.iter_batches(0, end)
    first = next(batches)
    assert first.header.base_offset == 0
    # Retention or compaction renames the next segment while the first is being read.
    for suffix in (LOG_SUFFIX, ".index", ".timeindex"):
        source = segment_path(live_log.directory, bases[1], suffix)
        source.rename(segment_path(live_log.directory, bases[1], suffix, DELETED_SUFFIX))
    rest = [batch.header.base_offset for batch in batches]
    assert rest == [base for base in range(5, end, 5) if not bases[1] <= base < bases[2]]


def test_index_lookups_work_on_live_and_trimmed_indexes(
    tmp_path: Path, clock: Any, make_batch: BatchFactory
) -> None:
    config = LogConfig(index_interval_bytes=200)  # one big active segment, a dense index
    log = PartitionLog.open(tmp_path / "t-0", config, clock_ms=clock)
    fill(log, make_batch, 400)
    reader = PartitionReader(log.directory)
    index = segment_path(log.directory, 0, ".index")
    assert index.stat().st_size == config.segment_index_bytes  # preallocated, zeros at the end
    assert offsets_of(reader, 1_777, 1_781) == [1_777, 1_778, 1_779, 1_780]
    first = next(reader.iter_batches(1_777, 1_781))
    assert first.header.base_offset == 1_775
    log.close()  # trims the index to its entries
    assert index.stat().st_size < config.segment_index_bytes
    assert offsets_of(reader, 1_777, 1_781) == [1_777, 1_778, 1_779, 1_780]
    index.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07" * 3)  # garbage: falls back to a scan
    assert offsets_of(reader, 1_777, 1_781) == [1_777, 1_778, 1_779, 1_780]
    index.unlink()
    assert offsets_of(reader, 1_998, 2_000) == [1_998, 1_999]


def test_offset_for_timestamp_agrees_with_the_log(
    live_log: PartitionLog, make_batch: BatchFactory
) -> None:
    live_log.append(make_batch(3, timestamp=1_800_000_000_000))
    reader = PartitionReader(live_log.directory)
    start, end = reader.bounds()
    for timestamp in (
        0,
        1_700_000_000_002,
        1_700_000_000_004,
        1_700_000_000_005,
        1_800_000_000_001,
    ):
        found = live_log.offset_for_timestamp(timestamp)
        expected = None if found is None else found.offset
        assert (
            reader.offset_for_timestamp(timestamp, start_offset=start, end_offset=end) == expected
        )
    assert (
        reader.offset_for_timestamp(2_000_000_000_000, start_offset=start, end_offset=end) is None
    )
    assert reader.offset_for_timestamp(0, start_offset=17, end_offset=end) == 17


def transactional(producer_id: int, base: int, count: int) -> bytes:
    records = [Record(base + index, 1_000 + base + index, b"k", b"tx") for index in range(count)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=0, is_transactional=True)


def marker(producer_id: int, offset: int, *, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    record = Record(offset, 2_000, key, struct.pack(">hi", 0, 0))
    return encode_batch(
        [record], producer_id=producer_id, producer_epoch=0, is_transactional=True, is_control=True
    )


def test_control_batches_and_aborted_transactions_are_skipped(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    plain = encode_batch([Record(index, 1_000, None, b"plain") for index in range(3)])
    later = encode_batch(
        [Record(11 + index, 1_000, None, b"plain") for index in range(2)],
        compression=Compression.GZIP,
    )
    log_bytes = b"".join(
        [
            plain,  # 0-2
            transactional(7, 3, 2),  # 3-4, committed at 7
            transactional(8, 5, 2),  # 5-6, aborted at 8
            marker(7, 7, commit=True),
            marker(8, 8, commit=False),
            transactional(9, 9, 2),  # 9-10, still open
            later,  # 11-12
        ]
    )
    segment_path(directory, 0, LOG_SUFFIX).write_bytes(log_bytes)
    reader = PartitionReader(directory)
    assert reader.bounds() == LogBounds(0, 13)
    visible = [
        record.offset
        for batch in reader.iter_visible_batches(0, 13)
        for record in decode_batch(batch.data).records
    ]
    assert sorted(visible) == [0, 1, 2, 3, 4, 11, 12]
    # A range that ends before the commit marker still sees the committed records.
    assert [
        record.offset
        for batch in reader.iter_visible_batches(3, 5)
        for record in decode_batch(batch.data).records
    ] == [3, 4]
