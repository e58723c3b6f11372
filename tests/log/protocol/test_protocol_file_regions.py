"""File regions in encoded responses: records sent with sendfile between byte chunks.

A records value that is not bytes but an object with ``length`` and
``read_bytes()`` ends the current byte chunk; the region follows as its own
chunk and encoding carries on in a new one. Flattening the chunks must give
exactly the bytes an inline encoding of the same records gives.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.protocol import (
    APIS,
    Chunk,
    chunks_length,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.codec import Writer, compile_struct
from eventplatform.log.storage.segment import SegmentSlice

PRODUCE = APIS[0]
FETCH = APIS[1]


class Region:
    """A stand-in file region that counts how often its bytes are read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    @property
    def length(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        self.reads += 1
        return self.data


def _fetch_body(version: int, records: list[Any]) -> dict[str, Any]:
    return {
        "throttle_time_ms": 3,
        "responses": [
            {
                "topic": "events",
                "topic_id": bytes(range(16)),
                "partitions": [
                    {"partition_index": index, "high_watermark": 100 + index, "records": value}
                    for index, value in enumerate(records)
                ],
            }
        ],
    }


def _inline(records: list[Any]) -> list[Any]:
    return [
        value.read_bytes() if isinstance(value, (Region, SegmentSlice)) else value
        for value in records
    ]


def _regions(chunks: list[Chunk]) -> list[Any]:
    return [chunk for chunk in chunks if not isinstance(chunk, bytes)]


def _assert_well_formed(chunks: list[Chunk]) -> None:
    # Byte chunks are never empty and never adjacent: each region splits exactly once.
    for chunk in chunks:
        if isinstance(chunk, bytes):
            assert chunk
    for before, after in pairwise(chunks):
        assert not (isinstance(before, bytes) and isinstance(after, bytes))


@pytest.fixture
def segment_file(tmp_path: Path) -> Iterator[int]:
    descriptor = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(descriptor, b"HEAD" + bytes(range(256)) * 4 + b"TAIL")
    try:
        yield descriptor
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("version", [4, 11, 12, 16, 17])
def test_fetch_response_splits_around_a_segment_slice(version: int, segment_file: int) -> None:
    region = SegmentSlice(descriptor=segment_file, position=4, length=1024, first_offset=0)
    body = _fetch_body(version, [region])

    chunks = encode_response(FETCH, version, 42, body)

    inline = flatten(
        encode_response(FETCH, version, 42, _fetch_body(version, [bytes(range(256)) * 4]))
    )
    assert len(chunks) in (2, 3)
    assert isinstance(chunks[0], bytes)
    assert chunks[1] is region
    # Non-flexible versions end with the records; flexible ones add tagged-field bytes.
    assert len(chunks) == (3 if FETCH.is_flexible(version) else 2)
    prefix_length = len(chunks[0])
    assert inline[prefix_length : prefix_length + 1024] == bytes(range(256)) * 4
    assert flatten(chunks) == inline
    assert chunks_length(chunks) == len(inline)
    _, decoded = decode_response(FETCH, version, flatten(chunks))
    assert decoded["responses"][0]["partitions"][0]["records"] == bytes(range(256)) * 4


def test_the_length_prefix_comes_from_the_region() -> None:
    region = Region(b"r" * 300)

    chunks = encode_response(FETCH, 4, 1, _fetch_body(4, [region]))

    # v4 records are int32-length bytes: the prefix is the last 4 bytes before the region.
    assert chunks[0][-4:] == (300).to_bytes(4, "big")
    # v12 records are compact: the varint of 301 is 0xAD 0x02.
    chunks = encode_response(FETCH, 12, 1, _fetch_body(12, [region]))
    assert chunks[0][-2:] == b"\xad\x02"


def test_several_regions_and_inline_records_in_one_response() -> None:
    first, second, empty = Region(b"a" * 10), Region(b"b" * 20), Region(b"")
    records = [first, b"inline", None, second, empty]

    for version in (4, 12, 17):
        chunks = encode_response(FETCH, version, 7, _fetch_body(version, records))

        assert _regions(chunks) == [first, second, empty]
        _assert_well_formed(chunks)
        inline = flatten(encode_response(FETCH, version, 7, _fetch_body(version, _inline(records))))
        assert flatten(chunks) == inline
        assert chunks_length(chunks) == len(inline)


def test_encoding_never_reads_the_region() -> None:
    region = Region(b"x" * 64)

    chunks = encode_response(FETCH, 11, 1, _fetch_body(11, [region]))

    assert region.reads == 0
    assert chunks_length(chunks) == len(chunks[0]) + 64
    assert region.reads == 0
    flatten(chunks)
    assert region.reads == 1


def _tagged_fetch_body(records: Any) -> dict[str, Any]:
    """A Fetch v16 body whose partition and response carry tagged fields after the records."""
    body = _fetch_body(16, [records])
    body["responses"][0]["partitions"][0]["current_leader"] = {"leader_id": 2, "leader_epoch": 3}
    body["node_endpoints"] = [{"node_id": 2, "host": "h", "port": 9093, "rack": None}]
    return body


def test_a_region_then_tagged_fields() -> None:
    region = Region(b"record-bytes")

    chunks = encode_response(FETCH, 16, 5, _tagged_fetch_body(region))

    assert _regions(chunks) == [region]
    _assert_well_formed(chunks)
    # After the region come the partition's, topic's and response's tagged fields.
    assert isinstance(chunks[-1], bytes)
    inline = flatten(encode_response(FETCH, 16, 5, _tagged_fetch_body(b"record-bytes")))
    assert flatten(chunks) == inline
    _, decoded = decode_response(FETCH, 16, inline)
    partition = decoded["responses"][0]["partitions"][0]
    assert partition["records"] == b"record-bytes"
    assert partition["current_leader"] == {"leader_id": 2, "leader_epoch": 3}
    assert decoded["node_endpoints"] == [{"node_id": 2, "host": "h", "port": 9093, "rack": None}]


def test_a_request_cannot_carry_a_region() -> None:
    body = {"acks": 1, "topic_data": [{"name": "t", "partition_data": [{"records": Region(b"r")}]}]}
    with pytest.raises(ValueError, match="file regions"):
        encode_request(PRODUCE, 3, body, correlation_id=1)


def test_writer_finish() -> None:
    assert Writer().finish() == [b""]
    writer = Writer()
    region = Region(b"abc")
    writer.region(region)
    assert writer.finish() == [region]
    writer = Writer()
    writer.buffer += b"xy"
    writer.region(region)
    writer.buffer += b"z"
    assert writer.finish() == [b"xy", region, b"z"]
    assert chunks_length([b"xy", region, b"z"]) == 6
    assert flatten([b"xy", region, b"z"]) == b"xyabcz"


def test_struct_codec_encode_returns_chunks_with_regions() -> None:
    codec = compile_struct(FETCH.response, 4, flexible=False)
    region = Region(b"data")
    chunks = codec.encode(_fetch_body(4, [region]))
    assert _regions(chunks) == [region]
    assert codec.decode(flatten(chunks))["responses"][0]["partitions"][0]["records"] == b"data"


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_drawn_fetch_responses_with_regions_match_inline(
    table_values: Any, data: st.DataObject
) -> None:
    version = data.draw(st.integers(FETCH.versions.low, FETCH.versions.high), label="version")
    body = data.draw(table_values.response(FETCH, version), label="body")
    regions = []
    for topic in body["responses"]:
        for partition in topic["partitions"]:
            if partition["records"] is not None and data.draw(st.booleans(), label="as region"):
                regions.append(Region(partition["records"]))
                partition["records"] = regions[-1]

    chunks = encode_response(FETCH, version, 9, body)

    assert _regions(chunks) == regions
    assert all(region.reads == 0 for region in regions)
    _assert_well_formed(chunks)
    for topic in body["responses"]:
        for partition in topic["partitions"]:
            if isinstance(partition["records"], Region):
                partition["records"] = partition["records"].data
    inline = encode_response(FETCH, version, 9, body)
    assert len(inline) == 1
    assert flatten(chunks) == inline[0]
    assert chunks_length(chunks) == len(inline[0])
    assert decode_response(FETCH, version, inline[0]) == (9, body)
