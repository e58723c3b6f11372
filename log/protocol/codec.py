"""The generic encoder and decoder that walk the declarative tables.

``compile_struct(fields, version, flexible=...)`` returns a ``StructCodec``
whose ``decode`` turns bytes into a dict keyed by field name and whose
``encode`` writes a mapping back. Codecs are built once per (table, version)
and cached.

Decoding never trusts a length: every string, byte string and array length is
checked against the bytes that remain before anything is sliced or
allocated, so a frame cannot make the broker reserve more memory than the
frame itself occupies. A field absent from the decoded version gets its
default, so callers always see every key.

Encoding writes into a ``Writer``. Record data may be given as bytes or as a
file region (any object with an ``int`` attribute ``length`` and a
``read_bytes()`` method, such as the storage engine's ``SegmentSlice``); a
region ends the current byte chunk, so the caller can send it with
``os.sendfile`` between the surrounding bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from eventplatform.log.protocol.errors import ProtocolError
from eventplatform.log.protocol.schema import Array, F, Primitive, Struct

ARRAY_ITEMS_MAX = 1 << 24
NULL_STRUCT_MARKER = -1
PRESENT_STRUCT_MARKER = 1
VARINT_BYTES_MAX = 5

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_UINT16 = struct.Struct(">H")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")


class FileRegion(Protocol):
    """Bytes of a file that the connection sends with ``os.sendfile``."""

    @property
    def length(self) -> int: ...

    def read_bytes(self) -> bytes: ...


Chunk = bytes | FileRegion


class Reader:
    """A cursor over one frame; every read checks the bytes that remain."""

    __slots__ = ("buffer", "end", "position")

    def __init__(
        self, buffer: bytes | bytearray | memoryview, position: int = 0, end: int | None = None
    ) -> None:
        self.buffer = buffer
        self.position = position
        self.end = len(buffer) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.position

    def take(self, count: int) -> int:
        """Reserve ``count`` bytes and return where they start."""
        position = self.position
        if count < 0 or count > self.end - position:
            raise ProtocolError(
                f"frame truncated: {count} bytes wanted at {position}, {self.end - position} left"
            )
        self.position = position + count
        return position

    def unpack(self, codec: struct.Struct) -> Any:
        return codec.unpack_from(self.buffer, self.take(codec.size))[0]

    def slice(self, count: int) -> Any:
        start = self.take(count)
        return self.buffer[start : start + count]

    def unsigned_varint(self) -> int:
        value = 0
        shift = 0
        for _ in range(VARINT_BYTES_MAX):
            byte = self.buffer[self.take(1)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ProtocolError("unsigned varint longer than 5 bytes")

    def finish(self) -> None:
        if self.position != self.end:
            raise ProtocolError(f"{self.end - self.position} trailing bytes after the message")


class Writer:
    """Collects encoded bytes, splitting around file regions."""

    __slots__ = ("buffer", "chunks")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.chunks: list[Chunk] = []

    def region(self, region: FileRegion) -> None:
        if self.buffer:
            self.chunks.append(bytes(self.buffer))
            self.buffer = bytearray()
        self.chunks.append(region)

    def unsigned_varint(self, value: int) -> None:
        buffer = self.buffer
        while value > 0x7F:
            buffer.append((value & 0x7F) | 0x80)
            value >>= 7
        buffer.append(value)

    def finish(self) -> list[Chunk]:
        if self.buffer or not self.chunks:
            self.chunks.append(bytes(self.buffer))
            self.buffer = bytearray()
        return self.chunks


def chunks_length(chunks: list[Chunk]) -> int:
    return sum(len(chunk) if isinstance(chunk, bytes) else chunk.length for chunk in chunks)


def flatten(chunks: list[Chunk]) -> bytes:
    """Join chunks into one byte string, reading file regions."""
    return b"".join(chunk if isinstance(chunk, bytes) else chunk.read_bytes() for chunk in chunks)


# ---------------------------------------------------------------- primitives

Read = Callable[[Reader], Any]
Write = Callable[[Writer, Any], None]


def _fixed(codec: struct.Struct) -> tuple[Read, Write]:
    def read(reader: Reader) -> Any:
        return reader.unpack(codec)

    def write(writer: Writer, value: Any) -> None:
        try:
            writer.buffer += codec.pack(value)
        except struct.error as exc:
            raise ValueError(f"{value!r} does not fit {codec.format!r}") from exc

    return read, write


def _read_bool(reader: Reader) -> bool:
    return bool(reader.buffer[reader.take(1)])


def _write_bool(writer: Writer, value: Any) -> None:
    writer.buffer.append(1 if value else 0)


def _read_uuid(reader: Reader) -> bytes:
    return bytes(reader.slice(16))


def _write_uuid(writer: Writer, value: Any) -> None:
    if len(value) != 16:
        raise ValueError("a uuid is 16 bytes")
    writer.buffer += value


def _read_length(reader: Reader, *, compact: bool, wide: bool) -> int:
    """A length prefix; -1 means null. Compact lengths are stored plus one."""
    if compact:
        return reader.unsigned_varint() - 1
    return int(reader.unpack(_INT32 if wide else _INT16))


def _write_length(writer: Writer, length: int, *, compact: bool, wide: bool) -> None:
    if compact:
        writer.unsigned_varint(length + 1)
    elif wide:
        writer.buffer += _INT32.pack(length)
    else:
        writer.buffer += _INT16.pack(length)


def _string_codec(*, compact: bool, nullable: bool) -> tuple[Read, Write]:
    def read(reader: Reader) -> str | None:
        length = _read_length(reader, compact=compact, wide=False)
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProtocolError(f"negative string length {length}")
        raw = reader.slice(length)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("string is not valid UTF-8") from exc

    def write(writer: Writer, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError("null for a non-nullable string")
            _write_length(writer, -1, compact=compact, wide=False)
            return
        encoded = value.encode("utf-8")
        if not compact and len(encoded) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        _write_length(writer, len(encoded), compact=compact, wide=False)
        writer.buffer += encoded

    return read, write


def _bytes_codec(*, compact: bool, nullable: bool, records: bool) -> tuple[Read, Write]:
    def read(reader: Reader) -> Any:
        length = _read_length(reader, compact=compact, wide=True)
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProtocolError(f"negative bytes length {length}")
        return reader.slice(length) if records else bytes(reader.slice(length))

    def write(writer: Writer, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError("null for non-nullable bytes")
            _write_length(writer, -1, compact=compact, wide=True)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            _write_length(writer, len(value), compact=compact, wide=True)
            writer.buffer += value
        else:
            _write_length(writer, value.length, compact=compact, wide=True)
            writer.region(value)

    return read, write


_FIXED = {
    "int8": _fixed(_INT8),
    "int16": _fixed(_INT16),
    "uint16": _fixed(_UINT16),
    "int32": _fixed(_INT32),
    "int64": _fixed(_INT64),
    "float64": _fixed(_FLOAT64),
    "bool": (_read_bool, _write_bool),
    "uuid": (_read_uuid, _write_uuid),
}
_FIXED_BYTES = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8}
_FIXED_BYTES.update({"bool": 1, "uuid": 16})


def _primitive(kind: Primitive, *, compact: bool, nullable: bool) -> tuple[Read, Write]:
    if kind.name in _FIXED:
        return _FIXED[kind.name]
    if kind.name == "string":
        return _string_codec(compact=compact, nullable=nullable)
    return _bytes_codec(compact=compact, nullable=nullable, records=kind.name == "records")


def _minimum_bytes(field: F, version: int, *, flexible: bool) -> int:
    """The fewest bytes one value of ``field`` occupies, to bound array lengths."""
    kind = field.type
    if isinstance(kind, Primitive):
        return _FIXED_BYTES.get(kind.name, 1 if flexible else (2 if kind.name == "string" else 4))
    if isinstance(kind, Struct):
        if field.nullable is not None and version in field.nullable:
            return 1
        return _struct_minimum(kind.fields, version, flexible=flexible)
    return 1 if flexible else 4


def _struct_minimum(fields: tuple[F, ...], version: int, *, flexible: bool) -> int:
    total = 1 if flexible else 0
    for field in fields:
        if version in field.versions and field.tag is None:
            total += _minimum_bytes(field, version, flexible=flexible)
    return total


# ---------------------------------------------------------------- structs


@dataclass(frozen=True, slots=True)
class StructCodec:
    """Decoder and encoder of one struct table at one version."""

    read: Read
    write: Write

    def decode(self, buffer: bytes | bytearray | memoryview) -> dict[str, Any]:
        """Decode exactly one struct filling ``buffer``; trailing bytes are an error."""
        reader = Reader(buffer)
        value: dict[str, Any] = self.read(reader)
        reader.finish()
        return value

    def encode(self, value: Mapping[str, Any]) -> list[Chunk]:
        writer = Writer()
        self.write(writer, value)
        return writer.finish()


def _field_codec(field: F, version: int, *, flexible: bool) -> tuple[Read, Write]:
    nullable = field.nullable is not None and version in field.nullable
    kind = field.type
    if isinstance(kind, Primitive):
        return _primitive(kind, compact=flexible, nullable=nullable)
    if isinstance(kind, Struct):
        inner = compile_struct(kind.fields, version, flexible=flexible)
        if nullable:
            return _nullable_struct_codec(inner)
        return inner.read, inner.write
    if isinstance(kind, Array):
        item_read, item_write = _primitive(kind.item, compact=flexible, nullable=False)
        item_bytes = _FIXED_BYTES.get(kind.item.name, 1)
    else:
        inner = compile_struct(field.fields, version, flexible=flexible)
        item_read, item_write = inner.read, inner.write
        item_bytes = max(1, _struct_minimum(field.fields, version, flexible=flexible))
    return _array_codec(item_read, item_write, item_bytes, flexible=flexible, nullable=nullable)


def _nullable_struct_codec(inner: StructCodec) -> tuple[Read, Write]:
    """A struct that may be null: an int8 marker, -1 for null or 1 before the struct."""

    def read(reader: Reader) -> dict[str, Any] | None:
        marker = reader.unpack(_INT8)
        if marker == NULL_STRUCT_MARKER:
            return None
        if marker != PRESENT_STRUCT_MARKER:
            raise ProtocolError(f"nullable struct marker {marker} is neither -1 nor 1")
        value: dict[str, Any] = inner.read(reader)
        return value

    def write(writer: Writer, value: Any) -> None:
        if value is None:
            writer.buffer += _INT8.pack(NULL_STRUCT_MARKER)
            return
        writer.buffer += _INT8.pack(PRESENT_STRUCT_MARKER)
        inner.write(writer, value)

    return read, write


def _array_codec(
    item_read: Read, item_write: Write, item_bytes: int, *, flexible: bool, nullable: bool
) -> tuple[Read, Write]:
    def read(reader: Reader) -> list[Any] | None:
        length = _read_length(reader, compact=flexible, wide=True)
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProtocolError(f"negative array length {length}")
        if length > ARRAY_ITEMS_MAX or length * item_bytes > reader.remaining:
            raise ProtocolError(f"array of {length} items cannot fit in {reader.remaining} bytes")
        return [item_read(reader) for _ in range(length)]

    def write(writer: Writer, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError("null for a non-nullable array")
            _write_length(writer, -1, compact=flexible, wide=True)
            return
        _write_length(writer, len(value), compact=flexible, wide=True)
        for item in value:
            item_write(writer, item)

    return read, write


def _skip_tagged(reader: Reader, tagged: dict[int, tuple[str, Read]], out: dict[str, Any]) -> None:
    count = reader.unsigned_varint()
    if count > reader.remaining:
        raise ProtocolError(f"{count} tagged fields cannot fit in {reader.remaining} bytes")
    previous = -1
    for _ in range(count):
        tag = reader.unsigned_varint()
        if tag <= previous:
            raise ProtocolError("tagged fields out of order")
        previous = tag
        size = reader.unsigned_varint()
        start = reader.take(size)
        if tag in tagged:
            name, read = tagged[tag]
            inner = Reader(reader.buffer, start, start + size)
            out[name] = read(inner)
            inner.finish()


@cache
def compile_struct(fields: tuple[F, ...], version: int, *, flexible: bool) -> StructCodec:
    """Build the codec of ``fields`` at ``version`` (tables are hashable tuples)."""
    steps: list[tuple[str, Read, Write, Any]] = []
    tagged: dict[int, tuple[str, Read]] = {}
    tagged_writes: list[tuple[int, str, Write, Any]] = []
    absent: list[F] = []
    for field in fields:
        if version not in field.versions or (field.tag is not None and not flexible):
            absent.append(field)
            continue
        read, write = _field_codec(field, version, flexible=flexible)
        if field.tag is not None:
            tagged[field.tag] = (field.name, read)
            tagged_writes.append((field.tag, field.name, write, field.default_value()))
            absent.append(field)
        else:
            steps.append((field.name, read, write, field.default_value()))
    tagged_writes.sort(key=lambda item: item[0])

    def read_struct(reader: Reader) -> dict[str, Any]:
        out = {field.name: field.default_value() for field in absent}
        for name, read, _, _ in steps:
            out[name] = read(reader)
        if flexible:
            _skip_tagged(reader, tagged, out)
        return out

    def write_struct(writer: Writer, value: Any) -> None:
        get = value.get
        for name, _, write, default in steps:
            write(writer, get(name, default))
        if flexible:
            _write_tagged(writer, value, tagged_writes)

    return StructCodec(read_struct, write_struct)


def _write_tagged(
    writer: Writer, value: Mapping[str, Any], tagged: list[tuple[int, str, Write, Any]]
) -> None:
    present = [item for item in tagged if value.get(item[1], item[3]) != item[3]]
    writer.unsigned_varint(len(present))
    for tag, name, write, _ in present:
        inner = Writer()
        write(inner, value[name])
        encoded = inner.finish()
        if len(encoded) != 1 or not isinstance(encoded[0], bytes):
            raise ValueError(f"tagged field {name} cannot hold a file region")
        writer.unsigned_varint(tag)
        writer.unsigned_varint(len(encoded[0]))
        writer.buffer += encoded[0]
