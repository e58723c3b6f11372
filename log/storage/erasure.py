"""Erasure: records emptied in place, on every reader's view of the log.

An erased record keeps its offset, timestamp and key; its value becomes null and its
headers one :data:`ERASED_HEADER`, so a consumer, a replay reading the files and a
follower fetching all see that it was there and not what it said. Each segment that
holds one is rewritten the way compaction rewrites segments (the batches re-encoded by
the cleaner's own encoder, with their offsets, producer fields and codec) and swapped
in by :meth:`PartitionLog.replace_segments`, so a crash leaves the old segment or the
new one. It runs on the log owner's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.log.storage.cleaner import (
    Cleaner,
    _close_views,
    _Kept,
    _reencode,
    _SegmentView,
    _views,
)
from eventplatform.log.storage.errors import DecompressionLimitError
from eventplatform.log.storage.files import CLEANED_SUFFIX, segment_path
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import (
    BatchHeader,
    RawRecord,
    Record,
    encode_record,
    parse_header,
)
from eventplatform.log.storage.segment import Segment


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


def erase_records(cleaner: Cleaner, log: PartitionLog, offsets: Iterable[int]) -> int:
    """Empty the records at ``offsets`` in place, on the log owner's thread; how many.

    An erased record keeps its offset, timestamp and key; its value becomes null and
    its headers one :data:`ERASED_HEADER`, so every reader (a consumer, a replay
    reading the files, a follower fetching) sees that it was there and not what it
    said. Each segment holding one is rewritten as compaction rewrites segments and
    swapped in by :meth:`PartitionLog.replace_segments`, so a crash leaves the old
    segment or the new one. The active segment is rolled first when it holds one.
    Offsets outside the log, of control records or of records erased before are left
    alone (a segment holding only those is not rewritten). A batch that
    inflates past ``batch_decompressed_bytes_max`` cannot be rewritten:
    :class:`ErasureError`, before anything changes in its segment.
    """
    targets = sorted({o for o in offsets if log.log_start_offset <= o < log.log_end_offset})
    if not targets:
        return 0
    active = [o for o in targets if o >= log.active_segment.base_offset]
    if active and not _all_erased(log, active):
        log.roll()
    elif active:
        targets = [o for o in targets if o < log.active_segment.base_offset]
    erased = 0
    views = _views(log)
    try:
        for view in views:
            inside = [o for o in targets if view.base_offset <= o < view.next_offset]
            if not inside:
                continue
            rewritten, count = _erase_segment(cleaner, log, view, set(inside))
            if count:
                log.replace_segments(rewritten, [view.segment], cleaner.on_step)
                erased += count
            else:
                rewritten.delete_files()
    finally:
        _close_views(views)
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
    cleaner: Cleaner, log: PartitionLog, view: _SegmentView, offsets: set[int]
) -> tuple[Segment, int]:
    base = view.base_offset
    for suffix in (".log", ".index", ".timeindex"):
        segment_path(log.directory, base, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
    rewritten = Segment.open(log.directory, base, log.config, state=CLEANED_SUFFIX)
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
            rewritten.append(out, [parse_header(out)], log.clock_ms())
            erased += count
        rewritten.flush()
    except BaseException:
        rewritten.delete_files()
        raise
    return rewritten, erased


def _erase_batch(
    cleaner: Cleaner, header: BatchHeader, data: bytes, offsets: set[int]
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
