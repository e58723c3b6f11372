"""Where each entity's records are: for every key of a partition with entity versions, the
batches that hold records with that key: their last offsets and where they lie in their
segments' files.

Reading one entity then costs what that entity holds, not what its partition holds: a
lookup (:meth:`EntityIndex.batches_of`) names the batches, and the reader reads each with
one positioned read (checking that it found the batch it expected). A batch of several
entities' records is named under each of its keys; the reader keeps its own key's records.

The index is a small log-structured merge tree of ``(key hash, batch last offset, file
position, size)`` entries (the last offset tells whether a batch reaches past an offset,
and finds its segment), sorted by hash and then by offset:

- New entries go to a memory part. When it holds ``MEMORY_ENTRIES_MAX`` of them it is
  written out as a *run*, a file covering the offsets ``[start, end)`` of the log, and
  the memory part starts again at ``end``. So the memory the index takes is bounded,
  whatever the partition holds.
- Runs are merged as a binary counter would carry: when the newest ``RUNS_PER_MERGE``
  runs have the same level, they become one run of the next level, up to
  ``LEVEL_MAX``; a merge costs at most ``MERGE_ENTRIES_MAX`` entries. The number of runs
  grows with the logarithm of the partition up to that size, and linearly after.
- A lookup binary-searches every run that reaches past the offset it starts from, then
  the memory part.

The key hash is 64 bits: CRC-32 and CRC-32C of the key side by side. Keys that share a
hash name each other's batches, which the reader filters out; they never hide one.

Runs live in ``entity-index/`` of the partition directory, one file each,
``<start>-<end>.run`` (20-digit offsets), written whole with :func:`write_atomically`:
a header (magic ``EPEI``, format version, level, start, end, entry count), the hashes,
last offsets and positions as little-endian 64-bit arrays and the sizes as 32-bit ones,
and a CRC-32C of everything before it.
On open (:meth:`EntityIndex.open`) the index keeps the chain of whole runs that starts
at the lowest start and runs without a gap, up to the log end; every other file goes.
The caller then adds the batches from the chain's end to the log end, so the index
always equals what a scan of the log would build.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from eventplatform.log.invariants import require
from eventplatform.log.storage.files import write_atomically

INDEX_DIRECTORY = "entity-index"
RUN_SUFFIX = ".run"
MEMORY_ENTRIES_MAX = 16_384
"""Entries the memory part holds before it is written out as a run (about 2.5 MB)."""
RUNS_PER_MERGE = 4
"""How many runs of one level become one run of the next."""
LEVEL_MAX = 2
"""Runs of this level are never merged: a merge handles at most ``MERGE_ENTRIES_MAX``."""
MERGE_ENTRIES_MAX = MEMORY_ENTRIES_MAX * RUNS_PER_MERGE**LEVEL_MAX

_MAGIC = b"EPEI"
_FORMAT = 2
_ENTRY_BYTES = 28
_HEAD = struct.Struct("<4sHHqqq")  # magic, format, level, start, end, entries
_CRC = struct.Struct("<I")
_HASHES = np.dtype("<u8")
_OFFSETS = np.dtype("<i8")
_SIZES = np.dtype("<i4")


class Located(NamedTuple):
    """A batch the index names: its last offset, and its position and size in the file of
    the segment that holds that offset."""

    last_offset: int
    position: int
    size: int


def key_hash(key: bytes) -> int:
    """The 64-bit hash the index files a key under."""
    return (zlib.crc32(key) << 32) | crc32c(key)


class RunError(ValueError):
    """A run file is not whole: it is dropped and its range rebuilt from the log."""


@dataclass(frozen=True)
class Run:
    """One run file, mapped: its entries sorted by hash, then offset."""

    path: Path
    level: int
    start: int
    end: int
    hashes: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray
    mapping: mmap.mmap | None

    @property
    def entries(self) -> int:
        return len(self.hashes)

    def lookup(self, hashed: int, from_offset: int) -> list[Located]:
        # As a uint64: a Python int below 2**63 would make NumPy compare as float64,
        # converting the whole run on every lookup (a hundred times slower).
        wanted = np.uint64(hashed)
        low = int(np.searchsorted(self.hashes, wanted, side="left"))
        high = int(np.searchsorted(self.hashes, wanted, side="right"))
        if low == high:
            return []
        offsets = self.offsets[low:high]
        skip = int(np.searchsorted(offsets, np.int64(from_offset), side="left"))
        return [
            Located(*entry)
            for entry in zip(
                offsets[skip:].tolist(),
                self.positions[low + skip : high].tolist(),
                self.sizes[low + skip : high].tolist(),
                strict=True,
            )
        ]

    def close(self) -> None:
        if self.mapping is not None:
            # the arrays view the mapping: drop them before it closes
            for name, dtype in (
                ("hashes", _HASHES),
                ("offsets", _OFFSETS),
                ("positions", _OFFSETS),
                ("sizes", _SIZES),
            ):
                object.__setattr__(self, name, np.empty(0, dtype))
            with contextlib.suppress(BufferError):
                self.mapping.close()


def run_name(start: int, end: int) -> str:
    return f"{start:020d}-{end:020d}{RUN_SUFFIX}"


def encode_run(level: int, start: int, end: int, entries: Entries) -> bytes:
    """A run file's bytes (see the module docstring); the entries must be sorted."""
    hashes, offsets, positions, sizes = entries
    body = (
        _HEAD.pack(_MAGIC, _FORMAT, level, start, end, len(hashes))
        + hashes.astype(_HASHES, copy=False).tobytes()
        + offsets.astype(_OFFSETS, copy=False).tobytes()
        + positions.astype(_OFFSETS, copy=False).tobytes()
        + sizes.astype(_SIZES, copy=False).tobytes()
    )
    return body + _CRC.pack(crc32c(body))


def open_run(path: Path, *, verify: bool = True) -> Run:
    """Map the run at ``path``; raises RunError when it is not whole. ``verify=False``
    skips the checksum, for a run this process has just written: reading it all through
    the mapping would keep every page of it in the process's resident set."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < _HEAD.size + _CRC.size:
                raise RunError(f"{path.name}: {size} bytes is shorter than a run")
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise RunError(f"{path.name}: {exc}") from exc
    try:
        magic, version, level, start, end, entries = _HEAD.unpack_from(mapping, 0)
        if magic != _MAGIC or version != _FORMAT:
            raise RunError(f"{path.name}: not a run of format {_FORMAT}")
        if size != _HEAD.size + _ENTRY_BYTES * entries + _CRC.size or not 0 <= start <= end:
            raise RunError(f"{path.name}: {entries} entries do not fill {size} bytes")
        (stored,) = _CRC.unpack_from(mapping, size - _CRC.size)
        if verify and _file_crc(path, size - _CRC.size) != stored:
            raise RunError(f"{path.name}: checksum mismatch")
        at = _HEAD.size
        hashes = np.frombuffer(mapping, _HASHES, entries, at)
        offsets = np.frombuffer(mapping, _OFFSETS, entries, at + 8 * entries)
        positions = np.frombuffer(mapping, _OFFSETS, entries, at + 16 * entries)
        sizes = np.frombuffer(mapping, _SIZES, entries, at + 24 * entries)
    except BaseException:
        mapping.close()
        raise
    return Run(path, level, start, end, hashes, offsets, positions, sizes, mapping)


def _file_crc(path: Path, length: int) -> int:
    """CRC-32C of the first ``length`` bytes of ``path``, read (not mapped) in chunks."""
    crc = 0
    with open(path, "rb") as handle:
        while length > 0:
            chunk = handle.read(min(length, _CRC_CHUNK_BYTES))
            if not chunk:
                raise RunError(f"{path.name}: shorter than its header says")
            crc = crc32c(chunk, crc)
            length -= len(chunk)
    return crc


_CRC_CHUNK_BYTES = 1 << 20

Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Hashes, last offsets, positions and sizes, entry by entry."""


def _sorted(entries: Entries) -> Entries:
    hashes, offsets, positions, sizes = entries
    order = np.lexsort((offsets, hashes))
    return hashes[order], offsets[order], positions[order], sizes[order]


class EntityIndex:
    """See the module docstring. Open with :meth:`open`; feed it every batch appended
    (:meth:`add`), in offset order; tell it of truncations (:meth:`truncate`)."""

    def __init__(
        self,
        directory: Path,
        runs: list[Run],
        end: int,
        *,
        memory_entries_max: int = MEMORY_ENTRIES_MAX,
    ) -> None:
        self.directory = directory
        self.memory_entries_max = memory_entries_max
        self.runs = runs
        self.start = runs[-1].end if runs else end  # where the memory part begins
        self.end = end  # the offset after the last batch indexed
        self._memory: dict[int, list[Located]] = {}
        self._memory_entries = 0

    # ------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        partition_directory: Path,
        log_end_offset: int,
        *,
        memory_entries_max: int = MEMORY_ENTRIES_MAX,
    ) -> EntityIndex:
        """The runs on disk that form a chain no further than ``log_end_offset``; every
        other run file is removed. Add the log from :attr:`end` on to complete it."""
        directory = partition_directory / INDEX_DIRECTORY
        directory.mkdir(exist_ok=True)
        runs: list[Run] = []
        for path in sorted(directory.glob(f"*{RUN_SUFFIX}")):
            try:
                runs.append(open_run(path))
            except RunError:
                continue
        chain: list[Run] = []
        position = min((run.start for run in runs), default=0)
        while True:
            candidates = [r for r in runs if r.start == position < r.end <= log_end_offset]
            if not candidates:
                break
            longest = max(candidates, key=lambda run: run.end)
            chain.append(longest)
            position = longest.end
        kept = {id(run) for run in chain}
        for run in runs:
            if id(run) not in kept:
                run.close()
        for path in directory.iterdir():
            if path not in {run.path for run in chain}:
                path.unlink(missing_ok=True)
        end = chain[-1].end if chain else 0
        return cls(directory, chain, end, memory_entries_max=memory_entries_max)

    # ------------------------------------------------------------ update

    def add(
        self,
        base_offset: int,
        last_offset: int,
        keys: Iterable[bytes | None],
        position: int,
        size: int,
    ) -> None:
        """Index one batch of the offsets ``base_offset..last_offset``, ``size`` bytes at
        ``position`` in its segment's file, holding records with ``keys``."""
        require(base_offset >= self.end, "entity index batches go forwards")
        memory = self._memory
        located = Located(last_offset, position, size)
        for hashed in {key_hash(key) for key in keys if key is not None}:
            found = memory.get(hashed)
            if found is None:
                memory[hashed] = [located]
            else:
                found.append(located)
            self._memory_entries += 1
        self.end = last_offset + 1
        if self._memory_entries >= self.memory_entries_max:
            self.write_memory()

    def write_memory(self) -> None:
        """Write the memory part out as a run (nothing when it is empty), then merge."""
        if not self._memory_entries:
            return
        count = self._memory_entries
        hashes = np.empty(count, _HASHES)
        rows = np.empty((count, 3), _OFFSETS)
        at = 0
        for hashed, found in self._memory.items():
            hashes[at : at + len(found)] = hashed
            rows[at : at + len(found)] = found
            at += len(found)
        entries = (hashes, rows[:, 0], rows[:, 1], rows[:, 2].astype(_SIZES))
        self._write_run(0, self.start, self.end, _sorted(entries))
        self._memory.clear()
        self._memory_entries = 0
        self.start = self.end
        self._merge()

    def _write_run(self, level: int, start: int, end: int, entries: Entries) -> Run:
        path = self.directory / run_name(start, end)
        write_atomically(path, encode_run(level, start, end, entries))
        run = open_run(path, verify=False)
        self.runs.append(run)
        return run

    def _merge(self) -> None:
        while len(self.runs) >= RUNS_PER_MERGE:
            newest = self.runs[-RUNS_PER_MERGE:]
            level = newest[0].level
            if level >= LEVEL_MAX or any(run.level != level for run in newest):
                return
            merged = _sorted(
                (
                    np.concatenate([run.hashes for run in newest]),
                    np.concatenate([run.offsets for run in newest]),
                    np.concatenate([run.positions for run in newest]),
                    np.concatenate([run.sizes for run in newest]),
                )
            )
            del self.runs[-RUNS_PER_MERGE:]
            # the merged run replaces the first of the four on disk: same start, later end
            self._write_run(level + 1, newest[0].start, newest[-1].end, merged)
            for run in newest:
                run.close()
                run.path.unlink(missing_ok=True)

    def truncate(self, offset: int) -> None:
        """Forget the batches at or after ``offset`` (the log was truncated there)."""
        if offset >= self.end:
            return
        if self._memory_entries and self.start < offset:
            kept: dict[int, list[Located]] = {}
            for hashed, found in self._memory.items():
                below = [entry for entry in found if entry.last_offset < offset]
                if below:
                    kept[hashed] = below
            self._memory = kept
            self._memory_entries = sum(len(found) for found in kept.values())
        else:
            self._memory.clear()
            self._memory_entries = 0
        while self.runs and self.runs[-1].end > offset:
            run = self.runs.pop()
            keep = run.offsets < offset
            head = (
                run.hashes[keep].copy(),
                run.offsets[keep].copy(),
                run.positions[keep].copy(),
                run.sizes[keep].copy(),
            )
            run.close()
            run.path.unlink(missing_ok=True)
            if run.start < offset:  # the run that holds the truncation point keeps its head
                self._write_run(run.level, run.start, offset, head)
        if self._memory_entries == 0:
            self.start = self.runs[-1].end if self.runs else offset
        self.end = offset

    def drop_before(self, offset: int) -> None:
        """Remove the runs wholly below ``offset`` (the log no longer holds them)."""
        while self.runs and self.runs[0].end <= offset:
            run = self.runs.pop(0)
            run.close()
            run.path.unlink(missing_ok=True)

    def reset(self, offset: int) -> None:
        """Forget everything: the log now starts, empty, at ``offset``."""
        self.close()
        for path in self.directory.iterdir():
            path.unlink(missing_ok=True)
        self.runs = []
        self.start = self.end = offset

    # ------------------------------------------------------------ lookup

    def batches_of(self, key: bytes, from_offset: int = 0) -> list[Located]:
        """The batches, in offset order, that reach ``from_offset`` or past it and may
        hold records with ``key``."""
        hashed = key_hash(key)
        found: list[Located] = []
        for run in self.runs:
            if run.end > from_offset:
                found.extend(run.lookup(hashed, from_offset))
        for entry in self._memory.get(hashed, ()):
            if entry.last_offset >= from_offset:
                found.append(entry)
        return found

    @property
    def entries(self) -> int:
        return self._memory_entries + sum(run.entries for run in self.runs)

    def close(self) -> None:
        """Unmap the runs; the memory part is rebuilt from the log at the next open."""
        for run in self.runs:
            run.close()
