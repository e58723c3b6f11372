"""Golden bytes of the share-group APIs (KIP-932) at v1, the version clients speak.

As in ``test_protocol_golden``: each frame is spelled out one field per line, requests
with their int32 size prefix, responses without. All four are flexible from v0: compact
lengths (length + 1 as an unsigned varint), tagged fields at the end of every struct
(``\\x00``: none), and a nullable struct behind an int8 marker (-1 null, 1 present).
"""

from __future__ import annotations

import struct
import uuid

from eventplatform.log.protocol import (
    APIS,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)

SHARE_GROUP_HEARTBEAT = APIS[76]
SHARE_FETCH = APIS[78]
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef").bytes
NO_TAGS = b"\x00"


def _i8(value: int) -> bytes:
    return struct.pack(">b", value)


def _i16(value: int) -> bytes:
    return struct.pack(">h", value)


def _i32(value: int) -> bytes:
    return struct.pack(">i", value)


def _i64(value: int) -> bytes:
    return struct.pack(">q", value)


def _compact(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


def test_share_group_heartbeat_v1_response_with_an_assignment() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": "m1",
        "member_epoch": 3,
        "heartbeat_interval_ms": 5000,
        "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 2]}]},
    }
    expected = b"".join(
        [
            _i32(7),  # correlation_id
            NO_TAGS,  # response header v1
            _i32(0),  # throttle_time_ms
            _i16(0),  # error_code
            b"\x00",  # error_message: null
            _compact("m1"),  # member_id
            _i32(3),  # member_epoch
            _i32(5000),  # heartbeat_interval_ms
            _i8(1),  # assignment: present
            b"\x02",  # topic_partitions: 1
            TOPIC_ID,
            b"\x03" + _i32(0) + _i32(2),  # partitions: [0, 2]
            NO_TAGS,  # topic_partitions[0]
            NO_TAGS,  # assignment
            NO_TAGS,  # body
        ]
    )
    assert flatten(encode_response(SHARE_GROUP_HEARTBEAT, 1, 7, body)) == expected
    assert decode_response(SHARE_GROUP_HEARTBEAT, 1, expected)[1] == body
    empty = {**body, "assignment": None}
    encoded = flatten(encode_response(SHARE_GROUP_HEARTBEAT, 1, 7, empty))
    assert encoded == expected[: expected.index(_i8(1) + b"\x02")] + _i8(-1) + NO_TAGS


def test_share_fetch_v1_request_with_an_acknowledgement() -> None:
    body = {
        "group_id": "g",
        "member_id": "m1",
        "share_session_epoch": 1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1024,
        "max_records": 500,
        "batch_size": 100,
        "topics": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 5, "last_offset": 6, "acknowledge_types": [1, 2]}
                        ],
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
    }
    payload = b"".join(
        [
            _i16(78),  # api_key
            _i16(1),  # api_version
            _i32(9),  # correlation_id
            _i16(1) + b"c",  # client_id (request header v2: a nullable int16 string)
            NO_TAGS,  # request header v2
            _compact("g"),  # group_id
            _compact("m1"),  # member_id
            _i32(1),  # share_session_epoch
            _i32(500),  # max_wait_ms
            _i32(1),  # min_bytes
            _i32(1024),  # max_bytes
            _i32(500),  # max_records
            _i32(100),  # batch_size
            b"\x02",  # topics: 1
            TOPIC_ID,
            b"\x02",  # partitions: 1
            _i32(0),  # partition_index (no partition_max_bytes from v1)
            b"\x02",  # acknowledgement_batches: 1
            _i64(5),
            _i64(6),
            b"\x03" + _i8(1) + _i8(2),  # acknowledge_types: ACCEPT, RELEASE
            NO_TAGS,  # acknowledgement_batches[0]
            NO_TAGS,  # partitions[0]
            NO_TAGS,  # topics[0]
            b"\x01",  # forgotten_topics_data: empty
            NO_TAGS,  # body
        ]
    )
    frame = _i32(len(payload)) + payload
    assert encode_request(SHARE_FETCH, 1, body, correlation_id=9, client_id="c") == frame
    header, position = decode_request_header(payload)
    assert (header.api_key, header.api_version) == (78, 1)
    decoded = decode_request_body(SHARE_FETCH, 1, payload, position)
    assert decoded["topics"][0]["partitions"][0].pop("partition_max_bytes") == 0  # v0 only
    assert decoded == body


def test_share_fetch_v1_response_with_acquired_records() -> None:
    records = b"\x00" * 3
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "acquisition_lock_timeout_ms": 30_000,
        "responses": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "error_message": None,
                        "acknowledge_error_code": 0,
                        "acknowledge_error_message": None,
                        "current_leader": {"leader_id": 1, "leader_epoch": 4},
                        "records": records,
                        "acquired_records": [
                            {"first_offset": 10, "last_offset": 12, "delivery_count": 2}
                        ],
                    }
                ],
            }
        ],
        "node_endpoints": [],
    }
    expected = b"".join(
        [
            _i32(7),
            NO_TAGS,
            _i32(0),  # throttle_time_ms
            _i16(0),  # error_code
            b"\x00",  # error_message
            _i32(30_000),  # acquisition_lock_timeout_ms (v1)
            b"\x02",  # responses: 1
            TOPIC_ID,
            b"\x02",  # partitions: 1
            _i32(0),  # partition_index
            _i16(0),  # error_code
            b"\x00",  # error_message
            _i16(0),  # acknowledge_error_code
            b"\x00",  # acknowledge_error_message
            _i32(1) + _i32(4) + NO_TAGS,  # current_leader
            b"\x04" + records,  # records: compact bytes of 3
            b"\x02",  # acquired_records: 1
            _i64(10),
            _i64(12),
            _i16(2),
            NO_TAGS,  # acquired_records[0]
            NO_TAGS,  # partitions[0]
            NO_TAGS,  # responses[0]
            b"\x01",  # node_endpoints: empty
            NO_TAGS,
        ]
    )
    assert flatten(encode_response(SHARE_FETCH, 1, 7, body)) == expected
    decoded = decode_response(SHARE_FETCH, 1, expected)[1]
    decoded["responses"][0]["partitions"][0]["records"] = bytes(
        decoded["responses"][0]["partitions"][0]["records"]
    )
    assert decoded == body
