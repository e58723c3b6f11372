"""Record-batch compression codecs (attributes bits 0-2).

All codecs are C or Rust backed: zlib for gzip, cramjam for snappy, the lz4
and zstandard bindings for lz4 and zstd. Decompression runs piece by piece
(:func:`iter_decompressed`) and stops at a limit the caller names
(``DECOMPRESSED_BYTES_MAX`` for :func:`decompress`), so a small hostile payload
(a decompression bomb) cannot inflate without bound, and a caller that walks
the pieces holds one piece at a time. Snappy arrives in two forms: the raw
block format, and the xerial framing that the Java client and librdkafka
produce (an 16-byte header, then big-endian length-prefixed raw blocks).
Decompression detects the framing by its magic; compression writes xerial
framing, which every client reads. LZ4 is the standard LZ4 frame format
(Kafka magic 2 fixed the header checksum).
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Iterator

import cramjam
import lz4.frame
import zstandard

from eventplatform.log.storage.errors import (
    CorruptRecordError,
    DecompressionLimitError,
    UnsupportedCompressionError,
)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024
ZSTD_INPUT_STEP_BYTES = 256
DECOMPRESSED_BYTES_MAX = 256 * 1024 * 1024
"""The most one batch's payload may inflate to when it is decompressed whole."""
DECOMPRESSED_CHUNK_BYTES_MAX = 1024 * 1024
"""The largest piece :func:`iter_decompressed` hands out at a time, except that a snappy
block (32 KiB from most writers) is one piece, up to the caller's limit. A zstd step
may yield up to 8 MiB."""
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
    return b"".join(iter_decompressed(codec, data, limit_bytes=DECOMPRESSED_BYTES_MAX))


def iter_decompressed(
    codec: Compression | int, data: bytes | memoryview, *, limit_bytes: int
) -> Iterator[bytes]:
    """Decompress ``data`` piece by piece: no piece is larger than
    ``DECOMPRESSED_CHUNK_BYTES_MAX``, and :class:`DecompressionLimitError` is raised
    before more than ``limit_bytes`` in all have been produced, so a caller that
    consumes the pieces as they come holds one piece, whatever the payload claims.
    Any codec failure is a :class:`CorruptRecordError`."""
    if codec == Compression.NONE:
        if len(data) > limit_bytes:
            raise DecompressionLimitError(f"payload of {len(data)} bytes exceeds {limit_bytes}")
        yield bytes(data)
        return
    pieces = _CODEC_PIECES.get(int(codec))
    if pieces is None:
        raise UnsupportedCompressionError(f"unsupported compression codec {int(codec)}")
    name = Compression(codec).name.lower()
    total = 0
    try:
        for piece in pieces(data, limit_bytes):
            total += len(piece)
            if total > limit_bytes:
                raise DecompressionLimitError(
                    f"{name} payload inflates past the decompression limit of {limit_bytes} bytes"
                )
            yield piece
    except CorruptRecordError:
        raise
    except Exception as exc:  # third-party codecs raise assorted types
        raise CorruptRecordError(f"{name} payload does not decompress: {exc}") from exc


def _gunzip_pieces(data: bytes | memoryview, limit_bytes: int) -> Iterator[bytes]:
    """Inflate every gzip member in turn, as Java's GZIPInputStream does."""
    remaining = bytes(data)
    while True:
        decompressor = zlib.decompressobj(47)  # 32 + 15: accept gzip or zlib headers
        pending = remaining
        while not decompressor.eof:
            piece = decompressor.decompress(pending, DECOMPRESSED_CHUNK_BYTES_MAX)
            pending = decompressor.unconsumed_tail
            if piece:
                yield piece
            elif not pending and not decompressor.eof:
                raise CorruptRecordError("gzip payload is truncated")
        remaining = decompressor.unused_data
        if not remaining:
            return


def _lz4_pieces(data: bytes | memoryview, limit_bytes: int) -> Iterator[bytes]:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    pending = bytes(data)
    while not decompressor.eof:
        piece: bytes = decompressor.decompress(pending, max_length=DECOMPRESSED_CHUNK_BYTES_MAX)
        pending = b""
        if piece:
            yield piece
        elif decompressor.needs_input and not decompressor.eof:
            raise CorruptRecordError("lz4 payload is truncated")


def _zstd_pieces(data: bytes | memoryview, limit_bytes: int) -> Iterator[bytes]:
    """Feed the frame in small steps. A zstd block inflates to at most 128 KiB and takes
    at least 4 bytes, so one step of ``ZSTD_INPUT_STEP_BYTES`` yields at most 8 MiB."""
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    view = memoryview(data)
    for start in range(0, len(view), ZSTD_INPUT_STEP_BYTES):
        piece = decompressor.decompress(view[start : start + ZSTD_INPUT_STEP_BYTES])
        if piece:
            yield piece
        if decompressor.eof:
            return
    raise CorruptRecordError("zstd payload is truncated")


def _xerial_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_pieces(data: bytes | memoryview, limit_bytes: int) -> Iterator[bytes]:
    """Raw snappy is one block; xerial framing is length-prefixed raw blocks. A raw
    block states its inflated length up front: one past what is left of
    ``limit_bytes`` is refused before anything is allocated for it."""
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        yield _snappy_block(view, limit_bytes)
        return
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError("xerial snappy header is truncated")
    position = len(XERIAL_HEADER)
    while position < len(view):
        if position + 4 > len(view):
            raise CorruptRecordError("xerial snappy block length is truncated")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > len(view):
            raise CorruptRecordError(f"xerial snappy block length {length} overruns the payload")
        block = _snappy_block(view[position : position + length], limit_bytes)
        limit_bytes -= len(block)
        yield block
        position += length


def _snappy_block(block: memoryview, limit_bytes: int) -> bytes:
    inflated = _snappy_inflated_length(block)
    if inflated > limit_bytes:
        raise DecompressionLimitError(
            f"snappy payload inflates past the decompression limit: a block of {inflated} bytes"
        )
    return bytes(cramjam.snappy.decompress_raw(bytes(block)))


def _snappy_inflated_length(block: memoryview) -> int:
    """The little-endian base-128 varint a raw snappy block starts with."""
    result = 0
    for index in range(min(len(block), 5)):
        byte = block[index]
        result |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return result
    raise CorruptRecordError("snappy block length is malformed")


_CODEC_PIECES: dict[int, Callable[[bytes | memoryview, int], Iterator[bytes]]] = {
    Compression.GZIP: _gunzip_pieces,
    Compression.SNAPPY: _snappy_pieces,
    Compression.LZ4: _lz4_pieces,
    Compression.ZSTD: _zstd_pieces,
}
