"""Golden bytes: frames built field by field from the protocol definition.

Each expected frame is spelled out one field per line, so a disagreement
with the codec points at the field that differs. Requests include the int32
size prefix (``encode_request`` writes it); responses do not
(``encode_response`` leaves it to the connection).
"""

from __future__ import annotations

import struct

from eventplatform.log.protocol import (
    APIS,
    RequestHeader,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)

METADATA = APIS[3]
PRODUCE = APIS[0]
FETCH = APIS[1]
JOIN_GROUP = APIS[11]
HEARTBEAT = APIS[12]
API_VERSIONS = APIS[18]

RECORDS_BLOB = bytes(range(61))
"""Opaque record-set bytes; the codec carries them without looking inside."""


def _int8(value: int) -> bytes:
    return struct.pack(">b", value)


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _int64(value: int) -> bytes:
    return struct.pack(">q", value)


def _framed(*parts: bytes) -> bytes:
    payload = b"".join(parts)
    return _int32(len(payload)) + payload


def _decode_request(frame: bytes) -> tuple[RequestHeader, dict[str, object]]:
    payload = frame[4:]
    header, position = decode_request_header(payload)
    api = APIS[header.api_key]
    return header, decode_request_body(api, header.api_version, payload, position)


# ---------------------------------------------------------------- Metadata v1


def test_metadata_v1_request() -> None:
    body = {"topics": [{"name": "orders"}, {"name": "payments"}]}
    expected = _framed(
        _int16(3),  # api_key: Metadata
        _int16(1),  # api_version
        _int32(7),  # correlation_id
        _int16(9),  # client_id length
        b"client-01",  # client_id
        _int32(2),  # topics: array length 2
        _int16(6),  # topics[0].name length
        b"orders",  # topics[0].name
        _int16(8),  # topics[1].name length
        b"payments",  # topics[1].name
    )

    assert encode_request(METADATA, 1, body, correlation_id=7, client_id="client-01") == expected
    header, decoded = _decode_request(expected)
    assert header == RequestHeader(3, 1, 7, "client-01")
    assert decoded == {
        "topics": [
            {"topic_id": bytes(16), "name": "orders"},
            {"topic_id": bytes(16), "name": "payments"},
        ],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def test_metadata_v1_request_with_null_topics_and_null_client_id() -> None:
    expected = _framed(
        _int16(3),  # api_key: Metadata
        _int16(1),  # api_version
        _int32(-5),  # correlation_id
        _int16(-1),  # client_id: null
        _int32(-1),  # topics: null array (all topics, from v1)
    )

    assert encode_request(METADATA, 1, {"topics": None}, correlation_id=-5) == expected
    header, decoded = _decode_request(expected)
    assert header == RequestHeader(3, 1, -5, None)
    assert decoded["topics"] is None


# ---------------------------------------------------------------- Produce v3


def test_produce_v3_request_carries_records() -> None:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": "events",
                "partition_data": [
                    {"index": 0, "records": RECORDS_BLOB},
                    {"index": 4, "records": None},
                ],
            }
        ],
    }
    expected = _framed(
        _int16(0),  # api_key: Produce
        _int16(3),  # api_version
        _int32(1),  # correlation_id
        _int16(8),  # client_id length
        b"producer",  # client_id
        _int16(-1),  # transactional_id: null (v3+)
        _int16(-1),  # acks: all
        _int32(30_000),  # timeout_ms
        _int32(1),  # topic_data: array length 1
        _int16(6),  # topic_data[0].name length
        b"events",  # topic_data[0].name
        _int32(2),  # partition_data: array length 2
        _int32(0),  # partition_data[0].index
        _int32(len(RECORDS_BLOB)),  # partition_data[0].records length
        RECORDS_BLOB,  # partition_data[0].records
        _int32(4),  # partition_data[1].index
        _int32(-1),  # partition_data[1].records: null
    )

    assert encode_request(PRODUCE, 3, body, correlation_id=1, client_id="producer") == expected
    header, decoded = _decode_request(expected)
    assert header == RequestHeader(0, 3, 1, "producer")
    assert decoded == body


def test_produce_v3_request_with_transactional_id() -> None:
    body = {"transactional_id": "tx-1", "acks": 1, "timeout_ms": 5, "topic_data": []}
    expected = _framed(
        _int16(0),  # api_key: Produce
        _int16(3),  # api_version
        _int32(2),  # correlation_id
        _int16(-1),  # client_id: null
        _int16(4),  # transactional_id length
        b"tx-1",  # transactional_id
        _int16(1),  # acks: leader only
        _int32(5),  # timeout_ms
        _int32(0),  # topic_data: empty array
    )

    assert encode_request(PRODUCE, 3, body, correlation_id=2) == expected
    assert _decode_request(expected)[1] == body


# ---------------------------------------------------------------- Fetch v4


def test_fetch_v4_response() -> None:
    body = {
        "throttle_time_ms": 25,
        "responses": [
            {
                "topic": "events",
                "partitions": [
                    {
                        "partition_index": 2,
                        "error_code": 0,
                        "high_watermark": 1_000,
                        "last_stable_offset": 990,
                        "aborted_transactions": [{"producer_id": 77, "first_offset": 980}],
                        "records": RECORDS_BLOB,
                    },
                    {
                        "partition_index": 3,
                        "error_code": 1,  # OFFSET_OUT_OF_RANGE
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "aborted_transactions": None,
                        "records": None,
                    },
                ],
            }
        ],
    }
    expected = b"".join(
        [
            _int32(99),  # response header v0: correlation_id
            _int32(25),  # throttle_time_ms (v1+)
            _int32(1),  # responses: array length 1
            _int16(6),  # responses[0].topic length
            b"events",  # responses[0].topic
            _int32(2),  # partitions: array length 2
            _int32(2),  # partitions[0].partition_index
            _int16(0),  # partitions[0].error_code
            _int64(1_000),  # partitions[0].high_watermark
            _int64(990),  # partitions[0].last_stable_offset (v4+)
            _int32(1),  # partitions[0].aborted_transactions: array length 1 (v4+)
            _int64(77),  # aborted_transactions[0].producer_id
            _int64(980),  # aborted_transactions[0].first_offset
            _int32(len(RECORDS_BLOB)),  # partitions[0].records length
            RECORDS_BLOB,  # partitions[0].records
            _int32(3),  # partitions[1].partition_index
            _int16(1),  # partitions[1].error_code
            _int64(-1),  # partitions[1].high_watermark
            _int64(-1),  # partitions[1].last_stable_offset
            _int32(-1),  # partitions[1].aborted_transactions: null
            _int32(-1),  # partitions[1].records: null
        ]
    )

    assert flatten(encode_response(FETCH, 4, 99, body)) == expected
    correlation_id, decoded = decode_response(FETCH, 4, expected)
    assert correlation_id == 99
    assert decoded["throttle_time_ms"] == 25
    assert decoded["error_code"] == 0  # absent before v7: the default
    assert decoded["session_id"] == 0  # absent before v7: the default
    partitions = decoded["responses"][0]["partitions"]
    assert decoded["responses"][0]["topic"] == "events"
    assert partitions[0]["records"] == RECORDS_BLOB
    assert partitions[0]["aborted_transactions"] == [{"producer_id": 77, "first_offset": 980}]
    assert partitions[0]["log_start_offset"] == -1  # absent before v5: the default
    assert partitions[0]["preferred_read_replica"] == -1  # absent before v11: the default
    assert partitions[1]["aborted_transactions"] is None
    assert partitions[1]["records"] is None


# ---------------------------------------------------------------- ApiVersions v3


def test_api_versions_v3_request_uses_header_v2() -> None:
    body = {"client_software_name": "eventplatform", "client_software_version": "1.0"}
    expected = _framed(
        _int16(18),  # api_key: ApiVersions
        _int16(3),  # api_version (flexible)
        _int32(11),  # correlation_id
        _int16(6),  # client_id length: int16, not compact, even in header v2
        b"client",  # client_id
        b"\x00",  # header tagged fields: none
        b"\x0e",  # client_software_name compact length: 13 + 1
        b"eventplatform",  # client_software_name
        b"\x04",  # client_software_version compact length: 3 + 1
        b"1.0",  # client_software_version
        b"\x00",  # body tagged fields: none
    )

    assert encode_request(API_VERSIONS, 3, body, correlation_id=11, client_id="client") == expected
    header, decoded = _decode_request(expected)
    assert header == RequestHeader(18, 3, 11, "client")
    assert decoded == body


def test_api_versions_v3_request_header_skips_unknown_header_tags() -> None:
    frame = _framed(
        _int16(18),  # api_key: ApiVersions
        _int16(3),  # api_version
        _int32(12),  # correlation_id
        _int16(-1),  # client_id: null
        b"\x01",  # header tagged fields: one
        b"\x05",  # tag 5 (unknown)
        b"\x02",  # size 2
        b"\xab\xcd",  # tag value, skipped
        b"\x01",  # client_software_name compact length: empty
        b"\x01",  # client_software_version compact length: empty
        b"\x00",  # body tagged fields: none
    )

    header, decoded = _decode_request(frame)
    assert header == RequestHeader(18, 3, 12, None)
    assert decoded == {"client_software_name": "", "client_software_version": ""}


def test_api_versions_v3_response_keeps_header_v0_and_writes_tagged_fields() -> None:
    body = {
        "error_code": 0,
        "api_keys": [
            {"api_key": 0, "min_version": 3, "max_version": 9},
            {"api_key": 18, "min_version": 0, "max_version": 3},
        ],
        "throttle_time_ms": 0,
        "supported_features": [{"name": "mv", "min_version": 1, "max_version": 7}],
        "finalized_features_epoch": 42,
        "finalized_features": [],
        "zk_migration_ready": False,
    }
    supported_features = b"".join(
        [
            b"\x02",  # compact array length: 1 + 1
            b"\x03",  # name compact length: 2 + 1
            b"mv",  # name
            _int16(1),  # min_version
            _int16(7),  # max_version
            b"\x00",  # tagged fields of the feature: none
        ]
    )
    expected = b"".join(
        [
            _int32(5),  # response header v0: correlation_id only, no tagged fields
            _int16(0),  # error_code
            b"\x03",  # api_keys compact array length: 2 + 1
            _int16(0),  # api_keys[0].api_key
            _int16(3),  # api_keys[0].min_version
            _int16(9),  # api_keys[0].max_version
            b"\x00",  # api_keys[0] tagged fields: none
            _int16(18),  # api_keys[1].api_key
            _int16(0),  # api_keys[1].min_version
            _int16(3),  # api_keys[1].max_version
            b"\x00",  # api_keys[1] tagged fields: none
            _int32(0),  # throttle_time_ms
            b"\x02",  # tagged fields: two (the defaults are left out)
            b"\x00",  # tag 0: supported_features
            bytes([len(supported_features)]),  # size of tag 0
            supported_features,  # supported_features value
            b"\x01",  # tag 1: finalized_features_epoch
            b"\x08",  # size of tag 1
            _int64(42),  # finalized_features_epoch value
        ]
    )

    assert flatten(encode_response(API_VERSIONS, 3, 5, body)) == expected
    assert decode_response(API_VERSIONS, 3, expected) == (5, body)


def test_api_versions_v0_response() -> None:
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    expected = b"".join(
        [
            _int32(1),  # correlation_id
            _int16(35),  # error_code: UNSUPPORTED_VERSION
            _int32(1),  # api_keys: array length 1
            _int16(18),  # api_keys[0].api_key
            _int16(0),  # api_keys[0].min_version
            _int16(4),  # api_keys[0].max_version
        ]
    )

    assert flatten(encode_response(API_VERSIONS, 0, 1, body)) == expected
    assert decode_response(API_VERSIONS, 0, expected)[1]["api_keys"] == body["api_keys"]


# ---------------------------------------------------------------- Heartbeat v4


def test_flexible_response_other_than_api_versions_uses_header_v1() -> None:
    expected = b"".join(
        [
            _int32(8),  # correlation_id
            b"\x00",  # response header v1 tagged fields: none
            _int32(0),  # throttle_time_ms
            _int16(27),  # error_code: REBALANCE_IN_PROGRESS
            b"\x00",  # body tagged fields: none
        ]
    )
    body = {"throttle_time_ms": 0, "error_code": 27}

    assert flatten(encode_response(HEARTBEAT, 4, 8, body)) == expected
    assert decode_response(HEARTBEAT, 4, expected) == (8, body)


# ---------------------------------------------------------------- JoinGroup v5


def test_join_group_v5_request() -> None:
    metadata = b"\x00\x01\x00\x00\x00\x01\x00\x06events\xff\xff\xff\xff"
    body = {
        "group_id": "billing",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 60_000,
        "member_id": "",
        "group_instance_id": "host-a",
        "protocol_type": "consumer",
        "protocols": [
            {"name": "range", "metadata": metadata},
            {"name": "roundrobin", "metadata": b""},
        ],
    }
    expected = _framed(
        _int16(11),  # api_key: JoinGroup
        _int16(5),  # api_version
        _int32(3),  # correlation_id
        _int16(3),  # client_id length
        b"app",  # client_id
        _int16(7),  # group_id length
        b"billing",  # group_id
        _int32(10_000),  # session_timeout_ms
        _int32(60_000),  # rebalance_timeout_ms (v1+)
        _int16(0),  # member_id length: empty on the first join
        _int16(6),  # group_instance_id length (v5+, nullable)
        b"host-a",  # group_instance_id
        _int16(8),  # protocol_type length
        b"consumer",  # protocol_type
        _int32(2),  # protocols: array length 2
        _int16(5),  # protocols[0].name length
        b"range",  # protocols[0].name
        _int32(len(metadata)),  # protocols[0].metadata length
        metadata,  # protocols[0].metadata
        _int16(10),  # protocols[1].name length
        b"roundrobin",  # protocols[1].name
        _int32(0),  # protocols[1].metadata length: empty
    )

    assert encode_request(JOIN_GROUP, 5, body, correlation_id=3, client_id="app") == expected
    header, decoded = _decode_request(expected)
    assert header == RequestHeader(11, 5, 3, "app")
    assert decoded == {**body, "reason": None}


def test_join_group_v5_request_with_null_group_instance_id() -> None:
    body = {
        "group_id": "g",
        "session_timeout_ms": 1,
        "rebalance_timeout_ms": 2,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": "",
        "protocols": [],
    }
    expected = _framed(
        _int16(11),  # api_key: JoinGroup
        _int16(5),  # api_version
        _int32(0),  # correlation_id
        _int16(-1),  # client_id: null
        _int16(1),  # group_id length
        b"g",  # group_id
        _int32(1),  # session_timeout_ms
        _int32(2),  # rebalance_timeout_ms
        _int16(1),  # member_id length
        b"m",  # member_id
        _int16(-1),  # group_instance_id: null
        _int16(0),  # protocol_type: empty
        _int32(0),  # protocols: empty array
    )

    assert encode_request(JOIN_GROUP, 5, body, correlation_id=0) == expected
    assert _decode_request(expected)[1] == {**body, "reason": None}


def test_int8_field_golden() -> None:
    # Fetch v4 carries isolation_level as a single byte after max_bytes.
    body = {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "topics": [],
    }
    expected = _framed(
        _int16(1),  # api_key: Fetch
        _int16(4),  # api_version
        _int32(4),  # correlation_id
        _int16(-1),  # client_id: null
        _int32(-1),  # replica_id: a consumer
        _int32(500),  # max_wait_ms
        _int32(1),  # min_bytes
        _int32(1 << 20),  # max_bytes (v3+)
        _int8(1),  # isolation_level: READ_COMMITTED (v4+)
        _int32(0),  # topics: empty array
    )

    assert encode_request(FETCH, 4, body, correlation_id=4) == expected
