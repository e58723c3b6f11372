"""Indexes that lie after a clean shutdown: a damaged entry is found, rebuilt from the log,
and every read is answered from the log's real batches."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from eventplatform.log.storage import LogConfig, PartitionLog
from eventplatform.log.storage.record_batch import decode_record_set, parse_header

CONFIG = LogConfig(index_interval_bytes=64, segment_bytes=4096)
BATCHES = 200
START_MS = 1_700_000_000_000
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
READ_SIZES = (1, 300)


def fill(directory: Path, make_batch) -> PartitionLog:
    """A log of several segments, each with many index entries and growing timestamps."""
    log = PartitionLog.open(directory, CONFIG)
    for number in range(BATCHES):
        log.append(
            make_batch(
                1 + number % 4,
                prefix=f"b{number}-",
                value_bytes=number % 7,
                timestamp=START_MS + 10 * number,
            )
        )
    return log


def every_read(log: PartitionLog) -> dict[tuple[int, int], bytes]:
    """What a read at every offset, small and large, returns."""
    reads = {}
    for offset in range(log.log_start_offset, log.log_end_offset):
        for max_bytes in READ_SIZES:
            found = log.read(offset, max_bytes)
            assert found is not None
            reads[offset, max_bytes] = found.read_bytes()
    return reads


def every_timestamp_lookup(log: PartitionLog) -> dict[int, object]:
    return {
        timestamp: log.offset_for_timestamp(timestamp)
        for timestamp in range(START_MS - 1, START_MS + 10 * BATCHES + 5, 3)
    }


def batch_starts(log_path: Path) -> dict[int, int]:
    """Byte position to base offset of every batch in a ``.log`` file."""
    data = log_path.read_bytes()
    starts = {}
    position = 0
    while position < len(data):
        header = parse_header(data, position)
        starts[position] = header.base_offset
        position += header.size_bytes
    return starts


def assert_offset_index_names_batch_starts(index_path: Path, base_offset: int) -> None:
    starts = batch_starts(index_path.with_suffix(".log"))
    data = index_path.read_bytes()
    assert data, f"{index_path} has no entries"
    for slot in range(len(data) // OFFSET_ENTRY.size):
        relative, position = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_ENTRY.size)
        assert starts.get(position) == base_offset + relative, (slot, relative, position)


def another_batch(position: int, starts: list[int]) -> int:
    """The start of the batch two after the one at ``position``, or two before at the end."""
    slot = starts.index(position)
    return starts[slot + 2] if slot + 2 < len(starts) else starts[slot - 2]


Damage = Callable[[tuple[int, int], list[int], int], tuple[int, int]]
"""(the entry, the segment's batch positions, the log's size) -> the damaged entry."""

OFFSET_DAMAGE: dict[str, Damage] = {
    "inside-a-batch": lambda entry, _, __: (entry[0], entry[1] + 7),
    "past-the-file": lambda entry, _, size: (entry[0], size + 4096),
    "at-another-batch": lambda entry, starts, _: (entry[0], another_batch(entry[1], starts)),
    "offset-below-its-batch": lambda entry, _, __: (entry[0] - 1, entry[1]),
}


@pytest.mark.parametrize("damage", OFFSET_DAMAGE, ids=str)
@pytest.mark.parametrize("where", ["middle", "last"])
@pytest.mark.parametrize("segment_slot", [1, -1], ids=["sealed-segment", "active-segment"])
def test_a_damaged_offset_index_entry_after_a_clean_shutdown_is_rebuilt_and_reads_stay_exact(
    tmp_path: Path, make_batch, caplog, damage: str, where: str, segment_slot: int
) -> None:
    log = fill(tmp_path, make_batch)
    assert len(log.segments) >= 4
    expected = every_read(log)
    timestamps = every_timestamp_lookup(log)
    segment = list(log.segments)[segment_slot]
    index_path, base = segment.offset_index.path, segment.base_offset
    log.close()

    data = bytearray(index_path.read_bytes())
    entries = len(data) // OFFSET_ENTRY.size
    assert entries >= 4
    slot = entries // 2 if where == "middle" else entries - 1
    entry = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_ENTRY.size)
    starts = sorted(batch_starts(index_path.with_suffix(".log")))
    size = index_path.with_suffix(".log").stat().st_size
    OFFSET_ENTRY.pack_into(
        data, slot * OFFSET_ENTRY.size, *OFFSET_DAMAGE[damage](entry, starts, size)
    )
    index_path.write_bytes(bytes(data))

    caplog.set_level(logging.WARNING)
    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert reopened.opened_cleanly
    assert every_read(reopened) == expected
    assert every_timestamp_lookup(reopened) == timestamps
    assert "index" in caplog.text
    reopened.close()
    assert_offset_index_names_batch_starts(index_path, base)


TIME_DAMAGE: dict[str, Callable[[tuple[int, int], int], tuple[int, int]]] = {
    "offset-of-a-later-batch": lambda entry, next_relative: (entry[0], next_relative),
    "offset-past-the-segment": lambda entry, _: (entry[0], 1 << 30),
    "timestamp-from-the-past": lambda entry, _: (START_MS - 1000, entry[1]),
    "garbage": lambda _, __: (0x3A3A3A3A3A3A3A3A, 0x3A3A3A3A),
}


@pytest.mark.parametrize("damage", TIME_DAMAGE, ids=str)
@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_damaged_time_index_entry_after_a_clean_shutdown_is_rebuilt_and_lookups_stay_exact(
    tmp_path: Path, make_batch, damage: str, where: str
) -> None:
    log = fill(tmp_path, make_batch)
    expected = every_read(log)
    timestamps = every_timestamp_lookup(log)
    segment = list(log.segments)[1]
    max_timestamps = [(s.base_offset, s.max_timestamp) for s in log.segments]
    time_index_path = segment.time_index.path
    log.close()

    data = bytearray(time_index_path.read_bytes())
    entries = len(data) // TIME_ENTRY.size
    assert entries >= 4
    slot = entries // 2 if where == "middle" else entries - 1
    entry = TIME_ENTRY.unpack_from(data, slot * TIME_ENTRY.size)
    later = TIME_ENTRY.unpack_from(data, min(slot + 1, entries - 1) * TIME_ENTRY.size)[1] + 3
    TIME_ENTRY.pack_into(data, slot * TIME_ENTRY.size, *TIME_DAMAGE[damage](entry, later))
    time_index_path.write_bytes(bytes(data))

    reopened = PartitionLog.open(tmp_path, CONFIG)
    assert every_timestamp_lookup(reopened) == timestamps
    assert every_read(reopened) == expected
    assert [(s.base_offset, s.max_timestamp) for s in reopened.segments] == max_timestamps
    reopened.close()


def test_reads_after_an_index_rebuild_return_whole_batches_holding_the_offset(
    tmp_path: Path, make_batch
) -> None:
    """The answer is also right on its own terms: whole batches from the one holding the
    offset (not only equal to what the undamaged log answered)."""
    log = fill(tmp_path, make_batch)
    index_path = list(log.segments)[2].offset_index.path
    log.close()
    data = bytearray(index_path.read_bytes())
    slot = len(data) // OFFSET_ENTRY.size // 2
    relative, position = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(data, slot * OFFSET_ENTRY.size, relative, position + 7)
    index_path.write_bytes(bytes(data))
    reopened = PartitionLog.open(tmp_path, CONFIG)
    for offset in range(reopened.log_end_offset):
        found = reopened.read(offset, 1)
        assert found is not None
        batches = decode_record_set(found.read_bytes())
        assert len(batches) == 1
        assert batches[0].header.base_offset <= offset <= batches[0].header.last_offset
    reopened.close()
