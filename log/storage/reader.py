"""Read-only, lock-free reads of one partition directory while its broker appends.

:class:`~eventplatform.log.storage.partition_log.PartitionLog` owns its
directory: it takes an exclusive lock and opens files for writing. Replay
reads the same files from other processes (Spark executors, a driver), so
:class:`PartitionReader` opens ``.log`` files read-only, never locks, and
expects the owner to change the directory under it:

- The active segment grows. Its last batch may be incomplete (a header or a
  body cut short by the end of the file): that batch is not there yet, and a
  read stops before it. An incomplete batch anywhere else, a bad magic or a
  failed CRC-32C is a :class:`CorruptRecordError` naming the file and byte.
- Its ``.index`` is preallocated with zeros past the last entry. A lookup
  treats a zero entry as unused (no real entry points at byte 0), and every
  index answer is checked against the batch it points at; a wrong or missing
  index only makes the read scan from the segment's start.
- Retention and compaction rename segments to ``.deleted`` / ``.swap`` and
  unlink them. A descriptor already open keeps reading the old file; a
  segment that vanishes between listing and opening makes the reader list
  the directory again and go on from the next offset it needs.

The log start offset is the larger of ``partition.checkpoint``'s (written on
DeleteRecords, retention and compaction, but it can lag) and the first live
segment's base offset. The log end offset is the offset after the last
complete batch. Nothing here caches state between calls, and nothing writes.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    parse_base_offset,
    read_checkpoint,
    segment_path,
)
from eventplatform.log.storage.record_batch import (
    HEADER_BYTES,
    BatchHeader,
    decode_batch,
    parse_header,
    read_offset_and_length,
    verify_crc,
)

READ_CHUNK_BYTES = 4 * 1024 * 1024
"""Bytes one ``pread`` asks for; a batch larger than this is read on its own."""
RELIST_ATTEMPTS_MAX = 100
"""Directory listings one read may take before a vanishing segment is an error."""
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_OFFSET_ENTRY = struct.Struct(">ii")
_CONTROL_KEY = struct.Struct(">hh")


class LogBounds(NamedTuple):
    """A partition's readable range: ``[log_start_offset, log_end_offset)``."""

    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class RawBatch:
    """One whole, CRC-checked batch. ``header.position`` is its byte in ``path``."""

    header: BatchHeader
    data: memoryview
    path: Path


class PartitionReader:
    """Reads one partition directory without owning it; see the module docstring.

    Safe to use from any thread or process alongside the broker; one instance
    is not shared between threads.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"PartitionReader({str(self.directory)!r})"

    # ------------------------------------------------------------ listing and bounds

    def segment_bases(self) -> list[int]:
        """Base offsets of the live segments, ascending (suffixed states are not live)."""
        try:
            names = [entry.name for entry in self.directory.iterdir()]
        except FileNotFoundError:
            raise CorruptRecordError(f"{self.directory}: no such partition directory") from None
        bases = []
        for name in names:
            if name.endswith(LOG_SUFFIX) and name.count(".") == 1:
                base = parse_base_offset(name)
                if base is not None:
                    bases.append(base)
        bases.sort()
        return bases

    def bounds(self) -> LogBounds:
        """The log start and end offsets as the files show them now."""
        for _ in range(RELIST_ATTEMPTS_MAX):
            bases = self.segment_bases()
            checkpoint = read_checkpoint(self.directory)
            recorded_start = checkpoint["log_start_offset"] if checkpoint else 0
            if not bases:
                return LogBounds(recorded_start, recorded_start)
            try:
                end = self._segment_end_offset(bases[-1])
            except FileNotFoundError:
                continue
            start = min(max(recorded_start, bases[0]), end)
            return LogBounds(start, end)
        raise CorruptRecordError(f"{self.directory}: segments keep vanishing while listed")

    def _segment_end_offset(self, base_offset: int) -> int:
        path = segment_path(self.directory, base_offset, LOG_SUFFIX)
        descriptor = os.open(path, os.O_RDONLY)
        try:
            end = base_offset
            position = _index_position(self.directory, base_offset, descriptor, 2**62)
            for batch in _read_batches(descriptor, path, position, tolerate_tail=True):
                end = batch.header.next_offset
            return end
        finally:
            os.close(descriptor)

    # ------------------------------------------------------------ batches

    def iter_batches(
        self, start_offset: int, end_offset: int, *, headers_only: bool = False
    ) -> Iterator[RawBatch]:
        """Every batch holding an offset in ``[start_offset, end_offset)``, in log order.

        The first batch may start below ``start_offset`` and the last may end
        past ``end_offset``: callers drop the records outside. Control and
        transactional batches are included; see :meth:`iter_visible_batches`.
        With ``headers_only`` the batches' bytes are neither read nor
        CRC-checked and ``data`` is empty: for cheap scans.
        """
        next_offset = start_offset
        last_listed = -1
        for _ in range(RELIST_ATTEMPTS_MAX):
            if next_offset >= end_offset:
                return
            bases = self.segment_bases()
            if not bases:
                return
            listed = self._read_listed(bases, next_offset, headers_only=headers_only)
            while True:
                try:
                    batch = next(listed)
                except StopIteration as stop:
                    vanished = bool(stop.value)
                    break
                if batch.header.base_offset >= end_offset:
                    listed.close()
                    return
                yield batch
                next_offset = batch.header.next_offset
                if next_offset >= end_offset:
                    listed.close()
                    return
            if not vanished:
                # Read to the end of the listing; a roll since then may have added a segment.
                if bases[-1] <= last_listed:
                    return
                last_listed = bases[-1]
        raise CorruptRecordError(f"{self.directory}: segments keep vanishing while read")

    def _read_listed(
        self, bases: list[int], offset: int, *, headers_only: bool
    ) -> Generator[RawBatch, None, bool]:
        """Batches from the listed segments at or after ``offset``; returns True when a
        segment vanished before it could be opened (the caller lists again)."""
        first = max(0, bisect.bisect_right(bases, offset) - 1)
        for slot in range(first, len(bases)):
            path = segment_path(self.directory, bases[slot], LOG_SUFFIX)
            try:
                descriptor = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return True
            try:
                position = _index_position(self.directory, bases[slot], descriptor, offset)
                active = slot == len(bases) - 1
                read = _read_headers if headers_only else _read_batches
                for batch in read(descriptor, path, position, tolerate_tail=active):
                    if batch.header.last_offset >= offset:
                        yield batch
                        offset = batch.header.next_offset
            finally:
                os.close(descriptor)
        return False

    def iter_visible_batches(
        self, start_offset: int, end_offset: int, *, stable_offset: int | None = None
    ) -> Iterator[RawBatch]:
        """The batches a read-committed consumer would see in the range.

        Control batches are dropped. A transactional batch is held until its
        producer's marker: a commit releases it, an abort drops it. Markers
        past ``end_offset`` are looked for up to ``stable_offset`` (the high
        watermark; by default the log end offset); a transaction still open
        there is not visible yet.
        """
        pending: dict[int, list[RawBatch]] = {}
        for batch in self.iter_batches(start_offset, end_offset):
            header = batch.header
            if header.is_control:
                held = pending.pop(header.producer_id, [])
                if _control_type(batch) == CONTROL_COMMIT:
                    yield from held
            elif header.is_transactional:
                pending.setdefault(header.producer_id, []).append(batch)
            else:
                yield batch
        if pending:
            stable = self.bounds().log_end_offset if stable_offset is None else stable_offset
            for producer_id, committed in self._find_markers(set(pending), end_offset, stable):
                if committed:
                    yield from pending[producer_id]

    def _find_markers(
        self, producer_ids: set[int], start_offset: int, end_offset: int
    ) -> Iterator[tuple[int, bool]]:
        for batch in self.iter_batches(start_offset, end_offset):
            header = batch.header
            if header.is_control and header.producer_id in producer_ids:
                producer_ids.discard(header.producer_id)
                yield header.producer_id, _control_type(batch) == CONTROL_COMMIT
                if not producer_ids:
                    return

    # ------------------------------------------------------------ timestamps

    def offset_for_timestamp(
        self, timestamp_ms: int, *, start_offset: int, end_offset: int
    ) -> int | None:
        """The first offset in ``[start_offset, end_offset)`` stamped at or after
        ``timestamp_ms`` (ListOffsets semantics), or None when no record is that late.

        Only batch headers are read until one's max timestamp reaches the target.
        """
        for candidate in self.iter_batches(start_offset, end_offset, headers_only=True):
            header = candidate.header
            if header.is_control or header.max_timestamp < timestamp_ms:
                continue
            low = max(start_offset, header.base_offset)
            for batch in self.iter_batches(low, min(end_offset, header.next_offset)):
                for record in decode_batch(batch.data, check_crc=False).records:
                    if low <= record.offset < end_offset and record.timestamp >= timestamp_ms:
                        return record.offset
        return None


# ---------------------------------------------------------------- file helpers


def _read_batches(
    descriptor: int, path: Path, position: int, *, tolerate_tail: bool
) -> Iterator[RawBatch]:
    """Whole, CRC-checked batches from ``position`` to the end of the file.

    Reads ``READ_CHUNK_BYTES`` at a time. An incomplete batch at the end of the
    file ends the iteration when ``tolerate_tail`` is set, else it is corrupt.
    """
    while True:
        chunk = os.pread(descriptor, READ_CHUNK_BYTES, position)
        if not chunk:
            return
        view = memoryview(chunk)
        cursor = 0
        while len(chunk) - cursor >= HEADER_BYTES:
            size_bytes = read_offset_and_length(chunk, cursor)[1]
            if cursor + size_bytes > len(chunk):
                break
            header = _checked_header(chunk, cursor, path, position)
            yield RawBatch(
                header._replace(position=position + cursor),
                view[cursor : cursor + size_bytes],
                path,
            )
            cursor += size_bytes
        if cursor == 0:
            # Nothing whole fits in the chunk: a batch larger than a chunk, or the tail.
            big = _read_large_batch(descriptor, path, position, chunk, tolerate_tail=tolerate_tail)
            if big is None:
                return
            yield big
            cursor = len(big.data)
        position += cursor


def _read_headers(
    descriptor: int, path: Path, position: int, *, tolerate_tail: bool
) -> Iterator[RawBatch]:
    """Like :func:`_read_batches`, but reads headers only: no bodies, no CRC check."""
    file_bytes = os.fstat(descriptor).st_size
    empty = memoryview(b"")
    while True:
        head = os.pread(descriptor, HEADER_BYTES, position)
        if not head:
            return
        if len(head) == HEADER_BYTES:
            header = _checked_header(head, 0, path, position, check_crc=False)
            if position + header.size_bytes > file_bytes:
                file_bytes = os.fstat(descriptor).st_size
            if position + header.size_bytes <= file_bytes:
                yield RawBatch(header._replace(position=position), empty, path)
                position += header.size_bytes
                continue
        if tolerate_tail:
            return
        raise CorruptRecordError(f"{path}: record batch at byte {position} is incomplete")


def _read_large_batch(
    descriptor: int, path: Path, position: int, chunk: bytes, *, tolerate_tail: bool
) -> RawBatch | None:
    if len(chunk) >= HEADER_BYTES:
        header = _checked_header(chunk, 0, path, position, check_crc=False)
        data = os.pread(descriptor, header.size_bytes, position)
        if len(data) == header.size_bytes:
            header = _checked_header(data, 0, path, position)
            return RawBatch(header._replace(position=position), memoryview(data), path)
    if tolerate_tail:
        return None
    raise CorruptRecordError(f"{path}: record batch at byte {position} is incomplete")


def _checked_header(
    chunk: bytes, cursor: int, path: Path, chunk_position: int, *, check_crc: bool = True
) -> BatchHeader:
    try:
        header = parse_header(chunk, cursor)
        if check_crc:
            verify_crc(chunk, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{path}: record batch at byte {chunk_position + cursor}: {exc}"
        ) from exc
    return header


def _index_position(directory: Path, base_offset: int, log_descriptor: int, offset: int) -> int:
    """The byte of the last indexed batch at or before ``offset``, checked; else 0.

    The index may be live (preallocated, zeros past its entries), trimmed, or
    gone. An entry is trusted only if the log holds a batch with that base
    offset at that byte.
    """
    path = segment_path(directory, base_offset, INDEX_SUFFIX)
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        entries = os.fstat(descriptor).st_size // _OFFSET_ENTRY.size
        relative_target = offset - base_offset
        low, high, found = 0, entries - 1, None
        while low <= high:
            middle = (low + high) // 2
            raw = os.pread(descriptor, _OFFSET_ENTRY.size, middle * _OFFSET_ENTRY.size)
            if len(raw) < _OFFSET_ENTRY.size:
                high = middle - 1
                continue
            relative, position = _OFFSET_ENTRY.unpack(raw)
            if position > 0 and relative <= relative_target:
                found = (relative, position)
                low = middle + 1
            else:
                high = middle - 1
    finally:
        os.close(descriptor)
    if found is None:
        return 0
    head = os.pread(log_descriptor, 12, found[1])
    if len(head) < 12 or read_offset_and_length(head, 0)[0] != base_offset + found[0]:
        return 0
    return int(found[1])


def _control_type(batch: RawBatch) -> int:
    """The marker type of a control batch: abort (0) or commit (1)."""
    records = decode_batch(batch.data, check_crc=False).records
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"{batch.path}: control batch at byte {batch.header.position}")
    return int(_CONTROL_KEY.unpack_from(records[0].key)[1])
