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
4. Each group is installed by :meth:`PartitionLog.replace_segments`
   (``.cleaned`` -> ``.swap`` -> ``.deleted``), which recovery can finish or undo.

Runs on the log owner's thread, between appends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from eventplatform.log.storage.config import CLEANER_KEYS_MAX_DEFAULT, INT32_MAX
from eventplatform.log.storage.files import CLEANED_SUFFIX, segment_path
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import (
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    parse_header,
)
from eventplatform.log.storage.segment import Segment


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
    def __init__(
        self,
        *,
        keys_max: int = CLEANER_KEYS_MAX_DEFAULT,
        on_step: Callable[[str], None] = _never,
    ) -> None:
        self.keys_max = keys_max
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
        first_dirty = max(log.cleaner_offset, log.log_start_offset)
        until = self.first_uncleanable_offset(log, now_ms)
        if until > first_dirty:
            ratio = self.dirty_ratio(log, until_offset=until)
            if ratio >= log.config.min_cleanable_dirty_ratio:
                return True
            if self._compaction_overdue(log, first_dirty, now_ms):
                return True
        return self._has_expired_tombstones(log, now_ms)

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
        """Run one compaction pass; None when there is nothing to clean.

        Only records below ``upper_bound_offset`` (the high watermark) enter the
        offset map, so an unreplicated record never displaces a committed one.
        """
        if not log.config.compact:
            return None
        first_dirty = max(log.cleaner_offset, log.log_start_offset)
        now_ms = log.clock_ms()
        bound = self.first_uncleanable_offset(log, now_ms)
        if upper_bound_offset is not None:
            bound = min(bound, upper_bound_offset)
        offset_map, clean_until = self._build_offset_map(log, first_dirty, bound)
        if clean_until <= first_dirty:
            if not self._has_expired_tombstones(log, now_ms):
                return None
            clean_until = first_dirty
        stats = _Counters()
        for group in self._groups(log, clean_until):
            self._clean_group(log, group, offset_map, now_ms, stats)
        log.cleaner_offset = max(log.cleaner_offset, clean_until)
        log.write_checkpoint()
        log.delete_expired_files()
        return CleanStats(
            stats.segments, stats.read, stats.written, stats.removed, first_dirty, clean_until
        )

    def _build_offset_map(
        self, log: PartitionLog, first_dirty: int, bound: int
    ) -> tuple[OffsetMap, int]:
        """Map keys from ``first_dirty`` until the map is full or ``bound`` is reached.

        Returns the map and the offset where mapping stopped: records from there on
        are not in the map, so the clean keeps them, and the next pass starts there.
        """
        offset_map = OffsetMap(self.keys_max)
        clean_until = first_dirty
        for segment in self._closed_segments(log):
            if segment.next_offset <= first_dirty:
                continue
            if segment.base_offset >= bound:
                break
            for _, data in segment.iter_batches():
                for record in decode_batch(data, check_crc=False).records:
                    if record.offset < first_dirty or record.key is None:
                        continue
                    if record.offset >= bound or not offset_map.put(record.key, record.offset):
                        return offset_map, clean_until
                    clean_until = record.offset + 1
            clean_until = max(clean_until, min(segment.next_offset, bound))
        return offset_map, clean_until

    def _has_expired_tombstones(self, log: PartitionLog, now_ms: int) -> bool:
        """Whether a clean would drop a tombstone whose delete horizon has passed."""
        for segment in self._closed_segments(log):
            for header in segment.scan():
                horizon = header.delete_horizon_ms
                if horizon is not None and horizon <= now_ms:
                    return True
        return False

    def _groups(self, log: PartitionLog, clean_until: int) -> list[list[Segment]]:
        """Consecutive closed segments whose merge fits one segment and its indexes."""
        groups: list[list[Segment]] = []
        current: list[Segment] = []
        size = entries = 0
        for segment in self._closed_segments(log):
            if segment.base_offset >= clean_until:
                break
            segment_entries = max(segment.offset_index.entries, segment.time_index.entries) + 1
            fits = (
                size + segment.size_bytes <= log.config.segment_bytes
                and entries + segment_entries <= segment.offset_index.max_entries
                and segment.next_offset - (current[0].base_offset if current else 0) - 1
                <= INT32_MAX
            )
            if current and not fits:
                groups.append(current)
                current, size, entries = [], 0, 0
            current.append(segment)
            size += segment.size_bytes
            entries += segment_entries
        if current:
            groups.append(current)
        return groups

    def _clean_group(
        self,
        log: PartitionLog,
        group: list[Segment],
        offset_map: OffsetMap,
        now_ms: int,
        stats: _Counters,
    ) -> None:
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex"):
            segment_path(log.directory, base, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
        cleaned = Segment.open(log.directory, base, log.config, state=CLEANED_SUFFIX)
        try:
            self._fill_cleaned(log, cleaned, group, offset_map, now_ms, stats)
        except BaseException:
            cleaned.delete_files()
            raise
        self.on_step("cleaned-filled")
        log.replace_segments(cleaned, group, self.on_step)

    def _fill_cleaned(
        self,
        log: PartitionLog,
        cleaned: Segment,
        group: list[Segment],
        offset_map: OffsetMap,
        now_ms: int,
        stats: _Counters,
    ) -> None:
        cleaned.make_active()
        cleaned.next_offset = cleaned.base_offset
        for segment in group:
            stats.segments += 1
            stats.read += segment.size_bytes
            for header, data in segment.iter_batches():
                kept = self._filter_batch(
                    header, data, offset_map, now_ms, log.config.delete_retention_ms
                )
                stats.removed += header.records_count - kept[1]
                if kept[0] is not None:
                    out = kept[0]
                    cleaned.append(out, [parse_header(out)], now_ms)
                    stats.written += len(out)

    def _filter_batch(
        self,
        header: BatchHeader,
        data: bytes,
        offset_map: OffsetMap,
        now_ms: int,
        delete_retention_ms: int,
    ) -> tuple[bytes | None, int]:
        """The batch's retained bytes (None when nothing stays) and the count kept."""
        if header.is_control:
            return data, header.records_count
        batch = decode_batch(data, check_crc=False)
        horizon = header.delete_horizon_ms
        kept: list[Record] = []
        for record in batch.records:
            if record.key is None:
                continue
            latest = offset_map.latest(record.key)
            if latest is not None and latest > record.offset:
                continue
            if record.value is None and horizon is not None and now_ms >= horizon:
                continue
            kept.append(record)
        has_tombstone = any(record.value is None for record in kept)
        # A horizon stays exactly as long as the batch holds a tombstone.
        if has_tombstone:
            new_horizon = horizon if horizon is not None else now_ms + delete_retention_ms
        else:
            new_horizon = None
        if len(kept) == len(batch.records) and new_horizon == horizon:
            return data, len(kept)
        if not kept:
            return None, 0
        return (
            encode_batch(
                kept,
                base_offset=header.base_offset,
                last_offset_delta=header.last_offset_delta,
                compression=header.compression,
                timestamp_type=header.timestamp_type,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                partition_leader_epoch=header.partition_leader_epoch,
                is_transactional=header.is_transactional,
                delete_horizon_ms=new_horizon,
            ),
            len(kept),
        )


@dataclass(slots=True)
class _Counters:
    segments: int = 0
    read: int = 0
    written: int = 0
    removed: int = 0
