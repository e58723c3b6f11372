"""Cleaner: time and size retention, and key-based compaction.

Retention (``cleanup.policy`` contains ``delete``) removes whole closed
segments from the front of the log: those whose newest record is older than
``retention.ms``, then the oldest while the log is over ``retention.bytes``.
The active segment is never removed.

Compaction (``cleanup.policy`` contains ``compact``) keeps the latest record
per key:

A log is due for compaction when the dirty share of its cleanable bytes reaches
``min.cleanable.dirty.ratio``, when its oldest dirty segment began more than
``max.compaction.lag.ms`` ago (whatever the ratio), or when a tombstone's
delete horizon has passed. Segments whose newest record is younger than
``min.compaction.lag.ms`` are not cleanable yet: they and everything after
them wait for a later pass.

1. The dirty section runs from the cleaner checkpoint to the active segment,
   or to the first segment too young to clean.
   Its keys go into a bounded :class:`OffsetMap` (16-byte BLAKE2b digest to
   the latest offset). When the map is full, cleaning stops at the last whole
   segment that fit, and the next pass continues from there.
2. Every closed segment up to that point is rewritten, in groups that fit in
   ``segment.bytes``, keeping a record when its key's latest offset is its
   own (or unknown to the map). A batch that keeps all its records is copied
   byte for byte; otherwise it is re-encoded with its base offset, last
   offset, producer fields and codec preserved.
3. A tombstone (null value) first survives a clean with a delete horizon
   ``now + delete.retention.ms`` stamped in its batch (Kafka's KIP-534), and is
   dropped by the first clean after that horizon.
3a. Transactions (:mod:`~eventplatform.log.storage.cleaner_transactions`): no
   pass reads past the first unstable offset; the batches of aborted
   transactions are left out of the offset map and removed; committed ones
   are kept like any record; commit and abort markers are all kept, and a
   cleaned segment's transaction index holds the entries of the segments it
   replaces.
4. Each group is installed by :meth:`PartitionLog.replace_segments`
   (``.cleaned`` -> ``.swap`` -> ``.deleted``), which recovery can finish or undo.

Memory: records are streamed from each batch (:func:`iter_raw_records`), and a
batch that inflates past ``batch_decompressed_bytes_max`` is kept whole rather
than compacted, so a pass holds the offset map (``keys_max`` digests) and at most
about twice that limit, whatever a batch claims to inflate to, besides the
aborted transactions of the range it maps or the group it cleans.

Threads: retention runs on the log owner's thread. A compaction pass is three
steps: :meth:`Cleaner.prepare_compaction` on the owner's thread takes duplicates
of the closed segments' descriptors; :meth:`Cleaner.run_compaction` may run on a
worker thread, reading only those duplicates and writing only its ``.cleaned``
segments; :meth:`Cleaner.finish_compaction`, back on the owner's thread, swaps
them in unless the log was truncated or lost one of those segments meanwhile.
The owner's thread alone changes the segment map. :meth:`Cleaner.compact` runs
all three on the calling thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from eventplatform.log.storage.cleaner_transactions import (
    AbortedBatches,
    TxnIndexView,
    close_txn_views,
    collect_aborted,
    entries_of,
    txn_views,
)
from eventplatform.log.storage.config import CLEANER_KEYS_MAX_DEFAULT, INT32_MAX, LogConfig
from eventplatform.log.storage.errors import DecompressionLimitError
from eventplatform.log.storage.files import CLEANED_SUFFIX, SEGMENT_SUFFIXES, segment_path
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import (
    NO_TIMESTAMP,
    BatchHeader,
    RawRecord,
    TimestampType,
    decode_varint,
    encode_batch_body,
    iter_raw_records,
    parse_header,
    rebase_record,
)
from eventplatform.log.storage.segment import Segment, scan_batches

logger = logging.getLogger(__name__)

CLEANER_BATCH_DECOMPRESSED_BYTES_MAX = 16 * 1024 * 1024
"""The most one batch may inflate to and still be compacted. The cleaner streams a
batch's records and holds at most this much of them (the kept records, then their
compressed form); a batch that inflates further, such as a decompression bomb, is
kept whole as it is, with a warning."""


@dataclass(frozen=True, slots=True)
class CleanStats:
    segments_read: int
    bytes_read: int
    bytes_written: int
    records_removed: int
    first_dirty_offset: int
    clean_until_offset: int


class OffsetMap:
    """Key digest to latest offset, bounded to ``capacity`` keys."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16).digest()

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; False when a new key does not fit."""
        digest = self.digest(key)
        if digest not in self._offsets and len(self._offsets) >= self.capacity:
            return False
        self._offsets[digest] = offset
        return True

    def latest(self, key: bytes) -> int | None:
        return self._offsets.get(self.digest(key))


def _never(step: str) -> None:
    del step


class Cleaner:
    """See the module docstring. Holds no state between passes but its settings."""

    def __init__(
        self,
        *,
        keys_max: int = CLEANER_KEYS_MAX_DEFAULT,
        batch_decompressed_bytes_max: int = CLEANER_BATCH_DECOMPRESSED_BYTES_MAX,
        on_step: Callable[[str], None] = _never,
    ) -> None:
        self.keys_max = keys_max
        self.batch_decompressed_bytes_max = batch_decompressed_bytes_max
        self.on_step = on_step

    # ------------------------------------------------------------ retention

    def apply_retention(self, log: PartitionLog, *, upper_bound_offset: int | None = None) -> int:
        """Delete closed segments that are expired, excess or below the log start.

        Segments wholly below the log start (after DeleteRecords) go under every
        policy. An expired active segment is rolled first, as Kafka does, so a quiet
        partition still ages out. Nothing at or above ``upper_bound_offset`` (the
        high watermark) is deleted. Returns how many segments went.
        """
        bound = log.log_end_offset if upper_bound_offset is None else upper_bound_offset
        if log.config.delete and self._active_expired(log) and log.log_end_offset <= bound:
            log.roll()
        doomed = self._below_log_start(log)
        if log.config.delete and not doomed:
            doomed = self._expired_by_time(log) or self._excess_by_size(log)
        doomed = [segment for segment in doomed if segment.next_offset <= bound]
        if doomed:
            log.delete_segments(doomed)
        log.delete_expired_files()
        return len(doomed)

    def _closed_segments(self, log: PartitionLog) -> Iterator[Segment]:
        return (segment for segment in log.segments if segment is not log.active_segment)

    def _below_log_start(self, log: PartitionLog) -> list[Segment]:
        doomed = []
        for segment in self._closed_segments(log):
            following = log.segments.higher(segment.base_offset)
            if following is None or following.base_offset > log.log_start_offset:
                break
            doomed.append(segment)
        return doomed

    def _active_expired(self, log: PartitionLog) -> bool:
        active = log.active_segment
        if active.is_empty or log.config.retention_ms < 0:
            return False
        return active.max_timestamp < log.clock_ms() - log.config.retention_ms

    def _expired_by_time(self, log: PartitionLog) -> list[Segment]:
        if log.config.retention_ms < 0:
            return []
        horizon = log.clock_ms() - log.config.retention_ms
        doomed = []
        for segment in self._closed_segments(log):
            if segment.max_timestamp >= horizon:
                break
            doomed.append(segment)
        return doomed

    def _excess_by_size(self, log: PartitionLog) -> list[Segment]:
        if log.config.retention_bytes < 0:
            return []
        excess = log.size_bytes - log.config.retention_bytes
        doomed = []
        for segment in self._closed_segments(log):
            if excess < segment.size_bytes:
                break
            excess -= segment.size_bytes
            doomed.append(segment)
        return doomed

    # ------------------------------------------------------------ compaction

    def dirty_ratio(self, log: PartitionLog, *, until_offset: int | None = None) -> float:
        """The dirty share of the closed segments' bytes, counting as dirty only the
        segments below ``until_offset`` (the first uncleanable offset) when given."""
        closed = list(self._closed_segments(log))
        total = sum(segment.size_bytes for segment in closed)
        if not total:
            return 0.0
        until = log.log_end_offset if until_offset is None else until_offset
        dirty = sum(
            s.size_bytes
            for s in closed
            if s.next_offset > log.cleaner_offset and s.base_offset < until
        )
        return float(dirty) / total

    def needs_compaction(self, log: PartitionLog) -> bool:
        """Whether a compaction pass is due (see the module docstring for when)."""
        if not log.config.compact:
            return False
        now_ms = log.clock_ms()
        if self._due(log, self.first_uncleanable_offset(log, now_ms), now_ms):
            return True
        views = _views(log)
        try:
            return _has_expired_tombstones(views, now_ms, threading.Event())
        finally:
            _close_views(views)

    def _due(self, log: PartitionLog, until: int, now_ms: int) -> bool:
        """Whether the cleanable dirty section (below ``until``) calls for a pass: its
        ratio, or its oldest segment past ``max.compaction.lag.ms``."""
        first_dirty = max(log.cleaner_offset, log.log_start_offset)
        if until <= first_dirty:
            return False
        if self.dirty_ratio(log, until_offset=until) >= log.config.min_cleanable_dirty_ratio:
            return True
        return self._compaction_overdue(log, first_dirty, now_ms)

    def first_uncleanable_offset(self, log: PartitionLog, now_ms: int) -> int:
        """Where cleanable records end: the active segment, or the first closed segment
        holding a record younger than ``min.compaction.lag.ms``."""
        until = log.active_segment.base_offset
        lag_ms = log.config.min_compaction_lag_ms
        if lag_ms > 0:
            for segment in self._closed_segments(log):
                if segment.max_timestamp > now_ms - lag_ms:
                    return min(until, segment.base_offset)
        return until

    def _compaction_overdue(self, log: PartitionLog, first_dirty: int, now_ms: int) -> bool:
        """Whether the first dirty closed segment began over ``max.compaction.lag.ms`` ago
        (judged, as Kafka does, by its first batch's timestamp)."""
        lag_ms = log.config.max_compaction_lag_ms
        for segment in self._closed_segments(log):
            if segment.next_offset <= first_dirty:
                continue
            first = next(segment.scan(), None)
            return first is not None and now_ms - first.max_timestamp >= lag_ms
        return False

    def compact(
        self, log: PartitionLog, *, upper_bound_offset: int | None = None
    ) -> CleanStats | None:
        """Run one compaction pass on this thread; None when there is nothing to clean.

        Only records below ``upper_bound_offset`` (the high watermark) enter the
        offset map, so an unreplicated record never displaces a committed one.
        """
        job = self.prepare_compaction(log, upper_bound_offset=upper_bound_offset)
        if job is None:
            return None
        self.run_compaction(job)
        return self.finish_compaction(log, job)

    def prepare_compaction(
        self,
        log: PartitionLog,
        *,
        upper_bound_offset: int | None = None,
        only_if_needed: bool = False,
    ) -> CompactionJob | None:
        """On the log owner's thread: what one pass will read, for :meth:`run_compaction`.

        None when the log is not compacted. With ``only_if_needed``, a log whose
        cleanable dirty section is not due (its ratio, ``max.compaction.lag.ms``) gets a
        tombstones-only job: whether an expired tombstone calls for a pass anyway is
        checked by the job, off the owner's thread. Nothing at or past the log's first
        unstable offset (an open transaction) is mapped.
        """
        if not log.config.compact:
            return None
        now_ms = log.clock_ms()
        until = self.first_uncleanable_offset(log, now_ms)
        due = self._due(log, until, now_ms)
        bound = until if upper_bound_offset is None else min(until, upper_bound_offset)
        unstable = log.first_unstable_offset()
        if unstable is not None:
            bound = min(bound, unstable)
        return CompactionJob(
            directory=log.directory,
            config=log.config,
            first_dirty=max(log.cleaner_offset, log.log_start_offset),
            bound=bound,
            now_ms=now_ms,
            views=_views(log),
            truncations=log.truncations,
            tombstones_only=only_if_needed and not due,
            txn_indexes=txn_views(log),
        )

    def run_compaction(self, job: CompactionJob) -> None:
        """Build the offset map and write the cleaned segments; any thread.

        Reads the closed segments only through the job's duplicated descriptors and
        writes only its own ``.cleaned`` segments, so the owner goes on appending,
        reading and even truncating meanwhile (:meth:`finish_compaction` then finds
        out). Setting ``job.abort`` stops it at the next batch.
        """
        try:
            if job.tombstones_only and not _has_expired_tombstones(
                job.views, job.now_ms, job.abort
            ):
                return
            offset_map, clean_until = self._build_offset_map(job)
            if clean_until <= job.first_dirty:
                if not _has_expired_tombstones(job.views, job.now_ms, job.abort):
                    return
                clean_until = job.first_dirty
            job.clean_until = clean_until
            for group in _groups(job.views, clean_until, job.config.segment_bytes):
                cleaned = self._clean_group(job, group, offset_map)
                job.cleaned.append((cleaned, group))
        except BaseException:
            job.discard()
            raise
        finally:
            _close_views(job.views)
            close_txn_views(job.txn_indexes)

    def finish_compaction(self, log: PartitionLog, job: CompactionJob) -> CleanStats | None:
        """On the log owner's thread: swap every cleaned segment in, if they still apply
        (see :meth:`install_next_group`), and move the cleaner offset."""
        while self.install_next_group(log, job):
            pass
        return self.conclude(log, job)

    def install_next_group(self, log: PartitionLog, job: CompactionJob) -> bool:
        """On the log owner's thread: swap the next cleaned segment in; False when none is left.

        A cleaned segment applies while the log is open, was not truncated since the
        job was prepared, and still holds every segment the job read; otherwise every
        cleaned segment left is deleted and the pass is dropped. The owner's thread is
        the only one that changes the segment map, so reads see either the old
        segments or the new one. Each swap fsyncs the directory: an owner that serves
        others (the broker) goes back to them between groups.
        """
        if not job.cleaned:
            return False
        segments = set() if log.closed else set(map(id, log.segments))
        cleaned, group = job.cleaned.pop(0)
        if log.truncations != job.truncations or not all(
            id(view.segment) in segments and view.segment.size_bytes == view.size_bytes
            for view in job.views
            if view.base_offset >= group[0].base_offset
        ):
            logger.info("%s changed while it was cleaned; the pass is dropped", job.directory)
            cleaned.delete_files()
            job.discard()
            return False
        try:
            self.on_step("cleaned-filled")
            log.replace_segments(cleaned, [view.segment for view in group], self.on_step)
        except BaseException:
            # From the .swap rename on, the swap is committed: recovery completes it.
            if cleaned.state == CLEANED_SUFFIX:
                cleaned.delete_files()
            job.discard()
            raise
        return True

    def conclude(self, log: PartitionLog, job: CompactionJob) -> CleanStats | None:
        """After the last group: move the cleaner offset and write the checkpoint. None when
        the pass found nothing to clean or was dropped."""
        if job.clean_until is None:
            return None
        log.cleaner_offset = max(log.cleaner_offset, job.clean_until)
        log.write_checkpoint()
        log.delete_expired_files()
        stats = job.stats
        return CleanStats(
            stats.segments,
            stats.read,
            stats.written,
            stats.removed,
            job.first_dirty,
            job.clean_until,
        )

    def _build_offset_map(self, job: CompactionJob) -> tuple[OffsetMap, int]:
        """Map keys from the first dirty offset until the map is full or the bound is reached.

        Returns the map and the offset where mapping stopped: records from there on
        are not in the map, so the clean keeps them, and the next pass starts there.
        A batch that inflates past the cleaner's limit maps the keys read before the
        limit: it is kept whole by the clean, so every offset it maps survives.
        """
        offset_map = OffsetMap(self.keys_max)
        first_dirty, bound = job.first_dirty, job.bound
        clean_until = first_dirty
        aborted = AbortedBatches(collect_aborted(job.txn_indexes, first_dirty, bound))
        for view in job.views:
            if view.next_offset <= first_dirty:
                continue
            if view.base_offset >= bound:
                break
            for header, data in view.iter_batches(job.abort):
                if aborted.is_aborted(header) or header.is_control:
                    continue  # an aborted transaction's records never stand for their key
                try:
                    for record in self.records_of(header, data, with_data=False):
                        offset = header.base_offset + record.offset_delta
                        if offset < first_dirty or record.key is None:
                            continue
                        if offset >= bound or not offset_map.put(record.key, offset):
                            return offset_map, clean_until
                        clean_until = offset + 1
                except DecompressionLimitError:
                    continue
            clean_until = max(clean_until, min(view.next_offset, bound))
        return offset_map, clean_until

    def records_of(
        self, header: BatchHeader, data: bytes, *, with_data: bool
    ) -> Iterator[RawRecord]:
        """The records of one batch read on its own (``data`` starts at the batch)."""
        return iter_raw_records(
            data,
            header._replace(position=0),
            decompressed_bytes_max=self.batch_decompressed_bytes_max,
            with_data=with_data,
        )

    def _clean_group(
        self, job: CompactionJob, group: list[_SegmentView], offset_map: OffsetMap
    ) -> Segment:
        base = group[0].base_offset
        for suffix in SEGMENT_SUFFIXES:
            segment_path(job.directory, base, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
        cleaned = Segment.open(job.directory, base, job.config, state=CLEANED_SUFFIX)
        try:
            self._fill_cleaned(job, cleaned, group, offset_map)
            bases = {view.base_offset for view in group}
            cleaned.txn_index.append_all(entries_of(job.txn_indexes, bases))
            cleaned.flush()  # here, so the swap on the owner's thread waits for no fsync
        except BaseException:
            cleaned.delete_files()
            raise
        return cleaned

    def _fill_cleaned(
        self,
        job: CompactionJob,
        cleaned: Segment,
        group: list[_SegmentView],
        offset_map: OffsetMap,
    ) -> None:
        cleaned.make_active()
        cleaned.next_offset = cleaned.base_offset
        stats = job.stats
        end = group[-1].next_offset
        aborted = AbortedBatches(collect_aborted(job.txn_indexes, group[0].base_offset, end))
        for view in group:
            stats.segments += 1
            stats.read += view.size_bytes
            for header, data in view.iter_batches(job.abort):
                if aborted.is_aborted(header):
                    stats.removed += header.records_count
                    continue
                out, kept = self._filter_batch(header, data, offset_map, job)
                stats.removed += header.records_count - kept
                if out is not None:
                    cleaned.append(out, [parse_header(out)], job.now_ms)
                    stats.written += len(out)

    def _filter_batch(
        self, header: BatchHeader, data: bytes, offset_map: OffsetMap, job: CompactionJob
    ) -> tuple[bytes | None, int]:
        """The batch's retained bytes (None when nothing stays) and the count kept.

        A batch that inflates past ``batch_decompressed_bytes_max`` is kept whole, as
        it is, with a warning: compacting it would hold more than the bound.
        """
        if header.is_control:
            return data, header.records_count
        try:
            kept = self._kept_records(header, data, offset_map, job.now_ms)
        except DecompressionLimitError as exc:
            logger.warning(
                "%s: the batch at offset %d is kept uncompacted: %s (the cleaner's "
                "decompression limit is %d bytes)",
                job.directory,
                header.base_offset,
                exc,
                self.batch_decompressed_bytes_max,
            )
            return data, header.records_count
        horizon = header.delete_horizon_ms
        # A horizon stays exactly as long as the batch holds a tombstone.
        if kept.has_tombstone:
            new_horizon = (
                horizon if horizon is not None else job.now_ms + job.config.delete_retention_ms
            )
        else:
            new_horizon = None
        if kept.count == header.records_count and new_horizon == horizon:
            return data, kept.count
        if not kept.count:
            return None, 0
        return _reencode(header, kept, new_horizon), kept.count

    def _kept_records(
        self, header: BatchHeader, data: bytes, offset_map: OffsetMap, now_ms: int
    ) -> _Kept:
        """Stream the batch's records and keep those the map and the horizon allow."""
        horizon = header.delete_horizon_ms
        kept = _Kept()
        for record in self.records_of(header, data, with_data=True):
            if record.key is None:
                continue
            offset = header.base_offset + record.offset_delta
            latest = offset_map.latest(record.key)
            if latest is not None and latest > offset:
                continue
            if record.is_tombstone and horizon is not None and now_ms >= horizon:
                continue
            kept.add(record, header.base_timestamp + record.timestamp_delta)
        return kept


def _reencode(header: BatchHeader, kept: _Kept, new_horizon: int | None) -> bytes:
    """The kept records as one batch with the original's offsets, producer fields and codec.

    Record timestamps are deltas from the base timestamp, which is the delete horizon
    while there is one: when the horizon comes or goes, every delta moves with it.
    """
    old_base = header.base_timestamp
    if new_horizon is not None:
        new_base = new_horizon
    elif header.delete_horizon_ms is not None:
        new_base = kept.first_timestamp
    else:
        new_base = old_base
    body = kept.body
    if new_base != old_base:
        body = bytearray()
        for data in _split_records(kept.body):
            body += rebase_record(data, old_base - new_base)
    log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    return encode_batch_body(
        body,
        records_count=kept.count,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=new_base,
        max_timestamp=header.max_timestamp if log_append_time else kept.max_timestamp,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        delete_horizon_ms=new_horizon,
    )


def _split_records(body: bytearray) -> Iterator[bytes]:
    """The encodings of the records in ``body``, one after another."""
    position = 0
    while position < len(body):
        length, start = decode_varint(body, position, len(body))
        yield bytes(body[position : start + length])
        position = start + length


@dataclass(slots=True)
class _Kept:
    """What a filtered batch keeps: its records' encodings back to back, and a summary."""

    body: bytearray = field(default_factory=bytearray)
    count: int = 0
    has_tombstone: bool = False
    first_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP

    def add(self, record: RawRecord, timestamp: int) -> None:
        self.body += record.data
        if not self.count:
            self.first_timestamp = timestamp
        self.count += 1
        self.has_tombstone = self.has_tombstone or record.is_tombstone
        self.max_timestamp = max(self.max_timestamp, timestamp)


class CleaningAbortedError(Exception):
    """The job's ``abort`` was set: the pass stopped and wrote nothing that stays."""


@dataclass(frozen=True, slots=True)
class _SegmentView:
    """A closed segment as a compaction job reads it: a duplicate of its ``.log``
    descriptor and its size when the job was prepared. ``segment`` is only compared
    by identity on the owner's thread; the job never calls it."""

    segment: Segment
    base_offset: int
    next_offset: int
    size_bytes: int
    index_entries: int
    index_entries_max: int
    descriptor: int
    path: Path

    def iter_batches(self, abort: threading.Event) -> Iterator[tuple[BatchHeader, bytes]]:
        for header in self.scan(abort):
            yield header, os.pread(self.descriptor, header.size_bytes, header.position)

    def scan(self, abort: threading.Event) -> Iterator[BatchHeader]:
        for header in scan_batches(self.descriptor, self.path, 0, self.size_bytes):
            if abort.is_set():
                raise CleaningAbortedError(f"cleaning {self.path} was aborted")
            yield header


@dataclass(slots=True)
class CompactionJob:
    """One compaction pass: prepared on the log owner's thread
    (:meth:`Cleaner.prepare_compaction`), run on any thread
    (:meth:`Cleaner.run_compaction`), installed on the owner's thread
    (:meth:`Cleaner.finish_compaction`). The job owns its duplicated descriptors and
    its ``.cleaned`` segments until they are swapped in or discarded."""

    directory: Path
    config: LogConfig
    first_dirty: int
    bound: int
    now_ms: int
    views: list[_SegmentView]
    truncations: int
    tombstones_only: bool
    txn_indexes: list[TxnIndexView] = field(default_factory=list)
    """Every segment's transaction index with entries, the active one's too."""
    abort: threading.Event = field(default_factory=threading.Event)
    clean_until: int | None = None
    cleaned: list[tuple[Segment, list[_SegmentView]]] = field(default_factory=list)
    stats: _Counters = field(default_factory=lambda: _Counters())

    def discard(self) -> None:
        """Delete the cleaned segments not swapped in; the log stays as it was."""
        for cleaned, _ in self.cleaned:
            try:
                cleaned.delete_files()
            except OSError:
                logger.exception("removing %s", cleaned.log_path)
        self.cleaned.clear()
        self.clean_until = None


def _views(log: PartitionLog) -> list[_SegmentView]:
    """The log's closed segments, each with a duplicate of its descriptor."""
    return [
        _SegmentView(
            segment,
            segment.base_offset,
            segment.next_offset,
            segment.size_bytes,
            max(segment.offset_index.entries, segment.time_index.entries),
            segment.offset_index.max_entries,
            os.dup(segment.descriptor),
            segment.log_path,
        )
        for segment in log.segments
        if segment is not log.active_segment
    ]


def _close_views(views: list[_SegmentView]) -> None:
    for view in views:
        os.close(view.descriptor)


def _has_expired_tombstones(views: list[_SegmentView], now_ms: int, abort: threading.Event) -> bool:
    """Whether a clean would drop a tombstone whose delete horizon has passed."""
    for view in views:
        for header in view.scan(abort):
            horizon = header.delete_horizon_ms
            if horizon is not None and horizon <= now_ms:
                return True
    return False


def _groups(
    views: list[_SegmentView], clean_until: int, segment_bytes: int
) -> list[list[_SegmentView]]:
    """Consecutive closed segments whose merge fits one segment and its indexes."""
    groups: list[list[_SegmentView]] = []
    current: list[_SegmentView] = []
    size = entries = 0
    for view in views:
        if view.base_offset >= clean_until:
            break
        view_entries = view.index_entries + 1
        fits = (
            size + view.size_bytes <= segment_bytes
            and entries + view_entries <= view.index_entries_max
            and view.next_offset - (current[0].base_offset if current else 0) - 1 <= INT32_MAX
        )
        if current and not fits:
            groups.append(current)
            current, size, entries = [], 0, 0
        current.append(view)
        size += view.size_bytes
        entries += view_entries
    if current:
        groups.append(current)
    return groups


@dataclass(slots=True)
class _Counters:
    segments: int = 0
    read: int = 0
    written: int = 0
    removed: int = 0
