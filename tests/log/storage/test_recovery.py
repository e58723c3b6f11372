"""Recovery after unclean shutdowns, corruption and lost or damaged indexes."""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventplatform.log.storage import LogConfig, PartitionLog
from eventplatform.log.storage.files import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE

CONFIG = LogConfig(index_interval_bytes=64, segment_bytes=4096)


def offsets(log: PartitionLog) -> list[int]:
    return [record.offset for record in log.iter_records()]


def fill(
    directory: Path, make_batch, batches: int, config: LogConfig = CONFIG
) -> tuple[PartitionLog, list[tuple[int, int, int]]]:
    """Append ``batches`` batches; return the log and per batch (segment, position, size, end)."""
    log = PartitionLog.open(directory, config)
    layout = []
    for number in range(batches):
        batch = make_batch(1 + number % 4, prefix=f"b{number}-", value_bytes=number % 7)
        active = log.active_segment
        position = active.size_bytes
        info = log.append(batch)
        if log.active_segment is not active:
            position = 0
        layout.append((log.active_segment.base_offset, position, len(batch), info.last_offset + 1))
    return log, layout


def test_unclean_reopen_keeps_every_whole_batch(tmp_path: Path, make_batch, crash) -> None:
    log, _ = fill(tmp_path, make_batch, 40)
    expected = offsets(log)
    crash(log)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert not reopened.opened_cleanly
    assert reopened.recovered_bytes_truncated == 0
    assert offsets(reopened) == expected
    # Recovered data may still be only in the page cache: the recovery point stays put
    # until a flush makes it durable.
    assert reopened.recovery_point == 0
    reopened.flush()
    assert reopened.recovery_point == reopened.log_end_offset


def crashed_active_segment(
    directory: Path, make_batch, crash, batches: int
) -> tuple[Path, int, list[tuple[int, int, int, int]]]:
    """Fill a log, kill it, and return its active segment's path, size and batch layout."""
    log, layout = fill(directory, make_batch, batches)
    active = [entry for entry in layout if entry[0] == layout[-1][0]]
    path, size = log.active_segment.log_path, log.active_segment.size_bytes
    crash(log)
    return path, size, active


def assert_valid_prefix_survives(
    directory: Path, make_batch, active: list[tuple[int, int, int, int]], damaged_at: int
) -> None:
    """Reopening keeps exactly the active segment's batches that end before ``damaged_at``."""
    survivors = [entry for entry in active if entry[1] + entry[2] <= damaged_at]
    expected_end = survivors[-1][3] if survivors else active[0][0]
    reopened = PartitionLog.open(directory, CONFIG)
    assert reopened.log_end_offset == expected_end
    assert offsets(reopened) == list(range(expected_end))
    expected_size = survivors[-1][1] + survivors[-1][2] if survivors else 0
    assert reopened.active_segment.size_bytes == expected_size
    # The log keeps working after recovery.
    assert reopened.append(make_batch(2)).base_offset == expected_end
    reopened.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_garbage_in_active_segment_keeps_exactly_the_valid_prefix(
    tmp_path_factory, make_batch, crash, data
) -> None:
    directory = tmp_path_factory.mktemp("garbage")
    path, size, active = crashed_active_segment(
        directory, make_batch, crash, data.draw(st.integers(5, 30))
    )
    position = data.draw(st.integers(0, size - 1))
    # 13 bytes always reach a checked field: batchLength, magic, CRC or the covered body.
    length = data.draw(st.integers(13, 32))
    original = Path(path).read_bytes()[position : position + length]
    noise = bytes(byte ^ data.draw(st.integers(1, 255)) for byte in original)
    noise += bytes(length - len(noise))
    with open(path, "r+b") as handle:
        handle.seek(position)
        handle.write(noise)
    assert_valid_prefix_survives(directory, make_batch, active, position)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_truncated_active_segment_keeps_exactly_the_valid_prefix(
    tmp_path_factory, make_batch, crash, data
) -> None:
    directory = tmp_path_factory.mktemp("torn")
    path, size, active = crashed_active_segment(
        directory, make_batch, crash, data.draw(st.integers(5, 30))
    )
    cut = data.draw(st.integers(0, size - 1))
    os.truncate(path, cut)
    assert_valid_prefix_survives(directory, make_batch, active, cut)


def test_corruption_in_an_older_unflushed_segment_drops_every_later_segment(
    tmp_path: Path, make_batch, crash
) -> None:
    log, _ = fill(tmp_path, make_batch, 200)
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) >= 4
    victim = list(log.segments)[1]
    path = victim.log_path
    crash(log)
    with open(path, "r+b") as handle:
        handle.seek(30)
        handle.write(b"\xff" * 8)
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert [segment.base_offset for segment in reopened.segments] == bases[:2]
    assert reopened.log_end_offset == bases[1]
    assert offsets(reopened) == list(range(bases[1]))


def test_an_unflushed_segment_that_lost_whole_batches_drops_every_later_segment(
    tmp_path: Path, make_batch, crash
) -> None:
    """A power cut can keep a later segment's writes and lose an earlier one's at a batch
    boundary: nothing is torn, but the log would have a hole. It ends at the hole."""
    log, layout = fill(tmp_path, make_batch, 200)
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) >= 4
    victim = list(log.segments)[1]
    kept = [entry for entry in layout if entry[0] == victim.base_offset][:3]
    path = victim.log_path
    crash(log)
    os.truncate(path, kept[-1][1] + kept[-1][2])  # the first three batches survive
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert [segment.base_offset for segment in reopened.segments] == bases[:2]
    assert reopened.log_end_offset == kept[-1][3]
    assert offsets(reopened) == list(range(kept[-1][3]))


def test_missing_index_files_are_rebuilt(tmp_path: Path, make_batch) -> None:
    log, _ = fill(tmp_path, make_batch, 60)
    expected = offsets(log)
    probes = {
        offset: log.read(offset, 1).first_offset for offset in range(0, log.log_end_offset, 7)
    }
    timestamp_probe = log.offset_for_timestamp(1_700_000_000_002)
    log.close()
    for path in tmp_path.glob("*index"):
        path.unlink()
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert offsets(reopened) == expected
    assert {offset: reopened.read(offset, 1).first_offset for offset in probes} == probes
    assert reopened.offset_for_timestamp(1_700_000_000_002) == timestamp_probe
    assert all(segment.offset_index.entries > 0 for segment in reopened.segments)


def test_corrupt_index_files_are_rebuilt(tmp_path: Path, make_batch) -> None:
    log, _ = fill(tmp_path, make_batch, 60)
    expected = offsets(log)
    probes = {
        offset: log.read(offset, 1).first_offset for offset in range(0, log.log_end_offset, 5)
    }
    log.close()
    rng = random.Random(7)
    for path in sorted(tmp_path.glob("*.index")):
        path.write_bytes(
            bytes(rng.randrange(256) for _ in range(13))
        )  # not a whole number of entries
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert offsets(reopened) == expected
    assert {offset: reopened.read(offset, 1).first_offset for offset in probes} == probes


def test_index_pointing_past_the_log_is_rebuilt(tmp_path: Path, make_batch) -> None:
    log, _ = fill(tmp_path, make_batch, 10, LogConfig(index_interval_bytes=1))
    expected = offsets(log)
    index_path = log.active_segment.offset_index.path
    log.close()
    index_path.write_bytes(bytes.fromhex("00000001 7fffffff"))
    reopened = PartitionLog.open(tmp_path, LogConfig(index_interval_bytes=1))
    assert offsets(reopened) == expected


def test_clean_marker_with_a_torn_tail_still_recovers(tmp_path: Path, make_batch) -> None:
    log, layout = fill(tmp_path, make_batch, 10, LogConfig())
    path = log.active_segment.log_path
    log.close()
    os.truncate(path, path.stat().st_size - 3)
    reopened = PartitionLog.open(tmp_path, LogConfig())
    assert reopened.log_end_offset == layout[-2][3]
    assert offsets(reopened) == list(range(layout[-2][3]))


def test_damaged_checkpoint_falls_back_to_full_recovery(tmp_path: Path, make_batch) -> None:
    log, _ = fill(tmp_path, make_batch, 20)
    expected = offsets(log)
    log.close()
    (tmp_path / CHECKPOINT_FILE).write_text("garbage")
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert not reopened.opened_cleanly
    assert offsets(reopened) == expected


def test_leftover_temporary_and_deleted_files_are_removed(tmp_path: Path, make_batch) -> None:
    log, _ = fill(tmp_path, make_batch, 5)
    log.close()
    (tmp_path / "00000000000000000099.log.deleted").write_bytes(b"old")
    (tmp_path / "00000000000000000099.log.cleaned").write_bytes(b"half")
    (tmp_path / "partition.checkpoint.tmp").write_bytes(b"half")
    PartitionLog.open(tmp_path, CONFIG).close()
    leftovers = [
        p.name for p in tmp_path.iterdir() if p.name.endswith((".deleted", ".cleaned", ".tmp"))
    ]
    assert leftovers == []


def test_recovered_closed_segments_have_trimmed_indexes(tmp_path: Path, make_batch, crash) -> None:
    log, _ = fill(tmp_path, make_batch, 200)
    crash(log)
    reopened = PartitionLog.open(tmp_path, CONFIG)
    crash(reopened)
    again = PartitionLog.open(tmp_path, CONFIG)
    for segment in list(again.segments)[:-1]:
        assert segment.offset_index.path.stat().st_size == segment.offset_index.entries * 8
        last = segment.offset_index.last_entry()
        assert last is None or last[1] > 0
    assert offsets(again) == list(range(again.log_end_offset))
