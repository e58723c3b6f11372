"""One log segment: a ``.log`` file of whole record batches and its indexes.

The ``.log`` file is a plain concatenation of RecordBatch v2 batches (see
:mod:`eventplatform.log.storage.record_batch`), in strictly increasing offset
order, starting at or after the segment's base offset. Every
``index.interval.bytes`` of appended data the segment adds an
:class:`OffsetIndex` entry for the batch's base offset and a
:class:`TimeIndex` entry when the max timestamp grew. Its
:class:`~eventplatform.log.storage.txn_index.TransactionIndex` lists the
aborted transactions whose marker it holds; the partition adds to it.

A segment is owned by one :class:`PartitionLog`; it is not thread-safe. Data
below ``size_bytes`` never changes except through :meth:`truncate_to`, so a
slice returned by :meth:`read` stays valid while the file is open.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from eventplatform.log.invariants import InvariantError, require
from eventplatform.log.storage.compression import DECOMPRESSED_BYTES_MAX
from eventplatform.log.storage.config import INT32_MAX, LogConfig
from eventplatform.log.storage.errors import CorruptRecordError, KafkaStorageError
from eventplatform.log.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from eventplatform.log.storage.index import OffsetIndex, TimeIndex
from eventplatform.log.storage.record_batch import (
    HEADER_BYTES,
    BatchHeader,
    TimestampType,
    iter_raw_records,
    parse_header,
    verify_crc,
)
from eventplatform.log.storage.txn_index import TransactionIndex

logger = logging.getLogger(__name__)

SCAN_CHUNK_BYTES = 64 * 1024
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """``length`` bytes at ``position`` of an open segment: whole batches, ready for sendfile.
    ``end_offset`` is the offset after the last of them (-1 when not known)."""

    descriptor: int
    position: int
    length: int
    first_offset: int
    end_offset: int = -1

    def read_bytes(self) -> bytes:
        return os.pread(self.descriptor, self.length, self.position)


class Segment:
    """See the module docstring. Create with :meth:`open`."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, state: str) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.state = state
        self.config = config
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX, state)
        self.descriptor = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self.descriptor).st_size
        self.offset_index = OffsetIndex(
            segment_path(directory, base_offset, INDEX_SUFFIX, state),
            base_offset,
            max_bytes=config.segment_index_bytes,
            writable=False,
        )
        self.time_index = TimeIndex(
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX, state),
            base_offset,
            max_bytes=config.segment_index_bytes,
            writable=False,
        )
        self.txn_index = TransactionIndex(
            segment_path(directory, base_offset, TXN_INDEX_SUFFIX, state)
        )
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_index_entry = 0
        self.rolling_base_ms: int | None = None

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, config: LogConfig, *, state: str = ""
    ) -> Segment:
        return cls(directory, base_offset, config, state)

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    # ------------------------------------------------------------ writing

    def make_active(self) -> None:
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def should_roll(self, *, incoming_bytes: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's roll rules: size, age, a full index, or a relative offset that would not fit."""
        if self.is_empty:
            return False
        if self.size_bytes + incoming_bytes > self.config.segment_bytes:
            return True
        if (
            self.rolling_base_ms is not None
            and now_ms - self.rolling_base_ms >= self.config.roll_ms
        ):
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > INT32_MAX

    def append(
        self, buffer: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int
    ) -> None:
        """Append whole, already stamped batches; ``headers`` describe them in order."""
        if headers[0].base_offset < self.next_offset:
            raise InvariantError("segment offsets must increase")
        # room for the entries this append may add, before its data: see index.py
        self.offset_index.reserve(len(headers))
        self.time_index.reserve(len(headers))
        written = os.write(self.descriptor, buffer)
        if written != len(buffer):  # formatting the message on every append costs more
            written += self._write_rest(memoryview(buffer)[written:])
        position = self.size_bytes
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        for header in headers:
            self._index_batch(header, position + header.position)
        self.size_bytes += written
        self.next_offset = headers[-1].next_offset

    def _write_rest(self, rest: memoryview) -> int:
        """After a short write: write the rest, or cut the file back to ``size_bytes`` and
        raise KafkaStorageError (a full disk). The file is append-only, so a torn batch
        left at its end would sit under the next append's index positions."""
        written = 0
        try:
            while written < len(rest):
                count = os.write(self.descriptor, rest[written:])
                if count == 0:
                    raise OSError(f"a write of {len(rest) - written} bytes wrote nothing")
                written += count
        except OSError as exc:
            self._cut_torn_tail()
            raise KafkaStorageError(f"{self.log_path}: a write failed part-way: {exc}") from exc
        return written

    def _cut_torn_tail(self) -> None:
        """Drop the bytes past ``size_bytes``; when even that fails, the log stays offline
        and recovery at the next start truncates them (they fail the batch checks)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.descriptor, self.size_bytes)

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self.bytes_since_index_entry > self.config.index_interval_bytes:
            # The indexes are sparse: when one is full (a merged, cleaned segment) a
            # skipped entry only lengthens the scan after a lookup.
            if not self.offset_index.is_full:
                self.offset_index.append(header.base_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += header.size_bytes

    def flush(self) -> None:
        os.fsync(self.descriptor)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def sync_descriptors(self) -> tuple[int, int, int]:
        """New descriptors of the files an fsync of this segment covers (the log and both
        indexes), for another thread; the caller closes them."""
        opened: list[int] = []
        try:
            opened.append(os.dup(self.descriptor))
            opened.append(self.offset_index.open_for_sync())
            opened.append(self.time_index.open_for_sync())
        except BaseException:
            for descriptor in opened:
                os.close(descriptor)
            raise
        return opened[0], opened[1], opened[2]

    def seal(self) -> None:
        """Stop being the active segment: record the final max timestamp and trim the indexes."""
        if self.max_timestamp != NO_TIMESTAMP and not self.time_index.is_full:
            self.time_index.make_writable()
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.seal()
        self.time_index.seal()

    def close(self) -> None:
        if self.descriptor < 0:
            return
        self.seal()
        self.offset_index.close()
        self.time_index.close()
        os.close(self.descriptor)
        self.descriptor = -1

    def release(self) -> None:
        """Close the files as they are, after a storage error: the indexes are trimmed
        if the disk allows, and nothing else is written. Recovery at the next open
        rebuilds what is missing."""
        if self.descriptor < 0:
            return
        for index in (self.offset_index, self.time_index):
            with contextlib.suppress(OSError):
                index.close()
        os.close(self.descriptor)
        self.descriptor = -1

    def rename(self, state: str) -> None:
        """Move every file to ``state`` (``""``, ``.cleaned``, ``.swap`` or ``.deleted``).

        The ``.txnindex`` moves first into ``.swap`` and last out of it, so a ``.log.swap``
        always has its transaction index beside it (recovery installs both), and a
        ``.txnindex.swap`` without one is that of a swap half installed: see
        :mod:`~eventplatform.log.storage.loader`."""
        suffixes = list(SEGMENT_SUFFIXES)
        if state == SWAP_SUFFIX:
            suffixes.remove(TXN_INDEX_SUFFIX)
            suffixes.insert(0, TXN_INDEX_SUFFIX)
        for suffix in suffixes:
            source = segment_path(self.directory, self.base_offset, suffix, self.state)
            if source.exists():
                source.rename(segment_path(self.directory, self.base_offset, suffix, state))
        self.state = state
        self.log_path = segment_path(self.directory, self.base_offset, LOG_SUFFIX, state)
        self.offset_index.path = segment_path(self.directory, self.base_offset, INDEX_SUFFIX, state)
        self.time_index.path = segment_path(
            self.directory, self.base_offset, TIME_INDEX_SUFFIX, state
        )
        self.txn_index.path = segment_path(
            self.directory, self.base_offset, TXN_INDEX_SUFFIX, state
        )

    def delete_files(self) -> None:
        self.close()
        for suffix in SEGMENT_SUFFIXES:
            segment_path(self.directory, self.base_offset, suffix, self.state).unlink(
                missing_ok=True
            )

    # ------------------------------------------------------------ reading

    def scan(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[BatchHeader]:
        """Yield batch headers from ``start_position`` with absolute positions; no CRC check.

        Stops at ``end_position`` (default: the end of the file). A header that
        does not parse or a batch that overruns the end raises CorruptRecordError.
        """
        end = self.size_bytes if end_position is None else end_position
        return scan_batches(self.descriptor, self.log_path, start_position, end)

    def find_batch(self, offset: int, end_position: int | None = None) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` and that starts before
        ``end_position`` (default: the end of the file), or None."""
        end = self.size_bytes if end_position is None else end_position
        for header in self._scan_indexed(lambda: self.offset_index.entry_at_or_before(offset)):
            if header.position >= end:
                return None
            if header.last_offset >= offset:
                return header
        return None

    def _scan_indexed(
        self,
        lookup: Callable[[], tuple[int, int] | None],
        start: int = 0,
        *,
        rebuilt: bool = False,
    ) -> Iterator[BatchHeader]:
        """Headers from the batch the offset index entry ``lookup()`` names, or from
        ``start`` when it names none past ``start``.

        An entry must name the start of a batch with the entry's offset. One that does
        not (a damaged file: it points inside a batch, past the file, or at another
        batch) would make a read answer the wrong batch or fail for good, so the
        indexes are rebuilt from the log (:meth:`rebuild_indexes`) and looked up again.
        """
        entry = lookup()
        if entry is None or entry[1] <= start:
            return self.scan(start)
        headers = self._scan_from_entry(entry)
        if headers is not None:
            return headers
        require(not rebuilt, f"{self.offset_index.path}: a rebuilt entry names no batch")
        self.rebuild_indexes(f"its entry for offset {entry[0]} names byte {entry[1]}")
        return self._scan_indexed(lookup, start, rebuilt=True)

    def _scan_from_entry(self, entry: tuple[int, int]) -> Iterator[BatchHeader] | None:
        """Headers from ``entry``'s position when a batch with its offset starts there."""
        offset, position = entry
        if not 0 <= position < self.size_bytes:
            return None
        headers = self.scan(position)
        try:
            first = next(headers, None)
        except CorruptRecordError:
            return None
        if first is None or first.base_offset != offset:
            return None
        return itertools.chain((first,), headers)

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> SegmentSlice | None:
        """Whole batches from the one containing ``offset``, at most ``max_bytes``.

        The first batch is returned whole even when it alone exceeds ``max_bytes``,
        so a consumer always makes progress. Batches at or past ``max_offset``
        (the high watermark) are never included. None when nothing qualifies.
        """
        end_position = self.size_bytes
        if max_offset is not None and max_offset < self.next_offset:
            bound = self.find_batch(max_offset)
            end_position = self.size_bytes if bound is None else bound.position
        first = self.find_batch(offset, end_position)
        if first is None or (max_offset is not None and first.base_offset >= max_offset):
            return None
        limit = min(end_position, first.position + max(max_bytes, first.size_bytes))
        end = first.position + first.size_bytes
        end_offset = first.next_offset
        if limit > end:
            # An index entry is a batch start, so everything before it is whole batches.
            start = end
            for header in self._scan_indexed(
                lambda: self.offset_index.entry_at_or_before_position(limit), start
            ):
                if header.position + header.size_bytes > limit:
                    end = max(end, header.position)
                    end_offset = max(end_offset, header.base_offset)  # the batch at ``end``
                    break
                end = header.position + header.size_bytes
                end_offset = header.next_offset
        return SegmentSlice(
            self.descriptor, first.position, end - first.position, first.base_offset, end_offset
        )

    def read_batch_bytes(self, header: BatchHeader) -> bytes:
        return os.pread(self.descriptor, header.size_bytes, header.position)

    def iter_batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        for header in self.scan():
            yield header, self.read_batch_bytes(header)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """First ``(offset, timestamp)`` at or after ``start_offset`` stamped >= ``timestamp``."""
        entry = self.time_index.entry_at_or_before(timestamp)
        if entry is not None and not self._time_entry_holds(entry):
            self.rebuild_indexes(f"its time index entry {entry} names no such batch")
            entry = self.time_index.entry_at_or_before(timestamp)
            require(entry is None or self._time_entry_holds(entry), "a rebuilt time entry lies")
        indexed_offset = self.base_offset if entry is None else entry[1]
        start = max(indexed_offset, start_offset)
        for header in self._scan_indexed(lambda: self.offset_index.entry_at_or_before(start)):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            found = _first_stamped_at_least(
                self.read_batch_bytes(header), header, timestamp, start_offset
            )
            if found is not None:
                return found
        return None

    def _time_entry_holds(self, entry: tuple[int, int]) -> bool:
        """Whether the batch at the entry's offset starts there and carries its timestamp:
        the time index records the max timestamp so far with the batch that reached it."""
        timestamp, offset = entry
        header = self.find_batch(offset)
        return header is not None and (header.base_offset, header.max_timestamp) == (
            offset,
            timestamp,
        )

    # ------------------------------------------------------------ recovery

    def load_tail(self) -> bool:
        """After a clean shutdown: find the next offset by scanning from the last index entry.

        Returns False when the indexes or the framing do not agree with the file,
        in which case the caller runs :meth:`recover`. Both indexes' last entries
        must name the batch they claim (Kafka's sanity check of index files on
        load); a damaged entry before them is found by the read that meets it.
        """
        if self.size_bytes and (self.offset_index.was_missing or self.time_index.was_missing):
            return False
        if not self.offset_index.is_sane(max(self.size_bytes, 1)):
            return False
        last = self.offset_index.last_entry()
        last_header = None
        try:
            headers = self.scan() if last is None else self._scan_from_entry(last)
            if headers is None:
                return False
            for header in headers:
                last_header = header
                self._note_max_timestamp(header)
        except CorruptRecordError:
            return False
        if last_header is not None:
            self.next_offset = last_header.next_offset
        entry = self.time_index.last_entry()
        if not self.time_index.is_sane(self.next_offset):
            return False
        if entry is not None:
            if not self._time_entry_holds(entry):
                return False
            if entry[0] > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = entry
        return True

    def _note_max_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset

    def recover(self, *, min_offset: int) -> int:
        """Re-check every batch by CRC, rebuild both indexes, truncate at the first bad byte.

        ``min_offset`` is the offset the first batch may not go below (the end of
        the previous segment). Returns the number of bytes truncated.
        """
        valid_end = self._reindex(min_offset=min_offset)
        truncated = self.size_bytes - valid_end
        if truncated:
            os.ftruncate(self.descriptor, valid_end)
            self.size_bytes = valid_end
        return truncated

    def rebuild_indexes(self, reason: str) -> None:
        """Rebuild both indexes from the log of an open segment whose index was found lying.

        The same CRC-checked walk as :meth:`recover`, but nothing is truncated: the
        segment is live and its batches were acknowledged. A log that itself fails the
        walk is damaged beyond its index: CorruptRecordError names the byte.
        """
        logger.warning("%s: rebuilding its indexes from the log: %s", self.log_path, reason)
        sealed = not self.offset_index.writable
        next_offset = self.next_offset
        valid_end = self._reindex(min_offset=self.base_offset)
        if sealed:
            self.seal()
        if valid_end != self.size_bytes or self.next_offset != next_offset:
            self.next_offset = next_offset
            raise CorruptRecordError(
                f"{self.log_path}: the batch at byte {valid_end} fails its check "
                "while rebuilding the indexes"
            )

    def _reindex(self, *, min_offset: int) -> int:
        """Empty both indexes and index every CRC-valid batch from the start, in order;
        returns the byte where the valid batches end."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = max(self.base_offset, min_offset)
        self.max_timestamp = NO_TIMESTAMP
        self.bytes_since_index_entry = 0
        valid_end = 0
        # Offsets may have gaps (compaction, or a replica of a compacted leader), so
        # only monotonicity is checked; baseOffset itself is outside the CRC.
        for header in self._iter_valid_batches():
            if (
                header.base_offset < self.next_offset
                or header.last_offset - self.base_offset > INT32_MAX
            ):
                break
            self._index_batch(header, header.position)
            self.next_offset = header.next_offset
            valid_end = header.position + header.size_bytes
        return valid_end

    def _iter_valid_batches(self) -> Iterator[BatchHeader]:
        position = 0
        while position + HEADER_BYTES <= self.size_bytes:
            head = os.pread(self.descriptor, HEADER_BYTES, position)
            try:
                header = parse_header(head)
            except CorruptRecordError:
                return
            if position + header.size_bytes > self.size_bytes:
                return
            data = os.pread(self.descriptor, header.size_bytes, position)
            try:
                verify_crc(data, header)
            except CorruptRecordError:
                return
            yield header._replace(position=position)
            position += header.size_bytes

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``. Returns the bytes removed."""
        header = self.find_batch(offset)
        if header is None:
            return 0
        removed = self.size_bytes - header.position
        os.ftruncate(self.descriptor, header.position)
        self.size_bytes = header.position
        self.offset_index.truncate_to_offset(header.base_offset)
        self.time_index.truncate_to_offset(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self.next_offset = header.base_offset if header.position else self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        for kept in self.scan():
            self._note_max_timestamp(kept)
        self.bytes_since_index_entry = self.config.index_interval_bytes + 1
        return removed


def scan_batches(descriptor: int, path: Path, start: int, end: int) -> Iterator[BatchHeader]:
    """The headers of the batches in ``[start, end)`` of an open ``.log`` file, with their
    absolute positions; see :meth:`Segment.scan`. Reads only through ``descriptor``, so
    another thread may scan a duplicate of it while the owner goes on."""
    position = start
    while position < end:
        chunk = os.pread(descriptor, min(SCAN_CHUNK_BYTES, end - position), position)
        cursor = 0
        while cursor + HEADER_BYTES <= len(chunk):
            header = parse_header(chunk, cursor)
            if position + cursor + header.size_bytes > end:
                raise CorruptRecordError(
                    f"{path}: batch at byte {position + cursor} overruns the segment"
                )
            yield header._replace(position=position + cursor)
            cursor += header.size_bytes
        if cursor == 0:
            raise CorruptRecordError(f"{path}: torn batch header at byte {position}")
        position += cursor


def _first_stamped_at_least(
    data: bytes, header: BatchHeader, timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    """The first ``(offset, timestamp)`` of the batch in ``data`` at or after
    ``start_offset`` stamped >= ``timestamp``; records are streamed, not kept."""
    verify_crc(data, header._replace(position=0))
    log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    for record in iter_raw_records(
        data,
        header._replace(position=0),
        decompressed_bytes_max=DECOMPRESSED_BYTES_MAX,
        with_data=False,
    ):
        offset = header.base_offset + record.offset_delta
        stamped = (
            header.max_timestamp
            if log_append_time
            else header.base_timestamp + record.timestamp_delta
        )
        if offset >= start_offset and stamped >= timestamp:
            return offset, stamped
    return None
