"""Record-batch compression codecs (attributes bits 0-2).

All codecs are C or Rust backed: zlib for gzip, cramjam for snappy, the lz4
and zstandard bindings for lz4 and zstd. Every decompressor stops at
``DECOMPRESSED_BYTES_MAX``, so a small hostile payload cannot inflate without
bound. Snappy arrives in two forms: the raw block format, and the xerial
framing that the Java client and librdkafka produce (an 16-byte header, then
big-endian length-prefixed raw blocks). Decompression detects the framing by
its magic; compression writes xerial framing, which every client reads.
LZ4 is the standard LZ4 frame format (Kafka magic 2 fixed the header checksum).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from eventplatform.log.storage.errors import CorruptRecordError, UnsupportedCompressionError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024
ZSTD_INPUT_STEP_BYTES = 1024
DECOMPRESSED_BYTES_MAX = 256 * 1024 * 1024
_BLOCK_LENGTH = struct.Struct(">i")


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.strip().upper()]
        except KeyError:
            allowed = ", ".join(member.name.lower() for member in cls)
            raise UnsupportedCompressionError(
                f"unknown compression {name!r}; expected one of {allowed}"
            ) from None


def compress(codec: Compression, data: bytes) -> bytes:
    """Compress ``data`` in the form clients expect for ``codec``."""
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        # The Java client rejects frames whose blocks depend on earlier blocks.
        return bytes(lz4.frame.compress(data, block_linked=False))
    if codec is Compression.ZSTD:
        return bytes(zstandard.ZstdCompressor(level=3).compress(data))
    raise UnsupportedCompressionError(f"unsupported compression codec {int(codec)}")


def decompress(codec: Compression | int, data: bytes | memoryview) -> bytes:
    """Decompress ``data``; raise :class:`CorruptRecordError` on any codec failure."""
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            return _gunzip(data)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec == Compression.LZ4:
            return _lz4_decompress(data)
        if codec == Compression.ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # third-party codecs raise assorted types
        name = Compression(codec).name.lower()
        raise CorruptRecordError(f"{name} payload does not decompress: {exc}") from exc
    raise UnsupportedCompressionError(f"unsupported compression codec {int(codec)}")


def _gunzip(data: bytes | memoryview) -> bytes:
    """Inflate every gzip member in turn, as Java's GZIPInputStream does."""
    parts = []
    total = 0
    remaining = bytes(data)
    while True:
        decompressor = zlib.decompressobj(47)  # 32 + 15: accept gzip or zlib headers
        part = decompressor.decompress(remaining, DECOMPRESSED_BYTES_MAX - total)
        total += len(part)
        parts.append(part)
        if decompressor.unconsumed_tail:
            raise CorruptRecordError("gzip payload inflates past the decompression limit")
        if not decompressor.eof:
            raise CorruptRecordError("gzip payload is truncated")
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


def _lz4_decompress(data: bytes | memoryview) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out: bytes = decompressor.decompress(bytes(data), max_length=DECOMPRESSED_BYTES_MAX)
    if not decompressor.eof:
        if not decompressor.needs_input:
            raise CorruptRecordError("lz4 payload inflates past the decompression limit")
        raise CorruptRecordError("lz4 payload is truncated")
    return out


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """Feed the frame in small steps: a zstd block inflates to at most 128 KiB, so the
    output of one step is bounded and the limit is checked before it can run away."""
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    view = memoryview(data)
    parts = []
    total = 0
    for start in range(0, len(view), ZSTD_INPUT_STEP_BYTES):
        part = decompressor.decompress(view[start : start + ZSTD_INPUT_STEP_BYTES])
        total += len(part)
        if total > DECOMPRESSED_BYTES_MAX:
            raise CorruptRecordError("zstd payload inflates past the decompression limit")
        parts.append(part)
        if decompressor.eof:
            break
    if not decompressor.eof:
        raise CorruptRecordError("zstd payload is truncated")
    return b"".join(parts)


def _xerial_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(bytes(view)))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError("xerial snappy header is truncated")
    position = len(XERIAL_HEADER)
    blocks = []
    total = 0
    while position < len(view):
        if position + 4 > len(view):
            raise CorruptRecordError("xerial snappy block length is truncated")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > len(view):
            raise CorruptRecordError(f"xerial snappy block length {length} overruns the payload")
        block = bytes(cramjam.snappy.decompress_raw(bytes(view[position : position + length])))
        total += len(block)
        if total > DECOMPRESSED_BYTES_MAX:
            raise CorruptRecordError("snappy payload inflates past the decompression limit")
        blocks.append(block)
        position += length
    return b"".join(blocks)
