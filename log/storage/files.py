"""File names and small durable files of a partition directory.

A partition directory holds, per segment, up to four files named by the
segment's 20-digit base offset: ``00000000000000000000.log``, ``.index``,
``.timeindex`` and, once the segment holds an abort marker, ``.txnindex`` (see
:mod:`eventplatform.log.storage.txn_index`). Multi-file changes pass through
suffixed states that recovery understands (see
:mod:`eventplatform.log.storage.loader`):

- ``.cleaned``: the cleaner is still writing; recovery deletes it.
- ``.swap``: a complete replacement; recovery finishes installing it.
- ``.deleted``: scheduled for removal; recovery removes it.

``partition.checkpoint`` records the log start offset, the recovery point and
the cleaner's first dirty offset. ``.clean_shutdown`` exists only between a
clean close and the next open. ``.lock`` is held (``flock``) by the one log that
has the directory open.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from eventplatform.log.storage.errors import CorruptRecordError, LogLockedError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TEMPORARY_SUFFIX = ".tmp"
CHECKPOINT_FILE = "partition.checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
LOCK_FILE = ".lock"
OFFSET_DIGITS = 20
_CHECKPOINT_VERSION = 1
_CHECKPOINT_KEYS = ("log_start_offset", "recovery_point", "cleaner_offset")


def file_stem(base_offset: int) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}"


def segment_path(directory: Path, base_offset: int, suffix: str, state: str = "") -> Path:
    """``directory/<20-digit base><suffix><state>``, for example ``...0042.log.swap``."""
    return directory / f"{file_stem(base_offset)}{suffix}{state}"


def parse_base_offset(name: str) -> int | None:
    """The base offset a segment file name starts with, or None for any other file."""
    stem = name.split(".", 1)[0]
    if len(stem) != OFFSET_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def fsync_directory(directory: Path) -> None:
    """Make renames and unlinks in ``directory`` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    fsync_directory(path.parent)


def write_checkpoint(directory: Path, values: dict[str, int]) -> None:
    lines = [f"version {_CHECKPOINT_VERSION}"] + [
        f"{key} {values[key]}" for key in _CHECKPOINT_KEYS
    ]
    write_atomically(directory / CHECKPOINT_FILE, ("\n".join(lines) + "\n").encode())


def read_checkpoint(directory: Path) -> dict[str, int] | None:
    """The checkpoint's values, or None when there is none yet."""
    path = directory / CHECKPOINT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    values: dict[str, int] = {}
    try:
        for line in text.splitlines():
            key, value = line.split()
            values[key] = int(value)
    except ValueError as exc:
        raise CorruptRecordError(f"{path} is malformed: {text[:80]!r}") from exc
    if values.get("version") != _CHECKPOINT_VERSION or any(
        k not in values for k in _CHECKPOINT_KEYS
    ):
        raise CorruptRecordError(f"{path} has an unknown version or missing keys")
    return values


def never_written(directory: Path) -> bool:
    """No checkpoint and no segment: a log that is about to be created."""
    if not directory.exists():
        return True
    if (directory / CHECKPOINT_FILE).exists():
        return False
    return not any(path.name.endswith(LOG_SUFFIX) for path in directory.iterdir())


def lock_directory(directory: Path) -> int:
    """Take an exclusive lock so that two logs never write one directory."""
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise LogLockedError(f"{directory} is already open by another log") from None
    return descriptor
