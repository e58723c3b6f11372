"""Errors raised by the storage engine.

Hierarchy::

    StorageError
    ├── InvalidConfigError          a log config value is missing, malformed or out of range
    ├── CorruptRecordError          bytes fail a CRC, a magic or a length check
    │   └── UnsupportedCompressionError
    ├── InvalidRecordError          a well-formed batch the log refuses (control batch, no key
    │                               on a compacted topic, offsets that do not fit)
    ├── InvalidTimestampError       a CreateTime timestamp outside ``message.timestamp.*.max.ms``
    ├── RecordTooLargeError         a batch over ``max.message.bytes``
    │   └── RecordBatchTooLargeError  a record set over ``segment.bytes``
    ├── OffsetOutOfRangeError       a read or truncation outside [log start, log end]
    ├── KafkaStorageError           the log's files failed (an OSError from a write, fsync,
    │                               open, truncate or mapping, or a short write): the log is
    │                               offline until the process restarts
    ├── LogClosedError              the log was closed
    └── LogLockedError              another log holds the directory

Each maps to one Kafka error code in the broker; ``kafka_error_code`` names it.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error the storage engine raises on bad input or a failing disk."""

    kafka_error_code = -1


class InvalidConfigError(StorageError):
    kafka_error_code = 40  # INVALID_CONFIG


class CorruptRecordError(StorageError):
    kafka_error_code = 2  # CORRUPT_MESSAGE


class UnsupportedCompressionError(CorruptRecordError):
    kafka_error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(StorageError):
    kafka_error_code = 87  # INVALID_RECORD


class InvalidTimestampError(StorageError):
    kafka_error_code = 32  # INVALID_TIMESTAMP


class RecordTooLargeError(StorageError):
    kafka_error_code = 10  # MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(RecordTooLargeError):
    kafka_error_code = 18  # RECORD_LIST_TOO_LARGE


class OffsetOutOfRangeError(StorageError):
    kafka_error_code = 1  # OFFSET_OUT_OF_RANGE


class KafkaStorageError(StorageError):
    """Not bad input but a failing disk: after it the log takes no more writes or reads."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR


class LogClosedError(StorageError):
    kafka_error_code = -1


class LogLockedError(StorageError):
    kafka_error_code = -1
