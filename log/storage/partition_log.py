"""PartitionLog: the append-only log of one topic partition.

A directory of segments (see :mod:`eventplatform.log.storage.files` for the
names) behind one API: append whole batches and get offsets back; read file
slices by offset; find offsets by timestamp; truncate for followers; flush
under a policy; close cleanly; keep each segment's aborted-transaction index
(:mod:`eventplatform.log.storage.txn_index`), whose entries the partition's
producer state derives. Retention and compaction live in
:class:`eventplatform.log.storage.cleaner.Cleaner`, which changes segments only
through :meth:`delete_segments` and :meth:`replace_segments`.

A storage I/O error (an ``OSError`` from a write, fsync, open, truncate or
mapping, or a write the disk could only take part of) takes the log offline,
as Kafka takes a failed log directory offline: the method raises
:class:`KafkaStorageError`, and so does every later append, read or flush,
until the process restarts and recovery checks the files. The bytes of a torn
append are cut back first (or, failing that, by recovery). A failed fsync is
never retried: after one the page cache's state is unknown (fsyncgate).

Concurrency: one owner calls every method (the partition's task in the broker).
Slices returned by :meth:`read` may be consumed later by the same thread:
removed segment files stay open for ``file.delete.delay.ms``.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, ParamSpec, TypeVar

from eventplatform.log.invariants import require
from eventplatform.log.storage.config import INT64_MAX, LogConfig
from eventplatform.log.storage.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from eventplatform.log.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    DELETED_SUFFIX,
    fsync_directory,
    lock_directory,
    never_written,
    write_atomically,
    write_checkpoint,
)
from eventplatform.log.storage.flush_jobs import FlushJob
from eventplatform.log.storage.flush_jobs import run_flush_jobs as run_flush_jobs
from eventplatform.log.storage.loader import LogLoader
from eventplatform.log.storage.record_batch import (
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    DecodedBatch,
    Record,
    check_keys_present,
    decode_record_set,
    split_batches,
    stamp,
    stamp_log_append_time,
    validate_record_set,
)
from eventplatform.log.storage.segment import Segment, SegmentSlice
from eventplatform.log.storage.segment_map import SegmentMap
from eventplatform.log.storage.txn_index import AbortedTransaction

READ_CHUNK_BYTES = 1024 * 1024
P = ParamSpec("P")
R = TypeVar("R")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _no_unstable_offset() -> int | None:
    return None


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int
    position: int = -1  # where the first batch starts in its segment's file


class TimestampOffset(NamedTuple):
    offset: int
    timestamp: int


def _owner(arguments: tuple[object, ...]) -> PartitionLog:
    owner = arguments[0]
    assert isinstance(owner, PartitionLog)
    return owner


DESCRIPTOR_LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
"""Errors of the process's or the system's open-file limit, not of the disk."""


def _offline_on_io_error(method: Callable[P, R]) -> Callable[P, R]:
    """Wrap a :class:`PartitionLog` method: an ``OSError`` (or a torn write's
    :class:`KafkaStorageError`) takes the log offline and raises KafkaStorageError. An
    open-file limit error is raised as it is: the disk is fine, and the caller may retry
    once descriptors are free."""

    @functools.wraps(method)
    def guarded(*arguments: P.args, **options: P.kwargs) -> R:
        try:
            return method(*arguments, **options)
        except KafkaStorageError as exc:
            _owner(arguments).take_offline(exc)
            raise
        except OSError as exc:
            if exc.errno in DESCRIPTOR_LIMIT_ERRNOS:
                raise  # the process ran out of descriptors: nothing is wrong with the disk
            raise _owner(arguments).take_offline(exc) from exc

    return guarded


class PartitionLog:
    """See the module docstring. Create with :meth:`open`."""

    background_flush = False
    """When set, a positive ``flush.ms`` is left to :meth:`start_flush` and
    :meth:`finish_flush`, whose fsync runs off the append path (the broker's
    flusher thread), as Kafka's log flusher does. ``flush.messages`` and
    ``flush.ms=0`` still fsync on the append itself."""

    def __init__(self, directory: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.update_config(config)
        self.clock_ms = clock_ms
        # A new log's directory is fsynced by its first flush (or roll, or close), not
        # here: creating a thousand partitions would wait on a thousand fsyncs.
        new = never_written(directory)
        self._directory_unsynced = new
        self._lock_descriptor = lock_directory(directory)
        loaded = LogLoader(directory, config).load(sync_directory=not new)
        self.segments: SegmentMap = loaded.segments
        self.log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        self.cleaner_offset = loaded.cleaner_offset
        self.recovered_bytes_truncated = loaded.truncated_bytes
        self.opened_cleanly = loaded.was_clean
        self._active = self.segments.last
        for segment in self.segments:
            if segment is not self._active:
                segment.seal()  # recovery leaves rebuilt indexes preallocated
        self._active.make_active()
        self._last_flush_ms = self._last_checkpoint_ms = clock_ms()
        self._truncations = 0
        self._pending_deletes: list[tuple[int, Segment]] = []
        self._closed = False
        self._failure: KafkaStorageError | None = None
        self.first_unstable_offset: Callable[[], int | None] = _no_unstable_offset
        """Set by the log's owner when it tracks transactions (the partition): the first
        offset of a transaction whose marker is not in, or not yet replicated; None when
        there is none. Compaction never reaches it: until its marker is known, a
        transaction's records can be neither kept as committed nor dropped as aborted."""
        # A new log's checkpoint would say what its absence says (start, recovery point and
        # cleaner offset 0), at the cost of two more fsyncs.
        if not new:
            self.write_checkpoint()

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> PartitionLog:
        """Open or create the log in ``directory``, recovering it if it was not closed cleanly."""
        return cls(Path(directory), config or LogConfig(), clock_ms)

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic settings; they take effect from the next append or roll."""
        self.config = config
        # Read once per append: plain attributes are cheaper than the dataclass's.
        self._max_message_bytes = config.max_message_bytes
        self._segment_bytes = config.segment_bytes
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        bounded = (
            config.message_timestamp_before_max_ms < INT64_MAX
            or config.message_timestamp_after_max_ms < INT64_MAX
        )
        self._timestamp_bounds = (
            (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)
            if bounded and not self._log_append_time
            else None
        )
        self._compact = config.compact
        for segment in getattr(self, "segments", ()):
            segment.config = config

    # ------------------------------------------------------------ state

    @property
    def log_end_offset(self) -> int:
        return self._active.next_offset

    @property
    def active_segment(self) -> Segment:
        return self._active

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def offline(self) -> bool:
        """A storage error took the log offline (see the module docstring)."""
        return self._failure is not None

    @property
    def failure(self) -> KafkaStorageError | None:
        """The error that took the log offline, or None."""
        return self._failure

    def take_offline(self, cause: BaseException) -> KafkaStorageError:
        """Stop every later append, read and flush; the error to raise for ``cause``."""
        if self._failure is None:
            self._failure = (
                cause
                if isinstance(cause, KafkaStorageError)
                else KafkaStorageError(f"{self.directory}: {cause}")
            )
        return self._failure

    @property
    def truncations(self) -> int:
        """How many times the log was truncated since it was opened: work prepared from
        its segments before a truncation no longer describes them."""
        return self._truncations

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory} is closed")
        if self._failure is not None:
            raise KafkaStorageError(
                f"{self.directory} is offline after a storage error: {self._failure}"
            )

    # ------------------------------------------------------------ appends

    def validate(self, record_set: bytes | bytearray) -> tuple[bytearray, list[BatchHeader]]:
        """Check a produced record set as ``append`` would, without appending it.

        Returns the (mutable) buffer and its batch headers, which the caller may
        hand back to ``append`` after its own checks, so the CRCs are verified once.
        """
        self._check_open()
        buffer = record_set if isinstance(record_set, bytearray) else bytearray(record_set)
        return buffer, self._validate(buffer)

    @_offline_on_io_error
    def append(
        self,
        record_set: bytes | bytearray,
        *,
        leader_epoch: int = -1,
        validated: list[BatchHeader] | None = None,
    ) -> AppendInfo:
        """Validate, assign offsets to and append a produced record set.

        Only batch headers and CRCs are checked (records stay bytes), except on a
        compacted topic, whose records must all carry a key. ``validated`` is the
        header list ``validate`` returned for this very ``record_set`` (a bytearray).
        """
        self._check_open()
        if validated is not None and isinstance(record_set, bytearray):
            buffer, headers = record_set, validated
        else:
            buffer, headers = self.validate(record_set)
        now_ms = self.clock_ms()
        next_offset = self._active.next_offset
        log_append_time = self._log_append_time
        stamped = []
        records = 0
        for header in headers:
            stamp(buffer, header, base_offset=next_offset, leader_epoch=leader_epoch)
            if log_append_time:
                stamp_log_append_time(buffer, header, now_ms)
                header = header._replace(max_timestamp=now_ms)
            # Per-batch hot path: building the tuple directly costs half of _replace.
            stamped.append(BatchHeader(next_offset, *header[1:]))
            next_offset += header.last_offset_delta + 1
            records += header.records_count
        position = self._append_stamped(buffer, stamped, now_ms)
        return AppendInfo(
            stamped[0].base_offset,
            next_offset - 1,
            now_ms if log_append_time else -1,
            self.log_start_offset,
            records,
            position,
        )

    @_offline_on_io_error
    def append_as_follower(self, record_set: bytes | bytearray) -> AppendInfo:
        """Append batches that already carry the leader's offsets and epochs."""
        self._check_open()
        headers = self._validate(record_set, producer=False)
        require(headers[0].base_offset >= self.log_end_offset, "follower append goes backwards")
        for previous, header in itertools.pairwise(headers):
            require(header.base_offset >= previous.next_offset, "follower batches overlap")
        position = self._append_stamped(record_set, headers, self.clock_ms())
        return AppendInfo(
            headers[0].base_offset,
            headers[-1].last_offset,
            -1,
            self.log_start_offset,
            sum(header.records_count for header in headers),
            position,
        )

    def _validate(self, buffer: bytes | bytearray, *, producer: bool = True) -> list[BatchHeader]:
        if len(buffer) > self._segment_bytes:
            raise RecordBatchTooLargeError(
                f"record set of {len(buffer)} bytes exceeds segment.bytes {self._segment_bytes}"
            )
        headers = validate_record_set(buffer) if producer else _follower_headers(buffer)
        limit = self._max_message_bytes
        for header in headers:
            if header.batch_length + LOG_OVERHEAD_BYTES > limit:
                raise RecordTooLargeError(
                    f"record batch of {header.size_bytes} bytes exceeds max.message.bytes {limit}"
                )
        bounds = self._timestamp_bounds
        if producer and bounds is not None:
            _check_timestamps(headers, bounds, self.clock_ms())
        if producer and self._compact:
            for header in headers:
                check_keys_present(buffer, header)
        return headers

    def _append_stamped(
        self, buffer: bytes | bytearray, headers: list[BatchHeader], now_ms: int
    ) -> int:
        """Append to the active segment (rolling first when due); the file position the
        buffer starts at, in the segment that holds it."""
        last_offset = headers[-1].last_offset
        if self._active.should_roll(
            incoming_bytes=len(buffer), last_offset=last_offset, now_ms=now_ms
        ):
            self.roll(base_offset=headers[0].base_offset)
        position = self._active.size_bytes
        self._active.append(buffer, headers, now_ms)
        self._maybe_flush(now_ms)
        return position

    @_offline_on_io_error
    def roll(self, *, base_offset: int | None = None) -> Segment:
        """Seal the active segment and start a new one at ``base_offset`` (default: the log end)."""
        self._check_open()
        base = self.log_end_offset if base_offset is None else base_offset
        require(base >= self.log_end_offset, "a new segment cannot start below the log end")
        if self._active.is_empty and self._active.base_offset == base:
            return self._active
        self._active.seal()
        if self._active.is_empty:
            self.segments.remove(self._active)
            self._active.delete_files()
        segment = Segment.open(self.directory, base, self.config)
        segment.next_offset = base
        segment.make_active()
        self.segments.add(segment)
        self._active = segment
        return segment

    # ------------------------------------------------------------ flushing

    def _maybe_flush(self, now_ms: int) -> None:
        messages = self.config.flush_messages
        unflushed = self.log_end_offset - self.recovery_point
        interval_ms = self.config.flush_interval_ms
        if (messages is not None and unflushed >= messages) or (
            now_ms - self._last_flush_ms >= interval_ms
            and (interval_ms == 0 or not self.background_flush)
        ):
            self.flush()

    @_offline_on_io_error
    def start_flush(self) -> FlushJob | None:
        """The periodic fsync, if ``flush.ms`` has passed, prepared for another thread.

        Run the job with :func:`run_flush_jobs`, then hand it to :meth:`finish_flush`
        on the owner's thread. None when the fsync is not due or nothing is unflushed.
        """
        self._check_open()
        now_ms = self.clock_ms()
        if now_ms - self._last_flush_ms < self.config.flush_interval_ms:
            return None
        self._last_flush_ms = now_ms
        if self.recovery_point >= self.log_end_offset:
            return None
        descriptors: list[int] = []
        for segment in self.segments.from_offset(self.recovery_point):
            descriptors += segment.sync_descriptors()
        if self._directory_unsynced:
            descriptors.append(os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY))
        return FlushJob(self.log_end_offset, self._truncations, tuple(descriptors))

    def finish_flush(self, job: FlushJob, error: OSError | None = None) -> None:
        """Advance the recovery point to what ``job`` made durable (unless truncated since);
        ``error``, the job's failed fsync, takes the log offline instead."""
        if self._closed or self._failure is not None:
            return
        if error is not None:
            self.take_offline(error)
            return
        self._directory_unsynced = False
        if job.truncations != self._truncations:
            return
        if job.end_offset > self.recovery_point:
            self.recovery_point = job.end_offset
            if self.clock_ms() - self._last_checkpoint_ms >= self.config.flush_interval_ms:
                self.write_checkpoint()

    @_offline_on_io_error
    def flush_if_due(self) -> None:
        """Run the periodic fsync if ``flush.ms`` (or the default interval) has passed."""
        self._check_open()
        self._maybe_flush(self.clock_ms())
        self.delete_expired_files()

    @_offline_on_io_error
    def flush(self) -> None:
        """fsync every segment from the recovery point on, then advance the recovery point."""
        self._check_open()
        for segment in self.segments.from_offset(self.recovery_point):
            segment.flush()
        if self._directory_unsynced:
            fsync_directory(self.directory)
            self._directory_unsynced = False
        now_ms = self.clock_ms()
        if self.recovery_point != self.log_end_offset:
            self.recovery_point = self.log_end_offset
            # The checkpoint costs two fsyncs: write it at most once per flush interval.
            if now_ms - self._last_checkpoint_ms >= self.config.flush_interval_ms:
                self.write_checkpoint()
        self._last_flush_ms = now_ms

    @_offline_on_io_error
    def write_checkpoint(self) -> None:
        self._last_checkpoint_ms = self.clock_ms()
        self._directory_unsynced = False  # writing the file fsyncs its directory
        write_checkpoint(
            self.directory,
            {
                "log_start_offset": self.log_start_offset,
                "recovery_point": self.recovery_point,
                "cleaner_offset": self.cleaner_offset,
            },
        )

    # ------------------------------------------------------------ reads

    @_offline_on_io_error
    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> SegmentSlice | None:
        """Whole batches from the one holding ``offset``, from a single segment.

        ``max_offset`` (exclusive; the high watermark) bounds what may be returned.
        None at the end of the log. Raises OffsetOutOfRangeError outside
        ``[log_start_offset, log_end_offset]``.
        """
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        upper = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        for segment in self.segments.from_offset(offset):
            if segment.base_offset >= upper:
                break
            bound = upper if upper < segment.next_offset else None
            found = segment.read(max(offset, segment.base_offset), max_bytes, max_offset=bound)
            if found is not None:
                return found
        return None

    def iter_batches(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[DecodedBatch]:
        """Decode the batches holding offsets in ``[start_offset, end_offset)``; for tools."""
        offset = self.log_start_offset if start_offset is None else start_offset
        while end_offset is None or offset < end_offset:
            found = self.read(offset, READ_CHUNK_BYTES)
            if found is None:
                return
            batches = decode_record_set(found.read_bytes())
            for batch in batches:
                if end_offset is not None and batch.header.base_offset >= end_offset:
                    return
                yield batch
            offset = batches[-1].header.next_offset

    def iter_records(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[Record]:
        low = self.log_start_offset if start_offset is None else start_offset
        for batch in self.iter_batches(low, end_offset):
            for record in batch.records:
                if record.offset >= low and (end_offset is None or record.offset < end_offset):
                    yield record

    @_offline_on_io_error
    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first offset whose record timestamp is at or after ``timestamp``, or None."""
        self._check_open()
        for segment in self.segments.from_offset(self.log_start_offset):
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return TimestampOffset(*found)
        return None

    @_offline_on_io_error
    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The first record carrying the log's largest timestamp, or None when it has none."""
        self._check_open()
        best: Segment | None = None
        for segment in self.segments.from_offset(self.log_start_offset):
            if segment.next_offset > segment.base_offset and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None or best.max_timestamp < 0:
            return None
        start = max(best.offset_of_max_timestamp, self.log_start_offset)
        for record in self.iter_records(start, best.next_offset):
            if record.timestamp == best.max_timestamp:
                return TimestampOffset(record.offset, record.timestamp)
        return None

    # ------------------------------------------------------------ aborted transactions

    @_offline_on_io_error
    def append_aborted_transaction(self, entry: AbortedTransaction) -> None:
        """Add an abort marker's entry to the index of the segment holding the marker."""
        self._check_open()
        segment = self.segments.floor(entry.last_offset)
        require(
            segment is not None and entry.last_offset < segment.next_offset,
            f"abort marker {entry.last_offset} is in the log",
        )
        assert segment is not None
        segment.txn_index.append(entry)

    @_offline_on_io_error
    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTransaction]:
        """The aborted transactions with ``last_offset >= start_offset`` and ``first_offset <
        upper_bound_offset``, in marker order (Kafka's ``collectAbortedTransactions``): the
        indexes from the segment holding ``start_offset`` on, until one's entries show no
        later segment can hold more. Only the indexes are read."""
        self._check_open()
        found: list[AbortedTransaction] = []
        for segment in self.segments.from_offset(start_offset):
            if not segment.txn_index.size_bytes:
                continue
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    @_offline_on_io_error
    def flush_transaction_indexes(self) -> None:
        """fsync every transaction index written since its last flush (before a producer
        snapshot that counts on them)."""
        self._check_open()
        for segment in self.segments:
            segment.txn_index.flush()

    # ------------------------------------------------------------ truncation and deletion

    @_offline_on_io_error
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset``; for followers.

        The log end becomes ``offset``, or the start of the batch that held it.
        """
        self._check_open()
        if offset >= self.log_end_offset:
            return
        holder = self.segments.floor(offset)
        cut = None if holder is None else holder.find_batch(offset)
        straddles_start = cut is not None and cut.base_offset < self.log_start_offset
        if offset <= self.log_start_offset or straddles_start:
            # Nothing below the cut would stay readable: restart the log at ``offset``.
            self.truncate_fully_and_start_at(offset)
            return
        for segment in reversed(list(self.segments)):
            if segment.base_offset < offset or segment is self.segments.first:
                break
            self.segments.remove(segment)
            self._schedule_delete(segment)
        holder = self.segments.last
        holder.truncate_to(offset)
        holder.make_active()
        self._active = holder
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.cleaner_offset = min(self.cleaner_offset, self.log_end_offset)
        self._truncations += 1
        self.write_checkpoint()

    @_offline_on_io_error
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``offset``."""
        self._check_open()
        for segment in list(self.segments):
            self.segments.remove(segment)
            self._schedule_delete(segment)
        segment = Segment.open(self.directory, offset, self.config)
        segment.next_offset = offset
        segment.make_active()
        self.segments.add(segment)
        self._active = segment
        self.log_start_offset = self.recovery_point = self.cleaner_offset = offset
        self._truncations += 1
        self.write_checkpoint()

    @_offline_on_io_error
    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start forward (retention, DeleteRecords); never backwards."""
        self._check_open()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"log start {offset} would pass the log end {self.log_end_offset}"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.cleaner_offset = max(self.cleaner_offset, offset)
            self.write_checkpoint()

    @_offline_on_io_error
    def delete_segments(self, doomed: list[Segment]) -> None:
        """Remove closed segments from the front of the log and advance the log start."""
        self._check_open()
        for segment in doomed:
            require(segment is not self._active, "the active segment is never deleted")
            require(segment is self.segments.first, "segments are deleted oldest first")
            self.segments.remove(segment)
            self._schedule_delete(segment)
        fsync_directory(self.directory)
        self.advance_log_start_offset(max(self.log_start_offset, self.segments.first.base_offset))

    @_offline_on_io_error
    def replace_segments(
        self, new: Segment, old: list[Segment], on_step: Callable[[str], None]
    ) -> None:
        """Install a finished ``.cleaned`` segment in place of ``old``, crash-safely.

        ``.cleaned`` becomes ``.swap`` (from here recovery completes the swap), the
        old segments become ``.deleted``, the swap takes the plain name, and the
        ``.deleted`` files go after the delete delay. ``on_step`` is called after
        each step so tests can inject a crash there.
        """
        self._check_open()
        require(
            all(segment is not self._active for segment in old),
            "the active segment is never replaced",
        )
        new.flush()
        new.seal()
        on_step("cleaned-written")
        new.rename(".swap")
        fsync_directory(self.directory)
        on_step("swap-renamed")
        for segment in old:
            self.segments.remove(segment)
            segment.rename(DELETED_SUFFIX)
            on_step("old-renamed")
        fsync_directory(self.directory)
        new.rename("")
        fsync_directory(self.directory)
        on_step("swap-installed")
        self.segments.add(new)
        for segment in old:
            self._schedule_delete(segment, renamed=True)

    def _schedule_delete(self, segment: Segment, *, renamed: bool = False) -> None:
        if not renamed:
            segment.rename(DELETED_SUFFIX)
        self._pending_deletes.append((self.clock_ms() + self.config.file_delete_delay_ms, segment))

    def delete_expired_files(self, *, force: bool = False) -> None:
        """Remove the removed segments' files whose delete delay has passed (background
        work: a storage error takes the log offline and is not raised)."""
        if self._failure is not None:
            return
        now_ms = self.clock_ms()
        keep = []
        try:
            for deadline, segment in self._pending_deletes:
                if force or deadline <= now_ms:
                    segment.delete_files()
                else:
                    keep.append((deadline, segment))
        except OSError as exc:
            self.take_offline(exc)
            return
        self._pending_deletes = keep

    def close(self) -> None:
        """Flush, trim the indexes, write the checkpoint and the clean-shutdown marker.

        An offline log only releases its files: the next open recovers it. A storage
        error on the way takes the log offline and releases it the same way, so a
        shutdown goes on with the other logs."""
        if self._closed:
            return
        if self._failure is None:
            try:
                self.flush()
                self.delete_expired_files(force=True)
                for segment in self.segments:
                    segment.close()
                self.write_checkpoint()
                write_atomically(self.directory / CLEAN_SHUTDOWN_FILE, b"")
            except (OSError, KafkaStorageError) as exc:
                self.take_offline(exc)
        if self._failure is not None:
            self._release()
            return
        os.close(self._lock_descriptor)
        self._closed = True

    def _release(self) -> None:
        for _, segment in self._pending_deletes:
            segment.release()
        for segment in self.segments:
            segment.release()
        os.close(self._lock_descriptor)
        self._closed = True


def _follower_headers(buffer: bytes | bytearray) -> list[BatchHeader]:
    headers = split_batches(buffer, check_crc=True)
    if not headers:
        raise InvalidRecordError("replicated record set carries no record batch")
    return headers


def _check_timestamps(headers: list[BatchHeader], bounds: tuple[int, int], now_ms: int) -> None:
    """Refuse (InvalidTimestampError) a CreateTime batch whose first timestamp is more than
    ``message.timestamp.before.max.ms`` (``bounds[0]``) in the past, or whose largest is
    more than ``message.timestamp.after.max.ms`` (``bounds[1]``) in the future. The records
    stay bytes, so the batch header's two timestamps stand for its records'."""
    before_ms, after_ms = bounds
    for header in headers:
        if now_ms - header.base_timestamp > before_ms:
            raise InvalidTimestampError(
                f"timestamp {header.base_timestamp} is more than "
                f"message.timestamp.before.max.ms {before_ms} before the broker's {now_ms}"
            )
        if header.max_timestamp - now_ms > after_ms:
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} is more than "
                f"message.timestamp.after.max.ms {after_ms} after the broker's {now_ms}"
            )
