"""A partition of a topic with entity versions: conditional appends, and the versions
recovered after a clean close, a kill and a torn tail."""

from __future__ import annotations

import os
import random
import struct
from collections import Counter
from pathlib import Path

import pytest
from crash_simulation import crash_partition
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.entity_index import INDEX_DIRECTORY
from eventplatform.log.replica.entity_versions import EXPECTED_VERSION_HEADER
from eventplatform.log.replica.partition import Partition
from eventplatform.log.replica.version_table import DATABASE_FILE
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.errors import InvalidConfigError
from eventplatform.log.storage.record_batch import (
    CRC_START,
    HEADER_BYTES,
    Record,
    decode_record_set,
    encode_batch,
    parse_header,
)

CRC_AT = 17  # where a batch keeps its CRC-32C
ATTRIBUTES_AT = 21
VERSIONED = LogConfig(eventplatform_entity_versions_enable=True, segment_bytes=1024)


def batch(*records: tuple[bytes | None, int | None]) -> bytes:
    """A batch of records ``(key, expected version or None)``."""
    return encode_batch(
        [
            Record(
                index,
                1_000,
                key,
                b"event",
                () if expected is None else ((EXPECTED_VERSION_HEADER, str(expected).encode()),),
            )
            for index, (key, expected) in enumerate(records)
        ]
    )


def open_partition(directory: Path) -> Partition:
    return Partition.open("accounts", 0, directory, VERSIONED)


def full_scan(partition: Partition) -> Counter[bytes]:
    return Counter(
        record.key
        for decoded in partition.log.iter_batches()
        for record in decoded.records
        if record.key is not None
    )


def versions_of(partition: Partition) -> dict[bytes, int]:
    assert partition.entities is not None
    return dict(partition.entities.items())


def entity_offsets(partition: Partition, key: bytes, from_offset: int = 0) -> list[int]:
    """The offsets of ``key``'s records read through the entity index."""
    found = []
    for piece in partition.entity_batches(key, from_offset, 1 << 30)[0]:
        for decoded in decode_record_set(piece):
            found.extend(r.offset for r in decoded.records if r.key == key)
    assert partition.entity_index_misses == 0, "every batch was where the index said"
    return [offset for offset in found if offset >= from_offset]


def scanned_offsets(partition: Partition, key: bytes, from_offset: int = 0) -> list[int]:
    return [
        record.offset for record in partition.log.iter_records(from_offset) if record.key == key
    ]


def test_an_account_is_opened_once_and_withdrawn_from_at_its_version(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    assert partition.append(batch((b"acct", 0))).error == ErrorCode.NONE
    second = partition.append(batch((b"acct", 0)))
    assert second.error == ErrorCode.INVALID_RECORD
    assert "version 1" in (second.message or "") and "expected 0" in (second.message or "")
    assert [e.batch_index for e in second.record_errors] == [0]
    assert partition.append(batch((b"acct", 1), (b"acct", 2))).error == ErrorCode.NONE
    refused = partition.append(batch((b"other", 0), (b"acct", 2)))
    assert refused.error == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1]
    assert partition.log.log_end_offset == 3, "nothing of a refused batch is appended"
    assert partition.append(batch((b"acct", None))).error == ErrorCode.NONE
    assert partition.append(batch((b"acct", 4))).error == ErrorCode.NONE
    partition.close()


def test_a_malformed_expected_version_is_invalid_record(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    bad = encode_batch(
        [
            Record(0, 1_000, b"a", b"v"),
            Record(1, 1_000, b"a", b"v", ((EXPECTED_VERSION_HEADER, b"-1"),)),
        ]
    )
    result = partition.append(bad)
    assert result.error == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in result.record_errors] == [1]
    assert partition.log.log_end_offset == 0
    partition.close()


def test_without_the_config_the_header_is_only_a_header(tmp_path: Path) -> None:
    partition = Partition.open("plain", 0, tmp_path, LogConfig())
    assert partition.append(batch((b"a", 5))).error == ErrorCode.NONE
    assert partition.entities is None
    partition.close()
    assert not (tmp_path / DATABASE_FILE).exists()


def test_the_versions_survive_a_clean_close(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    for version in range(5):
        assert partition.append(batch((b"a", version), (b"b", None))).error == ErrorCode.NONE
    partition.close()
    reopened = open_partition(tmp_path)
    assert reopened.entities is not None
    assert reopened.entities.version(b"a") == 5 and reopened.entities.version(b"b") == 5
    assert reopened.append(batch((b"a", 4))).error == ErrorCode.INVALID_RECORD
    assert reopened.append(batch((b"a", 5))).error == ErrorCode.NONE
    reopened.close()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    appends=st.integers(min_value=1, max_value=120),
    torn_bytes=st.integers(min_value=0, max_value=300),
    database_damaged=st.booleans(),
)
def test_after_a_kill_the_versions_equal_a_scan_of_the_log(
    tmp_path_factory: object, seed: int, appends: int, torn_bytes: int, database_damaged: bool
) -> None:
    directory = Path(tmp_path_factory.mktemp("kill"))  # type: ignore[attr-defined]
    rng = random.Random(seed)
    partition = open_partition(directory)
    keys = [f"entity-{n}".encode() for n in range(8)]
    for _ in range(appends):
        records = []
        for _ in range(rng.randint(1, 4)):
            key = rng.choice([*keys, None])
            expected = None
            if key is not None and rng.random() < 0.7:
                assert partition.entities is not None
                ahead = sum(1 for k, _ in records if k == key)
                expected = partition.entities.version(key) + ahead + rng.choice([0, 0, 0, 1])
            records.append((key, expected))
        partition.append(batch(*records))
    crash_partition(partition)
    segments = sorted(directory.glob("*.log"))
    last = segments[-1]
    size = last.stat().st_size
    os.truncate(last, max(0, size - torn_bytes))  # a torn tail
    database = directory / DATABASE_FILE
    if database_damaged and database.exists():
        data = bytearray(database.read_bytes())
        data[:16] = b"no database here"  # SQLite reads its header, and refuses the file
        database.write_bytes(bytes(data))
    recovered = open_partition(directory)
    assert versions_of(recovered) == full_scan(recovered)
    for key in keys:
        assert entity_offsets(recovered, key) == scanned_offsets(recovered, key)
    recovered.close()
    again = open_partition(directory)
    assert versions_of(again) == full_scan(again)
    again.close()


def test_a_topic_with_entity_versions_cannot_be_compacted() -> None:
    with pytest.raises(InvalidConfigError, match="must not include compact"):
        LogConfig.from_properties(
            {"eventplatform.entity.versions.enable": "true", "cleanup.policy": "compact,delete"}
        )
    assert LogConfig.from_properties({"eventplatform.entity.versions.enable": "true"}).delete


def test_turning_versions_on_counts_the_records_already_there(tmp_path: Path) -> None:
    partition = Partition.open("later", 0, tmp_path, LogConfig())
    partition.append(batch((b"a", None), (b"a", None)))
    partition.log.update_config(VERSIONED)
    assert partition.append(batch((b"a", 1))).error == ErrorCode.INVALID_RECORD
    assert partition.append(batch((b"a", 2))).error == ErrorCode.NONE
    partition.close()


def test_a_truncation_below_the_snapshot_leaves_no_stale_state_for_a_kill(
    tmp_path: Path,
) -> None:
    """A follower truncates below the offset of its snapshots, appends other records past
    it, and is killed before the next roll: the reopened state counts the log it holds,
    not the snapshot of the records it truncated."""
    config = LogConfig(eventplatform_entity_versions_enable=True)
    partition = Partition.open("accounts", 0, tmp_path, config)
    for _ in range(10):
        assert partition.append(batch((b"a", None))).error == ErrorCode.NONE
    partition.close()  # the versions are written as of offset 10
    partition = Partition.open("accounts", 0, tmp_path, config)
    assert partition.entities is not None and partition.entities.stored_offset == 10
    partition.truncate_to(7)
    for _ in range(5):
        assert partition.append(batch((b"b", None))).error == ErrorCode.NONE
    assert partition.log.log_end_offset == 12
    crash_partition(partition)
    reopened = Partition.open("accounts", 0, tmp_path, config)
    assert versions_of(reopened) == full_scan(reopened)
    assert reopened.entities is not None
    assert (reopened.entities.version(b"a"), reopened.entities.version(b"b")) == (7, 5)
    reopened.close()


def test_one_entity_is_read_from_the_batches_that_hold_it(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    rng = random.Random(5)
    keys = [b"a", b"b", b"c", None]
    for _ in range(200):
        records = [(rng.choice(keys), None) for _ in range(rng.randint(1, 3))]
        assert partition.append(batch(*records)).error == ErrorCode.NONE
    assert len(partition.log.segments) > 3
    for key in (b"a", b"b", b"c", b"never"):
        for from_offset in (0, 1, 137, partition.log.log_end_offset):
            assert entity_offsets(partition, key, from_offset) == scanned_offsets(
                partition, key, from_offset
            )
    every, end = partition.entity_batches(b"a", 0, 1 << 30)
    assert end == partition.high_watermark
    assert all(any(r.key == b"a" for r in decode_record_set(p)[0].records) for p in every), (
        "only batches holding the entity are read"
    )
    first, after_first = partition.entity_batches(b"a", 0, 0)
    assert after_first == parse_header(first[0]).last_offset + 1
    paged, offset = [], 0
    while offset < partition.high_watermark:
        pieces, offset = partition.entity_batches(b"a", offset, 300)
        paged.extend(parse_header(piece).base_offset for piece in pieces)
    assert paged == [parse_header(piece).base_offset for piece in every]
    assert len(first) == 1 and first[0] == every[0]
    partition.close()


def test_a_follower_truncation_and_a_restart_keep_the_index_true(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    for n in range(60):
        partition.append(batch((b"a", None), (b"b" if n % 2 else b"c", None)))
    partition.truncate_to(45)
    for _ in range(5):
        partition.append(batch((b"b", None)))
    for key in (b"a", b"b", b"c"):
        assert entity_offsets(partition, key) == scanned_offsets(partition, key)
    partition.restart_at(500)
    assert entity_offsets(partition, b"a") == []
    partition.append(batch((b"a", None)))
    assert entity_offsets(partition, b"a") == [500]
    partition.close()


def test_a_topic_that_stops_keeping_versions_keeps_none_of_their_files(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    for _ in range(40):
        partition.append(batch((b"a", None)))
    assert (tmp_path / INDEX_DIRECTORY).exists()
    partition.log.update_config(LogConfig(segment_bytes=1024))
    partition.append(batch((b"a", None)))
    assert partition.entities is None and partition.entity_batches(b"a", 0, 1 << 20)[0] == []
    assert not (tmp_path / INDEX_DIRECTORY).exists() and not (tmp_path / DATABASE_FILE).exists()
    partition.close()


def test_a_batch_whose_records_do_not_frame_is_refused_not_raised(tmp_path: Path) -> None:
    """Regression: a batch with a good CRC whose first record claims more bytes than the
    batch holds made the version check raise out of the partition's append."""
    bad = bytearray(encode_batch([Record(0, 1_000, b"acct", b"event")]))
    bad[HEADER_BYTES] = 0x7E  # the record's length: 63 bytes, past the batch's end
    struct.pack_into(">I", bad, CRC_AT, crc32c(bytes(bad[CRC_START:])))
    partition = open_partition(tmp_path)
    result = partition.append(bytes(bad))
    assert result.error == ErrorCode.CORRUPT_MESSAGE
    assert "overruns" in (result.message or "")
    assert partition.log.log_end_offset == 0
    assert partition.append(batch((b"acct", 0))).error == ErrorCode.NONE
    partition.close()


def undecodable_gzip_batch() -> bytes:
    """A batch with a good CRC that says gzip and holds no gzip data: a partition without
    entity versions takes it, as it checks headers and CRCs only."""
    data = bytearray(encode_batch([Record(0, 1_000, b"acct", b"event")]))
    attributes = struct.unpack_from(">h", data, ATTRIBUTES_AT)[0]
    struct.pack_into(">h", data, ATTRIBUTES_AT, attributes | 1)
    struct.pack_into(">I", data, CRC_AT, crc32c(bytes(data[CRC_START:])))
    return bytes(data)


def test_versions_turned_on_over_a_batch_that_cannot_be_read_count_it_for_no_entity(
    tmp_path: Path,
) -> None:
    """Regression: counting the log raised on such a batch, so the partition could not
    take a produce, nor open again, once its topic kept versions."""
    partition = Partition.open("later", 0, tmp_path, LogConfig())
    assert partition.append(undecodable_gzip_batch()).error == ErrorCode.NONE
    assert partition.append(batch((b"acct", None))).error == ErrorCode.NONE
    partition.log.update_config(VERSIONED)
    assert partition.append(batch((b"acct", 1))).error == ErrorCode.NONE
    partition.close()
    reopened = open_partition(tmp_path)
    assert versions_of(reopened) == {b"acct": 2}
    follower = Partition.open("later", 0, tmp_path / "follower", VERSIONED)
    piece = reopened.read_for_replica(0, 1 << 20)
    assert piece is not None
    follower.append_replicated(piece.read_bytes(), reopened.log.log_end_offset)
    assert versions_of(follower) == {b"acct": 2}
    follower.close()
    reopened.close()
