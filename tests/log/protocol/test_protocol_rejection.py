"""Hostile and broken frames: every failure is a ProtocolError, raised before allocating.

A broker reads these frames from the network, so nothing in them may turn
into IndexError, struct.error, UnicodeDecodeError or MemoryError, and no
length field may make the decoder reserve more than the frame holds.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.protocol import (
    APIS,
    Api,
    ProtocolError,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.codec import Reader, compile_struct
from eventplatform.log.protocol.schema import INT32, F

PRODUCE = APIS[0]
FETCH = APIS[1]
METADATA = APIS[3]
OFFSET_FETCH = APIS[9]
JOIN_GROUP = APIS[11]
HEARTBEAT = APIS[12]
DESCRIBE_GROUPS = APIS[15]
SASL_HANDSHAKE = APIS[17]
API_VERSIONS = APIS[18]

INT32_MAX = 2**31 - 1
FAIL_FAST_SECONDS = 0.05
FAIL_FAST_PEAK_BYTES = 64 * 1024
HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1, the largest 5-byte unsigned varint


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _string(text: str) -> bytes:
    return _int16(len(text.encode())) + text.encode()


def _compact_string(text: str) -> bytes:
    return bytes([len(text.encode()) + 1]) + text.encode()


def _request(api: Api, version: int, body: bytes, *, header_tags: bytes = b"\x00") -> bytes:
    """A request payload (no size prefix): header v1 or v2 and a raw body."""
    header = _int16(api.key) + _int16(version) + _int32(1) + _int16(-1)
    if api.is_flexible(version):
        header += header_tags
    return header + body


def _decode(payload: bytes | bytearray | memoryview) -> Any:
    header, position = decode_request_header(payload)
    api = APIS.get(header.api_key)
    if api is None:
        return None
    return decode_request_body(api, header.api_version, payload, position)


def _assert_fails_fast(payload: bytes) -> None:
    tracemalloc.start()
    try:
        started = time.perf_counter()
        with pytest.raises(ProtocolError):
            _decode(payload)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < FAIL_FAST_SECONDS
    assert peak < FAIL_FAST_PEAK_BYTES


# ---------------------------------------------------------------- sample frames


def _sample_requests() -> list[Any]:
    samples = [
        (METADATA, 1, {"topics": [{"name": "orders"}, {"name": "é"}]}),
        (METADATA, 12, {"topics": [{"topic_id": bytes(range(16)), "name": None}]}),
        (
            PRODUCE,
            3,
            {
                "transactional_id": "tx",
                "acks": -1,
                "timeout_ms": 1,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"rs"}]}],
            },
        ),
        (
            FETCH,
            15,
            {
                "cluster_id": "c",
                "replica_state": {"replica_id": 3, "replica_epoch": 4},
                "topics": [
                    {
                        "topic_id": bytes(16),
                        "partitions": [{"partition": 1, "fetch_offset": 9}],
                    }
                ],
                "forgotten_topics_data": [{"topic_id": bytes(16), "partitions": [1, 2]}],
                "rack_id": "r",
            },
        ),
        (JOIN_GROUP, 5, {"group_id": "g", "protocols": [{"name": "p", "metadata": b"m"}]}),
        (API_VERSIONS, 3, {"client_software_name": "n", "client_software_version": "v"}),
        (DESCRIBE_GROUPS, 5, {"groups": ["a", "bc"], "include_authorized_operations": True}),
        (SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
    ]
    return [
        pytest.param(
            encode_request(api, version, body, correlation_id=9, client_id="cid")[4:],
            id=f"{api.name}-v{version}",
        )
        for api, version, body in samples
    ]


def _sample_responses() -> list[Any]:
    samples = [
        (
            FETCH,
            4,
            {
                "responses": [
                    {
                        "topic": "t",
                        "partitions": [
                            {"aborted_transactions": [{"producer_id": 1}], "records": b"x"}
                        ],
                    }
                ]
            },
        ),
        (
            FETCH,
            16,
            {
                "responses": [
                    {
                        "topic_id": bytes(16),
                        "partitions": [
                            {
                                "current_leader": {"leader_id": 2, "leader_epoch": 3},
                                "records": b"xyz",
                            }
                        ],
                    }
                ],
                "node_endpoints": [{"node_id": 2, "host": "h", "port": 9092, "rack": None}],
            },
        ),
        (
            API_VERSIONS,
            3,
            {
                "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}],
                "finalized_features_epoch": 5,
                "zk_migration_ready": True,
            },
        ),
        (METADATA, 1, {"brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": "r"}]}),
        (HEARTBEAT, 4, {"error_code": 27}),
    ]
    return [
        pytest.param(
            api,
            version,
            flatten(encode_response(api, version, 9, body)),
            id=f"{api.name}-v{version}",
        )
        for api, version, body in samples
    ]


# ---------------------------------------------------------------- truncation, trailing bytes


@pytest.mark.parametrize("payload", _sample_requests())
def test_request_truncated_at_every_cut_point(payload: bytes) -> None:
    assert _decode(payload) is not None
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError):
            _decode(payload[:cut])


@pytest.mark.parametrize(("api", "version", "frame"), _sample_responses())
def test_response_truncated_at_every_cut_point(api: Api, version: int, frame: bytes) -> None:
    decode_response(api, version, frame)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_response(api, version, frame[:cut])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_drawn_request_truncated_at_every_cut_point(table_values: Any, data: st.DataObject) -> None:
    api = APIS[data.draw(st.sampled_from(sorted(APIS)), label="api key")]
    version = data.draw(st.integers(api.versions.low, api.versions.high), label="version")
    body = data.draw(table_values.request(api, version), label="body")
    payload = encode_request(api, version, body, correlation_id=0, client_id="c")[4:]
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError):
            _decode(payload[:cut])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_drawn_response_truncated_at_every_cut_point(
    table_values: Any, data: st.DataObject
) -> None:
    api = APIS[data.draw(st.sampled_from(sorted(APIS)), label="api key")]
    version = data.draw(st.integers(api.versions.low, api.versions.high), label="version")
    body = data.draw(table_values.response(api, version), label="body")
    frame = flatten(encode_response(api, version, 0, body))
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_response(api, version, frame[:cut])


@pytest.mark.parametrize("payload", _sample_requests())
@pytest.mark.parametrize("extra", [b"\x00", b"\xff\xff", b"junk"])
def test_request_with_trailing_bytes(payload: bytes, extra: bytes) -> None:
    """Refused, except where the API ignores a request's tail as Kafka does (Metadata v9+)."""
    header, _ = decode_request_header(payload)
    if APIS[header.api_key].ignores_request_tail(header.api_version):
        assert _decode(payload + extra) == _decode(payload)
        return
    with pytest.raises(ProtocolError, match="trailing"):
        _decode(payload + extra)


@pytest.mark.parametrize(("api", "version", "frame"), _sample_responses())
def test_response_with_trailing_bytes(api: Api, version: int, frame: bytes) -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode_response(api, version, frame + b"\x00")


def test_struct_codec_rejects_trailing_bytes() -> None:
    codec = compile_struct(HEARTBEAT.response, 0, flexible=False)
    assert codec.decode(b"\x00\x05") == {"throttle_time_ms": 0, "error_code": 5}
    with pytest.raises(ProtocolError):
        codec.decode(b"\x00\x05\x00")


def test_empty_and_short_headers() -> None:
    for payload in (b"", b"\x00", b"\x00\x03\x00\x01", b"\x00\x03\x00\x01\x00\x00\x00\x07\x00"):
        with pytest.raises(ProtocolError):
            decode_request_header(payload)
    with pytest.raises(ProtocolError):
        decode_response(HEARTBEAT, 0, b"\x00\x00\x00")


# ---------------------------------------------------------------- negative lengths


NEGATIVE_LENGTHS = [
    pytest.param(
        _request(HEARTBEAT, 0, _int16(-1) + _int32(1) + _string("m")),
        id="non-nullable-string-minus-1",
    ),
    pytest.param(
        _request(HEARTBEAT, 0, _int16(-2) + _int32(1) + _string("m")),
        id="non-nullable-string-minus-2",
    ),
    pytest.param(
        _request(HEARTBEAT, 0, _int16(-32768) + _int32(1) + _string("m")),
        id="string-minus-32768",
    ),
    pytest.param(
        _request(
            JOIN_GROUP,
            5,
            _string("g")
            + _int32(1)
            + _int32(2)
            + _string("m")
            + _int16(-2)
            + _string("c")
            + _int32(0),
        ),
        id="nullable-string-minus-2",
    ),
    pytest.param(
        _request(
            JOIN_GROUP,
            5,
            _string("g")
            + _int32(1)
            + _int32(2)
            + _string("m")
            + _int16(-1)
            + _string("c")
            + _int32(1)
            + _string("p")
            + _int32(-1),
        ),
        id="non-nullable-bytes-minus-1",
    ),
    pytest.param(
        _request(
            PRODUCE,
            3,
            _int16(-1)
            + _int16(1)
            + _int32(0)
            + _int32(1)
            + _string("t")
            + _int32(1)
            + _int32(0)
            + _int32(-2),
        ),
        id="nullable-records-minus-2",
    ),
    pytest.param(
        _request(
            JOIN_GROUP,
            5,
            _string("g")
            + _int32(1)
            + _int32(2)
            + _string("m")
            + _int16(-1)
            + _string("c")
            + _int32(-1),
        ),
        id="non-nullable-array-minus-1",
    ),
    pytest.param(_request(METADATA, 1, _int32(-2)), id="nullable-array-minus-2"),
    pytest.param(_request(METADATA, 0, _int32(-1)), id="array-null-before-nullable-version"),
    pytest.param(_request(METADATA, 1, _int32(-(2**31))), id="array-int32-min"),
    pytest.param(
        _request(API_VERSIONS, 3, b"\x00" + _compact_string("v") + b"\x00"),
        id="compact-string-null-when-not-nullable",
    ),
    pytest.param(
        _request(DESCRIBE_GROUPS, 5, b"\x00" + b"\x00" + b"\x00"),
        id="compact-array-null-when-not-nullable",
    ),
    pytest.param(
        _int16(12) + _int16(0) + _int32(1) + _int16(-2) + _string("g"),
        id="client-id-minus-2",
    ),
]


@pytest.mark.parametrize("payload", NEGATIVE_LENGTHS)
def test_negative_lengths_are_rejected(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        _decode(payload)


def test_minus_one_is_null_where_nullable() -> None:
    # The same shapes with -1 where the version allows null decode cleanly.
    assert _decode(_request(METADATA, 1, _int32(-1))) == {
        "topics": None,
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    body = _decode(
        _request(
            PRODUCE,
            3,
            _int16(-1)
            + _int16(1)
            + _int32(0)
            + _int32(1)
            + _string("t")
            + _int32(1)
            + _int32(0)
            + _int32(-1),
        )
    )
    assert body is not None
    assert body["transactional_id"] is None
    assert body["topic_data"][0]["partition_data"][0]["records"] is None


# ---------------------------------------------------------------- oversized lengths


OVERSIZED_LENGTHS = [
    pytest.param(_request(METADATA, 1, _int32(INT32_MAX)), id="array-int32-max-empty"),
    pytest.param(
        _request(METADATA, 1, _int32(INT32_MAX) + _string("a")), id="array-int32-max-one-item"
    ),
    pytest.param(
        _request(OFFSET_FETCH, 1, _string("g") + _int32(1) + _string("t") + _int32(INT32_MAX)),
        id="int32-array-int32-max",
    ),
    pytest.param(
        _request(DESCRIBE_GROUPS, 5, _int32(INT32_MAX) + b"\x00\x00"),
        id="string-array-int32-max",
    ),
    pytest.param(_request(METADATA, 9, HUGE_VARINT + b"\x00\x00\x00"), id="compact-array-huge"),
    pytest.param(
        _request(DESCRIBE_GROUPS, 5, HUGE_VARINT + b"\x00\x00"), id="compact-string-array-huge"
    ),
    pytest.param(
        _request(METADATA, 1, _int32(10) + b"\x00\x00" * 5), id="array-items-exceed-bytes"
    ),
    pytest.param(
        _request(
            FETCH,
            4,
            _int32(-1)
            + _int32(0)
            + _int32(0)
            + _int32(0)
            + b"\x00"
            + _int32(1000)
            + _string("t")
            + _int32(0),
        ),
        id="struct-array-min-size-exceeds-bytes",
    ),
    pytest.param(_request(SASL_HANDSHAKE, 0, _int16(32767) + b"PLAIN"), id="string-32767"),
    pytest.param(
        _request(API_VERSIONS, 3, HUGE_VARINT + b"abc" + b"\x01\x00"), id="compact-string-huge"
    ),
    pytest.param(
        _request(
            PRODUCE,
            3,
            _int16(-1)
            + _int16(1)
            + _int32(0)
            + _int32(1)
            + _string("t")
            + _int32(1)
            + _int32(0)
            + _int32(INT32_MAX)
            + b"batch",
        ),
        id="records-int32-max",
    ),
    pytest.param(
        _request(
            JOIN_GROUP,
            5,
            _string("g")
            + _int32(1)
            + _int32(2)
            + _string("m")
            + _int16(-1)
            + _string("c")
            + _int32(1)
            + _string("p")
            + _int32(INT32_MAX),
        ),
        id="bytes-int32-max",
    ),
    pytest.param(
        _int16(3) + _int16(1) + _int32(1) + _int16(32767) + b"client", id="client-id-32767"
    ),
]


@pytest.mark.parametrize("payload", OVERSIZED_LENGTHS)
def test_oversized_lengths_fail_fast_without_allocating(payload: bytes) -> None:
    _assert_fails_fast(payload)


def test_array_item_bound_counts_nested_fixed_fields() -> None:
    # Fetch v4 partitions need 4 + 8 + 4 = 16 bytes each: 2 items cannot fit in 31 bytes.
    fetch = _int32(-1) + _int32(0) + _int32(0) + _int32(0) + b"\x00"
    topics = _int32(1) + _string("t") + _int32(2)
    with pytest.raises(ProtocolError, match="cannot fit"):
        _decode(_request(FETCH, 4, fetch + topics + b"\x00" * 31))
    # With exactly enough bytes, it decodes.
    body = _decode(_request(FETCH, 4, fetch + topics + b"\x00" * 32))
    assert body is not None
    assert len(body["topics"][0]["partitions"]) == 2


# ---------------------------------------------------------------- UTF-8

INVALID_UTF8 = [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"ok\xe2\x82"]


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_string(raw: bytes) -> None:
    payload = _request(SASL_HANDSHAKE, 1, _int16(len(raw)) + raw)
    with pytest.raises(ProtocolError, match="UTF-8"):
        _decode(payload)


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_compact_string(raw: bytes) -> None:
    payload = _request(API_VERSIONS, 3, bytes([len(raw) + 1]) + raw + b"\x01\x00")
    with pytest.raises(ProtocolError, match="UTF-8"):
        _decode(payload)


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_client_id(raw: bytes) -> None:
    payload = _int16(17) + _int16(1) + _int32(1) + _int16(len(raw)) + raw + _string("PLAIN")
    with pytest.raises(ProtocolError, match="UTF-8"):
        _decode(payload)


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_in_response_string(raw: bytes) -> None:
    frame = _int32(1) + _int16(0) + _int32(1) + _int16(len(raw)) + raw
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_response(SASL_HANDSHAKE, 0, frame)


# ---------------------------------------------------------------- varints and tagged fields

OVERLONG_VARINT = b"\x80\x80\x80\x80\x80\x01"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(_request(API_VERSIONS, 3, OVERLONG_VARINT + b"\x01\x00"), id="compact-length"),
        pytest.param(
            _request(API_VERSIONS, 3, b"\x01\x01" + OVERLONG_VARINT), id="tagged-field-count"
        ),
        pytest.param(
            _request(API_VERSIONS, 3, b"\x01\x01" + b"\x01" + OVERLONG_VARINT + b"\x00"),
            id="tag-number",
        ),
        pytest.param(
            _request(API_VERSIONS, 3, b"\x01\x01" + b"\x01\x07" + OVERLONG_VARINT),
            id="tag-size",
        ),
        pytest.param(
            _request(API_VERSIONS, 3, b"\x01\x01\x00", header_tags=OVERLONG_VARINT),
            id="header-tag-count",
        ),
        pytest.param(
            _request(API_VERSIONS, 3, b"\x01\x01\x00", header_tags=b"\x01\x00" + OVERLONG_VARINT),
            id="header-tag-size",
        ),
        pytest.param(
            _request(API_VERSIONS, 3, b"\xff\xff\xff\xff\xff"), id="unterminated-five-bytes"
        ),
        pytest.param(_request(API_VERSIONS, 3, b"\x80"), id="unterminated-at-end"),
    ],
)
def test_overlong_or_unterminated_varints(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        _decode(payload)


def test_varint_limits() -> None:
    assert Reader(b"\xff\xff\xff\xff\x0f").unsigned_varint() == 2**32 - 1
    assert Reader(b"\x80\x80\x80\x80\x00").unsigned_varint() == 0
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        Reader(b"\x80\x80\x80\x80\x80\x00").unsigned_varint()


TAGGED = (F("a", INT32), F("x", INT32, tag=0), F("y", INT32, tag=3))


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            _int32(1) + b"\x02" + b"\x03\x04" + _int32(1) + b"\x00\x04" + _int32(2),
            id="out-of-order",
        ),
        pytest.param(
            _int32(1) + b"\x02" + b"\x00\x04" + _int32(1) + b"\x00\x04" + _int32(2), id="duplicate"
        ),
        pytest.param(_int32(1) + b"\x01" + b"\x00\x05" + _int32(1) + b"\x00", id="size-too-big"),
        pytest.param(_int32(1) + b"\x01" + b"\x00\x03" + _int32(1)[:3], id="size-too-small"),
        pytest.param(_int32(1) + b"\x01" + b"\x00\x09" + _int32(1), id="size-past-end"),
        pytest.param(_int32(1) + b"\x7f", id="count-exceeds-bytes"),
        pytest.param(_int32(1) + HUGE_VARINT, id="count-huge"),
    ],
)
def test_broken_tagged_fields(raw: bytes) -> None:
    codec = compile_struct(TAGGED, 0, flexible=True)
    with pytest.raises(ProtocolError):
        codec.decode(raw)


def test_unknown_tagged_fields_are_skipped() -> None:
    codec = compile_struct(TAGGED, 0, flexible=True)
    raw = _int32(1) + b"\x02" + b"\x02\x03abc" + b"\x03\x04" + _int32(-7)
    assert codec.decode(raw) == {"a": 1, "x": 0, "y": -7}


# ---------------------------------------------------------------- versions and other faults


@pytest.mark.parametrize("version", [-1, 13, 32767])
def test_unknown_version_is_a_protocol_error(version: int) -> None:
    payload = _request(METADATA, version, _int32(0) + b"\x00" * 3)
    with pytest.raises(ProtocolError, match="not a known version"):
        _decode(payload)


def test_unknown_api_key_still_decodes_the_header() -> None:
    payload = _int16(999) + _int16(0) + _int32(5) + _string("cid") + b"body"
    header, position = decode_request_header(payload)
    assert (header.api_key, header.correlation_id, header.client_id) == (999, 5, "cid")
    assert payload[position:] == b"body"


def test_truncated_uuid_and_fixed_fields() -> None:
    with pytest.raises(ProtocolError):
        _decode(_request(METADATA, 10, b"\x02" + bytes(15)))
    with pytest.raises(ProtocolError):
        _decode(_request(HEARTBEAT, 0, _string("g") + b"\x00\x00\x00"))


def test_decoding_from_bytearray_and_memoryview() -> None:
    payload = encode_request(HEARTBEAT, 4, {"group_id": "g"}, correlation_id=1)[4:]
    for buffer in (bytearray(payload), memoryview(payload)):
        assert _decode(buffer) == _decode(payload)
        with pytest.raises(ProtocolError):
            _decode(buffer[:-1])


def test_librdkafkas_all_topics_metadata_request_with_a_four_byte_null_list_is_all_topics() -> None:
    """librdkafka writes the null topic list of Metadata v9+ (all topics) as four zero bytes
    where the compact encoding takes one, so its fields end three bytes early. Kafka reads
    the fields it knows and ignores the rest; so does this broker, for this request only."""
    header = struct.pack(">hhi", METADATA.key, 12, 7) + struct.pack(">h", 1) + b"c" + b"\x00"
    body = b"\x00\x00\x00\x00" + b"\x01" + b"\x00" + b"\x00"
    decoded = _decode(header + body)
    assert decoded["topics"] is None
    with pytest.raises(ProtocolError, match="trailing"):
        _decode(
            struct.pack(">hhi", METADATA.key, 8, 7)
            + struct.pack(">h", 1)
            + b"c"
            + b"\xff" * 4
            + b"\x01\x00\x00\x00"
        )
