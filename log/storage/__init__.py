"""The segmented commit-log storage engine.

``PartitionLog`` is the entry point; ``Cleaner`` runs retention and
compaction; ``record_batch`` is the RecordBatch v2 codec shared by the broker
and by Spark replay.
"""

from eventplatform.log.storage.cleaner import Cleaner, CleanStats
from eventplatform.log.storage.compression import Compression
from eventplatform.log.storage.config import LogConfig
from eventplatform.log.storage.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogClosedError,
    LogLockedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnsupportedCompressionError,
)
from eventplatform.log.storage.partition_log import AppendInfo, PartitionLog, TimestampOffset
from eventplatform.log.storage.record_batch import BatchHeader, DecodedBatch, Record
from eventplatform.log.storage.segment import SegmentSlice

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "CleanStats",
    "Cleaner",
    "Compression",
    "CorruptRecordError",
    "DecodedBatch",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "LogClosedError",
    "LogConfig",
    "LogLockedError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "Record",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "SegmentSlice",
    "StorageError",
    "TimestampOffset",
    "UnsupportedCompressionError",
]
