"""Interoperability with kafka-python's independent RecordBatch v2 implementation.

kafka-python builds batches the way its producer sends them (baseOffset 0,
partitionLeaderEpoch 0) and reads them the way its consumer does. Its snappy
support needs the ``python-snappy`` module (``import snappy``); kafka-python
does not fall back to cramjam. When that module is absent the snappy cases
skip, and the other four codecs still run.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from eventplatform.log.storage.compression import Compression
from eventplatform.log.storage.record_batch import (
    Record,
    TimestampType,
    decode_batch,
    decode_record_set,
    decode_varint,
    encode_batch,
    encode_varint,
    stamp,
    stamp_log_append_time,
    validate_record_set,
)

BATCH_BYTES_MAX = 16 * 1024 * 1024
BASE_TIMESTAMP_MS = 1_700_000_000_000

# Compressible, so kafka-python keeps the codec instead of falling back to NONE.
SAMPLE_RECORDS = [
    Record(0, BASE_TIMESTAMP_MS, b"user-1", b"clicked " * 40, (("trace", b"abc"),)),
    Record(1, BASE_TIMESTAMP_MS + 7, None, b"viewed " * 40),
    Record(2, BASE_TIMESTAMP_MS + 2, b"user-2", None, (("a", None), ("b", b""), ("é", b"\x00"))),
    Record(3, BASE_TIMESTAMP_MS + 9, b"", b"scrolled " * 40),
]


def _codec_params() -> list[object]:
    return [pytest.param(codec, id=codec.name.lower()) for codec in Compression]


def _require_kafka_python_codec(codec: Compression) -> None:
    if codec is Compression.SNAPPY:
        pytest.importorskip("snappy", reason="kafka-python needs python-snappy for snappy")


def _build_with_kafka_python(records: list[Record], codec: Compression) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=int(codec), batch_size=BATCH_BYTES_MAX, offset=0
    )
    for record in records:
        metadata = builder.append(record.timestamp, record.key, record.value, list(record.headers))
        assert metadata is not None
    builder.close()
    return bytes(builder.buffer())


def _read_with_kafka_python(buffer: bytes) -> list[tuple[object, list[Record]]]:
    """Every batch in ``buffer`` as kafka-python's consumer sees it."""
    batches = []
    records = MemoryRecords(buffer)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        decoded = [
            Record(
                record.offset,
                record.timestamp,
                record.key,
                record.value,
                tuple((key, value) for key, value in record.headers),
            )
            for record in batch
        ]
        batches.append((batch, decoded))
    return batches


header_keys = st.text(max_size=10)
optional_bytes = st.none() | st.binary(max_size=40)


@st.composite
def producer_records(draw: st.DrawFn) -> list[Record]:
    """Records as a producer sends them: offsets from 0, compressible values."""
    base_timestamp = draw(st.integers(min_value=0, max_value=2**45))
    fields = draw(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=10**6),
                optional_bytes,
                st.none() | st.binary(max_size=16).map(lambda value: value * 20),
                st.lists(st.tuples(header_keys, optional_bytes), max_size=3).map(tuple),
            ),
            min_size=1,
            max_size=10,
        )
    )
    return [
        Record(index, base_timestamp + delta, key, value, headers)
        for index, (delta, key, value, headers) in enumerate(fields)
    ]


# ------------------------------------------------------------------ kafka-python writes, we read


@pytest.mark.parametrize("codec", _codec_params())
def test_we_read_batches_kafka_python_builds(codec: Compression) -> None:
    _require_kafka_python_codec(codec)
    buffer = _build_with_kafka_python(SAMPLE_RECORDS, codec)

    [header] = validate_record_set(buffer)
    decoded = decode_batch(buffer)

    assert header.compression is codec
    assert header.records_count == len(SAMPLE_RECORDS)
    assert header.base_offset == 0
    assert header.base_timestamp == BASE_TIMESTAMP_MS
    assert header.max_timestamp == BASE_TIMESTAMP_MS + 9
    assert decoded.records == SAMPLE_RECORDS


@pytest.mark.parametrize("codec", _codec_params())
def test_we_read_kafka_python_producer_state(codec: Compression) -> None:
    _require_kafka_python_codec(codec)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=True,
        producer_id=123_456,
        producer_epoch=7,
        base_sequence=40,
        batch_size=BATCH_BYTES_MAX,
    )
    for record in SAMPLE_RECORDS:
        builder.append(record.offset, record.timestamp, record.key, record.value, record.headers)
    buffer = bytes(builder.build())

    [header] = validate_record_set(buffer)

    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123_456, 7, 40)
    assert header.last_sequence == 43
    assert decode_batch(buffer).records == SAMPLE_RECORDS


@pytest.mark.parametrize("codec", _codec_params())
def test_we_stamp_a_kafka_python_batch_as_a_leader_does(codec: Compression) -> None:
    _require_kafka_python_codec(codec)
    buffer = bytearray(_build_with_kafka_python(SAMPLE_RECORDS, codec))
    [header] = validate_record_set(buffer)

    stamp(buffer, header, base_offset=1_000, leader_epoch=3)
    stamp_log_append_time(buffer, header, BASE_TIMESTAMP_MS + 500)

    [batch] = decode_record_set(buffer)
    assert [record.offset for record in batch.records] == [1_000, 1_001, 1_002, 1_003]
    assert {record.timestamp for record in batch.records} == {BASE_TIMESTAMP_MS + 500}
    [(kafka_batch, kafka_records)] = _read_with_kafka_python(bytes(buffer))
    assert kafka_records == batch.records
    assert kafka_batch.timestamp_type == 1


@settings(max_examples=60, deadline=None)
@given(
    records=producer_records(),
    codec=st.sampled_from([codec for codec in Compression if codec is not Compression.SNAPPY]),
)
def test_we_read_any_batch_kafka_python_builds(records: list[Record], codec: Compression) -> None:
    buffer = _build_with_kafka_python(records, codec)

    [header] = validate_record_set(buffer)

    assert header.compression in (codec, Compression.NONE)  # kafka-python drops useless codecs
    assert decode_batch(buffer).records == records


# ------------------------------------------------------------------ we write, kafka-python reads


@pytest.mark.parametrize("codec", _codec_params())
def test_kafka_python_reads_batches_we_encode(codec: Compression) -> None:
    _require_kafka_python_codec(codec)
    records = [
        Record(500 + record.offset, record.timestamp, record.key, record.value, record.headers)
        for record in SAMPLE_RECORDS
    ]
    buffer = encode_batch(
        records,
        compression=codec,
        producer_id=99,
        producer_epoch=1,
        base_sequence=5,
        partition_leader_epoch=4,
    )

    [(batch, decoded)] = _read_with_kafka_python(buffer)

    assert decoded == records
    assert batch.compression_type == int(codec)
    assert batch.base_offset == 500
    assert batch.last_offset == 503
    assert batch.leader_epoch == 4
    assert batch.max_timestamp == BASE_TIMESTAMP_MS + 9
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 1, 5)


@pytest.mark.parametrize("codec", _codec_params())
def test_kafka_python_reads_a_record_set_of_our_batches(codec: Compression) -> None:
    _require_kafka_python_codec(codec)
    first = [Record(0, 10, b"a", b"1" * 100), Record(1, 11, None, None)]
    second = [Record(2, 12, b"b", b"2" * 100, (("h", None),))]
    buffer = bytearray(
        encode_batch(first, compression=codec) + encode_batch(second, compression=codec)
    )
    headers = validate_record_set(buffer)
    stamp_log_append_time(buffer, headers[1], 99)

    batches = _read_with_kafka_python(bytes(buffer))

    assert [decoded for _, decoded in batches] == [
        first,
        [Record(2, 99, b"b", b"2" * 100, (("h", None),))],
    ]
    assert [batch.timestamp_type for batch, _ in batches] == [
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
    ]


@settings(max_examples=60, deadline=None)
@given(
    records=producer_records(),
    codec=st.sampled_from([codec for codec in Compression if codec is not Compression.SNAPPY]),
    base_offset=st.integers(min_value=0, max_value=2**62),
)
def test_kafka_python_reads_any_batch_we_encode(
    records: list[Record], codec: Compression, base_offset: int
) -> None:
    records = [
        Record(
            base_offset + record.offset, record.timestamp, record.key, record.value, record.headers
        )
        for record in records
    ]

    [(batch, decoded)] = _read_with_kafka_python(encode_batch(records, compression=codec))

    assert decoded == records
    assert batch.compression_type == int(codec)


# ------------------------------------------------------------------ varints


@settings(max_examples=300, deadline=None)
@given(value=st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varints_match_kafka_python(value: int) -> None:
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)

    assert encode_varint(value) == bytes(theirs)
    assert decode_varint(theirs, 0, len(theirs)) == kafka_decode_varint(theirs, 0)
