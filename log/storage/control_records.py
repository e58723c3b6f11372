"""Transaction markers: the control batches that end a producer's transaction.

A marker is a RecordBatch v2 with the transactional and control attributes set,
the producer's id and epoch, base sequence -1 and one record (Kafka's
``EndTransactionMarker``), all big-endian::

    key    int16 version (0), int16 type (0 = ABORT, 1 = COMMIT)
    value  int16 version (0), int32 coordinator epoch

Only a partition's leader writes one (WriteTxnMarkers); clients may not produce
control batches. Other control types (Kafka's LEADER_CHANGE and snapshot
records live in metadata logs) and control batches the cleaner emptied are no
marker: :func:`read_marker` answers None for them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.record_batch import (
    BatchHeader,
    Record,
    encode_batch,
    keyed_records,
    record_value,
)

CONTROL_KEY = struct.Struct(">hh")
MARKER_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
ABORT = 0
COMMIT = 1


class TransactionMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def encode_marker(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """The marker batch at offset 0, to be stamped by the append."""
    record = Record(
        0,
        timestamp_ms,
        CONTROL_KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT),
        MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch),
    )
    return encode_batch(
        [record],
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def read_marker(
    buffer: bytes | bytearray | memoryview, header: BatchHeader
) -> TransactionMarker | None:
    """The marker a control batch at ``header.position`` of ``buffer`` carries; None when it
    is not a transaction marker (another control type, or no record left). Raises
    CorruptRecordError for a marker whose key or value does not parse."""
    if not header.is_control or header.records_count == 0:
        return None
    for _, _, key, body, value_at, end in keyed_records(buffer, header.position):
        if key is None or len(key) < CONTROL_KEY.size:
            raise CorruptRecordError(f"control record at offset {header.base_offset} has no key")
        version, kind = CONTROL_KEY.unpack_from(key)
        if version < 0:
            raise CorruptRecordError(f"control record key version {version} is negative")
        if kind not in (ABORT, COMMIT):
            return None
        value, _ = record_value(body, value_at, end)
        if value is None or len(value) < MARKER_VALUE.size:
            raise CorruptRecordError(f"marker at offset {header.base_offset} has no value")
        _, coordinator_epoch = MARKER_VALUE.unpack_from(value)
        return TransactionMarker(kind == COMMIT, coordinator_epoch)
    return None
