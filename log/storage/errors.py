"""Errors raised by the storage engine.

Hierarchy::

    StorageError
    ├── InvalidConfigError          a log config value is missing, malformed or out of range
    ├── CorruptRecordError          bytes fail a CRC, a magic or a length check
    │   ├── UnsupportedCompressionError
    │   └── DecompressionLimitError  a payload inflates past the limit its reader set
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
A validation error may name the records of the batch it refused
(``record_errors``: their indexes in the batch and why), which Produce v8+
answers per record as Kafka does; an error about the batch as a whole names
none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record of a batch: its index in the batch (0 first) and why."""

    batch_index: int
    message: str


class StorageError(Exception):
    """Base of every error the storage engine raises on bad input or a failing disk."""

    kafka_error_code = -1
    record_errors: tuple[RecordError, ...] = ()


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

    def __init__(self, message: str, record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


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
