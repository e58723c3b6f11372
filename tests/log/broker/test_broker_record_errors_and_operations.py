"""Per-record produce errors and authorized operations, byte for byte on the wire.

The produce answer for a batch refused for some of its records is compared
with bytes built field by field, as Kafka writes it (KIP-467); Metadata and
DescribeCluster report the operations of Kafka's supported sets when asked
and ``-2147483648`` when not.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_CLUSTER, METADATA, PRODUCE
from eventplatform.log.storage.record_batch import KEYLESS_RECORD_MESSAGE

TOPIC = "compacted"
OPERATIONS_NOT_REQUESTED = -(2**31)
# bit N is ACL operation code N: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
TOPIC_OPERATIONS_BITS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS_BITS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _int64(value: int) -> bytes:
    return struct.pack(">q", value)


def _string(text: str) -> bytes:
    return _int16(len(text.encode())) + text.encode()


async def test_a_produce_v8_answer_names_the_one_keyless_record_of_a_batch_in_record_errors(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"cleanup.policy": "compact"})
        keys = [b"a", b"b", None, b"d"]
        correlation_id = await client.send(
            PRODUCE,
            8,
            wire.produce_body(TOPIC, {0: wire.batch([b"1", b"2", b"3", b"4"], keys=keys)}),
        )
        frame = await client.read_frame()
        client.expected.clear()
        summary = (
            "1 of 4 records have no key, and a compacted topic only accepts records "
            "with a key (first: record 2)"
        )
        expected = b"".join(
            [
                _int32(correlation_id),  # response header v0: correlation_id
                _int32(1),  # responses: 1 topic
                _string(TOPIC),  # responses[0].name
                _int32(1),  # partition_responses: 1 partition
                _int32(0),  # index
                _int16(ErrorCode.INVALID_RECORD),  # error_code 87
                _int64(-1),  # base_offset: nothing appended
                _int64(-1),  # log_append_time_ms
                _int64(-1),  # log_start_offset
                _int32(1),  # record_errors: 1 entry
                _int32(2),  # record_errors[0].batch_index: the keyless record
                _string(KEYLESS_RECORD_MESSAGE),  # record_errors[0].batch_index_error_message
                _string(summary),  # error_message
                _int32(0),  # throttle_time_ms
            ]
        )
        assert frame == expected
        end = await client.fetch(TOPIC, 0)
        assert end["high_watermark"] == 0


async def test_a_produce_v7_answer_to_the_same_batch_has_no_record_errors_field(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"cleanup.policy": "compact"})
        refused = await client.produce(
            TOPIC, wire.batch([b"1", b"2"], keys=[None, None]), version=7
        )
        assert refused["error_code"] == ErrorCode.INVALID_RECORD
        assert refused["record_errors"] == []  # absent before v8: the codec's default


async def test_every_keyless_record_of_a_batch_is_named_in_order(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"cleanup.policy": "compact"})
        keys = [None if n in (0, 5, 9) else b"k" for n in range(10)]
        refused = await client.produce(TOPIC, wire.batch([b"v"] * 10, keys=keys))
        assert refused["error_code"] == ErrorCode.INVALID_RECORD
        assert [entry["batch_index"] for entry in refused["record_errors"]] == [0, 5, 9]
        keyed = await client.produce(TOPIC, wire.batch([b"v"] * 3, keys=[b"a", b"b", b"c"]))
        assert (keyed["error_code"], keyed["record_errors"]) == (ErrorCode.NONE, [])


async def test_metadata_v8_reports_topic_and_cluster_operations_only_when_asked(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        plain = await client.metadata([TOPIC])
        assert plain["topics"][0]["topic_authorized_operations"] == OPERATIONS_NOT_REQUESTED
        assert plain["cluster_authorized_operations"] == OPERATIONS_NOT_REQUESTED
        body = {
            "topics": [{"name": TOPIC}, {"name": "missing"}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True,
        }
        asked = await client.request(METADATA, 8, body)
        found, missing = asked["topics"]
        assert found["topic_authorized_operations"] == TOPIC_OPERATIONS_BITS
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert missing["topic_authorized_operations"] == OPERATIONS_NOT_REQUESTED
        assert asked["cluster_authorized_operations"] == CLUSTER_OPERATIONS_BITS


async def test_describe_cluster_names_this_broker_and_its_operations(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        body = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
        answer = await client.request(DESCRIBE_CLUSTER, 1, body)
        assert answer["error_code"] == ErrorCode.NONE
        assert [entry["port"] for entry in answer["brokers"]] == [running.port]
        assert answer["controller_id"] == answer["brokers"][0]["broker_id"]
        assert answer["cluster_authorized_operations"] == CLUSTER_OPERATIONS_BITS
        plain = await client.request(DESCRIBE_CLUSTER, 0, {})
        assert plain["cluster_authorized_operations"] == OPERATIONS_NOT_REQUESTED
        controllers = await client.request(DESCRIBE_CLUSTER, 1, {"endpoint_type": 2})
        assert controllers["error_code"] == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


async def test_produce_v9_appends_and_names_refused_records_in_the_flexible_layout(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"cleanup.policy": "compact"})
        keyed = await client.produce(TOPIC, wire.batch([b"1", b"2"], keys=[b"a", b"b"]), version=9)
        assert (keyed["error_code"], keyed["base_offset"]) == (ErrorCode.NONE, 0)
        refused = await client.produce(
            TOPIC, wire.batch([b"3", b"4"], keys=[b"c", None]), version=9
        )
        assert refused["error_code"] == ErrorCode.INVALID_RECORD
        assert [entry["batch_index"] for entry in refused["record_errors"]] == [1]
        fetched = await client.fetch(TOPIC, 0)
        assert [record.value for record in wire.records_of(fetched["records"])] == [b"1", b"2"]
