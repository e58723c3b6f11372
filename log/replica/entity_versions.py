"""Entity versions of one partition: for every record key, how many records with that key
the partition's log holds, and the check of conditional appends against them.

A topic with ``eventplatform.entity.versions.enable=true`` keeps them. A record whose
header ``eventplatform.expected.version`` holds an ASCII decimal ``n`` is appended only
if its key has exactly ``n`` records before it, counting the records ahead of it in the
same batch (``0``: the entity must not exist yet). Otherwise the whole batch is refused,
and :class:`Conflict` names the record, the key, the expected version and the current
one; nothing of the batch is appended. A record without the header appends
unconditionally, and counts. A record without a key belongs to no entity: it cannot be
conditional, and it is not counted.

The module is pure. The partition turns a batch's records into :class:`Condition`\\ s
(:func:`conditions_of`), asks :meth:`EntityVersions.check` before it appends and calls
:meth:`EntityVersions.apply` after; a follower applies what it replicates, so a new
leader enforces the versions from its first request. The state persists as a snapshot
as of an offset (:func:`encode_snapshot`, :func:`decode_snapshot`), from which it is
rebuilt with the records after it, as producer state is.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from eventplatform.log.extensions import EXPECTED_VERSION_HEADER
from eventplatform.log.storage.compression import Compression, decompress
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.record_batch import (
    COMPRESSION_MASK,
    HEADER_BYTES,
    Record,
    decode_varint,
    parse_header,
)

EXPECTED_VERSION_DIGITS_MAX = 18
"""An expected version has at most 18 decimal digits: it stays below 2**63."""

SNAPSHOT_MAGIC = b"EPEV"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">4sHqq")  # magic, format version, offset, entries
_ENTRY_HEAD = struct.Struct(">Iq")  # key length, version
_CRC = struct.Struct(">I")


class VersionHeaderError(ValueError):
    """A record's ``eventplatform.expected.version`` header is not a version; ``record``
    is the record's number in its batch (0 first)."""

    def __init__(self, message: str, record: int = 0) -> None:
        super().__init__(message)
        self.record = record


class Condition(NamedTuple):
    """One record as the check sees it: its key, and the version it expects its key to
    have before it (None: it appends whatever the version)."""

    key: bytes | None
    expected: int | None = None


class Conflict(NamedTuple):
    """Why a batch is refused: its record number ``record`` (0 first) expected ``key`` at
    ``expected``, and the key is at ``current`` (counting the records ahead of it in the
    batch)."""

    record: int
    key: bytes | None
    expected: int
    current: int

    @property
    def message(self) -> str:
        if self.key is None:
            return (
                f"record {self.record} expects version {self.expected} but has no key: "
                "only a keyed record belongs to an entity"
            )
        return (
            f"record {self.record}: entity {_shown(self.key)} is at version {self.current}, "
            f"not the expected {self.expected}"
        )


def parse_expected_version(value: bytes | None) -> int:
    """The version an ``eventplatform.expected.version`` header value expects: ASCII
    decimal digits, 0 or more, with no sign, space or leading zero."""
    if value is None or not value or len(value) > EXPECTED_VERSION_DIGITS_MAX:
        raise VersionHeaderError(
            f"{EXPECTED_VERSION_HEADER} must be 1 to {EXPECTED_VERSION_DIGITS_MAX} ASCII digits"
        )
    if not value.isdigit() or not value.isascii() or (value[:1] == b"0" and len(value) > 1):
        raise VersionHeaderError(
            f"{EXPECTED_VERSION_HEADER} must be a decimal number such as 0 or 12, "
            f"not {value[:EXPECTED_VERSION_DIGITS_MAX]!r}"
        )
    return int(value)


def conditions_of(records: Iterable[Record]) -> list[Condition]:
    """Each record's key and expected version, in batch order; raises VersionHeaderError
    (with the record's index) for a header that is not a version or given twice."""
    found = []
    for index, record in enumerate(records):
        expected = None
        for name, value in record.headers:
            if name != EXPECTED_VERSION_HEADER:
                continue
            if expected is not None:
                message = f"record {index} has two {EXPECTED_VERSION_HEADER} headers"
                raise VersionHeaderError(message, index)
            try:
                expected = parse_expected_version(value)
            except VersionHeaderError as exc:
                raise VersionHeaderError(f"record {index}: {exc}", index) from None
        found.append(Condition(record.key, expected))
    return found


_HEADER_NAME = EXPECTED_VERSION_HEADER.encode()


def batch_conditions(buffer: bytes | bytearray | memoryview) -> list[Condition]:
    """:func:`conditions_of` for the one record batch in ``buffer``, reading only each
    record's key and headers: values are skipped, not copied. Raises VersionHeaderError
    as :func:`conditions_of` does, CorruptRecordError for records that do not frame."""
    header = parse_header(buffer)
    payload = memoryview(buffer)[HEADER_BYTES : header.size_bytes]
    codec = Compression(header.attributes & COMPRESSION_MASK)
    body = bytes(payload) if codec is Compression.NONE else decompress(codec, payload)
    end = len(body)
    found: list[Condition] = []
    position = 0
    for index in range(header.records_count):
        length, position = _varint(body, position, end)
        record_end = position + length
        if length < 0 or record_end > end:
            raise CorruptRecordError(f"record length {length} overruns its batch")
        at = position + 1  # attributes
        _, at = _varint(body, at, record_end)  # timestamp delta
        _, at = _varint(body, at, record_end)  # offset delta
        size, at = _varint(body, at, record_end)
        key = None if size < 0 else body[at : at + size]
        at += max(size, 0)
        size, at = _varint(body, at, record_end)
        at += max(size, 0)  # the value, skipped
        headers, at = _varint(body, at, record_end)
        expected = None
        for _ in range(headers):
            size, at = _varint(body, at, record_end)
            name = body[at : at + size]
            at += max(size, 0)
            size, at = _varint(body, at, record_end)
            if name == _HEADER_NAME:
                if expected is not None:
                    message = f"record {index} has two {EXPECTED_VERSION_HEADER} headers"
                    raise VersionHeaderError(message, index)
                value = None if size < 0 else body[at : at + size]
                try:
                    expected = parse_expected_version(value)
                except VersionHeaderError as exc:
                    raise VersionHeaderError(f"record {index}: {exc}", index) from None
            at += max(size, 0)
        if at > record_end:
            raise CorruptRecordError("record fields overrun the record")
        found.append(Condition(key, expected))
        position = record_end
    return found


def _varint(body: bytes, position: int, end: int) -> tuple[int, int]:
    """A zig-zag varint; the one-byte case (every length below 64) inline."""
    if position < end:
        byte = body[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
    return decode_varint(body, position, end)


class EntityVersions:
    """See the module docstring."""

    __slots__ = ("_versions",)

    def __init__(self, versions: dict[bytes, int] | None = None) -> None:
        self._versions: dict[bytes, int] = versions if versions is not None else {}

    def __len__(self) -> int:
        return len(self._versions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EntityVersions) and self._versions == other._versions

    __hash__ = None  # type: ignore[assignment]

    def version(self, key: bytes) -> int:
        """How many records with ``key`` the log holds (0: none)."""
        return self._versions.get(key, 0)

    def items(self) -> Iterator[tuple[bytes, int]]:
        return iter(self._versions.items())

    def check(self, conditions: Sequence[Condition]) -> Conflict | None:
        """The first record of a batch whose expectation fails, or None when the whole
        batch may be appended."""
        ahead: dict[bytes, int] = {}
        for index, (key, expected) in enumerate(conditions):
            if key is None:
                if expected is not None:
                    return Conflict(index, None, expected, 0)
                continue
            current = ahead.get(key)
            if current is None:
                current = self._versions.get(key, 0)
            if expected is not None and expected != current:
                return Conflict(index, key, expected, current)
            ahead[key] = current + 1
        return None

    def apply(self, keys: Iterable[bytes | None]) -> None:
        """Count the records of an appended batch, by key."""
        versions = self._versions
        for key in keys:
            if key is not None:
                versions[key] = versions.get(key, 0) + 1


def encode_snapshot(versions: EntityVersions, offset: int) -> bytes:
    """The state as of ``offset`` (the log end it counts to), with a CRC-32 of it all."""
    parts = [_SNAPSHOT_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, offset, len(versions))]
    for key, version in versions.items():
        parts.append(_ENTRY_HEAD.pack(len(key), version))
        parts.append(key)
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


class SnapshotError(ValueError):
    """A snapshot that cannot be read: the state is rebuilt from the log instead."""


def decode_snapshot(data: bytes) -> tuple[EntityVersions, int]:
    """The state and its offset; raises SnapshotError for anything but a whole snapshot
    of this format."""
    if len(data) < _SNAPSHOT_HEAD.size + _CRC.size:
        raise SnapshotError("the snapshot is shorter than its header")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
    if zlib.crc32(body) != crc:
        raise SnapshotError("the snapshot's checksum does not match")
    magic, version, offset, count = _SNAPSHOT_HEAD.unpack_from(body)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise SnapshotError(f"not an entity-version snapshot of format {SNAPSHOT_VERSION}")
    versions: dict[bytes, int] = {}
    position = _SNAPSHOT_HEAD.size
    for _ in range(count):
        if position + _ENTRY_HEAD.size > len(body):
            raise SnapshotError("the snapshot ends inside an entry")
        length, entity_version = _ENTRY_HEAD.unpack_from(body, position)
        position += _ENTRY_HEAD.size
        key = body[position : position + length]
        if len(key) != length or entity_version <= 0 or key in versions:
            raise SnapshotError("the snapshot holds a malformed entry")
        versions[key] = entity_version
        position += length
    if position != len(body) or offset < 0:
        raise SnapshotError("the snapshot holds more than its entries")
    return EntityVersions(versions), offset


def _shown(key: bytes) -> str:
    """A key for an error message: its text when printable, else hex; at most 100."""
    text = key.decode("utf-8", "replace")
    if text.isprintable() and "\ufffd" not in text:
        return repr(text[:100])
    return key[:50].hex()
