"""The table vocabulary and the codec's building blocks: versions, varints, tagged
fields, version gating, defaults and encode-side validation."""

from __future__ import annotations

from typing import Any

import kafka.errors
import pytest

from eventplatform.log.protocol import (
    APIS,
    ErrorCode,
    decode_request_body,
    decode_request_header,
    encode_request,
    flatten,
)
from eventplatform.log.protocol.codec import Reader, Writer, compile_struct
from eventplatform.log.protocol.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    VERSION_OPEN,
    Array,
    F,
    Struct,
    Versions,
)

LIST_OFFSETS = APIS[2]
METADATA = APIS[3]
OFFSET_COMMIT = APIS[8]


# ---------------------------------------------------------------- schema


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("0+", 0, VERSION_OPEN), ("3-5", 3, 5), ("7", 7, 7), ("12+", 12, VERSION_OPEN)],
)
def test_versions_parse(text: str, low: int, high: int) -> None:
    assert Versions.parse(text) == Versions(low, high)


def test_versions_contains_only_ints_in_range() -> None:
    versions = Versions.parse("3-5")
    assert [version in versions for version in range(2, 7)] == [False, True, True, True, False]
    assert "4" not in versions
    assert 4.0 not in versions
    assert None not in versions


def test_field_of_a_primitive_has_no_nested_fields_and_a_repr() -> None:
    field = F("x", INT32, "2+", default=-1)
    assert field.fields == ()
    assert "name='x'" in repr(field)
    assert not field.is_array


def test_field_defaults() -> None:
    assert F("s", STRING).default == ""
    assert F("b", BYTES).default == b""
    assert F("u", UUID).default == bytes(16)
    assert F("r", RECORDS).default is None
    assert F("f", BOOL, default=True).default is True
    nested = F("n", Struct(F("a", INT32, default=-1), F("b", Array(INT16))))
    assert nested.default_value() == {"a": -1, "b": []}
    listed = F("l", [F("a", INT8)])
    assert listed.is_array
    first = listed.default_value()
    first.append({"a": 1})
    assert listed.default_value() == []


def test_api_is_flexible() -> None:
    assert not METADATA.is_flexible(8)
    assert METADATA.is_flexible(9)
    assert METADATA.is_flexible(12)
    assert not APIS[17].is_flexible(1)  # SaslHandshake is never flexible


def test_error_codes_match_kafka_python() -> None:
    # kafka-python spells six of the names differently; the numbers must all agree.
    renamed = {
        "UNKNOWN_SERVER_ERROR": "UNKNOWN",
        "NONE": "NO_ERROR",
        "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
        "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
        "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
        "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
    }
    newer = {
        code
        for code in ErrorCode
        if kafka.errors.for_code(code.value).message == "UNKNOWN" and code.value > 0
    }
    # kafka-python's table ends before the share-group codes (KIP-932), which the broker
    # answers with; those follow Kafka's numbering from 116 on.
    assert all(code >= 116 for code in newer)
    assert ErrorCode.INVALID_RECORD_STATE == 121 and ErrorCode.SHARE_SESSION_LIMIT_REACHED == 133
    for code in ErrorCode:
        if code not in newer:
            assert kafka.errors.for_code(code.value).message == renamed.get(code.name, code.name)


# ---------------------------------------------------------------- varints

VARINTS = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"),
    (2**21, b"\x80\x80\x80\x01"),
    (2**28, b"\x80\x80\x80\x80\x01"),
    (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINTS)
def test_unsigned_varint(value: int, encoded: bytes) -> None:
    writer = Writer()
    writer.unsigned_varint(value)
    assert writer.finish() == [encoded]
    reader = Reader(encoded + b"rest")
    assert reader.unsigned_varint() == value
    assert reader.position == len(encoded)


def test_reader_respects_its_end() -> None:
    reader = Reader(b"abcdef", 1, 3)
    assert reader.remaining == 2
    assert bytes(reader.slice(2)) == b"bc"
    assert reader.remaining == 0
    reader.finish()


# ---------------------------------------------------------------- compact encodings


def test_compact_and_non_compact_primitives() -> None:
    fields = (
        F("s", STRING),
        F("n", STRING, nullable="0+"),
        F("b", BYTES),
        F("r", RECORDS, nullable="0+"),
        F("a", Array(INT32)),
        F("u", UINT16),
    )
    value = {"s": "hé", "n": None, "b": b"\x01", "r": None, "a": [1, -1], "u": 65535}
    legacy = flatten(compile_struct(fields, 0, flexible=False).encode(value))
    assert legacy == (
        b"\x00\x03h\xc3\xa9"  # string: int16 length, UTF-8 bytes
        b"\xff\xff"  # nullable string: null
        b"\x00\x00\x00\x01\x01"  # bytes: int32 length
        b"\xff\xff\xff\xff"  # nullable records: null
        b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff"  # int32 array
        b"\xff\xff"  # uint16 65535
    )
    compact = flatten(compile_struct(fields, 0, flexible=True).encode(value))
    assert compact == (
        b"\x04h\xc3\xa9"  # compact string: varint length + 1
        b"\x00"  # compact nullable string: null
        b"\x02\x01"  # compact bytes
        b"\x00"  # compact nullable records: null
        b"\x03\x00\x00\x00\x01\xff\xff\xff\xff"  # compact int32 array
        b"\xff\xff"  # uint16
        b"\x00"  # tagged fields: none
    )
    assert compile_struct(fields, 0, flexible=True).decode(compact) == value
    assert compile_struct(fields, 0, flexible=False).decode(legacy) == value


def test_nested_struct_in_flexible_version_has_its_own_tag_section() -> None:
    fields = (F("s", Struct(F("a", INT8), F("t", INT8, tag=0))), F("z", INT8))
    codec = compile_struct(fields, 0, flexible=True)
    assert flatten(codec.encode({"s": {"a": 1, "t": 2}, "z": 3})) == (
        b"\x01"  # s.a
        b"\x01\x00\x01\x02"  # s tagged fields: one, tag 0, size 1, value 2
        b"\x03"  # z
        b"\x00"  # tagged fields: none
    )


# ---------------------------------------------------------------- tagged fields


def test_tagged_fields_are_written_in_tag_order_and_only_when_not_default() -> None:
    fields = (
        F("late", INT32, tag=7),
        F("plain", INT16),
        F("early", STRING, tag=2, nullable="0+", default=None),
        F("flag", BOOL, tag=4),
    )
    codec = compile_struct(fields, 0, flexible=True)

    assert flatten(codec.encode({"plain": 1})) == b"\x00\x01\x00"
    assert flatten(codec.encode({"plain": 1, "late": 0, "early": None, "flag": False})) == (
        b"\x00\x01\x00"
    )
    encoded = flatten(codec.encode({"plain": 1, "late": -2, "early": "ab", "flag": True}))
    assert encoded == (
        b"\x00\x01"  # plain
        b"\x03"  # three tagged fields
        b"\x02\x03\x03ab"  # tag 2, size 3, compact string "ab"
        b"\x04\x01\x01"  # tag 4, size 1, true
        b"\x07\x04\xff\xff\xff\xfe"  # tag 7, size 4, int32 -2
    )
    assert codec.decode(encoded) == {"plain": 1, "late": -2, "early": "ab", "flag": True}


def test_tagged_fields_do_not_exist_in_non_flexible_versions() -> None:
    fields = (F("plain", INT16), F("tagged", INT32, tag=0, default=-1))
    codec = compile_struct(fields, 0, flexible=False)
    assert flatten(codec.encode({"plain": 5, "tagged": 9})) == b"\x00\x05"
    assert codec.decode(b"\x00\x05") == {"plain": 5, "tagged": -1}


def test_a_region_cannot_be_a_tagged_field() -> None:
    class Region:
        length = 1

        def read_bytes(self) -> bytes:
            return b"x"

    codec = compile_struct((F("r", RECORDS, tag=0, nullable="0+"),), 0, flexible=True)
    with pytest.raises(ValueError, match="file region"):
        codec.encode({"r": Region()})


# ---------------------------------------------------------------- versions and defaults


def test_fields_outside_the_version_are_not_written() -> None:
    topics = [{"name": "t", "topic_id": bytes(range(16))}]
    v0 = encode_request(METADATA, 0, {"topics": topics}, correlation_id=1)
    with_extras = encode_request(
        METADATA,
        0,
        {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True,
        },
        correlation_id=1,
    )
    assert v0 == with_extras
    assert v0.endswith(b"\x00\x00\x00\x01\x00\x01t")


@pytest.mark.parametrize(("version", "present"), [(0, False), (1, True), (2, False)])
def test_single_version_field(version: int, present: bool) -> None:
    # commit_timestamp exists only in OffsetCommit v1.
    partition = {"partition_index": 0, "committed_offset": 5, "commit_timestamp": 123}
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [partition]}]}
    payload = encode_request(OFFSET_COMMIT, version, body, correlation_id=1)[4:]
    _, position = decode_request_header(payload)
    decoded = decode_request_body(OFFSET_COMMIT, version, payload, position)
    assert decoded["topics"][0]["partitions"][0]["commit_timestamp"] == (123 if present else -1)


def test_list_offsets_v0_only_fields() -> None:
    codec = compile_struct(LIST_OFFSETS.response, 0, flexible=False)
    body = {
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 1, "old_style_offsets": [5, 3]}]}
        ]
    }
    decoded = codec.decode(flatten(codec.encode(body)))
    partition = decoded["topics"][0]["partitions"][0]
    assert partition["old_style_offsets"] == [5, 3]
    assert (partition["timestamp"], partition["offset"], partition["leader_epoch"]) == (-1, -1, -1)


def test_compile_struct_is_cached() -> None:
    first = compile_struct(METADATA.request, 4, flexible=False)
    assert compile_struct(METADATA.request, 4, flexible=False) is first
    assert compile_struct(METADATA.request, 5, flexible=False) is not first


def test_decoded_defaults_are_fresh_objects() -> None:
    codec = compile_struct(METADATA.response, 0, flexible=False)
    raw = b"\x00\x00\x00\x00\x00\x00\x00\x00"  # no brokers, no topics
    first = codec.decode(raw)
    first["brokers"].append("mutated")
    assert codec.decode(raw)["brokers"] == []


# ---------------------------------------------------------------- encode-side validation


@pytest.mark.parametrize(
    ("fields", "value"),
    [
        pytest.param((F("x", INT8),), {"x": 128}, id="int8-overflow"),
        pytest.param((F("x", INT16),), {"x": -(2**15) - 1}, id="int16-underflow"),
        pytest.param((F("x", UINT16),), {"x": -1}, id="uint16-negative"),
        pytest.param((F("x", INT32),), {"x": 2**31}, id="int32-overflow"),
        pytest.param((F("x", STRING),), {"x": None}, id="null-string"),
        pytest.param((F("x", BYTES),), {"x": None}, id="null-bytes"),
        pytest.param((F("x", [F("y", INT8)]),), {"x": None}, id="null-array"),
        pytest.param((F("x", STRING),), {"x": "é" * 20_000}, id="string-too-long"),
        pytest.param((F("x", UUID),), {"x": b"short"}, id="uuid-length"),
    ],
)
def test_invalid_values_are_refused_when_encoding(
    fields: tuple[F, ...], value: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        compile_struct(fields, 0, flexible=False).encode(value)


def test_long_strings_are_fine_when_compact() -> None:
    codec = compile_struct((F("x", STRING),), 0, flexible=True)
    value = {"x": "é" * 20_000}
    assert codec.decode(flatten(codec.encode(value))) == value
