"""A disk that forgets what was never fsynced, for whole-cluster simulations.

While :func:`fake_disk` is active, ``os.fsync`` does not reach the real disk
(the simulation has no use for it); it records the size of the file it was
given, by inode, as that file's durable length. A node's files then live
as the page cache holds them. :meth:`FakeDisk.lose_power` is what a power
cut does to one node's data directory: every file that grew past its
durable length loses the unflushed bytes, except that the first of them
may survive in part (a torn write), and a file never fsynced loses
everything after a torn prefix. Files the broker writes through a memory
map (offset and time indexes, flushed with ``msync``) keep what they hold,
which leaves recovery to cope with index entries past the end of a
truncated log, as after a real power cut.

A directory can also run out of space (:meth:`FakeDisk.fill`): a write
under it takes what still fits, as a real file system does (a short
write), and the next one fails with ENOSPC, until :meth:`FakeDisk.free`.
Truncations under it give their bytes back. :meth:`FakeDisk.fail_fsyncs`
makes every fsync of a file under a directory fail with EIO, as a failing
disk does.

A process kill (the common crash) loses nothing: the page cache outlives
the process. The simulation only cuts a node's power while every replica
of every partition is in sync, since the log, like Kafka's, keeps
acknowledged records through replication, not through fsync.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAPPED_SUFFIXES = (".index", ".timeindex")
SKIPPED_NAMES = (".lock",)


@dataclass
class FakeDisk:
    random: random.Random
    durable: dict[str, tuple[int, int]] = field(default_factory=dict)
    """path → (inode, length) at its last fsync."""
    torn_writes: int = 0
    lost_bytes: int = 0
    space_bytes: dict[str, int] = field(default_factory=dict)
    """directory → what writes under it may still add; an unlisted directory has no limit."""
    failing_fsyncs: set[str] = field(default_factory=set)
    """directories under which every fsync fails with EIO."""
    refused_writes: int = 0

    def fill(self, directory: Path, space_bytes: int = 0) -> None:
        """From now on writes under ``directory`` may add only ``space_bytes`` more."""
        self.space_bytes[os.path.realpath(directory)] = space_bytes

    def free(self, directory: Path) -> None:
        """Space returns under ``directory``, and its fsyncs work again."""
        self.space_bytes.pop(os.path.realpath(directory), None)
        self.failing_fsyncs.discard(os.path.realpath(directory))

    def fail_fsyncs(self, directory: Path) -> None:
        self.failing_fsyncs.add(os.path.realpath(directory))

    def write(self, descriptor: int, data: Any, real_write: Any) -> int:
        root = _root_of(_path_of(descriptor), self.space_bytes) if self.space_bytes else None
        if root is None:
            written: int = real_write(descriptor, data)
            return written
        room = self.space_bytes[root]
        if room <= 0:
            self.refused_writes += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(descriptor, memoryview(data)[:room])
        self.space_bytes[root] -= written
        return written

    def fsync(self, descriptor: int) -> None:
        path = _path_of(descriptor)
        if self.failing_fsyncs and _root_of(path, self.failing_fsyncs) is not None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        status = os.fstat(descriptor)
        self.durable[path] = (status.st_ino, status.st_size)

    def truncating(self, path: str, length: int) -> None:
        """A truncation under a full directory gives its bytes back."""
        root = _root_of(path, self.space_bytes) if self.space_bytes else None
        if root is not None:
            with contextlib.suppress(FileNotFoundError):
                self.space_bytes[root] += max(Path(path).stat().st_size - length, 0)

    def length(self, path: str) -> int:
        """What of ``path`` survives a power cut for sure: its length at its last fsync, or
        nothing when it was never fsynced (or the inode there is another file now)."""
        inode, length = self.durable.get(path, (-1, 0))
        try:
            return length if Path(path).stat().st_ino == inode else 0
        except FileNotFoundError:
            return 0

    def truncated(self, path: str, length: int) -> None:
        """A truncation is journalled at once; what is written after it is not."""
        if path in self.durable:
            inode, durable = self.durable[path]
            self.durable[path] = (inode, min(durable, length))

    def renamed(self, source: str, target: str) -> None:
        """A rename is journalled at once and carries what was fsynced."""
        self.durable.pop(target, None)
        if source in self.durable:
            self.durable[target] = self.durable.pop(source)

    def lose_power(self, directory: Path) -> None:
        """Drop what ``directory``'s files hold beyond their durable length (see the module)."""
        for path in sorted(directory.rglob("*")):
            if not path.is_file() or path.name in SKIPPED_NAMES:
                continue
            if path.name.endswith(MAPPED_SUFFIXES):
                continue
            status = path.stat()
            durable = self.length(os.path.realpath(path))
            if status.st_size <= durable:
                continue
            kept = durable
            if self.random.random() < 0.5:
                kept += self.random.randint(0, status.st_size - durable)
                self.torn_writes += 1
            self.lost_bytes += status.st_size - kept
            os.truncate(path, kept)


@contextlib.contextmanager
def fake_disk(disk: FakeDisk) -> Iterator[FakeDisk]:
    real = (os.fsync, os.ftruncate, os.truncate, os.replace, os.rename, os.write)
    real_ftruncate, real_truncate, real_replace, real_rename, real_write = real[1:]

    def ftruncate(descriptor: int, length: int) -> None:
        path = _path_of(descriptor)
        disk.truncating(path, length)
        disk.truncated(path, length)
        real_ftruncate(descriptor, length)

    def truncate(path: Any, length: int) -> None:
        if isinstance(path, int):
            ftruncate(path, length)
            return
        disk.truncating(os.path.realpath(path), length)
        disk.truncated(os.path.realpath(path), length)
        real_truncate(path, length)

    def write(descriptor: int, data: Any) -> int:
        return disk.write(descriptor, data, real_write)

    def replace(source: Any, target: Any, **options: Any) -> None:
        real_replace(source, target, **options)
        disk.renamed(os.path.realpath(source), os.path.realpath(target))

    def rename(source: Any, target: Any, **options: Any) -> None:
        real_rename(source, target, **options)
        disk.renamed(os.path.realpath(source), os.path.realpath(target))

    os.fsync, os.ftruncate, os.truncate, os.replace, os.rename, os.write = (
        disk.fsync,
        ftruncate,
        truncate,
        replace,
        rename,
        write,
    )
    try:
        yield disk
    finally:
        os.fsync, os.ftruncate, os.truncate, os.replace, os.rename, os.write = real


def _path_of(descriptor: int) -> str:
    return str(Path(f"/proc/self/fd/{descriptor}").readlink())


def _root_of(path: str, roots: Any) -> str | None:
    """The one of ``roots`` (directories) that holds ``path``, or None."""
    for root in roots:
        if path == root or path.startswith(root + os.sep):
            return str(root)
    return None
