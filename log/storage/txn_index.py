"""TransactionIndex: the aborted transactions whose abort marker a segment holds.

File ``<base>.txnindex`` (see :mod:`eventplatform.log.storage.files`), Kafka's
format: 34-byte entries, big-endian::

    offset  size  field
         0     2  version           0
         2     8  producerId
        10     8  firstOffset       the transaction's first batch in this partition
        18     8  lastOffset        the abort marker's offset
        26     8  lastStableOffset  the partition's last stable offset once the marker
                                    was in: the first offset of the earliest other open
                                    transaction, or lastOffset + 1

Entries follow marker order, so ``lastOffset`` strictly increases. A segment's
index holds the entries whose marker lies in that segment: retention deleting a
segment takes its entries along, and a cleaned or erased segment gets the
entries of the segments it replaces (every marker is kept, with its offset).

Lookups (:meth:`TransactionIndex.collect`) follow Kafka's
``TransactionIndex.collectAbortedTxns``: the entries of transactions that overlap
``[fetch offset, upper bound)``, and whether the search is complete. Every
later entry belongs to a transaction that began at or after this entry's
``lastStableOffset``, so once that reaches the upper bound, later segments hold
nothing more that overlaps.

Durability: the file is appended to in place, without an fsync per entry; the
partition makes its indexes durable (:meth:`flush`) before it writes a producer
snapshot, and rebuilds the entries of markers after the snapshot from the log
when it opens (see :mod:`eventplatform.log.replica.producer_state`). A torn
trailing entry is cut when the index is opened.

The file is created by the first entry and never held open: appends are rare
(one per aborted transaction that wrote to the partition) and a lookup opens
it for its own duration. The size is cached, so a segment without an abort
costs no system call. Owned by its segment; one thread.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from eventplatform.log.invariants import require
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.files import fsync_directory

ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size
ENTRY_VERSION = 0
READ_CHUNK_ENTRIES = 4096
"""Entries read per ``pread`` while scanning an index (about 136 KiB)."""


class AbortedTransaction(NamedTuple):
    """One entry: a transaction of ``producer_id`` from ``first_offset`` that the marker at
    ``last_offset`` aborted; see the module docstring for ``last_stable_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: Iterable[AbortedTransaction]) -> bytes:
    return b"".join(ENTRY.pack(ENTRY_VERSION, *entry) for entry in entries)


def read_entries(
    descriptor: int, size_bytes: int, path: Path, start_bytes: int = 0
) -> Iterator[AbortedTransaction]:
    """The entries in ``[start_bytes, size_bytes)`` of an open index file, in order. A file
    shorter than ``size_bytes`` (cut meanwhile) ends the iteration; an entry of an unknown
    version raises CorruptRecordError."""
    position = start_bytes
    while position < size_bytes:
        wanted = min(READ_CHUNK_ENTRIES * ENTRY_BYTES, size_bytes - position)
        chunk = os.pread(descriptor, wanted, position)
        whole = len(chunk) - len(chunk) % ENTRY_BYTES
        for at in range(0, whole, ENTRY_BYTES):
            version, *fields = ENTRY.unpack_from(chunk, at)
            if version != ENTRY_VERSION:
                raise CorruptRecordError(
                    f"{path}: the entry at byte {position + at} has version {version}"
                )
            yield AbortedTransaction(*fields)
        if whole < wanted:
            return
        position += whole


class TransactionIndex:
    """See the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._unsynced = False
        self._created = False
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        whole = size - size % ENTRY_BYTES
        if whole != size:
            os.truncate(path, whole)  # a torn last entry: its marker is rescanned
            self._unsynced = True
        self.size_bytes = whole
        self.last_offset = self._read_last_offset()

    def _read_last_offset(self) -> int:
        if not self.size_bytes:
            return -1
        last = list(self.entries(self.size_bytes - ENTRY_BYTES))
        return last[-1].last_offset if last else -1

    @property
    def entry_count(self) -> int:
        return self.size_bytes // ENTRY_BYTES

    def append(self, entry: AbortedTransaction) -> None:
        """Add the entry of an abort marker after every marker the index holds."""
        require(entry.last_offset > self.last_offset, "abort markers follow each other")
        require(entry.first_offset <= entry.last_offset, "a transaction ends after it began")
        self.append_all([entry])

    def append_all(self, entries: list[AbortedTransaction]) -> None:
        """Add several entries, in marker order, with one write."""
        if not entries:
            return
        data = encode_entries(entries)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._created = self._created or (not self.size_bytes and not self.path.exists())
        descriptor = os.open(self.path, flags, 0o644)
        try:
            written = os.write(descriptor, data)
            if written != len(data):
                os.ftruncate(descriptor, self.size_bytes)
                raise OSError(f"{self.path}: wrote {written} of {len(data)} bytes")
        finally:
            os.close(descriptor)
        self.size_bytes += len(data)
        self.last_offset = entries[-1].last_offset
        self._unsynced = True

    def entries(self, start_bytes: int = 0) -> Iterator[AbortedTransaction]:
        """Every entry from byte ``start_bytes``, in marker order."""
        if self.size_bytes <= start_bytes:
            return
        try:
            descriptor = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            yield from read_entries(descriptor, self.size_bytes, self.path, start_bytes)
        finally:
            os.close(descriptor)

    def collect(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTransaction], bool]:
        """The transactions with ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset``, and whether no later segment can hold more (Kafka's
        ``collectAbortedTxns``)."""
        found = []
        for entry in self.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset``."""
        if self.last_offset < offset:
            return
        keep = 0
        last = -1
        for entry in self.entries():
            if entry.last_offset >= offset:
                break
            keep += ENTRY_BYTES
            last = entry.last_offset
        os.truncate(self.path, keep)
        self.size_bytes = keep
        self.last_offset = last
        self._unsynced = True

    def flush(self) -> None:
        """fsync what was written since the last flush (and the directory entry of a file
        created meanwhile)."""
        if not self._unsynced:
            return
        try:
            descriptor = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._unsynced = self._created = False
            return
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        if self._created:
            fsync_directory(self.path.parent)
        self._unsynced = self._created = False

    @property
    def unsynced(self) -> bool:
        return self._unsynced

    def open_for_reading(self) -> tuple[int, int] | None:
        """A new descriptor of the file and its size, for a reader on another thread (the
        cleaner); None when there are no entries. The caller closes it."""
        if not self.size_bytes:
            return None
        try:
            return os.open(self.path, os.O_RDONLY), self.size_bytes
        except FileNotFoundError:
            return None
