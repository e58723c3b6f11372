"""Errors raised by the storage engine.

Hierarchy::

    StorageError
    ├── InvalidConfigError          a log config value is missing, malformed or out of range
    ├── CorruptRecordError          bytes fail a CRC, a magic or a length check
    │   ├── UnsupportedCompressionError
    │   └── DecompressionLimitError  a payload inflates past the limit its reader set
    ├── InvalidRecordError          a well-formed batch the log refuses (control batch, no key
    │                               on a compacted topic, offsets that do not fit)
    ├── RecordTooLargeError         a batch over ``max.message.bytes``
    │   └── RecordBatchTooLargeError  a record set over ``segment.bytes``
    ├── OffsetOutOfRangeError       a read or truncation outside [log start, log end]
    ├── LogClosedError              the log was closed
    └── LogLockedError              another log holds the directory

Each maps to one Kafka error code in the broker; ``kafka_error_code`` names it.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error the storage engine raises on bad input."""

    kafka_error_code = -1


class InvalidConfigError(StorageError):
    kafka_error_code = 40  # INVALID_CONFIG


class CorruptRecordError(StorageError):
    kafka_error_code = 2  # CORRUPT_MESSAGE


class UnsupportedCompressionError(CorruptRecordError):
    kafka_error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class DecompressionLimitError(CorruptRecordError):
    """A compressed payload inflates past the limit its reader set (a decompression bomb,
    or a batch too large for the job at hand)."""


class InvalidRecordError(StorageError):
    kafka_error_code = 87  # INVALID_RECORD


class RecordTooLargeError(StorageError):
    kafka_error_code = 10  # MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(RecordTooLargeError):
    kafka_error_code = 18  # RECORD_LIST_TOO_LARGE


class OffsetOutOfRangeError(StorageError):
    kafka_error_code = 1  # OFFSET_OUT_OF_RANGE


class LogClosedError(StorageError):
    kafka_error_code = -1


class LogLockedError(StorageError):
    kafka_error_code = -1
