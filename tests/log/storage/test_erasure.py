"""Erasing records in place: the value and headers go, the offset, timestamp and key
stay, every other record is untouched, and a crash at any step of the swap leaves the
old segment or the new one."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.log.storage import Cleaner, Compression, LogConfig, PartitionLog, Record
from eventplatform.log.storage.erasure import (
    erase_records,
    install_erasure,
    prepare_erasure,
    run_erasure,
)
from eventplatform.log.storage.record_batch import encode_batch

SECRET = b"password=hunter2"


def batch(first: int, count: int, timestamp: int, codec: Compression) -> bytes:
    records = [
        Record(
            i, timestamp + i, f"host-{(first + i) % 3}".encode(), line(first + i), (("n", b"1"),)
        )
        for i in range(count)
    ]
    return encode_batch(records, base_offset=0, compression=codec)


def line(number: int) -> bytes:
    return SECRET if number % 7 == 3 else f"line {number}".encode()


def write(log: PartitionLog, now_ms: int) -> list[Record]:
    codecs = [Compression.NONE, Compression.GZIP, Compression.ZSTD, Compression.LZ4]
    for number in range(12):
        log.append(batch(number * 5, 5, now_ms, codecs[number % len(codecs)]))
    return list(log.iter_records())


def config() -> LogConfig:
    return LogConfig.from_properties({"segment.bytes": 600})


def test_erased_records_keep_their_place_and_lose_their_content(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    before = write(log, clock.now_ms)
    doomed = {r.offset for r in before if r.value == SECRET}
    assert len(doomed) == 9 and len(log.segments) > 3

    assert erase_records(Cleaner(), log, doomed | {10_000}) == len(doomed)

    after = list(log.iter_records())
    assert [(r.offset, r.timestamp, r.key) for r in after] == [
        (r.offset, r.timestamp, r.key) for r in before
    ]
    for old, new in zip(before, after, strict=True):
        if old.offset in doomed:
            assert (new.value, new.headers) == (None, ((ERASED_HEADER, b""),))
        else:
            assert new == old
    assert all(SECRET not in path.read_bytes() for path in tmp_path.glob("*.log"))
    log.close()
    reopened = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    assert list(reopened.iter_records()) == after
    appended = reopened.append(batch(60, 1, clock.now_ms, Compression.NONE))
    assert appended.base_offset == before[-1].offset + 1
    reopened.close()


def test_erasing_in_the_active_segment_rolls_it_first(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(), clock_ms=clock)
    before = write(log, clock.now_ms)
    assert len(log.segments) == 1
    assert erase_records(Cleaner(), log, {before[-2].offset}) == 1
    assert list(log.iter_records())[-2].value is None
    assert log.append(batch(60, 1, clock.now_ms, Compression.NONE)).base_offset == 60
    log.close()


def test_nothing_to_erase_changes_nothing(tmp_path: Path, clock) -> None:
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    write(log, clock.now_ms)
    files = {path.name: path.read_bytes() for path in tmp_path.glob("*.log")}
    assert erase_records(Cleaner(), log, {-1, 10_000}) == 0
    assert {path.name: path.read_bytes() for path in tmp_path.glob("*.log")} == files
    log.close()


def test_erasing_again_rewrites_no_segment(tmp_path: Path, clock) -> None:
    """Every replica applies every erasure again when it starts: records erased before
    count nothing, and a segment holding only those is left as it is."""
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    doomed = {r.offset for r in write(log, clock.now_ms) if r.value == SECRET}
    assert erase_records(Cleaner(), log, doomed) == len(doomed)
    files = {path.name: path.read_bytes() for path in tmp_path.glob("*.log")}
    assert erase_records(Cleaner(), log, doomed) == 0
    assert {path.name: path.read_bytes() for path in tmp_path.glob("*.log")} == files
    log.close()


def test_appends_go_on_while_the_segments_are_rewritten(tmp_path: Path, clock) -> None:
    """The owner prepares and installs; the rewriting reads only its own descriptors,
    so records appended between the steps stay, and the erasure lands."""
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    doomed = {r.offset for r in write(log, clock.now_ms) if r.value == SECRET}
    job = prepare_erasure(log, doomed)
    assert job is not None
    run_erasure(Cleaner(), job)
    appended = log.append(batch(60, 3, clock.now_ms, Compression.NONE))
    assert install_erasure(Cleaner(), log, job) == len(doomed)
    after = list(log.iter_records())
    assert [r.offset for r in after if r.value is None] == sorted(doomed)
    assert [r.value for r in after[-3:]] == [line(n) for n in range(60, 63)]
    assert after[-1].offset == appended.base_offset + 2
    log.close()


def test_an_erasure_whose_log_was_truncated_meanwhile_swaps_nothing_in(
    tmp_path: Path, clock
) -> None:
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    before = write(log, clock.now_ms)
    doomed = {r.offset for r in before if r.value == SECRET}
    job = prepare_erasure(log, doomed)
    assert job is not None
    run_erasure(Cleaner(), job)
    log.truncate_to(before[-5].offset)  # the last batch goes
    assert install_erasure(Cleaner(), log, job) is None
    assert [r.value for r in log.iter_records()] == [r.value for r in before[:-5]]
    assert not list(tmp_path.glob("*.cleaned"))
    left = {o for o in doomed if o < before[-5].offset}
    assert erase_records(Cleaner(), log, doomed) == len(left)  # prepared again, it lands
    log.close()


class SimulatedCrashError(Exception):
    pass


@pytest.mark.parametrize("crash_at", range(4))
def test_a_crash_at_any_step_leaves_the_old_segment_or_the_erased_one(
    tmp_path: Path, clock, crash, crash_at: int
) -> None:
    log = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    before = write(log, clock.now_ms)
    doomed = {before[3].offset}
    seen: list[str] = []

    def maybe_crash(step: str) -> None:
        seen.append(step)
        if len(seen) > crash_at:
            raise SimulatedCrashError(step)

    with pytest.raises(SimulatedCrashError):
        erase_records(Cleaner(on_step=maybe_crash), log, doomed)
    crash(log)
    reopened = PartitionLog.open(tmp_path, config(), clock_ms=clock)
    survivors = list(reopened.iter_records())
    assert [r.offset for r in survivors] == [r.offset for r in before], seen
    assert survivors[3].value in (None, SECRET), seen
    assert erase_records(Cleaner(), reopened, doomed) in (0, 1)  # again: the job is finished
    assert list(reopened.iter_records())[3].value is None
    reopened.close()
