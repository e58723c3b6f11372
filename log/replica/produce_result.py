"""What a partition answers one produced batch (or one marker): :class:`ProduceResult`."""

from __future__ import annotations

from dataclasses import dataclass

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage import StorageError
from eventplatform.log.storage.errors import RecordError


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """One partition's produce outcome; ``record_errors`` names the refused records of a
    batch refused for some of its records (Produce v8+ answers them per record)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    last_offset: int = -1
    record_errors: tuple[RecordError, ...] = ()

    @classmethod
    def refused(cls, exc: StorageError) -> ProduceResult:
        """The answer to a batch the log refused, with the records it named."""
        return cls(
            ErrorCode(exc.kafka_error_code), message=str(exc), record_errors=exc.record_errors
        )


def invalid_record(message: str, record: int = 0) -> ProduceResult:
    """A batch refused whole for one of its records (INVALID_RECORD, named per record)."""
    return ProduceResult(
        ErrorCode.INVALID_RECORD, message=message, record_errors=(RecordError(record, message),)
    )
