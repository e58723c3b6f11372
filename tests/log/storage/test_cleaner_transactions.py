"""Compaction and erasure of a log with transactions: aborted records are removed and
never stand as a key's latest value, committed transactional records do, markers and the
transaction indexes stay, nothing past an open transaction is cleaned, and a crash at any
step of the swap keeps the aborted index whole."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import Cleaner, LogConfig, PartitionLog, Record
from eventplatform.log.storage.erasure import erase_records
from eventplatform.log.storage.record_batch import encode_batch

TIMESTAMP_MS = 1_700_000_000_000


def compacted(**overrides: object) -> LogConfig:
    settings = {"cleanup.policy": "compact", "segment.bytes": 400, "file.delete.delay.ms": 0}
    settings.update(overrides)
    return LogConfig.from_properties(settings)


def open_partition(directory: Path, config: LogConfig | None = None) -> Partition:
    return Partition.open(
        "accounts", 0, directory, config or compacted(), clock_ms=lambda: TIMESTAMP_MS
    )


class Writer:
    """Appends keyed records: plainly, or in transactions of one producer each."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.sequences: dict[int, int] = {}

    def plain(self, *pairs: tuple[bytes, bytes | None]) -> int:
        return self._append(pairs, producer_id=-1)

    def transactional(self, producer_id: int, *pairs: tuple[bytes, bytes | None]) -> int:
        return self._append(pairs, producer_id=producer_id)

    def end(self, producer_id: int, *, commit: bool) -> int:
        result = self.partition.write_marker(producer_id, 0, commit, 0)
        assert result.error == ErrorCode.NONE, result
        return result.base_offset

    def _append(self, pairs: tuple[tuple[bytes, bytes | None], ...], *, producer_id: int) -> int:
        records = [Record(i, TIMESTAMP_MS, key, value) for i, (key, value) in enumerate(pairs)]
        sequence = self.sequences.get(producer_id, 0)
        batch = encode_batch(
            records,
            base_offset=0,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=sequence if producer_id >= 0 else -1,
            is_transactional=producer_id >= 0,
        )
        result = self.partition.append(batch)
        assert result.error == ErrorCode.NONE, result
        if producer_id >= 0:
            self.sequences[producer_id] = sequence + len(pairs)
        return result.base_offset


def data_records(log: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {
        record.offset: (record.key, record.value)
        for batch in log.iter_batches()
        if not batch.header.is_control
        for record in batch.records
    }


def markers(log: PartitionLog) -> list[tuple[int, int, bytes | None]]:
    return [
        (batch.header.base_offset, batch.header.producer_id, batch.records[0].key)
        for batch in log.iter_batches()
        if batch.header.is_control
    ]


def latest(records: dict[int, tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    found: dict[bytes, bytes | None] = {}
    for _, (key, value) in sorted(records.items()):
        assert key is not None
        found[key] = value
    return found


def roll_away(partition: Partition, writer: Writer) -> None:
    """Enough plain filler that everything written so far sits in closed segments."""
    for number in range(8):
        writer.plain((b"filler", b"%d" % number))
    partition.log.roll()


def test_aborted_records_go_and_never_stand_for_their_key(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    writer = Writer(partition)
    writer.plain((b"a", b"a0"), (b"b", b"b0"))
    aborted_start = writer.transactional(1, (b"a", b"aborted"), (b"c", b"aborted"))
    writer.end(1, commit=False)
    committed = writer.transactional(2, (b"b", b"committed"))
    writer.end(2, commit=True)
    roll_away(partition, writer)
    markers_before = markers(partition.log)
    aborted_index = partition.aborted_transactions(0, partition.log.log_end_offset)
    stats = Cleaner().compact(partition.log)
    assert stats is not None and stats.records_removed > 0
    survivors = data_records(partition.log)
    assert aborted_start not in survivors and aborted_start + 1 not in survivors
    # the aborted "a" never hid the plain one; "c" was only ever aborted
    assert latest(survivors)[b"a"] == b"a0"
    assert b"c" not in latest(survivors)
    # a committed transactional record is the latest value of its key
    assert survivors[committed] == (b"b", b"committed")
    assert latest(survivors)[b"b"] == b"committed"
    assert markers(partition.log) == markers_before
    assert partition.aborted_transactions(0, partition.log.log_end_offset) == aborted_index
    assert aborted_index == [(1, aborted_start)]
    partition.close()


def test_the_cleaned_segment_keeps_the_transaction_index(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    writer = Writer(partition)
    for producer_id in range(5):
        writer.transactional(producer_id, (b"k%d" % producer_id, b"v"))
        writer.end(producer_id, commit=producer_id % 2 == 1)
    roll_away(partition, writer)
    before = [list(s.txn_index.entries()) for s in partition.log.segments]
    entries = [entry for group in before for entry in group]
    assert len(entries) == 3
    assert Cleaner().compact(partition.log) is not None
    after = [entry for s in partition.log.segments for entry in s.txn_index.entries()]
    assert after == entries
    partition.close()
    reopened = open_partition(tmp_path)
    end = reopened.log.log_end_offset
    assert [e.producer_id for e in reopened.log.collect_aborted_transactions(0, end)] == [0, 2, 4]
    reopened.close()


def test_nothing_past_an_open_transaction_is_cleaned(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    writer = Writer(partition)
    writer.plain((b"a", b"old"))
    open_start = writer.transactional(1, (b"a", b"undecided"))
    writer.plain((b"a", b"newest"))
    roll_away(partition, writer)
    assert partition.log.first_unstable_offset() == open_start
    Cleaner().compact(partition.log)
    survivors = data_records(partition.log)
    # the clean stopped before the open transaction: the record before it was not mapped
    # against records after it, and the open transaction's record is kept
    assert survivors[0] == (b"a", b"old")
    assert survivors[open_start] == (b"a", b"undecided")
    writer.end(1, commit=False)
    Cleaner().compact(partition.log)
    survivors = data_records(partition.log)
    assert 0 not in survivors and open_start not in survivors
    assert latest(survivors)[b"a"] == b"newest"
    partition.close()


def test_a_crash_at_every_swap_step_keeps_the_aborted_index(tmp_path: Path, crash) -> None:
    class CrashError(Exception):
        pass

    for crash_at in range(5):
        directory = tmp_path / f"victim-{crash_at}"
        partition = open_partition(directory)
        writer = Writer(partition)
        rng = random.Random(crash_at)
        for number in range(12):
            producer_id = rng.randint(0, 3)
            writer.transactional(producer_id, (b"k%d" % rng.randint(0, 5), b"%d" % number))
            writer.end(producer_id, commit=rng.random() < 0.5)
        roll_away(partition, writer)
        end = partition.log.log_end_offset
        expected = partition.aborted_transactions(0, end)
        seen: list[str] = []

        def step(name: str, seen: list[str] = seen, crash_at: int = crash_at) -> None:
            seen.append(name)
            if len(seen) > crash_at:
                raise CrashError(name)

        with pytest.raises(CrashError):
            Cleaner(on_step=step).compact(partition.log)
        crash(partition.log)
        reopened = open_partition(directory)
        where = f"after a crash at {seen[-1]}"
        assert reopened.aborted_transactions(0, end) == expected, where
        Cleaner().compact(reopened.log)
        assert reopened.aborted_transactions(0, end) == expected, where
        reopened.close()


def test_an_erasure_keeps_markers_transactions_and_the_index(tmp_path: Path) -> None:
    partition = open_partition(tmp_path, LogConfig(segment_bytes=400, file_delete_delay_ms=0))
    writer = Writer(partition)
    target = writer.transactional(1, (b"user-1", b"secret"), (b"user-2", b"kept"))
    writer.end(1, commit=True)
    writer.transactional(2, (b"user-3", b"gone"))
    writer.end(2, commit=False)
    roll_away(partition, writer)
    before = list(partition.log.iter_batches())
    aborted = partition.aborted_transactions(0, partition.log.log_end_offset)
    assert erase_records(Cleaner(), partition.log, [target]) == 1
    after = list(partition.log.iter_batches())
    assert [b.header.base_offset for b in after] == [b.header.base_offset for b in before]
    for old, new in zip(before, after, strict=True):
        assert new.header.attributes & 0x30 == old.header.attributes & 0x30
        assert (new.header.producer_id, new.header.producer_epoch) == (
            old.header.producer_id,
            old.header.producer_epoch,
        )
        if old.header.is_control:
            assert new.records == old.records
    erased = after[0].records[0]
    assert erased.offset == target and erased.value is None
    assert after[0].records[1].value == b"kept"
    assert partition.aborted_transactions(0, partition.log.log_end_offset) == aborted
    partition.close()
