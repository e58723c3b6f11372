"""Golden bytes of the per-record produce errors, the newer group and admin APIs, and this
log's own EntityRead (flexible from v0).

As in ``test_protocol_golden``: each frame is spelled out one field per
line. Requests include the int32 size prefix; responses do not. Flexible
versions use compact lengths (length + 1 as an unsigned varint) and end each
struct with its tagged fields (``\\x00``: none).
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

PRODUCE = APIS[0]
LIST_GROUPS = APIS[16]
OFFSET_DELETE = APIS[47]
DESCRIBE_LOG_DIRS = APIS[35]
DESCRIBE_CLUSTER = APIS[60]
DESCRIBE_TOPIC_PARTITIONS = APIS[75]
ENTITY_READ = APIS[32_000]  # this log's own API
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef").bytes
NO_TAGS = b"\x00"


def _int8(value: int) -> bytes:
    return struct.pack(">b", value)


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _int64(value: int) -> bytes:
    return struct.pack(">q", value)


def _compact(text: str) -> bytes:
    """A compact string: unsigned varint length + 1 (all lengths here are below 127)."""
    return bytes([len(text) + 1]) + text.encode()


def _framed(*parts: bytes) -> bytes:
    payload = b"".join(parts)
    return _int32(len(payload)) + payload


def _decoded_request(frame: bytes) -> dict[str, object]:
    payload = frame[4:]
    header, position = decode_request_header(payload)
    return decode_request_body(APIS[header.api_key], header.api_version, payload, position)


# ---------------------------------------------------------------- Produce v8 record_errors


def test_produce_v8_response_with_record_errors() -> None:
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": 87,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                        "record_errors": [
                            {"batch_index": 2, "batch_index_error_message": "no key"},
                            {"batch_index": 5, "batch_index_error_message": None},
                        ],
                        "error_message": "2 records",
                    }
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    expected = b"".join(
        [
            _int32(9),  # correlation_id (header v0)
            _int32(1),  # responses: 1
            _int16(1) + b"t",  # responses[0].name
            _int32(1),  # partition_responses: 1
            _int32(0),  # index
            _int16(87),  # error_code: INVALID_RECORD
            _int64(-1),  # base_offset
            _int64(-1),  # log_append_time_ms (v2+)
            _int64(-1),  # log_start_offset (v5+)
            _int32(2),  # record_errors: 2 (v8+)
            _int32(2),  # record_errors[0].batch_index
            _int16(6) + b"no key",  # record_errors[0].batch_index_error_message
            _int32(5),  # record_errors[1].batch_index
            _int16(-1),  # record_errors[1].batch_index_error_message: null
            _int16(9) + b"2 records",  # error_message (v8+)
            _int32(0),  # throttle_time_ms
        ]
    )
    assert flatten(encode_response(PRODUCE, 8, 9, body)) == expected
    correlation_id, decoded = decode_response(PRODUCE, 8, expected)
    partition = decoded["responses"][0]["partition_responses"][0]
    assert correlation_id == 9
    assert partition == {
        **body["responses"][0]["partition_responses"][0],
        "current_leader": {"leader_id": -1, "leader_epoch": -1},  # v10+ only: the default
    }


# ---------------------------------------------------------------- ListGroups v5


def test_list_groups_v5_request_carries_states_and_types_filters() -> None:
    body = {"states_filter": ["Stable"], "types_filter": ["classic"]}
    expected = _framed(
        _int16(16),  # api_key: ListGroups
        _int16(5),  # api_version (flexible from v3)
        _int32(3),  # correlation_id
        _int16(1) + b"c",  # client_id (int16 length even in header v2)
        NO_TAGS,  # header tagged fields
        b"\x02",  # states_filter: compact array of 1 (v4+)
        _compact("Stable"),  # states_filter[0]
        b"\x02",  # types_filter: compact array of 1 (v5+)
        _compact("classic"),  # types_filter[0]
        NO_TAGS,  # body tagged fields
    )
    assert encode_request(LIST_GROUPS, 5, body, correlation_id=3, client_id="c") == expected
    assert _decoded_request(expected) == body


def test_list_groups_v5_response_names_state_and_type() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "groups": [
            {
                "group_id": "g",
                "protocol_type": "consumer",
                "group_state": "Empty",
                "group_type": "classic",
            }
        ],
    }
    expected = b"".join(
        [
            _int32(3),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            _int32(0),  # throttle_time_ms
            _int16(0),  # error_code
            b"\x02",  # groups: compact array of 1
            _compact("g"),  # group_id
            _compact("consumer"),  # protocol_type
            _compact("Empty"),  # group_state (v4+)
            _compact("classic"),  # group_type (v5+)
            NO_TAGS,  # groups[0] tagged fields
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(LIST_GROUPS, 5, 3, body)) == expected
    assert decode_response(LIST_GROUPS, 5, expected) == (3, body)


# ---------------------------------------------------------------- OffsetDelete v0


def test_offset_delete_v0_request() -> None:
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 4}]}]}
    expected = _framed(
        _int16(47),  # api_key: OffsetDelete
        _int16(0),  # api_version
        _int32(5),  # correlation_id
        _int16(-1),  # client_id: null
        _int16(1) + b"g",  # group_id
        _int32(1),  # topics: 1
        _int16(1) + b"t",  # topics[0].name
        _int32(1),  # partitions: 1
        _int32(4),  # partitions[0].partition_index
    )
    assert encode_request(OFFSET_DELETE, 0, body, correlation_id=5) == expected
    assert _decoded_request(expected) == body


def test_offset_delete_v0_response_puts_the_group_error_first() -> None:
    body = {
        "error_code": 0,
        "throttle_time_ms": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 4, "error_code": 86}]}],
    }
    expected = b"".join(
        [
            _int32(5),  # correlation_id
            _int16(0),  # error_code: the group's
            _int32(0),  # throttle_time_ms
            _int32(1),  # topics: 1
            _int16(1) + b"t",  # topics[0].name
            _int32(1),  # partitions: 1
            _int32(4),  # partition_index
            _int16(86),  # error_code: GROUP_SUBSCRIBED_TO_TOPIC
        ]
    )
    assert flatten(encode_response(OFFSET_DELETE, 0, 5, body)) == expected
    assert decode_response(OFFSET_DELETE, 0, expected) == (5, body)


# ---------------------------------------------------------------- DescribeCluster v1


def test_describe_cluster_v1_response_with_authorized_operations() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": "c",
        "controller_id": 1,
        "brokers": [{"broker_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_authorized_operations": 0x1FA0,
    }
    expected = b"".join(
        [
            _int32(6),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            _int32(0),  # throttle_time_ms
            _int16(0),  # error_code
            b"\x00",  # error_message: compact null
            _int8(1),  # endpoint_type: brokers (v1+)
            _compact("c"),  # cluster_id
            _int32(1),  # controller_id
            b"\x02",  # brokers: compact array of 1
            _int32(1),  # broker_id
            _compact("h"),  # host
            _int32(9092),  # port
            b"\x00",  # rack: compact null
            NO_TAGS,  # brokers[0] tagged fields
            _int32(0x1FA0),  # cluster_authorized_operations: bits 5, 7-12
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(DESCRIBE_CLUSTER, 1, 6, body)) == expected
    assert decode_response(DESCRIBE_CLUSTER, 1, expected) == (6, body)


# ---------------------------------------------------------------- DescribeTopicPartitions v0


def test_describe_topic_partitions_v0_request_with_and_without_a_cursor() -> None:
    body = {
        "topics": [{"name": "t"}],
        "response_partition_limit": 2,
        "cursor": {"topic_name": "t", "partition_index": 3},
    }
    expected = _framed(
        _int16(75),  # api_key: DescribeTopicPartitions
        _int16(0),  # api_version (flexible)
        _int32(8),  # correlation_id
        _int16(-1),  # client_id: null
        NO_TAGS,  # header tagged fields
        b"\x02",  # topics: compact array of 1
        _compact("t"),  # topics[0].name
        NO_TAGS,  # topics[0] tagged fields
        _int32(2),  # response_partition_limit
        _int8(1),  # cursor: present
        _compact("t"),  # cursor.topic_name
        _int32(3),  # cursor.partition_index
        NO_TAGS,  # cursor tagged fields
        NO_TAGS,  # body tagged fields
    )
    assert encode_request(DESCRIBE_TOPIC_PARTITIONS, 0, body, correlation_id=8) == expected
    assert _decoded_request(expected) == body

    no_cursor = {**body, "cursor": None}
    expected_null = _framed(
        _int16(75),  # api_key
        _int16(0),  # api_version
        _int32(8),  # correlation_id
        _int16(-1),  # client_id: null
        NO_TAGS,  # header tagged fields
        b"\x02",  # topics: compact array of 1
        _compact("t"),  # topics[0].name
        NO_TAGS,  # topics[0] tagged fields
        _int32(2),  # response_partition_limit
        _int8(-1),  # cursor: null
        NO_TAGS,  # body tagged fields
    )
    assert encode_request(DESCRIBE_TOPIC_PARTITIONS, 0, no_cursor, correlation_id=8) == (
        expected_null
    )
    assert _decoded_request(expected_null) == no_cursor


def test_describe_topic_partitions_v0_response_with_a_next_cursor() -> None:
    body = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": TOPIC_ID,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 2,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                        "eligible_leader_replicas": [],
                        "last_known_elr": None,
                        "offline_replicas": [],
                    }
                ],
                "topic_authorized_operations": 0xDF8,
            }
        ],
        "next_cursor": {"topic_name": "t", "partition_index": 1},
    }
    expected = b"".join(
        [
            _int32(8),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            _int32(0),  # throttle_time_ms
            b"\x02",  # topics: compact array of 1
            _int16(0),  # error_code
            _compact("t"),  # name
            TOPIC_ID,  # topic_id: 16 bytes
            _int8(0),  # is_internal: false
            b"\x02",  # partitions: compact array of 1
            _int16(0),  # error_code
            _int32(0),  # partition_index
            _int32(1),  # leader_id
            _int32(2),  # leader_epoch
            b"\x02" + _int32(1),  # replica_nodes: [1]
            b"\x02" + _int32(1),  # isr_nodes: [1]
            b"\x01",  # eligible_leader_replicas: empty
            b"\x00",  # last_known_elr: null
            b"\x01",  # offline_replicas: empty
            NO_TAGS,  # partitions[0] tagged fields
            _int32(0xDF8),  # topic_authorized_operations: bits 3-8, 10, 11
            NO_TAGS,  # topics[0] tagged fields
            _int8(1),  # next_cursor: present
            _compact("t"),  # next_cursor.topic_name
            _int32(1),  # next_cursor.partition_index
            NO_TAGS,  # next_cursor tagged fields
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(DESCRIBE_TOPIC_PARTITIONS, 0, 8, body)) == expected
    assert decode_response(DESCRIBE_TOPIC_PARTITIONS, 0, expected) == (8, body)


# ---------------------------------------------------------------- Produce v9 (flexible)

RECORDS_BLOB = bytes(range(70))
"""Opaque record-set bytes; the codec carries them without looking inside."""


def test_produce_v9_request_uses_compact_records_and_tagged_fields() -> None:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1500,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": RECORDS_BLOB}]}],
    }
    expected = _framed(
        _int16(0),  # api_key: Produce
        _int16(9),  # api_version: the first flexible one
        _int32(10),  # correlation_id
        _int16(1) + b"c",  # client_id (int16 length even in header v2)
        NO_TAGS,  # header tagged fields
        b"\x00",  # transactional_id: compact null
        _int16(-1),  # acks: all
        _int32(1500),  # timeout_ms
        b"\x02",  # topic_data: compact array of 1
        _compact("t"),  # topic_data[0].name
        b"\x02",  # partition_data: compact array of 1
        _int32(2),  # index
        bytes([len(RECORDS_BLOB) + 1]),  # records: compact length 70 + 1
        RECORDS_BLOB,  # records
        NO_TAGS,  # partition_data[0] tagged fields
        NO_TAGS,  # topic_data[0] tagged fields
        NO_TAGS,  # body tagged fields
    )
    assert encode_request(PRODUCE, 9, body, correlation_id=10, client_id="c") == expected
    decoded = _decoded_request(expected)
    records = decoded["topic_data"][0]["partition_data"][0]["records"]  # type: ignore[index]
    assert bytes(records) == RECORDS_BLOB


def test_produce_v9_response_with_record_errors_and_header_v1() -> None:
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 2,
                        "error_code": 87,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                        "record_errors": [{"batch_index": 0, "batch_index_error_message": "k"}],
                        "error_message": None,
                    }
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    expected = b"".join(
        [
            _int32(10),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            b"\x02",  # responses: compact array of 1
            _compact("t"),  # name
            b"\x02",  # partition_responses: compact array of 1
            _int32(2),  # index
            _int16(87),  # error_code: INVALID_RECORD
            _int64(-1),  # base_offset
            _int64(-1),  # log_append_time_ms
            _int64(-1),  # log_start_offset
            b"\x02",  # record_errors: compact array of 1
            _int32(0),  # batch_index
            _compact("k"),  # batch_index_error_message
            NO_TAGS,  # record_errors[0] tagged fields
            b"\x00",  # error_message: compact null
            NO_TAGS,  # partition_responses[0] tagged fields (current_leader is v10+)
            NO_TAGS,  # responses[0] tagged fields
            _int32(0),  # throttle_time_ms
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(PRODUCE, 9, 10, body)) == expected


# ---------------------------------------------------------------- DescribeLogDirs v4


def test_describe_log_dirs_v4_response() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "results": [
            {
                "error_code": 0,
                "log_dir": "/d",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 1,
                                "partition_size": 171,
                                "offset_lag": 0,
                                "is_future_key": False,
                            }
                        ],
                    }
                ],
                "total_bytes": 1000,
                "usable_bytes": 400,
            }
        ],
    }
    expected = b"".join(
        [
            _int32(11),  # correlation_id
            NO_TAGS,  # response header v1 tagged fields
            _int32(0),  # throttle_time_ms
            _int16(0),  # error_code (v3+)
            b"\x02",  # results: compact array of 1
            _int16(0),  # results[0].error_code
            _compact("/d"),  # log_dir
            b"\x02",  # topics: compact array of 1
            _compact("t"),  # name
            b"\x02",  # partitions: compact array of 1
            _int32(1),  # partition_index
            _int64(171),  # partition_size
            _int64(0),  # offset_lag
            _int8(0),  # is_future_key: false
            NO_TAGS,  # partitions[0] tagged fields
            NO_TAGS,  # topics[0] tagged fields
            _int64(1000),  # total_bytes (v4+)
            _int64(400),  # usable_bytes (v4+)
            NO_TAGS,  # results[0] tagged fields
            NO_TAGS,  # body tagged fields
        ]
    )
    assert flatten(encode_response(DESCRIBE_LOG_DIRS, 4, 11, body)) == expected
    assert decode_response(DESCRIBE_LOG_DIRS, 4, expected) == (11, body)


# ---------------------------------------------------------------- EntityRead v0


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
