"""Sparse, memory-mapped segment indexes.

``OffsetIndex`` (``.index``): 8-byte entries, big-endian ``int32`` offset
relative to the segment's base and ``int32`` byte position of the batch that
starts at that offset. ``TimeIndex`` (``.timeindex``): 12-byte entries,
``int64`` timestamp and ``int32`` relative offset of the first batch whose
max timestamp reached it. Both are strictly increasing in every field.

While a segment is active its index files are sized to
``segment.index.bytes`` (sparse) and mapped; closing or sealing trims them to
their entries. A store to a page of a sparse map that no block backs yet takes
one from the file system, and when it has none the kernel kills the process
with SIGBUS. So the segment reserves the room its next entries need
(:meth:`_MappedIndex.reserve`, ``posix_fallocate`` by :data:`RESERVE_BYTES`)
before it writes an append's log data: a full file system fails the append
with an OSError, which takes the log offline, instead of the process.

Indexes are derived data: a missing or insane file is rebuilt from the log
(:meth:`Segment.recover`). An entry names the start of a batch whose base
offset is the entry's offset; lookups return entries as stored, and the segment
checks the batch an entry names before trusting it (a damaged file can hold any
bytes), rebuilding the index when it lies. One owner thread; reads and appends
must not run concurrently.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from eventplatform.log.invariants import InvariantError

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
RESERVE_BYTES = 64 * 1024
"""Index room is reserved this much at a time: one ``posix_fallocate`` per 8,192 offset
entries, about 32 MiB of log at the default ``index.interval.bytes``."""


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int]:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


class _MappedIndex:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, *, max_bytes: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        self.was_missing = not path.exists()
        self._closed = False
        with _opened(path) as descriptor:
            size = os.fstat(descriptor).st_size
        self.entries = size // self.entry.size
        self._map: mmap.mmap | None = None
        self._writable = False
        self._reserved = 0
        """Bytes from the file's start that blocks back: stores below it cannot fault."""
        if size % self.entry.size:
            self.entries = 0  # insane: the caller's sanity check sees it and rebuilds
            self._torn = True
        else:
            self._torn = False
        self._remap(writable)
        self._last = self._read_last()

    # ------------------------------------------------------------ lifecycle

    def _remap(self, writable: bool) -> None:
        """Size the file for ``writable`` and map it. The descriptor is closed again at
        once: the map keeps a duplicate of its own, and a second one per index would
        cost every partition two more of the process's open files."""
        if self._map is not None:
            self._map.close()
            self._map = None
        length = self.max_entries * self.entry.size if writable else self.entries * self.entry.size
        self._writable = writable
        self._reserved = self.entries * self.entry.size  # the entries' pages were stored to
        with _opened(self.path) as descriptor:
            os.ftruncate(descriptor, length)
            if not length:
                return
            self._map = mmap.mmap(descriptor, length)
            if writable:
                # Appends touch each page of a new, sparse index file once, in order; with
                # readahead every such page fault also maps and zero-fills the pages
                # around it, which made 100 partitions' produce half as fast as one's.
                self._map.madvise(mmap.MADV_RANDOM)

    def reserve(self, entries: int) -> None:
        """Make sure blocks back the next ``entries`` entries (up to the index's end), so
        storing them cannot fault; raises OSError (ENOSPC) when the file system has no
        room. A no-op but for every :data:`RESERVE_BYTES` of entries."""
        end = min(self.entries + entries, self.max_entries) * self.entry.size
        if not self._writable or end <= self._reserved:
            return
        limit = self.max_entries * self.entry.size
        target = min(limit, max(end, self._reserved + RESERVE_BYTES))
        with _opened(self.path) as descriptor:
            os.posix_fallocate(descriptor, self._reserved, target - self._reserved)
        self._reserved = target

    @property
    def writable(self) -> bool:
        """Whether the index takes appends (the active segment's, or one being rebuilt)."""
        return self._writable

    def make_writable(self) -> None:
        if not self._writable:
            self._remap(True)

    def seal(self) -> None:
        """Trim the file to its entries and stop accepting appends."""
        if self._writable:
            self.flush()
            self._remap(False)

    def flush(self) -> None:
        if self._map is not None:
            self._map.flush()

    def open_for_sync(self) -> int:
        """A new descriptor of the index file, which the caller closes: an fsync of it
        (in any thread) also writes back the mapped pages."""
        return os.open(self.path, os.O_RDONLY)

    def close(self) -> None:
        if self._closed:
            return
        self.seal()
        if self._map is not None:
            self._map.close()
            self._map = None
        self._closed = True

    def reset(self) -> None:
        """Drop every entry and leave the index writable, for a rebuild."""
        self.entries = 0
        self._torn = False
        self._remap(True)
        self._last = None

    def truncate_entries(self, entries: int) -> None:
        self.entries = entries
        if not self._writable:
            self._remap(False)
        self._last = self._read_last()

    def _read_last(self) -> tuple[int, int] | None:
        """The raw last entry; appends keep a copy so the hot path never reads the map."""
        return self._entry(self.entries - 1) if self.entries and self._map is not None else None

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _entry(self, slot: int) -> tuple[int, int]:
        assert self._map is not None
        result: tuple[int, int] = self.entry.unpack_from(self._map, slot * self.entry.size)
        return result

    def _append(self, first: int, second: int) -> None:
        if not self._writable or self._map is None or self.entries >= self.max_entries:
            raise InvariantError(f"{self.path}: append to a sealed or full index")
        at = self.entries * self.entry.size
        if at + self.entry.size > self._reserved:  # a rebuild or a cleaned segment's index
            self.reserve(1)
        self.entry.pack_into(self._map, at, first, second)
        self.entries += 1
        self._last = (first, second)

    def _last_slot_at_most(self, field: int, target: int) -> int:
        """Index of the last entry whose ``field`` is <= target, or -1."""
        low, high = 0, self.entries - 1
        found = -1
        while low <= high:
            middle = (low + high) // 2
            if self._entry(middle)[field] <= target:
                found = middle
                low = middle + 1
            else:
                high = middle - 1
        return found


class OffsetIndex(_MappedIndex):
    """Relative offset to file position; see the module docstring for the format."""

    entry = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        last = self._last
        if last is not None and (relative <= last[0] or position <= last[1]):
            raise InvariantError(f"{self.path}: index offsets and positions must increase")
        self._append(relative, position)

    def entry_at_or_before(self, offset: int) -> tuple[int, int] | None:
        """``(offset, position)`` of the last entry at or before ``offset``; None when none is.

        The entry is as stored: the caller checks the batch it names."""
        slot = self._last_slot_at_most(0, offset - self.base_offset)
        if slot < 0:
            return None
        relative, position = self._entry(slot)
        return self.base_offset + relative, position

    def entry_at_or_before_position(self, position: int) -> tuple[int, int] | None:
        """``(offset, position)`` of the last entry whose position is <= ``position``, or None."""
        slot = self._last_slot_at_most(1, position)
        if slot < 0:
            return None
        relative, entry_position = self._entry(slot)
        return self.base_offset + relative, entry_position

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry for offsets at or after ``offset``."""
        self.truncate_entries(self._last_slot_at_most(0, offset - self.base_offset - 1) + 1)

    def last_entry(self) -> tuple[int, int] | None:
        if self._last is None:
            return None
        return self.base_offset + self._last[0], self._last[1]

    def is_sane(self, log_size_bytes: int) -> bool:
        if self._torn:
            return False
        last = self.last_entry()
        return last is None or (last[0] >= self.base_offset and last[1] < log_size_bytes)


class TimeIndex(_MappedIndex):
    """Timestamp to relative offset; see the module docstring for the format."""

    entry = _TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is newer than the last one."""
        last = self._last
        relative = offset - self.base_offset
        if last is not None and (timestamp <= last[0] or relative <= last[1]):
            return
        self._append(timestamp, relative)

    def entry_at_or_before(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry stamped <= ``timestamp``; None when none is.

        The entry is as stored: the caller checks the batch it names."""
        slot = self._last_slot_at_most(0, timestamp)
        if slot < 0:
            return None
        entry_timestamp, relative = self._entry(slot)
        return entry_timestamp, self.base_offset + relative

    def truncate_to_offset(self, offset: int) -> None:
        self.truncate_entries(self._last_slot_at_most(1, offset - self.base_offset - 1) + 1)

    def last_entry(self) -> tuple[int, int] | None:
        if self._last is None:
            return None
        return self._last[0], self.base_offset + self._last[1]

    def is_sane(self, next_offset: int) -> bool:
        if self._torn:
            return False
        last = self.last_entry()
        return last is None or self.base_offset <= last[1] < max(next_offset, self.base_offset + 1)
