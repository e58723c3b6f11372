"""Snapshot files of the metadata log: their names and their bytes, without I/O.

A voter keeps each snapshot of its applied metadata in its metadata log
directory as ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``: the
snapshot stands for every entry before the end offset, and the last of
those has the epoch. The file is written under a ``.tmp`` name, fsynced and
renamed, so a crash leaves either no file or a whole one (and a ``.tmp``
that the next start removes). Its bytes::

    magic      8 bytes  b"EPSNAPSH"
    version    2 bytes  big-endian, 1
    end offset 8 bytes  big-endian
    epoch      4 bytes  big-endian
    length     8 bytes  big-endian, of the data
    data       length bytes (the state machine's own encoding)
    checksum   4 bytes  big-endian CRC-32C of everything before it

:func:`decode` checks all of it, so a torn or corrupt file is refused with
a :class:`~.raft.SnapshotError` saying what is wrong, never half-read.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from eventplatform.log.cluster.raft import SnapshotError, SnapshotId

SUFFIX = ".checkpoint"
MAGIC = b"EPSNAPSH"
VERSION = 1
HEADER = struct.Struct(">8sHQIQ")
CHECKSUM = struct.Struct(">I")
OFFSET_DIGITS = 20
EPOCH_DIGITS = 10


def file_name(snapshot: SnapshotId) -> str:
    return f"{snapshot.end_offset:0{OFFSET_DIGITS}d}-{snapshot.epoch:0{EPOCH_DIGITS}d}{SUFFIX}"


def parse_file_name(name: str) -> SnapshotId | None:
    """The snapshot a file name names, or None for any other file (a ``.tmp`` among them)."""
    if not name.endswith(SUFFIX):
        return None
    offset, _, epoch = name[: -len(SUFFIX)].partition("-")
    if len(offset) != OFFSET_DIGITS or len(epoch) != EPOCH_DIGITS:
        return None
    if not (offset.isdigit() and epoch.isdigit()):
        return None
    return SnapshotId(int(offset), int(epoch))


def encode(snapshot: SnapshotId, data: bytes) -> bytes:
    header = HEADER.pack(MAGIC, VERSION, snapshot.end_offset, snapshot.epoch, len(data))
    body = header + data
    return body + CHECKSUM.pack(crc32c(body))


def decode(content: bytes, expected: SnapshotId, name: str) -> bytes:
    """The data of the snapshot ``content`` holds; raises SnapshotError naming ``name``
    when it is torn, corrupt, or another snapshot than ``expected``."""
    if len(content) < HEADER.size + CHECKSUM.size:
        raise SnapshotError(f"snapshot {name} is torn: {len(content)} bytes, shorter than a header")
    magic, version, end_offset, epoch, length = HEADER.unpack_from(content)
    if magic != MAGIC or version != VERSION:
        raise SnapshotError(f"snapshot {name} is not a snapshot file (version {version})")
    whole = HEADER.size + length + CHECKSUM.size
    if len(content) != whole:
        raise SnapshotError(f"snapshot {name} is torn: {len(content)} bytes of {whole}")
    body = content[: -CHECKSUM.size]
    (checksum,) = CHECKSUM.unpack_from(content, len(body))
    if crc32c(body) != checksum:
        raise SnapshotError(f"snapshot {name} is corrupt: its checksum does not match")
    if SnapshotId(end_offset, epoch) != expected:
        raise SnapshotError(
            f"snapshot {name} holds offset {end_offset} and epoch {epoch}, not what its name says"
        )
    return content[HEADER.size : HEADER.size + length]
