"""One partition as the broker serves it: its log, producer state and fetch waiters.

The partition is the single owner of its ``PartitionLog``: every append and
read happens through it on the broker's trio thread, so there is no lock.
Appends wake long-polling fetches through ``trio.Event``s registered with
``add_waiter``; nobody polls.

On a single node the high watermark is the log end offset, and with no
transactions the last stable offset equals it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from eventplatform.log.broker.producer_state import ProducerStates, Verdict
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage import (
    InvalidRecordError,
    LogConfig,
    PartitionLog,
    SegmentSlice,
    StorageError,
)
from eventplatform.log.storage.partition_log import wall_clock_ms


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None


class Partition:
    """See the module docstring."""

    def __init__(self, topic: str, index: int, directory: Path, log: PartitionLog) -> None:
        self.topic = topic
        self.index = index
        self.directory = directory
        self.log = log
        self.leader_epoch = 0
        self.producers = ProducerStates.load(directory, log)
        self._waiters: set[trio.Event] = set()

    @classmethod
    def open(
        cls,
        topic: str,
        index: int,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> Partition:
        return cls(topic, index, directory, PartitionLog.open(directory, config, clock_ms=clock_ms))

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def check_leader_epoch(self, epoch: int) -> ErrorCode:
        """A client's ``current_leader_epoch`` against ours (-1 skips the check)."""
        if epoch < 0 or epoch == self.leader_epoch:
            return ErrorCode.NONE
        if epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # ------------------------------------------------------------ produce

    def append(self, record_set: bytes | bytearray) -> ProduceResult:
        """Validate and append one produced batch; errors are answered, not raised."""
        try:
            buffer, headers = self.log.validate(record_set)
        except StorageError as exc:
            return ProduceResult(ErrorCode(exc.kafka_error_code), message=str(exc))
        if len(headers) != 1:
            message = "a produce request carries exactly one record batch per partition"
            return ProduceResult(ErrorCode.INVALID_RECORD, message=message)
        header = headers[0]
        check = self.producers.check(header)
        if check.verdict is Verdict.DUPLICATE:
            require(check.duplicate_of is not None, "a duplicate names its batch")
            assert check.duplicate_of is not None
            return ProduceResult(
                ErrorCode.NONE, check.duplicate_of.first_offset, -1, self.log_start_offset
            )
        if check.verdict is Verdict.FENCED:
            return ProduceResult(ErrorCode.INVALID_PRODUCER_EPOCH, message=check.message)
        if check.verdict is Verdict.OUT_OF_ORDER:
            return ProduceResult(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, message=check.message)
        active_base = self.log.active_segment.base_offset
        try:
            info = self.log.append(buffer, leader_epoch=self.leader_epoch, validated=headers)
        except InvalidRecordError as exc:
            return ProduceResult(ErrorCode.INVALID_RECORD, message=str(exc))
        except StorageError as exc:
            return ProduceResult(ErrorCode(exc.kafka_error_code), message=str(exc))
        stamped = header._replace(base_offset=info.base_offset)
        if info.append_time_ms >= 0:
            stamped = stamped._replace(max_timestamp=info.append_time_ms)
        self.producers.update(stamped)
        if self.log.active_segment.base_offset != active_base:
            self.producers.write_snapshot(self.directory, self.log.log_end_offset)
        self._wake()
        return ProduceResult(
            ErrorCode.NONE, info.base_offset, info.append_time_ms, info.log_start_offset
        )

    # ------------------------------------------------------------ fetch

    def read(self, offset: int, max_bytes: int) -> SegmentSlice | None:
        """Whole batches from ``offset`` below the high watermark; raises when out of range."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

    def add_waiter(self, event: trio.Event) -> None:
        """Set ``event`` at the next append (fetch long polling)."""
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def _wake(self) -> None:
        if self._waiters:
            for event in self._waiters:
                event.set()
            self._waiters.clear()

    def wake_all(self) -> None:
        """Wake every waiter, as when the partition goes away."""
        self._wake()

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self.producers.write_snapshot(self.directory, self.log.log_end_offset)
        self.log.close()
        self._wake()
