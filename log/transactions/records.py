"""Record formats of ``__transaction_state``: Kafka's keys and values, byte for byte.

Every record's key is an int16 version (0) and the transactional id (int16-length
string); its value an int16 version and the transaction's metadata, or no value
(a tombstone: the transactional id expired)::

    value v0     producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
                 transaction_status int8, transaction_partitions nullable array of
                 {topic string, partition_ids [int32]},
                 transaction_last_update_timestamp_ms int64,
                 transaction_start_timestamp_ms int64
    value v1     the same, flexible (compact lengths, tagged fields: previous and
                 next producer id, the client's transaction version)

Version 0 is written; both are read, so a log written by Kafka itself loads. The
transactional id's partition is ``abs(hashCode(id)) % partitions``, as for groups.

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eventplatform.log.protocol import ProtocolError, flatten
from eventplatform.log.protocol.codec import compile_struct
from eventplatform.log.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, F

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_MAX = 1
_VERSION = struct.Struct(">h")

KEY_FIELDS = (F("transactional_id", STRING),)
VALUE_FIELDS = (
    F("producer_id", INT64),
    F("previous_producer_id", INT64, "1+", tag=0, default=-1),
    F("next_producer_id", INT64, "1+", tag=1, default=-1),
    F("producer_epoch", INT16),
    F("transaction_timeout_ms", INT32),
    F("transaction_status", INT8),
    F(
        "transaction_partitions",
        [F("topic", STRING), F("partition_ids", Array(INT32))],
        nullable="0+",
    ),
    F("transaction_last_update_timestamp_ms", INT64),
    F("transaction_start_timestamp_ms", INT64),
    F("client_transaction_version", INT16, "1+", tag=2, default=0),
)


class TransactionStatus(IntEnum):
    """A transaction's state, by the number Kafka writes it as."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class RecordFormatError(ValueError):
    """A ``__transaction_state`` key or value that does not decode."""


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One transactional id's metadata as the log keeps it."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TransactionStatus
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    body = compile_struct(KEY_FIELDS, 0, flexible=False).encode(
        {"transactional_id": transactional_id}
    )
    return _VERSION.pack(KEY_VERSION) + flatten(body)


def encode_value(record: TransactionRecord) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(record.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = {
        "producer_id": record.producer_id,
        "producer_epoch": record.producer_epoch,
        "transaction_timeout_ms": record.timeout_ms,
        "transaction_status": int(record.status),
        "transaction_partitions": [
            {"topic": topic, "partition_ids": ids} for topic, ids in by_topic.items()
        ],
        "transaction_last_update_timestamp_ms": record.last_update_ms,
        "transaction_start_timestamp_ms": record.start_ms,
    }
    body = compile_struct(VALUE_FIELDS, VALUE_VERSION, flexible=False).encode(value)
    return _VERSION.pack(VALUE_VERSION) + flatten(body)


def _split(data: bytes | memoryview, what: str) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < _VERSION.size:
        raise RecordFormatError(f"{what} of {len(view)} bytes has no version")
    return _VERSION.unpack_from(view)[0], view[_VERSION.size :]


def _decode(fields: tuple[F, ...], version: int, body: memoryview, what: str) -> dict[str, Any]:
    try:
        return compile_struct(fields, version, flexible=version >= 1).decode(body)
    except (ProtocolError, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"{what} version {version} does not decode: {exc}") from exc


def decode_key(data: bytes | memoryview) -> str:
    version, body = _split(data, "key")
    if version != KEY_VERSION:
        raise RecordFormatError(f"transaction log key version {version} is unknown")
    return str(_decode(KEY_FIELDS, 0, body, "key")["transactional_id"])


def decode_value(data: bytes | memoryview) -> TransactionRecord:
    version, body = _split(data, "value")
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise RecordFormatError(f"transaction log value version {version} is unknown")
    value = _decode(VALUE_FIELDS, version, body, "value")
    try:
        status = TransactionStatus(value["transaction_status"])
    except ValueError as exc:
        raise RecordFormatError(f"transaction status {value['transaction_status']}") from exc
    partitions = frozenset(
        (entry["topic"], index)
        for entry in value["transaction_partitions"] or ()
        for index in entry["partition_ids"]
    )
    return TransactionRecord(
        value["producer_id"],
        value["producer_epoch"],
        value["transaction_timeout_ms"],
        status,
        partitions,
        value["transaction_last_update_timestamp_ms"],
        value["transaction_start_timestamp_ms"],
    )
