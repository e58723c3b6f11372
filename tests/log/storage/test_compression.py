"""Compression codecs: round trips, and agreement with independent implementations."""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.storage import compression
from eventplatform.log.storage.compression import (
    XERIAL_BLOCK_BYTES,
    XERIAL_HEADER,
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
)
from eventplatform.log.storage.errors import CorruptRecordError, UnsupportedCompressionError

CODECS = list(Compression)
COMPRESSING_CODECS = [codec for codec in Compression if codec is not Compression.NONE]
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_BLOCK_INDEPENDENCE_BIT = 0x20


def _payload(size: int, seed: int) -> bytes:
    """``size`` bytes, half random and half repetitive, so every codec has work to do."""
    generator = random.Random(seed)
    words = [generator.randbytes(generator.randint(1, 12)) for _ in range(32)]
    parts: list[bytes] = []
    total = 0
    while total < size:
        part = generator.randbytes(64) if generator.random() < 0.5 else generator.choice(words) * 8
        parts.append(part)
        total += len(part)
    return b"".join(parts)[:size]


payloads = st.binary(max_size=600) | st.builds(
    _payload,
    st.integers(min_value=XERIAL_BLOCK_BYTES - 1, max_value=5 * XERIAL_BLOCK_BYTES),
    st.integers(min_value=0, max_value=2**32),
)


def _xerial_blocks(framed: bytes) -> list[bytes]:
    """Split a xerial snappy stream into its raw blocks, checking the framing."""
    assert framed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    blocks = []
    position = 16
    while position < len(framed):
        (length,) = struct.unpack_from(">i", framed, position)
        blocks.append(framed[position + 4 : position + 4 + length])
        position += 4 + length
    assert position == len(framed)
    return blocks


def _xerial_frame(data: bytes, block_bytes: int) -> bytes:
    parts = [XERIAL_HEADER]
    for start in range(0, len(data), block_bytes):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + block_bytes]))
        parts.append(struct.pack(">i", len(block)) + block)
    return b"".join(parts)


# ------------------------------------------------------------------ round trips


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(Compression), data=payloads)
def test_decompress_inverts_compress(codec: Compression, data: bytes) -> None:
    compressed = compress(codec, data)

    assert decompress(codec, compressed) == data
    assert decompress(int(codec), memoryview(compressed)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
@pytest.mark.parametrize(
    "size",
    [0, 1, XERIAL_BLOCK_BYTES - 1, XERIAL_BLOCK_BYTES, XERIAL_BLOCK_BYTES + 1, 200_000],
)
def test_round_trip_at_block_boundaries(codec: Compression, size: int) -> None:
    data = _payload(size, seed=size)

    assert decompress(codec, compress(codec, data)) == data


def test_none_is_the_identity() -> None:
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, memoryview(b"abc")) == b"abc"


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
def test_repetitive_data_shrinks(codec: Compression) -> None:
    data = b"the same record value, again and again " * 1000

    assert len(compress(codec, data)) < len(data) // 10


# ------------------------------------------------------------------ gzip


@settings(max_examples=50, deadline=None)
@given(data=payloads)
def test_gzip_agrees_with_the_stdlib(data: bytes) -> None:
    ours = compress(Compression.GZIP, data)

    assert ours[:2] == b"\x1f\x8b"
    assert gzip.decompress(ours) == data
    assert decompress(Compression.GZIP, gzip.compress(data)) == data
    assert decompress(Compression.GZIP, gzip.compress(data, compresslevel=1, mtime=0)) == data


def test_gzip_accepts_a_zlib_stream() -> None:
    data = _payload(5000, seed=1)

    assert decompress(Compression.GZIP, zlib.compress(data)) == data


# ------------------------------------------------------------------ snappy


def test_snappy_writes_xerial_framing_with_32_kib_blocks() -> None:
    data = _payload(3 * XERIAL_BLOCK_BYTES + 100, seed=3)

    blocks = _xerial_blocks(compress(Compression.SNAPPY, data))

    decoded = [bytes(cramjam.snappy.decompress_raw(block)) for block in blocks]
    assert [len(block) for block in decoded] == [XERIAL_BLOCK_BYTES] * 3 + [100]
    assert b"".join(decoded) == data


def test_snappy_of_nothing_is_a_bare_xerial_header() -> None:
    assert compress(Compression.SNAPPY, b"") == XERIAL_HEADER
    assert decompress(Compression.SNAPPY, XERIAL_HEADER) == b""


@settings(max_examples=50, deadline=None)
@given(data=payloads, block_bytes=st.sampled_from([1000, XERIAL_BLOCK_BYTES, 64 * 1024]))
def test_snappy_reads_raw_and_xerial_input(data: bytes, block_bytes: int) -> None:
    raw = bytes(cramjam.snappy.compress_raw(data))

    assert decompress(Compression.SNAPPY, raw) == data
    assert decompress(Compression.SNAPPY, _xerial_frame(data, block_bytes)) == data


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(XERIAL_MAGIC + b"\x00\x00\x00\x01", id="truncated-xerial-header"),
        pytest.param(XERIAL_HEADER + b"\x00\x00", id="truncated-block-length"),
        pytest.param(XERIAL_HEADER + struct.pack(">i", 50) + b"abc", id="block-overruns"),
        pytest.param(XERIAL_HEADER + struct.pack(">i", -1), id="negative-block-length"),
        pytest.param(XERIAL_HEADER + struct.pack(">i", 3) + b"\xff\xff\xff", id="bad-block"),
    ],
)
def test_snappy_rejects_broken_xerial_framing(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, payload)


# ------------------------------------------------------------------ lz4


@settings(max_examples=50, deadline=None)
@given(data=payloads)
def test_lz4_agrees_with_lz4_frame(data: bytes) -> None:
    ours = compress(Compression.LZ4, data)

    assert ours[:4] == LZ4_FRAME_MAGIC
    assert lz4.frame.decompress(ours) == data
    assert decompress(Compression.LZ4, lz4.frame.compress(data)) == data
    assert decompress(Compression.LZ4, lz4.frame.compress(data, block_linked=False)) == data
    assert (
        decompress(
            Compression.LZ4,
            lz4.frame.compress(data, block_checksum=True, content_checksum=True, store_size=False),
        )
        == data
    )


def _decode_lz4_blocks_independently(frame: bytes) -> bytes:
    """Decode an LZ4 frame as Kafka's Java Lz4BlockInputStream does.

    That reader refuses a descriptor without the block-independence flag and
    decompresses every block on its own, with no window from earlier blocks.
    """
    assert frame[:4] == LZ4_FRAME_MAGIC
    flags, block_descriptor = frame[4], frame[5]
    assert flags >> 6 == 1, "frame format version must be 01"
    assert flags & 0x03 == 0, "reserved FLG bits must be 0"
    assert flags & LZ4_BLOCK_INDEPENDENCE_BIT, "Java rejects dependent blocks"
    assert block_descriptor & 0x8F == 0, "reserved BD bits must be 0"
    block_size_value = (block_descriptor >> 4) & 0x07
    assert 4 <= block_size_value <= 7
    block_bytes_max = 1 << (2 * block_size_value + 8)
    position = 6 + (8 if flags & 0x08 else 0) + 1  # optional content size, then HC
    out = []
    while True:
        (size,) = struct.unpack_from("<I", frame, position)
        position += 4
        if size == 0:
            break
        stored, size = size & 0x80000000, size & 0x7FFFFFFF
        assert size <= block_bytes_max
        block = frame[position : position + size]
        if stored:
            out.append(block)
        else:
            out.append(lz4.block.decompress(block, uncompressed_size=block_bytes_max))
        position += size + (4 if flags & 0x10 else 0)  # optional block checksum
    position += 4 if flags & 0x04 else 0  # optional content checksum
    assert position == len(frame)
    return b"".join(out)


@pytest.mark.parametrize("size", [0, 100, 64 * 1024 + 1, 300_000])
def test_lz4_frames_decode_block_by_block_as_the_java_client_does(size: int) -> None:
    data = _payload(size, seed=size)

    assert _decode_lz4_blocks_independently(compress(Compression.LZ4, data)) == data


# ------------------------------------------------------------------ zstd


@settings(max_examples=50, deadline=None)
@given(data=payloads)
def test_zstd_agrees_with_zstandard(data: bytes) -> None:
    ours = compress(Compression.ZSTD, data)

    assert zstandard.ZstdDecompressor().decompressobj().decompress(ours) == data
    assert decompress(Compression.ZSTD, zstandard.ZstdCompressor().compress(data)) == data
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    without_size = streamed.compress(data) + streamed.flush()
    assert decompress(Compression.ZSTD, without_size) == data


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
@pytest.mark.parametrize(
    "garbage",
    [b"", b"\xff", b"this is not compressed data at all", bytes(range(256)) * 4],
    ids=["empty", "one-byte", "text", "ramp"],
)
def test_garbage_raises_corrupt_record(codec: Compression, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
def test_truncated_payload_raises_corrupt_record(codec: Compression) -> None:
    compressed = compress(codec, _payload(10_000, seed=7))

    for cut in (1, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, compressed[:cut])


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(COMPRESSING_CODECS), garbage=st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt_record(codec: Compression, garbage: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, garbage)


def test_unknown_codec_number_is_unsupported() -> None:
    with pytest.raises(UnsupportedCompressionError):
        decompress(5, b"payload")


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("snappy", Compression.SNAPPY),
        ("lz4", Compression.LZ4),
        ("zstd", Compression.ZSTD),
        ("ZSTD", Compression.ZSTD),
        (" Gzip ", Compression.GZIP),
    ],
)
def test_from_name(name: str, codec: Compression) -> None:
    assert Compression.from_name(name) is codec


@pytest.mark.parametrize("name", ["brotli", "", "zstandard", "lz4-frame"])
def test_from_name_rejects_unknown_codecs(name: str) -> None:
    with pytest.raises(UnsupportedCompressionError, match="expected one of"):
        Compression.from_name(name)


def test_codec_numbers_match_the_attributes_bits() -> None:
    assert [int(codec) for codec in Compression] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_decompression_stops_at_the_limit(
    monkeypatch: pytest.MonkeyPatch, codec: Compression
) -> None:
    monkeypatch.setattr(compression, "DECOMPRESSED_BYTES_MAX", 1024 * 1024)
    bomb = compress(codec, bytes(4 * 1024 * 1024))
    assert len(bomb) < 512 * 1024
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(codec, bomb)


def test_a_raw_snappy_block_is_refused_before_inflating_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Raw snappy (no xerial framing) states its inflated length up front: a block that
    claims more than the limit is refused, not inflated."""
    monkeypatch.setattr(compression, "DECOMPRESSED_BYTES_MAX", 1024 * 1024)
    bomb = bytes(cramjam.snappy.compress_raw(bytes(4 * 1024 * 1024)))
    assert bomb[:8] != XERIAL_MAGIC and len(bomb) < 512 * 1024
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.SNAPPY, bomb)


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name.lower())
def test_decompressed_pieces_are_bounded_whatever_the_payload_inflates_to(
    codec: Compression,
) -> None:
    inflated = 24 * 1024 * 1024
    bomb = compress(codec, bytes(inflated))
    pieces = [
        len(piece) for piece in compression.iter_decompressed(codec, bomb, limit_bytes=inflated)
    ]
    assert sum(pieces) == inflated
    # A zstd step may inflate to 8 MiB; every other codec's pieces are at most 1 MiB.
    assert max(pieces) <= 8 * compression.DECOMPRESSED_CHUNK_BYTES_MAX
    if codec is not Compression.ZSTD:
        assert max(pieces) <= compression.DECOMPRESSED_CHUNK_BYTES_MAX
