"""RecordBatch v2 (magic 2): header validation, in-place stamping, full codec.

Wire and disk layout, big-endian, 61-byte header::

    offset  size  field
         0     8  baseOffset            stamped by the leader
         8     4  batchLength           bytes after this field
        12     4  partitionLeaderEpoch  stamped by the leader
        16     1  magic                 2
        17     4  crc                   CRC-32C of bytes 21..end
        21     2  attributes            bits 0-2 codec, 3 timestamp type, 4 transactional,
                                        5 control, 6 has delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp         the delete horizon when bit 6 is set
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     *  records, compressed as a whole when the codec is not NONE

Each record: varint length, int8 attributes, varlong timestampDelta, varint
offsetDelta, varint key length (-1 for null) and key, varint value length and
value, varint header count, then per header a varint key length, UTF-8 key,
varint value length and value. Varints are zig-zag encoded.

The produce path only calls :func:`parse_header`, :func:`validate_record_set`
and :func:`stamp`: records stay bytes. The full codec is for tools, tests,
compaction and replay. Nothing here reads past the buffer it is given.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from eventplatform.log.storage.compression import (
    DECOMPRESSED_BYTES_MAX,
    Compression,
    compress,
    decompress,
    iter_decompressed,
)
from eventplatform.log.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    UnsupportedCompressionError,
)

MAGIC = 2
HEADER_BYTES = 61
LOG_OVERHEAD_BYTES = 12  # baseOffset + batchLength: bytes not counted by batchLength
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
KEYLESS_RECORD_MESSAGE = "a compacted topic only accepts records with a key"
VARINT_BYTES_MAX = 10

_HEADER = struct.Struct(">qiibIhiqqqhii")
_STAMP = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_STAMP_EPOCH_AT = 12
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_CRC_AT = 17
_ATTRIBUTES_AT = 21

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40


class TimestampType:
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The decoded 61-byte header. ``position`` is where the batch starts in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. Header keys are text, as in every Kafka client."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]


def parse_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode and sanity-check the header at ``position``; records are not touched.

    Checks that the header fits, that the magic is 2 and that ``batchLength``
    covers at least a header. It does not check that the whole batch fits:
    callers reading a file compare ``size_bytes`` with what remains.
    """
    if position < 0 or len(buffer) - position < HEADER_BYTES:
        raise CorruptRecordError(
            f"record batch header needs {HEADER_BYTES} bytes, "
            f"{max(0, len(buffer) - position)} remain"
        )
    fields = _HEADER.unpack_from(buffer, position)
    if fields[3] != MAGIC:
        raise CorruptRecordError(f"record batch magic is {fields[3]}, only magic 2 is supported")
    if fields[1] < HEADER_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"record batch length {fields[1]} is shorter than a header")
    if fields[6] < 0:
        raise CorruptRecordError(f"record batch lastOffsetDelta {fields[6]} is negative")
    if fields[12] < 0:
        raise CorruptRecordError(f"record batch count {fields[12]} is negative")
    # tuple.__new__ skips the NamedTuple constructor's argument handling (hot path).
    header: BatchHeader = tuple.__new__(BatchHeader, (*fields, position))
    return header


def read_offset_and_length(
    buffer: bytes | bytearray | memoryview, position: int
) -> tuple[int, int]:
    """Return ``(baseOffset, total size in bytes)`` from the first 12 bytes at ``position``."""
    base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
    return base_offset, batch_length + LOG_OVERHEAD_BYTES


def verify_crc(buffer: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Raise :class:`CorruptRecordError` unless the batch's CRC-32C matches."""
    start = header.position + CRC_START
    end = header.position + header.size_bytes
    if end > len(buffer):
        raise CorruptRecordError(
            f"record batch at byte {header.position} claims {header.size_bytes} bytes, "
            f"{len(buffer) - header.position} remain"
        )
    actual = crc32c(memoryview(buffer)[start:end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at byte {header.position} fails its CRC-32C "
            f"(stored {header.crc:#010x}, computed {actual:#010x})"
        )


def split_batches(buffer: bytes | bytearray | memoryview, *, check_crc: bool) -> list[BatchHeader]:
    """The headers of a record set that must be exactly whole batches, in order.

    A plain loop building a list: this runs on every produce and every replica
    fetch, where a generator's overhead shows up.
    """
    headers = []
    position = 0
    end = len(buffer)
    while position < end:
        header = parse_header(buffer, position)
        size_bytes = header.batch_length + LOG_OVERHEAD_BYTES
        if position + size_bytes > end:
            raise CorruptRecordError(
                f"record batch at byte {position} claims {size_bytes} bytes, "
                f"{end - position} remain"
            )
        if check_crc:
            verify_crc(buffer, header)
        headers.append(header)
        position += size_bytes
    return headers


def validate_record_set(buffer: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Validate a produced record set: whole v2 batches, good CRCs, no control batches.

    Records are not decoded. A producer's batch must carry at least one record and
    contiguous offset deltas, so ``lastOffsetDelta == recordsCount - 1``.
    """
    headers = split_batches(buffer, check_crc=True)
    if not headers:
        raise InvalidRecordError("produce request carries no record batch")
    for header in headers:
        if header.attributes & CONTROL_BIT:
            raise InvalidRecordError("clients may not produce control batches")
        codec = header.attributes & COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise UnsupportedCompressionError(f"record batch uses unknown codec {codec}")
        if header.attributes & DELETE_HORIZON_BIT:
            raise InvalidRecordError("clients may not set a delete horizon")
        if header.records_count == 0:
            raise InvalidRecordError("record batch has no records")
        if header.last_offset_delta != header.records_count - 1:
            raise InvalidRecordError(
                f"record batch has {header.records_count} records "
                f"but lastOffsetDelta {header.last_offset_delta}"
            )
    return headers


def stamp(
    buffer: bytearray | memoryview, header: BatchHeader, *, base_offset: int, leader_epoch: int
) -> None:
    """Write ``baseOffset`` and ``partitionLeaderEpoch`` in place; the CRC does not cover them."""
    _STAMP.pack_into(buffer, header.position, base_offset, header.batch_length, leader_epoch)


def stamp_log_append_time(
    buffer: bytearray | memoryview, header: BatchHeader, timestamp_ms: int
) -> None:
    """Switch a batch to LogAppendTime with ``maxTimestamp = timestamp_ms`` and re-seal its CRC."""
    attributes = (header.attributes | TIMESTAMP_TYPE_BIT) & 0xFFFF
    _ATTRIBUTES.pack_into(buffer, header.position + _ATTRIBUTES_AT, _signed16(attributes))
    _MAX_TIMESTAMP.pack_into(buffer, header.position + _MAX_TIMESTAMP_AT, timestamp_ms)
    end = header.position + header.size_bytes
    crc = crc32c(memoryview(buffer)[header.position + CRC_START : end])
    _CRC.pack_into(buffer, header.position + _CRC_AT, crc)


# ---------------------------------------------------------------- full codec


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    compression: Compression = Compression.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode ``records`` as one batch. Offsets are kept: deltas are ``offset - base_offset``.

    ``base_offset`` defaults to the first record's offset and ``last_offset_delta``
    to the last record's delta; the cleaner passes both to keep a batch's range
    when it drops records.
    """
    if base_offset is None:
        if not records:
            raise InvalidRecordError("an empty batch needs an explicit base offset")
        base_offset = records[0].offset
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    timestamps = [record.timestamp for record in records]
    first_timestamp = timestamps[0] if timestamps else NO_TIMESTAMP
    max_timestamp = max(timestamps) if timestamps else NO_TIMESTAMP
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = b"".join(encode_record(record, base_offset, base_timestamp) for record in records)
    return encode_batch_body(
        body,
        records_count=len(records),
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        delete_horizon_ms=delete_horizon_ms,
    )


def encode_batch_body(
    body: bytes | bytearray,
    *,
    records_count: int,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: Compression = Compression.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One batch around ``body``, already encoded records whose deltas are relative to
    ``base_offset`` and ``base_timestamp`` (the delete horizon when one is given)."""
    payload = compress(compression, bytes(body))
    attributes = int(compression)
    attributes |= TIMESTAMP_TYPE_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    attributes |= TRANSACTIONAL_BIT if is_transactional else 0
    attributes |= CONTROL_BIT if is_control else 0
    attributes |= DELETE_HORIZON_BIT if delete_horizon_ms is not None else 0
    batch = bytearray(HEADER_BYTES + len(payload))
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD_BYTES,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    batch[HEADER_BYTES:] = payload
    _CRC.pack_into(batch, _CRC_AT, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def decode_batch(
    buffer: bytes | bytearray | memoryview, position: int = 0, *, check_crc: bool = True
) -> DecodedBatch:
    """Decode the batch at ``position`` with all its records."""
    header = parse_header(buffer, position)
    end = position + header.size_bytes
    if end > len(buffer):
        raise CorruptRecordError(
            f"record batch at byte {position} claims {header.size_bytes} bytes, "
            f"{len(buffer) - position} remain"
        )
    if check_crc:
        verify_crc(buffer, header)
    return DecodedBatch(header, _decode_records(_records_bytes(buffer, header), header))


def _records_bytes(buffer: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The batch's records, decompressed: one copy, as bytes (indexing and slicing bytes
    is much cheaper than a memoryview's)."""
    payload = memoryview(buffer)[
        header.position + HEADER_BYTES : header.position + header.size_bytes
    ]
    compression = header.attributes & COMPRESSION_MASK
    if not compression:  # uncompressed, the common case: no enum lookup
        return bytes(payload)
    try:
        codec = Compression(compression)
    except ValueError:
        raise CorruptRecordError(
            f"record batch uses unknown compression codec {compression}"
        ) from None
    return decompress(codec, payload)


def decode_record_set(
    buffer: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> list[DecodedBatch]:
    """Decode every whole batch in ``buffer``; a partial batch at the end is ignored."""
    batches = []
    position = 0
    while len(buffer) - position >= HEADER_BYTES:
        _, size = read_offset_and_length(buffer, position)
        if position + size > len(buffer):
            break
        batches.append(decode_batch(buffer, position, check_crc=check_crc))
        position += size
    return batches


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    """One record's encoding in a batch of ``base_offset`` and ``base_timestamp``, its
    length prefix included."""
    parts = [
        b"\x00",
        encode_varint(record.timestamp - base_timestamp),
        encode_varint(record.offset - base_offset),
        _encode_bytes(record.key),
        _encode_bytes(record.value),
        encode_varint(len(record.headers)),
    ]
    for header_key, header_value in record.headers:
        parts.append(_encode_bytes(header_key.encode()))
        parts.append(_encode_bytes(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _encode_bytes(value: bytes | None) -> bytes:
    if value is None:
        return encode_varint(-1)
    return encode_varint(len(value)) + value


def encode_varint(value: int) -> bytes:
    """Zig-zag varint, as Kafka's ``ByteUtils.writeVarlong``."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def decode_varint(
    buffer: bytes | bytearray | memoryview, position: int, end: int
) -> tuple[int, int]:
    """Decode a zig-zag varint at ``position``, never reading at or past ``end``."""
    result = 0
    shift = 0
    while True:
        if position >= end:
            raise CorruptRecordError("varint runs past the end of its record")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def check_keys_present(buffer: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Raise unless every record of the batch at ``header`` carries a key (compacted topics).

    Walks the records as :func:`iter_raw_records` streams them: one record at a time
    is held, whatever the batch inflates to (up to ``DECOMPRESSED_BYTES_MAX``), and
    offset deltas must count 0, 1, 2, ... Every keyless record is named in the
    ``InvalidRecordError``'s ``record_errors``, so the producer learns which records
    were refused; a framing error refuses the whole batch (``CorruptRecordError``)
    before any record is named.
    """
    keyless: list[int] = []
    records = iter_raw_records(
        buffer, header, decompressed_bytes_max=DECOMPRESSED_BYTES_MAX, with_data=False
    )
    for index, record in enumerate(records):
        if record.offset_delta != index:
            raise InvalidRecordError(f"record {index} has offset delta {record.offset_delta}")
        if record.key is None:
            keyless.append(index)
    if keyless:
        raise InvalidRecordError(
            f"{len(keyless)} of {header.records_count} records have no key, "
            f"and a compacted topic only accepts records with a key (first: record {keyless[0]})",
            tuple(RecordError(index, KEYLESS_RECORD_MESSAGE) for index in keyless),
        )


class RawRecord(NamedTuple):
    """One record as streamed from its batch: the fields the cleaner reads, and ``data``,
    the record's encoding (length prefix included), to copy it unchanged."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool
    data: bytes


def iter_raw_records(
    buffer: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    decompressed_bytes_max: int,
    with_data: bool = True,
) -> Iterator[RawRecord]:
    """The records of the batch at ``header``, one at a time, decompressed as they are
    reached: at most one record and one piece of decompressed payload are held.

    Raises :class:`DecompressionLimitError` as soon as the payload inflates past
    ``decompressed_bytes_max``, CorruptRecordError when the records do not frame
    exactly (count, lengths, trailing bytes). Header keys and values are not checked.
    Without ``with_data`` each record's ``data`` is empty, which saves a copy of it.
    """
    payload = memoryview(buffer)[
        header.position + HEADER_BYTES : header.position + header.size_bytes
    ]
    codec = header.attributes & COMPRESSION_MASK
    reader = _PieceReader(iter_decompressed(codec, payload, limit_bytes=decompressed_bytes_max))
    for _ in range(header.records_count):
        yield reader.next_record(with_data)
    if reader.has_more():
        raise CorruptRecordError("record batch has bytes after its last record")


class _PieceReader:
    """Records across the pieces of a decompressed payload, holding only what is unread."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._buffer = bytearray()
        self._cursor = 0

    def _ensure(self, count: int) -> bool:
        """Whether ``count`` unread bytes are buffered, reading pieces until they are."""
        while len(self._buffer) - self._cursor < count:
            piece = next(self._pieces, None)
            if piece is None:
                return False
            del self._buffer[: self._cursor]
            self._cursor = 0
            self._buffer += piece
        return True

    def has_more(self) -> bool:
        return self._ensure(1)

    def next_record(self, with_data: bool) -> RawRecord:
        self._ensure(VARINT_BYTES_MAX)
        buffer = self._buffer
        length, position = decode_varint(buffer, self._cursor, len(buffer))
        prefix = position - self._cursor
        if length < 0 or not self._ensure(prefix + length):
            raise CorruptRecordError(f"record length {length} overruns its batch")
        buffer = self._buffer  # reading more may have moved the unread bytes to the front
        start = self._cursor
        position = start + prefix
        end = position + length
        timestamp_delta, field = decode_varint(buffer, position + 1, end)  # after attributes
        offset_delta, field = decode_varint(buffer, field, end)
        key_length, field = decode_varint(buffer, field, end)
        if key_length < -1 or field + max(key_length, 0) > end:
            raise CorruptRecordError(f"record key length {key_length} overruns its record")
        key = None if key_length < 0 else bytes(buffer[field : field + key_length])
        value_length, _ = decode_varint(buffer, field + max(key_length, 0), end)
        self._cursor = end
        data = b""
        if with_data:
            with memoryview(buffer) as view:
                data = bytes(view[start:end])
        return RawRecord(offset_delta, timestamp_delta, key, value_length == -1, data)


def rebase_record(data: bytes, timestamp_shift_ms: int) -> bytes:
    """A record's encoding with its timestamp delta moved by ``timestamp_shift_ms`` (for a
    batch whose base timestamp changes); every other field is copied."""
    _, position = decode_varint(data, 0, len(data))
    timestamp_delta, rest = decode_varint(data, position + 1, len(data))
    body = (
        data[position : position + 1]
        + encode_varint(timestamp_delta + timestamp_shift_ms)
        + data[rest:]
    )
    return encode_varint(len(body)) + body


def _decode_records(body: bytes, header: BatchHeader) -> list[Record]:
    records: list[Record] = []
    position = 0
    end = len(body)
    for _ in range(header.records_count):
        length, position = read_varint(body, position, end)
        record_end = position + length
        if length < 0 or record_end > end:
            raise CorruptRecordError(f"record length {length} overruns its batch")
        records.append(_decode_record(body, position, record_end, header))
        position = record_end
    if position != end:
        raise CorruptRecordError(f"record batch has {end - position} bytes after its last record")
    return records


def _decode_record(body: bytes, position: int, end: int, header: BatchHeader) -> Record:
    position += 1  # attributes: unused in v2
    if position > end:
        raise CorruptRecordError("record is shorter than its attributes byte")
    timestamp_delta, position = read_varint(body, position, end)
    offset_delta, position = read_varint(body, position, end)
    key, position = _decode_bytes(body, position, end)
    value, position = _decode_bytes(body, position, end)
    header_count, position = read_varint(body, position, end)
    if header_count < 0 or header_count > end - position:
        raise CorruptRecordError(f"record header count {header_count} is impossible")
    headers = []
    for _ in range(header_count):
        raw_key, position = _decode_bytes(body, position, end)
        header_value, position = _decode_bytes(body, position, end)
        if raw_key is None:
            raise CorruptRecordError("record header key is null")
        try:
            headers.append((raw_key.decode(), header_value))
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("record header key is not UTF-8") from exc
    if position != end:
        raise CorruptRecordError("record has trailing bytes")
    timestamp = header.base_timestamp + timestamp_delta
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamp = header.max_timestamp
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))


def read_varint(body: bytes, position: int, end: int) -> tuple[int, int]:
    """:func:`decode_varint` for ``bytes``, with the one-byte case (every value from -64
    to 63) inline."""
    if position < end:
        byte = body[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
    return decode_varint(body, position, end)


def _decode_bytes(body: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = read_varint(body, position, end)
    if length == -1:
        return None, position
    if length < 0 or position + length > end:
        raise CorruptRecordError(f"record field length {length} overruns its record")
    return body[position : position + length], position + length


def keyed_records(
    buffer: bytes | bytearray | memoryview, position: int = 0
) -> Iterator[tuple[int, int, bytes | None, bytes, int, int]]:
    """A lighter walk than :func:`decode_batch` for readers that want a few fields: for
    each record of the batch at ``position``, its number, its offset delta, its key, the
    batch's record bytes (decompressed), where the record's value begins in them, and
    where the record ends. Nothing past the key is read (see :func:`skip_value`,
    :func:`named_headers`) and the CRC is not checked. Raises CorruptRecordError for
    records that do not frame or a codec that is none."""
    header = parse_header(buffer, position)
    body = _records_bytes(buffer, header)
    end = len(body)
    at = 0
    for index in range(header.records_count):
        length, at = read_varint(body, at, end)
        record_end = at + length
        if length < 0 or record_end > end:
            raise CorruptRecordError(f"record length {length} overruns its batch")
        at += 1  # attributes
        _, at = read_varint(body, at, record_end)  # timestamp delta
        offset_delta, at = read_varint(body, at, record_end)
        size, at = read_varint(body, at, record_end)
        if size > record_end - at:
            raise CorruptRecordError(f"record key length {size} overruns its record")
        key = None if size < 0 else body[at : at + size]
        yield index, offset_delta, key, body, at + max(size, 0), record_end
        at = record_end


def record_value(body: bytes, at: int, end: int) -> tuple[bytes | None, int]:
    """The value of the record whose value begins at ``at``, and where its headers begin."""
    return _decode_bytes(body, at, end)


def skip_value(body: bytes, at: int, end: int) -> int:
    """Where the headers begin of the record whose value begins at ``at``."""
    size, at = read_varint(body, at, end)
    return at + max(size, 0)


def named_headers(body: bytes, at: int, end: int, name: bytes) -> list[bytes | None]:
    """The values of the headers called ``name`` of the record whose headers begin at
    ``at`` and which ends at ``end``, in order; CorruptRecordError when they overrun it."""
    count, at = read_varint(body, at, end)
    found: list[bytes | None] = []
    for _ in range(count):
        size, at = read_varint(body, at, end)
        matches = body[at : at + size] == name
        at += max(size, 0)
        size, at = read_varint(body, at, end)
        if matches:
            found.append(None if size < 0 else body[at : at + size])
        at += max(size, 0)
    if at > end:
        raise CorruptRecordError("record fields overrun the record")
    return found


def _signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value
