"""The ``eventlog`` rows as Arrow columns, decoded from record batches in bulk.

Both read paths end here. The direct path hands over raw batches from the
segment files (:func:`decode_batches`); the Kafka path hands over messages
from librdkafka (:func:`columns_from_messages`). Either way the records
become :class:`RecordSpans`: one byte buffer and, per record, integers that
say where its key, value and headers lie in it. :func:`to_arrow` turns spans
into the output columns without a Python object per field.

Decoding a batch's records is the hot loop of a replay. The direct path
decodes with the compiled ``_columns`` extension (``_columns.c``), which walks
the records once and writes the Arrow buffers of every column that comes
from them, at about a third of the cost of the NumPy decoder. The NumPy
decoder serves the Kafka path's spans, and the direct path too where the
package was installed without a C compiler: one Python pass finds where each
record starts (each starts with its length), then every field of every
record is decoded together, one field at a time, with vectorized varint
decoding. Both check every record (it must end exactly at its length); when
one does not parse, the reference decoder in
:mod:`eventplatform.log.storage.record_batch` decodes the batch again and
raises its precise :class:`CorruptRecordError`.

``event_type`` and ``event_version`` come from the ``event-type`` and
``event-version`` headers (the first with a value). ``event_id`` is the
envelope's ``"id"``: the value must start with ``{"id":"`` and a 36-character
id, else it is parsed with orjson. Each is null when absent or unparseable.
The header names and the id's length are the SDK's own, from
:mod:`eventplatform.events.wire`, which imports nothing: each Python worker
Spark starts reads them without the SDK's pydantic models (about 0.2 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from eventplatform.events.wire import TYPE_HEADER, UUID_TEXT_LENGTH, VERSION_HEADER
from eventplatform.log.storage.compression import Compression, decompress
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.reader import RawBatch
from eventplatform.log.storage.record_batch import (
    COMPRESSION_MASK,
    HEADER_BYTES,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decode_batch,
    decode_varint,
)


def _compiled_decoder() -> ModuleType | None:
    try:
        from eventplatform.spark_projections import _columns
    except ImportError:  # installed without a C compiler: the NumPy decoder serves
        return None
    return _columns


compiled = _compiled_decoder()
"""The compiled decoder, or None; tests set it to None to run the NumPy decoder."""

ROWS_PER_ARROW_BATCH = 65_536
"""Records decoded together and handed to Spark as one Arrow batch (at most)."""
BODY_BYTES_PER_ARROW_BATCH = 64 * 1024 * 1024
"""Decompressed record bytes decoded together (at most, unless one batch is larger)."""
PADDING_BYTES = 16
EVENT_ID_PREFIX = b'{"id":"'
VERSION_DIGITS_MAX = 9

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestamp_type", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("element", HEADER_STRUCT))),
        pa.field("event_type", pa.string()),
        pa.field("event_version", pa.int32()),
        pa.field("event_id", pa.string()),
    ]
)
"""The columns, in order; Spark's schema is the same (see ``source.SCHEMA``)."""

_INLINE_BYTES = 12
_ID_PREFIX_BYTES = np.frombuffer(EVENT_ID_PREFIX, dtype=np.uint8)
_ID_WINDOW_BYTES = len(EVENT_ID_PREFIX) + UUID_TEXT_LENGTH + 1
"""An id's window in a value: the prefix, the id and its closing quote."""


@dataclass(slots=True)
class RecordSpans:
    """Records as integers over one buffer. Lengths are -1 for null keys and values.

    Header ``i`` of the flattened header arrays belongs to the record whose
    ``header_offsets`` range holds ``i``.
    """

    buffer: bytes
    offset: Int64Array
    timestamp_ms: Int64Array
    timestamp_type: Int64Array
    key_start: Int64Array
    key_length: Int64Array
    value_start: Int64Array
    value_length: Int64Array
    header_offsets: Int64Array
    header_key_start: Int64Array
    header_key_length: Int64Array
    header_value_start: Int64Array
    header_value_length: Int64Array


# ---------------------------------------------------------------- direct path


def decode_batches(
    batches: Iterable[RawBatch], *, topic: str, partition: int, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``[start, end)`` held by ``batches``.

    ``batches`` are whole, CRC-checked data batches in log order (control
    batches already removed). Records outside the range are dropped.
    """
    group: list[RawBatch] = []
    rows = body_bytes = 0
    for batch in batches:
        group.append(batch)
        rows += batch.header.records_count
        body_bytes += len(batch.data)
        if rows >= ROWS_PER_ARROW_BATCH or body_bytes >= BODY_BYTES_PER_ARROW_BATCH:
            yield _decode_group(group, topic=topic, partition=partition, start=start, end=end)
            group, rows, body_bytes = [], 0, 0
    if group:
        yield _decode_group(group, topic=topic, partition=partition, start=start, end=end)


def _decode_group(
    group: Sequence[RawBatch], *, topic: str, partition: int, start: int, end: int
) -> pa.RecordBatch:
    if compiled is not None:
        table, offset = _decode_compiled(group, topic=topic, partition=partition)
    else:
        spans = decode_spans(group)
        table, offset = to_arrow(spans, topic=topic, partition=partition), spans.offset
    if len(offset) and (offset[0] < start or offset[-1] >= end):
        table = table.filter(pa.array((offset >= start) & (offset < end)))
    return table


def decode_spans(group: Sequence[RawBatch]) -> RecordSpans:
    """Every record of ``group`` as spans; raises CorruptRecordError on malformed records."""
    bodies = _bodies(group)
    buffer = b"".join([*bodies, bytes(PADDING_BYTES)])  # one copy, padding included
    record_starts, record_ends, batch_of_record = _record_bounds(buffer, group, bodies)
    spans, bad = _decode_fields(buffer, record_starts, record_ends)
    if bad.any():
        _raise_first_corrupt(group, batch_of_record[bad])
    stamps = _Stamps([batch.header for batch in group], batch_of_record)
    spans.offset += stamps.base_offset
    spans.timestamp_ms, spans.timestamp_type = stamps.timestamps(spans.timestamp_ms)
    return spans


def _bodies(group: Sequence[RawBatch]) -> list[memoryview]:
    """Each batch's records, decompressed."""
    bodies = []
    for batch in group:
        payload = batch.data[HEADER_BYTES:]
        codec = batch.header.attributes & COMPRESSION_MASK
        if codec == Compression.NONE:
            bodies.append(payload)
        else:
            try:
                bodies.append(memoryview(decompress(codec, payload)))
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"{batch.path}: record batch at byte {batch.header.position}: {exc}"
                ) from exc
    return bodies


class _Stamps:
    """Per record, what its batch header adds: the base offset and timestamps."""

    def __init__(self, headers: Sequence[BatchHeader], batch_of_record: Int64Array) -> None:
        def per_record(values: list[int]) -> Int64Array:
            return np.array(values, dtype=np.int64)[batch_of_record]

        self.base_offset = per_record([header.base_offset for header in headers])
        self._base_timestamp = per_record([header.base_timestamp for header in headers])
        self._max_timestamp = per_record([header.max_timestamp for header in headers])
        self._append_time = per_record(
            [int(bool(header.attributes & TIMESTAMP_TYPE_BIT)) for header in headers]
        )

    def timestamps(self, deltas: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Timestamps (ms) and their types: a batch stamped at log append time gives
        each record its max timestamp, else each record adds its delta to the base."""
        timestamp_ms = deltas + self._base_timestamp
        if self._append_time.any():
            timestamp_ms = np.where(self._append_time == 1, self._max_timestamp, timestamp_ms)
        return timestamp_ms, self._append_time


def _decode_compiled(
    group: Sequence[RawBatch], *, topic: str, partition: int
) -> tuple[pa.RecordBatch, Int64Array]:
    """The columns of every record of ``group`` from the compiled decoder, and the offsets."""
    assert compiled is not None
    bodies = _bodies(group)
    counts = np.array([batch.header.records_count for batch in group], dtype=np.int64)
    body_ends = np.cumsum([len(body) for body in bodies], dtype=np.int64)
    decoded = compiled.decode(
        b"".join(bodies), body_ends, counts, TYPE_HEADER, VERSION_HEADER, pa.allocate_buffer
    )
    if isinstance(decoded, int):
        _raise_corrupt(group[decoded])
    rows = int(counts.sum())
    stamps = _Stamps([batch.header for batch in group], np.repeat(np.arange(len(group)), counts))
    offset = np.frombuffer(decoded["offset_delta"], dtype=np.int64) + stamps.base_offset
    timestamp_ms, timestamp_type = stamps.timestamps(
        np.frombuffer(decoded["timestamp_delta"], dtype=np.int64)
    )
    header_keys_offsets, header_keys_data = decoded["header_key"]
    header_count = len(header_keys_offsets) // 4 - 1
    header_keys = _checked_header_keys(
        _arrow_binary(pa.string(), header_count, None, header_keys_offsets, header_keys_data)
    )
    headers = pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), rows + 1, [None, decoded["header_offsets"]]),
        pa.StructArray.from_arrays(
            [header_keys, _arrow_binary(pa.binary(), header_count, *decoded["header_value"])],
            fields=list(HEADER_STRUCT),
        ),
        type=ARROW_SCHEMA.field("headers").type,
    )
    values = _arrow_binary(pa.binary(), rows, *decoded["value"])
    version_validity, versions = decoded["event_version"]
    columns = [
        _constant_text(topic, rows),
        pa.array(np.full(rows, partition, dtype=np.int32)),
        pa.array(offset),
        pa.array(timestamp_ms * 1000, type=pa.int64()).view(ARROW_SCHEMA.field(3).type),
        pa.array(timestamp_type.astype(np.int32)),
        _arrow_binary(pa.binary(), rows, *decoded["key"]),
        values,
        headers,
        _as_text(_arrow_binary(pa.binary(), rows, *decoded["event_type"])),
        pa.Array.from_buffers(pa.int32(), rows, [version_validity, versions]),
        _slow_ids(
            _as_text(_arrow_binary(pa.binary(), rows, *decoded["event_id"])),
            values,
            np.array(decoded["slow_ids"], dtype=np.int64),
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), offset


def _arrow_binary(
    arrow_type: pa.DataType,
    rows: int,
    validity: pa.Buffer | None,
    offsets: pa.Buffer,
    data: pa.Buffer,
) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, rows, [validity, offsets, data])


def _record_bounds(
    buffer: bytes, group: Sequence[RawBatch], bodies: Sequence[memoryview]
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Start and end of every record's bytes (after its varint length), and its batch.

    The one per-record Python loop: it only hops from length to length, and
    one- and two-byte lengths are read inline. A negative or overrunning
    length shows up in the vectorized check that follows.
    """
    begins: list[int] = []
    append = begins.append
    counts = []
    limits = []
    position = 0
    for batch, body in zip(group, bodies, strict=True):
        end = position + len(body)
        try:
            for _ in range(batch.header.records_count):
                append(position)
                byte = buffer[position]
                if byte < 0x80:
                    position += 1 + (byte >> 1)
                    continue
                second = buffer[position + 1]
                if second < 0x80:
                    position += 2 + (((byte & 0x7F) | (second << 7)) >> 1)
                else:
                    length, position = decode_varint(buffer, position, end)
                    position += max(length, 0)
        except (IndexError, CorruptRecordError):
            _raise_corrupt(batch)
        if position != end:
            _raise_corrupt(batch)
        counts.append(batch.header.records_count)
        limits.append(end)
    batch_of_record = np.repeat(np.arange(len(group), dtype=np.int64), counts)
    begin = np.array(begins, dtype=np.int64)
    end_of_record = np.empty_like(begin)
    end_of_record[:-1] = begin[1:]
    last = np.cumsum(counts) - 1
    end_of_record[last[np.array(counts) > 0]] = np.array(limits)[np.array(counts) > 0]
    record_length, start = _varints(np.frombuffer(buffer, dtype=np.uint8), begin)
    bad = (record_length < 0) | (start + record_length != end_of_record)
    if bad.any():
        _raise_first_corrupt(group, batch_of_record[bad])
    return start, end_of_record, batch_of_record


def _decode_fields(
    buffer: bytes, starts: Int64Array, ends: Int64Array
) -> tuple[RecordSpans, BoolArray]:
    """Decode every record's fields at once; ``bad`` marks records that do not parse.

    Offsets and timestamps come back as deltas; the caller adds the batch bases.
    """
    data = np.frombuffer(buffer, dtype=np.uint8)
    position = starts + 1  # the attributes byte, unused in v2
    timestamp_delta, position = _varints(data, position)
    offset_delta, position = _varints(data, position)
    key_length, position = _varints(data, position)
    key_start = position
    position = key_start + np.maximum(key_length, 0)
    value_length, position = _varints(data, position)
    value_start = position
    position = value_start + np.maximum(value_length, 0)
    header_count, position = _varints(data, position)
    bad = (key_length < -1) | (value_length < -1) | (header_count < 0)
    bad |= header_count > ends - position
    header_count = np.where(bad, 0, header_count)
    header_offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(header_count, out=header_offsets[1:])
    total = int(header_offsets[-1])
    flat = [np.zeros(total, dtype=np.int64) for _ in range(4)]
    active = np.flatnonzero(header_count > 0)
    cursor = position[active]
    index = 0
    while active.size:
        header_key_length, cursor = _varints(data, cursor)
        header_key_start = cursor
        cursor = cursor + np.maximum(header_key_length, 0)
        header_value_length, cursor = _varints(data, cursor)
        header_value_start = cursor
        cursor = cursor + np.maximum(header_value_length, 0)
        slot = header_offsets[active] + index
        flat[0][slot] = header_key_start
        flat[1][slot] = np.maximum(header_key_length, 0)
        flat[2][slot] = header_value_start
        flat[3][slot] = header_value_length
        bad[active] |= (header_key_length < 0) | (header_value_length < -1)
        position[active] = cursor
        index += 1
        more = header_count[active] > index
        active, cursor = active[more], cursor[more]
    bad |= position != ends
    spans = RecordSpans(
        buffer,
        offset_delta,
        timestamp_delta,
        np.zeros(len(starts), dtype=np.int64),
        key_start,
        key_length,
        value_start,
        value_length,
        header_offsets,
        *flat,
    )
    return spans, bad


def _varints(data: npt.NDArray[np.uint8], position: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The zig-zag varints at ``position`` and the positions after them.

    Reads past the buffer clip to its last (padding) byte; the caller's
    end-of-record check catches the damage.
    """
    byte = data.take(position, mode="clip")
    raw = (byte & 0x7F).astype(np.uint64)
    after = position + 1
    more = np.flatnonzero(byte & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            after[more] = -(2**62)  # longer than 10 bytes: poison the record
            break
        byte = data.take(after[more], mode="clip")
        raw[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[more] += 1
        more = more[(byte & 0x80) != 0]
        shift += 7
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, after


def _raise_first_corrupt(group: Sequence[RawBatch], bad_batches: Int64Array) -> None:
    _raise_corrupt(group[int(bad_batches.min())])


def _raise_corrupt(batch: RawBatch) -> None:
    where = f"{batch.path}: record batch at byte {batch.header.position}"
    try:
        decode_batch(batch.data, check_crc=False)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
    raise CorruptRecordError(f"{where}: its records do not parse")


# ---------------------------------------------------------------- Kafka path


def columns_from_messages(
    messages: Sequence[tuple[int, int, int, bytes | None, bytes | None, object]],
    *,
    topic: str,
    partition: int,
) -> pa.RecordBatch:
    """The Arrow batch of ``(offset, timestamp_ms, timestamp_type, key, value, headers)``
    tuples, ``headers`` a list of ``(str, bytes | None)`` pairs or None."""
    parts: list[bytes] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    starts: list[list[int]] = [[], [], [], []]  # key, value, header key, header value
    lengths: list[list[int]] = [[], [], [], []]
    header_counts: list[int] = []
    position = 0
    for offset, timestamp_ms, timestamp_type, key, value, headers in messages:
        offsets.append(offset)
        timestamps.append(timestamp_ms)
        types.append(timestamp_type)
        pairs: list[tuple[str, bytes | None]] = headers or []  # type: ignore[assignment]
        header_counts.append(len(pairs))
        fields = [(0, key), (1, value)]
        fields.extend(item for name, raw in pairs for item in ((2, name.encode()), (3, raw)))
        for column, field in fields:
            starts[column].append(position)
            if field is None:
                lengths[column].append(-1)
            else:
                lengths[column].append(len(field))
                parts.append(field)
                position += len(field)
    header_offsets = np.zeros(len(messages) + 1, dtype=np.int64)
    np.cumsum(np.array(header_counts, dtype=np.int64), out=header_offsets[1:])

    def array(values: list[int]) -> Int64Array:
        return np.array(values, dtype=np.int64)

    spans = RecordSpans(
        b"".join(parts) + bytes(PADDING_BYTES),
        array(offsets),
        array(timestamps),
        array(types),
        array(starts[0]),
        array(lengths[0]),
        array(starts[1]),
        array(lengths[1]),
        header_offsets,
        array(starts[2]),
        array(lengths[2]),
        array(starts[3]),
        array(lengths[3]),
    )
    return to_arrow(spans, topic=topic, partition=partition)


# ---------------------------------------------------------------- Arrow


def to_arrow(spans: RecordSpans, *, topic: str, partition: int) -> pa.RecordBatch:
    """The output columns of ``spans`` (see :data:`ARROW_SCHEMA`)."""
    rows = len(spans.offset)
    data = np.frombuffer(spans.buffer, dtype=np.uint8)
    header_keys = _span_array(
        data, spans.header_key_start, spans.header_key_length, pa.string(), check_text=True
    )
    header_values = _span_array(
        data, spans.header_value_start, spans.header_value_length, pa.binary()
    )
    headers = pa.ListArray.from_arrays(
        pa.array(spans.header_offsets.astype(np.int32)),
        pa.StructArray.from_arrays([header_keys, header_values], fields=list(HEADER_STRUCT)),
        type=ARROW_SCHEMA.field("headers").type,
    )
    values = _span_array(data, spans.value_start, spans.value_length, pa.binary())
    record_of_header = np.repeat(np.arange(rows), np.diff(spans.header_offsets))
    event_type = _first_header(TYPE_HEADER, header_keys, header_values, record_of_header, rows)
    version = _first_header(VERSION_HEADER, header_keys, header_values, record_of_header, rows)
    columns = [
        _constant_text(topic, rows),
        pa.array(np.full(rows, partition, dtype=np.int32)),
        pa.array(spans.offset),
        pa.array(spans.timestamp_ms * 1000, type=pa.int64()).view(ARROW_SCHEMA.field(3).type),
        pa.array(spans.timestamp_type.astype(np.int32)),
        _span_array(data, spans.key_start, spans.key_length, pa.binary()),
        values,
        headers,
        _as_text(event_type),
        _parse_versions(version),
        _event_ids(data, spans.value_start, spans.value_length, values),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _constant_text(text: str, rows: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(rows + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(raw * rows)]
    )


def _span_array(
    data: npt.NDArray[np.uint8],
    starts: Int64Array,
    lengths: Int64Array,
    arrow_type: pa.DataType,
    *,
    check_text: bool = False,
) -> pa.Array:
    """An Arrow binary or string array of ``data[start:start + length]`` per row
    (null where the length is negative), built as a view array and then compacted."""
    rows = len(starts)
    valid = lengths >= 0
    sizes = np.maximum(lengths, 0)
    views = np.zeros((rows, 4), dtype=np.int32)
    views[:, 0] = sizes
    long = sizes > _INLINE_BYTES
    long_count = int(np.count_nonzero(long))
    if long_count == rows:
        views[:, 1] = _windows(data, 4, starts).view(np.int32)[:, 0]
        views[:, 3] = starts
    elif long_count:
        picked = np.flatnonzero(long)
        views[picked, 1] = _windows(data, 4, starts[picked]).view(np.int32)[:, 0]
        views[picked, 3] = starts[picked]
    if long_count < rows:
        short = np.flatnonzero(~long & (sizes > 0))
        inline = _windows(data, _INLINE_BYTES, starts[short])
        inline *= np.arange(_INLINE_BYTES, dtype=np.int64)[None, :] < sizes[short, None]
        views.view(np.uint8).reshape(rows, 16)[short, 4:] = inline
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if arrow_type == pa.string() else pa.binary_view()
    array = pa.Array.from_buffers(
        view_type, rows, [validity, pa.py_buffer(views), pa.py_buffer(data)]
    ).cast(arrow_type)
    return _checked_header_keys(array) if check_text else array


def _checked_header_keys(keys: pa.Array) -> pa.Array:
    """``keys``, once they are known to be UTF-8, as every Kafka client reads them."""
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptRecordError(f"a record header key is not UTF-8: {exc}") from exc
    return keys


def _windows(data: npt.NDArray[np.uint8], width: int, starts: Int64Array) -> npt.NDArray[np.uint8]:
    """``data[start:start + width]`` for every start, as rows of a new array.

    Gathers fixed-size items of a byte-strided void view: one copy per row,
    far cheaper than a 2-D fancy index. Every start must leave ``width`` bytes.
    """
    items = np.ndarray((len(data) - width + 1,), dtype=f"V{width}", buffer=data.data, strides=(1,))
    return items[starts].view(np.uint8).reshape(len(starts), width)


def _first_header(
    name: str,
    keys: pa.Array,
    values: pa.Array,
    record_of_header: Int64Array,
    rows: int,
) -> pa.Array:
    """Per record, the value of its first header called ``name`` that has a value."""
    match = pc.and_(pc.equal(keys, name), pc.is_valid(values))
    hits = np.flatnonzero(match.to_numpy(zero_copy_only=False))
    chosen = np.full(rows, -1, dtype=np.int64)
    chosen[record_of_header[hits[::-1]]] = hits[::-1]  # the first hit is assigned last
    return values.take(pa.array(chosen, mask=chosen < 0))


def _parse_versions(raw: pa.Array) -> pa.Array:
    """Decimal header values as int32; null when absent, not all digits, or too long."""
    text = raw.view(pa.string())
    digits = pc.match_substring_regex(text, f"^[0-9]{{1,{VERSION_DIGITS_MAX}}}$")
    return pc.cast(pc.if_else(digits, text, pa.scalar(None, pa.string())), pa.int32())


def _event_ids(
    data: npt.NDArray[np.uint8], starts: Int64Array, lengths: Int64Array, values: pa.Array
) -> pa.Array:
    """The envelope's id: cut from values that start ``{"id":"<36 characters>"``, parsed
    with orjson from other values that look like JSON objects.

    The cut is made on the value spans in ``data``, in bulk: one fixed-width
    window per value holds the prefix, the id and its closing quote.
    """
    rows = len(starts)
    prefix = len(EVENT_ID_PREFIX)
    fast = np.zeros(rows, dtype=np.bool_)
    ids = np.empty((0, UUID_TEXT_LENGTH), dtype=np.uint8)
    wide = np.flatnonzero(lengths >= _ID_WINDOW_BYTES)
    if wide.size:
        window = _windows(data, _ID_WINDOW_BYTES, starts[wide])
        candidate = window[:, prefix : prefix + UUID_TEXT_LENGTH]
        hit = (window[:, :prefix] == _ID_PREFIX_BYTES).all(axis=1)
        hit &= window[:, -1] == ord('"')
        hit &= ~(candidate == ord("\\")).any(axis=1)
        fast[wide] = hit
        ids = candidate[hit]
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(np.where(fast, UUID_TEXT_LENGTH, 0), out=offsets[1:])
    validity = None if fast.all() else pa.py_buffer(np.packbits(fast, bitorder="little"))
    column = _as_text(
        pa.Array.from_buffers(
            pa.binary(), rows, [validity, pa.py_buffer(offsets), pa.py_buffer(ids.tobytes())]
        )
    )
    opening = np.flatnonzero(~fast & (lengths > 0))
    return _slow_ids(column, values, opening[data[starts[opening]] == ord("{")])


def _slow_ids(column: pa.Array, values: pa.Array, slow_rows: Int64Array) -> pa.Array:
    """``column`` with the ids of ``slow_rows``' values (JSON objects) parsed by orjson."""
    if not slow_rows.size:
        return column
    identifiers = [envelope_id(raw) for raw in values.take(pa.array(slow_rows)).to_pylist()]
    mask = np.zeros(len(column), dtype=np.bool_)
    mask[slow_rows] = True
    return pc.replace_with_mask(column, pa.array(mask), pa.array(identifiers, pa.string()))


def envelope_id(value: bytes) -> str | None:
    """The ``"id"`` of an envelope's JSON; None if ``value`` is no JSON object with a text id."""
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    identifier = document.get("id") if isinstance(document, dict) else None
    return identifier if isinstance(identifier, str) else None


def _as_text(array: pa.Array) -> pa.Array:
    """A binary array as text; values that are not UTF-8 decode with replacement."""
    text = array.view(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return pa.array(
            [None if raw is None else raw.decode("utf-8", "replace") for raw in array.to_pylist()],
            pa.string(),
        )
    return text
