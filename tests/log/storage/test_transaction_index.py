"""The aborted-transaction index: one ``.txnindex`` per segment in Kafka's format, looked up
as Kafka's ``collectAbortedTransactions`` does, truncated with its segment, deleted by
retention with it, and carried through every state of a segment swap by recovery."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from eventplatform.log.storage import Cleaner, LogConfig, PartitionLog, Record
from eventplatform.log.storage.control_records import (
    ABORT,
    COMMIT,
    TransactionMarker,
    encode_marker,
    read_marker,
)
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.files import (
    CLEANED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from eventplatform.log.storage.record_batch import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    decode_batch,
    encode_batch,
    parse_header,
    split_batches,
)
from eventplatform.log.storage.txn_index import ENTRY_BYTES, AbortedTransaction, TransactionIndex

TIMESTAMP_MS = 1_700_000_000_000


def entry(producer_id: int, first: int, last: int, stable: int | None = None) -> AbortedTransaction:
    return AbortedTransaction(producer_id, first, last, last + 1 if stable is None else stable)


# ---------------------------------------------------------------- the file


def test_an_entry_is_kafkas_34_bytes(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTransaction(7, 10, 20, 15))
    expected = b"".join(
        [
            struct.pack(">h", 0),  # version
            struct.pack(">q", 7),  # producer id
            struct.pack(">q", 10),  # first offset
            struct.pack(">q", 20),  # last offset: the abort marker
            struct.pack(">q", 15),  # last stable offset once the marker was in
        ]
    )
    assert ENTRY_BYTES == 34
    assert index.path.read_bytes() == expected


def test_no_file_until_the_first_abort(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    assert not index.path.exists()
    assert list(index.entries()) == []
    assert index.collect(0, 100) == ([], False)
    index.flush()  # nothing to make durable
    assert not index.path.exists()


def test_entries_read_back_in_marker_order_after_reopening(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    written = [entry(1, 0, 3), entry(2, 1, 5, stable=4), entry(1, 6, 9)]
    for item in written:
        index.append(item)
    index.flush()
    reopened = TransactionIndex(path)
    assert list(reopened.entries()) == written
    assert reopened.last_offset == 9
    assert reopened.entry_count == 3


def test_collect_follows_kafkas_overlap_rule_and_completeness(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(entry(1, 0, 3))  # ends before the fetch
    index.append(entry(2, 2, 8, stable=5))  # overlaps
    index.append(entry(3, 9, 12))  # begins at the upper bound
    found, complete = index.collect(5, 9)
    assert found == [entry(2, 2, 8, stable=5)]
    assert complete  # the last entry's stable offset reached the bound
    assert index.collect(5, 100) == ([entry(2, 2, 8, stable=5), entry(3, 9, 12)], False)


def test_truncation_drops_the_markers_at_and_after_the_offset(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    for item in [entry(1, 0, 3), entry(2, 1, 5), entry(3, 6, 9)]:
        index.append(item)
    index.truncate_to(5)
    assert list(index.entries()) == [entry(1, 0, 3)]
    assert index.last_offset == 3
    index.append(entry(4, 4, 6))  # markers go on from there
    assert [item.producer_id for item in index.entries()] == [1, 4]


def test_a_torn_last_entry_is_cut_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    index.append(entry(1, 0, 3))
    index.append(entry(2, 4, 5))
    with open(path, "r+b") as handle:
        handle.truncate(2 * ENTRY_BYTES - 7)
    reopened = TransactionIndex(path)
    assert list(reopened.entries()) == [entry(1, 0, 3)]
    assert path.stat().st_size == ENTRY_BYTES


def test_an_entry_of_an_unknown_version_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 3, 1, 2, 3, 4))
    with pytest.raises(CorruptRecordError, match="version 3"):
        list(TransactionIndex(path).entries())


def test_markers_encode_kafkas_end_transaction_record() -> None:
    batch = encode_marker(
        producer_id=42, producer_epoch=3, commit=False, coordinator_epoch=11, timestamp_ms=5
    )
    header = parse_header(batch)
    assert header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT) == TRANSACTIONAL_BIT | CONTROL_BIT
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    [record] = decode_batch(batch).records
    assert record.key == struct.pack(">hh", 0, ABORT)
    assert record.value == struct.pack(">hi", 0, 11)
    assert read_marker(batch, header) == TransactionMarker(commit=False, coordinator_epoch=11)
    commit = encode_marker(
        producer_id=42, producer_epoch=3, commit=True, coordinator_epoch=11, timestamp_ms=5
    )
    assert decode_batch(commit).records[0].key == struct.pack(">hh", 0, COMMIT)


def test_a_control_record_of_another_type_is_no_marker() -> None:
    leader_change = encode_batch(
        [Record(0, 5, struct.pack(">hh", 0, 2), b"\x00\x00")], is_control=True
    )
    assert read_marker(leader_change, parse_header(leader_change)) is None


# ---------------------------------------------------------------- in the log


def open_log(directory: Path, **settings: int) -> PartitionLog:
    config = LogConfig(segment_bytes=settings.pop("segment_bytes", 300), **settings)
    return PartitionLog.open(directory, config)


def append_transactional(log: PartitionLog, producer_id: int, count: int = 2) -> int:
    records = [Record(i, TIMESTAMP_MS, b"k%d" % i, b"v" * 20) for i in range(count)]
    batch = encode_batch(
        records, producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    return log.append(batch).base_offset


def append_abort(log: PartitionLog, producer_id: int, first_offset: int) -> int:
    """What a partition does for an abort: the marker, then its entry."""
    batch = bytearray(
        encode_marker(
            producer_id=producer_id,
            producer_epoch=0,
            commit=False,
            coordinator_epoch=0,
            timestamp_ms=TIMESTAMP_MS,
        )
    )
    offset = log.append(batch, validated=split_batches(batch, check_crc=False)).base_offset
    log.append_aborted_transaction(entry(producer_id, first_offset, offset))
    return offset


def abort_across_segments(log: PartitionLog, count: int) -> list[AbortedTransaction]:
    aborted = []
    for producer_id in range(count):
        first = append_transactional(log, producer_id)
        last = append_abort(log, producer_id, first)
        aborted.append(entry(producer_id, first, last))
    return aborted


def test_each_segment_indexes_the_markers_it_holds(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    aborted = abort_across_segments(log, 6)
    assert len(log.segments) > 2
    for segment in log.segments:
        held = [e.last_offset for e in segment.txn_index.entries()]
        assert all(segment.base_offset <= offset < segment.next_offset for offset in held)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == aborted
    assert log.collect_aborted_transactions(aborted[2].last_offset, aborted[4].first_offset) == [
        aborted[2],
        aborted[3],
    ]
    log.close()


def test_a_lookup_stops_at_the_segment_that_completes_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    aborted = abort_across_segments(log, 6)
    segments = list(log.segments)
    # damage every index after the second segment: a lookup that reads them fails
    for segment in segments[2:]:
        if segment.txn_index.size_bytes:
            with open(segment.txn_index.path, "r+b") as handle:
                handle.write(struct.pack(">h", 9))
    inside = [e for e in aborted if e.last_offset < segments[1].next_offset]
    found = log.collect_aborted_transactions(0, inside[-1].last_offset)
    assert found == inside
    with pytest.raises(CorruptRecordError):
        log.collect_aborted_transactions(0, log.log_end_offset)
    log.close()


def test_retention_deletes_a_segment_with_its_transaction_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, file_delete_delay_ms=0)
    aborted = abort_across_segments(log, 6)
    first = log.segments.first
    path = first.txn_index.path
    assert path.exists()
    log.advance_log_start_offset(first.next_offset)  # as DeleteRecords does
    Cleaner().apply_retention(log)
    assert not path.exists()
    start = log.segments.first.base_offset
    kept = [e for e in aborted if e.last_offset >= start]
    assert kept and len(kept) < len(aborted)
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == kept
    log.close()


def test_truncating_the_log_drops_the_entries_of_the_markers_it_removes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=10_000)
    aborted = abort_across_segments(log, 4)
    log.truncate_to(aborted[2].last_offset)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == aborted[:2]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=10_000)
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted[:2]
    reopened.close()


# ---------------------------------------------------------------- recovery of swaps


def test_a_transaction_index_without_its_log_is_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    orphan = segment_path(tmp_path, 999, TXN_INDEX_SUFFIX)
    orphan.write_bytes(b"\x00" * ENTRY_BYTES)
    open_log(tmp_path).close()
    assert not orphan.exists()


def swapped(tmp_path: Path) -> tuple[PartitionLog, list[AbortedTransaction], Path, bytes]:
    """A log whose first segment holds aborts, and that segment's index bytes."""
    log = open_log(tmp_path)
    aborted = abort_across_segments(log, 6)
    first = log.segments.first
    data = first.txn_index.path.read_bytes()
    assert data
    log.close()
    return log, aborted, first.txn_index.path, data


def test_recovery_installs_the_index_of_a_complete_swap(tmp_path: Path) -> None:
    _, aborted, path, data = swapped(tmp_path)
    # the cleaner's swap renamed index first: .txnindex.swap and .log.swap, old ones gone
    for suffix in (LOG_SUFFIX, TXN_INDEX_SUFFIX):
        plain = segment_path(tmp_path, 0, suffix)
        plain.rename(segment_path(tmp_path, 0, suffix, SWAP_SUFFIX))
    reopened = open_log(tmp_path)
    assert path.read_bytes() == data
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted
    reopened.close()


def test_recovery_installs_the_index_left_behind_by_a_half_installed_swap(tmp_path: Path) -> None:
    """The log took its plain name, the transaction index (renamed last) did not."""
    _, aborted, path, data = swapped(tmp_path)
    path.rename(segment_path(tmp_path, 0, TXN_INDEX_SUFFIX, SWAP_SUFFIX))
    reopened = open_log(tmp_path)
    assert path.read_bytes() == data
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted
    reopened.close()


def test_recovery_drops_the_index_of_a_swap_still_being_made(tmp_path: Path) -> None:
    """The index reached .swap, its log is still .cleaned: the old segment stays whole."""
    _, aborted, path, data = swapped(tmp_path)
    segment_path(tmp_path, 0, TXN_INDEX_SUFFIX, SWAP_SUFFIX).write_bytes(b"\x00" * ENTRY_BYTES)
    segment_path(tmp_path, 0, LOG_SUFFIX, CLEANED_SUFFIX).write_bytes(b"")
    reopened = open_log(tmp_path)
    assert path.read_bytes() == data
    assert not list(tmp_path.glob("*.swap")) and not list(tmp_path.glob("*.cleaned"))
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted
    reopened.close()
