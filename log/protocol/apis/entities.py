"""This log's own APIs: EntityRead for entity streams, EraseRecords for erasure.

EntityRead (v0, flexible) asks the leader of one partition of a topic that keeps entity
versions for the batches, below the high watermark, that hold records with ``key`` at
``from_offset`` or after, at most ``max_bytes`` of them (the first batch comes whole
whatever its size). The batches may hold other keys' records too; the reader keeps its
own. ``next_offset`` is where to ask again: the high watermark when the answer holds
every batch of the key below it.

EraseRecords (v0, flexible) asks the leader of one partition to erase the records at
``offsets`` (all below the high watermark, at most ``ERASE_OFFSETS_MAX``) on every
replica. It answers once the erasure is committed to the cluster's metadata and done
on the leader's own log; ``erased`` counts the offsets the log held (those below the
log start are gone already).
See ``eventplatform.log.extensions``.
"""

from __future__ import annotations

from eventplatform.log.extensions import ENTITY_READ_API_KEY, ERASE_RECORDS_API_KEY
from eventplatform.log.protocol.schema import (
    BYTES,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    Api,
    Array,
    F,
)

ENTITY_READ = Api(
    ENTITY_READ_API_KEY,
    "EntityRead",
    "0",
    flexible="0+",
    request=(
        F("topic", STRING),
        F("partition", INT32),
        F("current_leader_epoch", INT32, default=-1),
        F("key", BYTES),
        F("from_offset", INT64),
        F("max_bytes", INT32),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("high_watermark", INT64, default=-1),
        F("log_start_offset", INT64, default=-1),
        F("next_offset", INT64, default=-1),
        F("records", RECORDS, nullable="0+", default=None),
    ),
)

ERASE_OFFSETS_MAX = 10_000
"""The most offsets one EraseRecords request names."""

ERASE_RECORDS = Api(
    ERASE_RECORDS_API_KEY,
    "EraseRecords",
    "0",
    flexible="0+",
    request=(
        F("topic", STRING),
        F("partition", INT32),
        F("current_leader_epoch", INT32, default=-1),
        F("offsets", Array(INT64)),
        F("timeout_ms", INT32),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("erased", INT32, default=0),
    ),
)
