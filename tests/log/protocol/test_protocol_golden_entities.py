"""Golden bytes of this log's own API, EntityRead v0 (flexible from v0).

As in ``test_protocol_golden``: each frame spelled out one field per line; requests
with the int32 size prefix, responses without. Compact lengths are length + 1 as an
unsigned varint; each struct ends with its tagged fields (``\\x00``: none).
"""

from __future__ import annotations

import struct

from eventplatform.log.protocol import (
    APIS,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)

ENTITY_READ = APIS[32_000]
NO_TAGS = b"\x00"


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _int64(value: int) -> bytes:
    return struct.pack(">q", value)


def test_entity_read_v0_request() -> None:
    body = {
        "topic": "accounts",
        "partition": 2,
        "current_leader_epoch": 5,
        "key": b"acct-1",
        "from_offset": 300,
        "max_bytes": 65_536,
    }
    payload = b"".join(
        [
            _int16(32_000),  # api_key: EntityRead
            _int16(0),  # api_version (flexible)
            _int32(7),  # correlation_id
            _int16(1) + b"c",  # client_id (int16 length even in header v2)
            NO_TAGS,  # header tagged fields
            b"\x09accounts",  # topic: compact string
            _int32(2),  # partition
            _int32(5),  # current_leader_epoch
            b"\x07acct-1",  # key: compact bytes
            _int64(300),  # from_offset
            _int32(65_536),  # max_bytes
            NO_TAGS,  # body tagged fields
        ]
    )
    frame = _int32(len(payload)) + payload
    assert encode_request(ENTITY_READ, 0, body, correlation_id=7, client_id="c") == frame
    header, position = decode_request_header(payload)
    assert (header.api_key, header.api_version) == (32_000, 0)
    assert decode_request_body(ENTITY_READ, 0, payload, position) == body


def test_entity_read_v0_response() -> None:
    records = b"\x00" * 3
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "high_watermark": 900,
        "log_start_offset": 0,
        "next_offset": 412,
        "records": records,
    }
    expected = b"".join(
        [
            _int32(7),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            _int32(0),  # throttle_time_ms
            _int16(0),  # error_code
            b"\x00",  # error_message: compact null
            _int64(900),  # high_watermark
            _int64(0),  # log_start_offset
            _int64(412),  # next_offset
            b"\x04" + records,  # records: compact bytes of 3
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(ENTITY_READ, 0, 7, body)) == expected
    correlation_id, decoded = decode_response(ENTITY_READ, 0, expected)
    assert correlation_id == 7
    assert {**decoded, "records": bytes(decoded["records"])} == body
