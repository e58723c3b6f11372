"""``__consumer_offsets`` record formats: golden bytes, older versions, partitioning."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventplatform.log.groups.offsets_topic import OffsetsReplay
from eventplatform.log.groups.records import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    RecordFormatError,
    TopicPartition,
    UnknownKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)

WALL_MS = 1_700_000_000_000


def int16(value: int) -> bytes:
    return struct.pack(">h", value)


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def int64(value: int) -> bytes:
    return struct.pack(">q", value)


def string(text: str | None) -> bytes:
    if text is None:
        return int16(-1)
    encoded = text.encode()
    return int16(len(encoded)) + encoded


def blob(data: bytes) -> bytes:
    return int32(len(data)) + data


def compact_string(text: str) -> bytes:
    encoded = text.encode()
    return bytes([len(encoded) + 1]) + encoded


MEMBER = MemberRecord(
    member_id="consumer-1-abc",
    group_instance_id=None,
    client_id="consumer-1",
    client_host="/10.0.0.7",
    rebalance_timeout_ms=300_000,
    session_timeout_ms=45_000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x01asg",
)


# ---------------------------------------------------------------- golden bytes


def test_offset_commit_key_is_version_1_group_topic_partition() -> None:
    expected = (
        int16(1)  # key version 1: an offset commit
        + string("my-group")  # group
        + string("events")  # topic
        + int32(7)  # partition
    )
    assert encode_offset_key("my-group", "events", 7) == expected
    assert decode_key(expected) == OffsetKey("my-group", "events", 7)


def test_offset_commit_value_is_version_3() -> None:
    committed = CommittedOffset(
        offset=1234, metadata="checkpoint", leader_epoch=5, commit_timestamp_ms=WALL_MS
    )
    expected = (
        int16(3)  # value version 3
        + int64(1234)  # offset
        + int32(5)  # leader epoch
        + string("checkpoint")  # metadata
        + int64(WALL_MS)  # commit timestamp
    )
    assert encode_offset_value(committed) == expected
    assert decode_offset_value(expected) == committed


def test_group_metadata_key_is_version_2_group() -> None:
    expected = int16(2) + string("my-group")  # key version 2: group metadata; group
    assert encode_group_key("my-group") == expected
    assert decode_key(expected) == GroupKey("my-group")


def test_group_metadata_value_is_version_3_with_members() -> None:
    static = MemberRecord(
        "instance-1-xyz", "instance-1", "c2", "/10.0.0.8", 60_000, 10_000, b"s2", b"a2"
    )
    record = GroupRecord(
        protocol_type="consumer",
        generation=12,
        protocol="range",
        leader="consumer-1-abc",
        current_state_timestamp_ms=WALL_MS,
        members=(MEMBER, static),
    )
    expected = (
        int16(3)  # value version 3
        + string("consumer")  # protocol type
        + int32(12)  # generation
        + string("range")  # protocol (nullable)
        + string("consumer-1-abc")  # leader (nullable)
        + int64(WALL_MS)  # current state timestamp
        + int32(2)  # members
        + string("consumer-1-abc")  # member id
        + string(None)  # group instance id: null
        + string("consumer-1")  # client id
        + string("/10.0.0.7")  # client host
        + int32(300_000)  # rebalance timeout
        + int32(45_000)  # session timeout
        + blob(b"\x00\x01sub")  # subscription
        + blob(b"\x00\x01asg")  # assignment
        + string("instance-1-xyz")
        + string("instance-1")  # a static member's instance id
        + string("c2")
        + string("/10.0.0.8")
        + int32(60_000)
        + int32(10_000)
        + blob(b"s2")
        + blob(b"a2")
    )
    assert encode_group_value(record) == expected
    assert decode_group_value(expected) == record


def test_an_empty_group_has_null_protocol_and_leader() -> None:
    record = GroupRecord("consumer", 4, None, None, WALL_MS, ())
    expected = (
        int16(3) + string("consumer") + int32(4) + string(None) + string(None) + int64(WALL_MS)
    )
    expected += int32(0)  # no members
    assert encode_group_value(record) == expected
    assert decode_group_value(expected) == record


# ---------------------------------------------------------------- older and newer versions


def test_offset_values_of_every_kafka_version_decode() -> None:
    version_0 = int16(0) + int64(10) + string("m") + int64(WALL_MS)
    version_1 = int16(1) + int64(11) + string("m") + int64(WALL_MS) + int64(WALL_MS + 5)
    version_2 = int16(2) + int64(12) + string("m") + int64(WALL_MS)
    version_4 = (
        int16(4)  # flexible
        + int64(14)
        + int32(3)  # leader epoch
        + compact_string("m")  # compact string: length + 1 as a varint
        + int64(WALL_MS)
        + b"\x00"  # no tagged fields
    )
    assert decode_offset_value(version_0) == CommittedOffset(10, "m", -1, WALL_MS)
    assert decode_offset_value(version_1) == CommittedOffset(11, "m", -1, WALL_MS, WALL_MS + 5)
    assert decode_offset_value(version_2) == CommittedOffset(12, "m", -1, WALL_MS)
    assert decode_offset_value(version_4) == CommittedOffset(14, "m", 3, WALL_MS)


def test_group_values_of_old_versions_decode() -> None:
    member_v0 = string("m-1") + string("c") + string("/h") + int32(9_000) + blob(b"s") + blob(b"a")
    version_0 = (
        int16(0) + string("consumer") + int32(2) + string("range") + string("m-1") + int32(1)
    )
    decoded = decode_group_value(version_0 + member_v0)
    assert decoded.current_state_timestamp_ms == -1
    assert decoded.members == (MemberRecord("m-1", None, "c", "/h", 9_000, 9_000, b"s", b"a"),)
    member_v1 = (
        string("m-1")
        + string("c")
        + string("/h")
        + int32(20_000)  # rebalance timeout, from version 1
        + int32(9_000)
        + blob(b"s")
        + blob(b"a")
    )
    version_2 = (
        int16(2)
        + string("consumer")
        + int32(2)
        + string("range")
        + string("m-1")
        + int64(WALL_MS)  # current state timestamp, from version 2
        + int32(1)
        + member_v1
    )
    decoded = decode_group_value(version_2)
    assert decoded.current_state_timestamp_ms == WALL_MS
    assert decoded.members[0].rebalance_timeout_ms == 20_000


def test_keys_of_newer_group_protocols_are_unknown_not_errors() -> None:
    assert decode_key(int16(5) + b"anything") == UnknownKey(5)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        int16(1) + string("group"),
        int16(2) + string("group") + b"trailing",
        int16(1) + int16(10) + b"short",
    ],
)
def test_malformed_keys_are_refused(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(data)


def test_values_of_unknown_versions_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        decode_offset_value(int16(9) + int64(1))
    with pytest.raises(RecordFormatError):
        decode_group_value(int16(-1))


@given(
    offset=st.integers(-1, 2**63 - 1),
    epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=40),
    timestamp=st.integers(-1, 2**62),
)
def test_offset_values_round_trip(offset: int, epoch: int, metadata: str, timestamp: int) -> None:
    committed = CommittedOffset(offset, metadata, epoch, timestamp)
    assert decode_offset_value(encode_offset_value(committed)) == committed


# ---------------------------------------------------------------- replay


def test_replay_keeps_the_latest_value_and_honours_tombstones() -> None:
    replay = OffsetsReplay()
    key = encode_offset_key("g", "t", 0)
    replay.apply(key, encode_offset_value(CommittedOffset(1, "", -1, WALL_MS)))
    replay.apply(key, encode_offset_value(CommittedOffset(2, "", -1, WALL_MS)))
    replay.apply(encode_offset_key("g", "t", 1), encode_offset_value(CommittedOffset(9)))
    replay.apply(encode_offset_key("g", "t", 1), None)
    group = GroupRecord("consumer", 3, "range", "m", WALL_MS, (MEMBER,))
    replay.apply(encode_group_key("g"), encode_group_value(group))
    replay.apply(encode_group_key("gone"), encode_group_value(group))
    replay.apply(encode_group_key("gone"), None)
    replay.apply(int16(7) + b"newer protocol", b"value")
    replay.apply(encode_offset_key("g", "t", 5), b"\x00")
    loaded = dict(replay.groups())
    assert list(loaded) == ["g"]
    assert loaded["g"].record == group
    assert loaded["g"].offsets == {TopicPartition("t", 0): CommittedOffset(2, "", -1, WALL_MS)}
    assert replay.skipped == 2


# ---------------------------------------------------------------- partitioning


@pytest.mark.parametrize(
    ("text", "hashed"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 units
    ],
)
def test_group_ids_hash_like_java_strings(text: str, hashed: int) -> None:
    assert java_string_hash(text) == hashed


def test_the_partition_is_kafkas_abs_of_the_hash_modulo_the_count() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Hello World", 50) == 862545276 % 50
    assert partition_for("polygenelubricants", 50) == 0, "Utils.abs(Integer.MIN_VALUE) is 0"
