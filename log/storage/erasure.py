"""Erasure: records emptied in place, on every reader's view of the log.

An erased record keeps its offset, timestamp and key; its value becomes null and its
headers one :data:`ERASED_HEADER`, so a consumer, a replay reading the files and a
follower fetching all see that it was there and not what it said. Each segment that
holds one is rewritten the way compaction rewrites segments (the batches re-encoded by
the cleaner's own encoder, with their offsets, producer fields and codec) and swapped
in by :meth:`PartitionLog.replace_segments`, so a crash leaves the old segment or the
new one. Like a compaction pass, it is prepared and installed on the log owner's thread
and the rewriting runs on any (:class:`ErasureJob`).

Transactions are left as they were: control batches (markers) are copied byte for byte
and never erased, a rewritten batch keeps its transactional attribute and producer
fields, and the rewritten segment's transaction index holds the entries of the one it
replaces (read when the job is prepared).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.log.storage.cleaner import (
    Cleaner,
    _close_views,
    _Kept,
    _reencode,
    _SegmentView,
    _views,
)
from eventplatform.log.storage.config import LogConfig
from eventplatform.log.storage.errors import DecompressionLimitError
from eventplatform.log.storage.files import CLEANED_SUFFIX, SEGMENT_SUFFIXES, segment_path
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import (
    BatchHeader,
    RawRecord,
    Record,
    encode_record,
    parse_header,
)
from eventplatform.log.storage.segment import Segment
from eventplatform.log.storage.txn_index import AbortedTransaction


class ErasureError(Exception):
    """A record that cannot be erased in place; nothing of its segment changed."""


def _erased_record(
    record: RawRecord, header: BatchHeader, offset: int, timestamp: int
) -> RawRecord:
    """``record`` with its value null and its headers replaced by :data:`ERASED_HEADER`;
    its offset, timestamp and key stay."""
    empty = Record(offset, timestamp, record.key, None, ((ERASED_HEADER, b""),))
    data = encode_record(empty, header.base_offset, header.base_timestamp)
    return RawRecord(record.offset_delta, record.timestamp_delta, record.key, True, data)


@dataclass
class ErasureJob:
    """One erasure of a partition's records: prepared on the log owner's thread
    (:func:`prepare_erasure`), its segments rewritten on any thread
    (:func:`run_erasure`), swapped in on the owner's thread (:func:`install_erasure`).
    The job owns its duplicated descriptors and its ``.cleaned`` segments until they
    are swapped in or discarded."""

    views: list[tuple[_SegmentView, frozenset[int]]]
    """Each segment holding targets, and the targets it holds."""
    config: LogConfig
    clock_ms: Callable[[], int]
    truncations: int
    aborted: dict[int, list[AbortedTransaction]] = field(default_factory=dict)
    """Each chosen segment's transaction index entries, by base offset."""
    rewritten: list[tuple[Segment, _SegmentView, int]] = field(default_factory=list)
    """Each rewritten segment, the segment it replaces and how many records it erased."""

    def discard(self) -> None:
        for rewritten, _, _ in self.rewritten:
            rewritten.delete_files()
        self.rewritten.clear()


def erase_records(cleaner: Cleaner, log: PartitionLog, offsets: Iterable[int]) -> int:
    """Empty the records at ``offsets`` in place, all on the calling thread (the log
    owner's); how many. The three steps it takes are :func:`prepare_erasure`,
    :func:`run_erasure` and :func:`install_erasure`, which an owner that serves others
    (the broker) runs apart, the middle one in a worker thread.

    An erased record keeps its offset, timestamp and key; its value becomes null and
    its headers one :data:`ERASED_HEADER`, so every reader (a consumer, a replay
    reading the files, a follower fetching) sees that it was there and not what it
    said. Each segment holding one is rewritten as compaction rewrites segments and
    swapped in by :meth:`PartitionLog.replace_segments`, so a crash leaves the old
    segment or the new one. The active segment is rolled first when it holds one.
    Offsets outside the log, of control records or of records erased before are left
    alone (a segment holding only those is not rewritten). A batch that inflates past
    ``batch_decompressed_bytes_max`` cannot be rewritten: :class:`ErasureError`,
    before anything changes.
    """
    job = prepare_erasure(log, offsets)
    if job is None:
        return 0
    run_erasure(cleaner, job)
    erased = install_erasure(cleaner, log, job)
    assert erased is not None, "nothing else changed the log meanwhile"
    return erased


def prepare_erasure(log: PartitionLog, offsets: Iterable[int]) -> ErasureJob | None:
    """On the log owner's thread: the segments to rewrite; None when no offset lies in
    the log. Rolls the active segment when it holds a record still to erase."""
    targets = sorted({o for o in offsets if log.log_start_offset <= o < log.log_end_offset})
    if not targets:
        return None
    active = [o for o in targets if o >= log.active_segment.base_offset]
    if active and not _all_erased(log, active):
        log.roll()
    elif active:
        targets = [o for o in targets if o < log.active_segment.base_offset]
    chosen = []
    for view in _views(log):
        inside = frozenset(o for o in targets if view.base_offset <= o < view.next_offset)
        if inside:
            chosen.append((view, inside))
        else:
            os.close(view.descriptor)
    if not chosen:
        return None
    aborted = {view.base_offset: list(view.segment.txn_index.entries()) for view, _ in chosen}
    return ErasureJob(chosen, log.config, log.clock_ms, log.truncations, aborted)


def run_erasure(cleaner: Cleaner, job: ErasureJob) -> None:
    """Write the rewritten segments; any thread. It reads the segments only through the
    job's duplicated descriptors and writes only its own ``.cleaned`` files."""
    try:
        for view, inside in job.views:
            rewritten, count = _erase_segment(cleaner, job, view, inside)
            if count:
                job.rewritten.append((rewritten, view, count))
            else:
                rewritten.delete_files()
    except BaseException:
        job.discard()
        raise
    finally:
        _close_views([view for view, _ in job.views])


def install_erasure(cleaner: Cleaner, log: PartitionLog, job: ErasureJob) -> int | None:
    """On the log owner's thread: swap the rewritten segments in; how many records they
    erased. None when the log changed meanwhile (closed, truncated, or a segment the
    job read is gone or grew): nothing is swapped in, and the erasure is to be prepared
    again."""
    segments = set() if log.closed else set(map(id, log.segments))
    if log.truncations != job.truncations or not all(
        id(view.segment) in segments and view.segment.size_bytes == view.size_bytes
        for _, view, _ in job.rewritten
    ):
        job.discard()
        return None
    erased = 0
    while job.rewritten:
        rewritten, view, count = job.rewritten.pop(0)
        try:
            log.replace_segments(rewritten, [view.segment], cleaner.on_step)
        except BaseException:
            # From the .swap rename on, the swap is committed: recovery completes it.
            if rewritten.state == CLEANED_SUFFIX:
                rewritten.delete_files()
            job.discard()
            raise
        erased += count
    return erased


def _all_erased(log: PartitionLog, offsets: list[int]) -> bool:
    """Whether every record at ``offsets`` (sorted) is erased already, or is a control
    record: then the active segment need not be rolled for them."""
    wanted = set(offsets)
    for record in log.iter_records(offsets[0], offsets[-1] + 1):
        if record.offset in wanted and not _is_erased(record):
            return False
    return True


def _is_erased(record: Record) -> bool:
    return record.value is None and record.headers == ((ERASED_HEADER, b""),)


def _erase_segment(
    cleaner: Cleaner, job: ErasureJob, view: _SegmentView, offsets: frozenset[int]
) -> tuple[Segment, int]:
    base = view.base_offset
    directory = view.path.parent
    for suffix in SEGMENT_SUFFIXES:
        segment_path(directory, base, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
    rewritten = Segment.open(directory, base, job.config, state=CLEANED_SUFFIX)
    erased = 0
    try:
        rewritten.make_active()
        rewritten.next_offset = base
        for header, data in view.iter_batches(threading.Event()):
            out, count = data, 0
            if not header.is_control and any(
                header.base_offset <= o <= header.last_offset for o in offsets
            ):
                out, count = _erase_batch(cleaner, header, data, offsets)
            rewritten.append(out, [parse_header(out)], job.clock_ms())
            erased += count
        rewritten.txn_index.append_all(job.aborted.get(base, []))
        rewritten.flush()
    except BaseException:
        rewritten.delete_files()
        raise
    return rewritten, erased


def _erase_batch(
    cleaner: Cleaner, header: BatchHeader, data: bytes, offsets: frozenset[int]
) -> tuple[bytes, int]:
    kept = _Kept()
    erased = 0
    try:
        for record in cleaner.records_of(header, data, with_data=True):
            offset = header.base_offset + record.offset_delta
            timestamp = header.base_timestamp + record.timestamp_delta
            if offset in offsets:
                emptied = _erased_record(record, header, offset, timestamp)
                if emptied.data != record.data:  # not erased before
                    record = emptied
                    erased += 1
            kept.add(record, timestamp)
    except DecompressionLimitError as exc:
        raise ErasureError(
            f"the batch at offset {header.base_offset} inflates past the cleaner's limit "
            f"of {cleaner.batch_decompressed_bytes_max} bytes: {exc}"
        ) from exc
    return _reencode(header, kept, header.delete_horizon_ms), erased
