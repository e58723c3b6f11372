"""Retention and compaction, including a crash at every step of a compaction swap."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from eventplatform.log.storage import (
    Cleaner,
    Compression,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    Record,
)
from eventplatform.log.storage.record_batch import encode_batch

HOUR_MS = 3_600_000


def keyed_batch(
    pairs: list[tuple[bytes, bytes | None]], timestamp: int, codec=Compression.NONE
) -> bytes:
    records = [Record(i, timestamp, key, value) for i, (key, value) in enumerate(pairs)]
    return encode_batch(records, base_offset=0, compression=codec)


# ---------------------------------------------------------------- retention


def test_time_retention_deletes_only_expired_closed_segments(
    tmp_path: Path, clock, make_batch
) -> None:
    config = LogConfig(segment_bytes=400, retention_ms=HOUR_MS, file_delete_delay_ms=0)
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for _ in range(6):
        log.append(make_batch(3, timestamp=clock.now_ms))
    old_segments = len(log.segments)
    log.roll()
    clock.advance(2 * HOUR_MS)
    for _ in range(6):
        log.append(make_batch(3, timestamp=clock.now_ms))
    deleted = Cleaner().apply_retention(log)
    assert deleted == old_segments
    assert log.log_start_offset == 18
    assert log.segments.first.base_offset == 18
    assert [record.offset for record in log.iter_records()] == list(range(18, 36))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert not list(tmp_path.glob("*.deleted"))
    log.close()
    assert PartitionLog.open(tmp_path, config, clock_ms=clock).log_start_offset == 18


def test_an_expired_active_segment_is_rolled_and_deleted(tmp_path: Path, clock, make_batch) -> None:
    config = LogConfig(retention_ms=HOUR_MS, file_delete_delay_ms=0)
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    log.append(make_batch(3, timestamp=clock.now_ms))
    clock.advance(HOUR_MS - 10)
    assert Cleaner().apply_retention(log) == 0
    clock.advance(HOUR_MS)
    assert Cleaner().apply_retention(log) == 1
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert log.append(make_batch(1, timestamp=clock.now_ms)).base_offset == 3


def test_retention_stops_at_the_upper_bound(tmp_path: Path, clock, make_batch) -> None:
    config = LogConfig(segment_bytes=300, retention_bytes=0, file_delete_delay_ms=0)
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for _ in range(6):
        log.append(make_batch(3))
    Cleaner().apply_retention(log, upper_bound_offset=7)
    assert log.log_start_offset <= 7
    assert [r.offset for r in log.iter_records()][-1] == 17


def test_segments_below_a_deleted_records_start_are_freed(
    tmp_path: Path, clock, make_batch
) -> None:
    for policy in ("delete", "compact"):
        directory = tmp_path / policy
        config = LogConfig.from_properties(
            {
                "segment.bytes": 150,
                "retention.ms": -1,
                "cleanup.policy": policy,
                "file.delete.delay.ms": 0,
            }
        )
        log = PartitionLog.open(directory, config, clock_ms=clock)
        for _ in range(8):
            log.append(make_batch(3))
        bases = [segment.base_offset for segment in log.segments]
        log.advance_log_start_offset(bases[2] + 1)
        assert Cleaner().apply_retention(log) == 2
        assert log.segments.first.base_offset == bases[2]
        assert log.log_start_offset == bases[2] + 1


def test_size_retention_keeps_the_log_under_retention_bytes(
    tmp_path: Path, clock, make_batch
) -> None:
    batch = make_batch(2, value_bytes=100)
    config = LogConfig(segment_bytes=len(batch) * 2, retention_bytes=len(batch) * 5)
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for _ in range(12):
        log.append(batch)
    Cleaner().apply_retention(log)
    # As in Kafka, a segment goes only if the log stays at or over retention.bytes without it.
    assert log.size_bytes - log.segments.first.size_bytes < config.retention_bytes <= log.size_bytes
    assert log.log_start_offset == 12
    assert log.log_end_offset == 24


def test_retention_minus_one_keeps_everything(tmp_path: Path, clock, make_batch) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=300, retention_ms=-1), clock_ms=clock)
    for _ in range(5):
        log.append(make_batch(3, timestamp=0))
    clock.advance(10_000 * HOUR_MS)
    assert Cleaner().apply_retention(log) == 0


def test_deleted_files_linger_for_the_delete_delay(tmp_path: Path, clock, make_batch) -> None:
    config = LogConfig(segment_bytes=300, retention_ms=1, file_delete_delay_ms=60_000)
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for _ in range(5):
        log.append(make_batch(3, timestamp=0))
    clock.advance(10)
    slice_before = log.read(0, 100)
    Cleaner().apply_retention(log)
    assert list(tmp_path.glob("*.log.deleted"))
    assert slice_before.read_bytes()  # an in-flight read still works
    clock.advance(60_000)
    log.flush_if_due()
    assert not list(tmp_path.glob("*.deleted"))


# ---------------------------------------------------------------- compaction


def compacted_config(**overrides) -> LogConfig:
    base = {"cleanup.policy": "compact", "segment.bytes": 600, "file.delete.delay.ms": 0}
    base.update(overrides)
    return LogConfig.from_properties(base)


def write_history(log: PartitionLog, rng: random.Random, batches: int, now_ms: int) -> list[Record]:
    history: list[Record] = []
    for number in range(batches):
        pairs = []
        for _ in range(rng.randint(1, 4)):
            key = f"key-{rng.randint(0, 9)}".encode()
            value = None if rng.random() < 0.1 else f"value-{number}-{rng.randint(0, 99)}".encode()
            pairs.append((key, value))
        codec = rng.choice(list(Compression))
        info = log.append(keyed_batch(pairs, now_ms, codec))
        history += [Record(info.base_offset + i, now_ms, k, v) for i, (k, v) in enumerate(pairs)]
    return history


def latest_by_key(records: list[Record]) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for record in records:
        latest[record.key] = (record.offset, record.value)
    return latest


def test_compaction_keeps_the_latest_record_per_key(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(tmp_path, compacted_config(), clock_ms=clock)
    history = write_history(log, random.Random(1), 80, clock.now_ms)
    active_base = log.active_segment.base_offset
    stats = Cleaner().compact(log)
    assert stats is not None and stats.records_removed > 0
    survivors = list(log.iter_records())
    offsets = [record.offset for record in survivors]
    assert offsets == sorted(set(offsets))
    closed_history = [record for record in history if record.offset < active_base]
    # The active segment is never read by the cleaner, so closed segments keep the
    # latest record per key among themselves.
    expected_closed = {
        (offset, key, value) for key, (offset, value) in latest_by_key(closed_history).items()
    }
    closed_survivors = {(r.offset, r.key, r.value) for r in survivors if r.offset < active_base}
    assert closed_survivors == expected_closed
    assert [r for r in survivors if r.offset >= active_base] == [
        r for r in history if r.offset >= active_base
    ]
    assert latest_by_key(survivors) == latest_by_key(history)
    assert log.cleaner_offset == active_base
    assert Cleaner().compact(log) is None


def test_compaction_keeps_offsets_codecs_and_survives_reopen(tmp_path: Path, clock) -> None:
    config = compacted_config()
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    history = write_history(log, random.Random(2), 60, clock.now_ms)
    Cleaner().compact(log)
    before = [(r.offset, r.key, r.value) for r in log.iter_records()]
    log.close()
    reopened = PartitionLog.open(tmp_path, config, clock_ms=clock)
    assert [(r.offset, r.key, r.value) for r in reopened.iter_records()] == before
    assert reopened.log_end_offset == history[-1].offset + 1
    assert (
        reopened.append(keyed_batch([(b"key-1", b"after")], clock.now_ms)).base_offset
        == history[-1].offset + 1
    )


def test_tombstones_go_after_delete_retention(tmp_path: Path, clock) -> None:
    config = compacted_config(**{"delete.retention.ms": HOUR_MS, "segment.bytes": 200})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")], clock.now_ms))
    log.append(keyed_batch([(b"a", None)], clock.now_ms))
    for number in range(4):
        log.append(keyed_batch([(b"c", str(number).encode())], clock.now_ms))
    Cleaner().compact(log)
    survivors = {(r.key, r.value) for r in log.iter_records()}
    assert (b"a", None) in survivors and (b"a", b"1") not in survivors
    clock.advance(HOUR_MS - 1)
    assert Cleaner().compact(log) is None  # nothing dirty and no horizon has passed
    clock.advance(1)
    assert Cleaner().compact(log) is not None  # the passed horizon alone makes the log cleanable
    survivors = {(r.key, r.value) for r in log.iter_records()}
    assert not any(key == b"a" for key, _ in survivors)
    assert (b"b", b"1") in survivors and (b"c", b"3") in survivors


def test_compaction_is_bounded_by_the_offset_map(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(tmp_path, compacted_config(**{"segment.bytes": 300}), clock_ms=clock)
    for number in range(40):
        log.append(keyed_batch([(f"k{number}".encode(), b"v")], clock.now_ms))
    first = Cleaner(keys_max=10).compact(log)
    assert first is not None and first.clean_until_offset < log.active_segment.base_offset
    second = Cleaner(keys_max=10).compact(log)
    assert second is not None and second.first_dirty_offset == first.clean_until_offset


# ---------------------------------------------------------------- crash during the swap


class SimulatedCrashError(Exception):
    pass


def record_steps(directory: Path, clock) -> list[str]:
    log = PartitionLog.open(directory, compacted_config(), clock_ms=clock)
    write_history(log, random.Random(3), 60, clock.now_ms)
    steps: list[str] = []
    Cleaner(on_step=steps.append).compact(log)
    log.close()
    return steps


def test_every_swap_step_is_reached(tmp_path: Path, clock) -> None:
    steps = record_steps(tmp_path, clock)
    assert {
        "cleaned-filled",
        "cleaned-written",
        "swap-renamed",
        "old-renamed",
        "swap-installed",
    } <= set(steps)


def test_crash_at_every_swap_step_recovers_consistently(tmp_path: Path, clock, crash) -> None:
    steps = record_steps(tmp_path / "reference", clock)
    assert len(steps) >= 5
    for crash_at in range(len(steps)):
        check_crash_at(tmp_path / f"victim-{crash_at}", clock, crash, crash_at)


def check_crash_at(directory: Path, clock, crash, crash_at: int) -> None:
    config = compacted_config()
    log = PartitionLog.open(directory, config, clock_ms=clock)
    history = write_history(log, random.Random(3), 60, clock.now_ms)
    seen: list[str] = []

    def maybe_crash(step: str) -> None:
        seen.append(step)
        if len(seen) > crash_at:
            raise SimulatedCrashError(step)

    with pytest.raises(SimulatedCrashError):
        Cleaner(on_step=maybe_crash).compact(log)
    crash(log)
    reopened = PartitionLog.open(directory, config, clock_ms=clock)
    survivors = list(reopened.iter_records())
    offsets = [record.offset for record in survivors]
    where = f"after a crash at step {crash_at} ({seen[-1]})"
    assert offsets == sorted(set(offsets)), f"offsets repeat or go back {where}"
    original = {(r.offset, r.key, r.value) for r in history}
    assert {(r.offset, r.key, r.value) for r in survivors} <= original, where
    assert latest_by_key(survivors) == latest_by_key(history), where
    assert reopened.log_end_offset == history[-1].offset + 1, where
    # A later clean finishes the job.
    Cleaner().compact(reopened)
    assert latest_by_key(list(reopened.iter_records())) == latest_by_key(history), where
    reopened.close()


# ---------------------------------------------------------------- regressions


def test_a_segment_with_more_keys_than_the_map_still_gets_cleaned(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(
        tmp_path, compacted_config(**{"segment.bytes": 100_000}), clock_ms=clock
    )
    for round_number in range(3):
        for key in range(50):
            log.append(
                keyed_batch([(f"k{key}".encode(), f"{round_number}".encode())], clock.now_ms)
            )
    log.roll()
    cleaner = Cleaner(keys_max=40)
    passes = 0
    while cleaner.compact(log) is not None and passes < 20:
        passes += 1
    survivors = list(log.iter_records())
    assert len(survivors) < 150
    assert latest_by_key(survivors) == {f"k{key}".encode(): (100 + key, b"2") for key in range(50)}


def test_merging_never_overflows_the_indexes(tmp_path: Path, clock) -> None:
    config = compacted_config(**{"segment.index.bytes": 64, "index.interval.bytes": 0})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    for number in range(60):
        log.append(keyed_batch([(f"k{number}".encode(), b"v")], clock.now_ms))
    assert len(log.segments) > 3
    Cleaner().compact(log)
    assert [r.offset for r in log.iter_records()] == list(range(60))
    assert not list(tmp_path.glob("*.cleaned"))


def test_a_dropped_tombstone_clears_the_horizon(tmp_path: Path, clock) -> None:
    config = compacted_config(**{"delete.retention.ms": HOUR_MS})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    log.append(keyed_batch([(b"live", b"v"), (b"gone", None)], clock.now_ms))
    log.roll()
    assert Cleaner().compact(log) is not None  # stamps the horizon
    assert Cleaner().needs_compaction(log) is False
    clock.advance(HOUR_MS)
    assert Cleaner().needs_compaction(log) is True
    assert Cleaner().compact(log) is not None  # drops the tombstone and the horizon
    assert [(r.key, r.value) for r in log.iter_records()] == [(b"live", b"v")]
    assert Cleaner().compact(log) is None
    assert Cleaner().needs_compaction(log) is False


# ---------------------------------------------------------------- compaction lags


def append_keys(
    log: PartitionLog, keys: range, now_ms: int, tag: str, *, distinct_keys: int = 5
) -> None:
    for number in keys:
        key = f"key-{number % distinct_keys}".encode()
        log.append(keyed_batch([(key, f"{tag}-{number}".encode())], now_ms))


def test_a_dirty_segment_older_than_max_compaction_lag_is_compacted_below_the_dirty_ratio(
    tmp_path: Path, clock
) -> None:
    config = compacted_config(**{"segment.bytes": 2000, "max.compaction.lag.ms": HOUR_MS})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    cleaner = Cleaner()
    append_keys(log, range(200), clock.now_ms, "old", distinct_keys=200)
    assert cleaner.compact(log) is not None
    append_keys(log, range(200, 220), clock.now_ms, "new")
    log.roll()
    assert cleaner.dirty_ratio(log) < config.min_cleanable_dirty_ratio
    assert not cleaner.needs_compaction(log)
    clock.advance(HOUR_MS)
    assert cleaner.needs_compaction(log)
    stats = cleaner.compact(log)
    assert stats is not None and stats.records_removed > 0
    assert not cleaner.needs_compaction(log)


def test_records_younger_than_min_compaction_lag_are_not_compacted(tmp_path: Path, clock) -> None:
    config = compacted_config(**{"min.compaction.lag.ms": HOUR_MS})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    cleaner = Cleaner()
    append_keys(log, range(100), clock.now_ms, "young")
    log.roll()
    assert not cleaner.needs_compaction(log)
    assert cleaner.compact(log) is None
    assert len(list(log.iter_records())) == 100
    clock.advance(HOUR_MS + 1)
    assert cleaner.needs_compaction(log)
    stats = cleaner.compact(log)
    assert stats is not None and stats.records_removed == 95
    assert sorted(record.value for record in log.iter_records()) == sorted(
        f"young-{number}".encode() for number in range(95, 100)
    )


def test_a_compacted_topic_rolls_its_active_segment_at_max_compaction_lag(
    tmp_path: Path, clock
) -> None:
    config = compacted_config(**{"segment.bytes": 1 << 20, "max.compaction.lag.ms": 1000})
    log = PartitionLog.open(tmp_path, config, clock_ms=clock)
    append_keys(log, range(3), clock.now_ms, "first")
    clock.advance(999)
    append_keys(log, range(3, 4), clock.now_ms, "second")
    assert len(log.segments) == 1
    clock.advance(1)
    append_keys(log, range(4, 5), clock.now_ms, "third")
    assert len(log.segments) == 2
    assert log.active_segment.base_offset == 4
