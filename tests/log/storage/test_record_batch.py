"""RecordBatch v2: golden bytes, round trips, stamping, validation and hostile input."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventplatform.log.storage.compression import Compression
from eventplatform.log.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    StorageError,
)
from eventplatform.log.storage.record_batch import (
    HEADER_BYTES,
    KEYLESS_RECORD_MESSAGE,
    Record,
    TimestampType,
    check_keys_present,
    decode_batch,
    decode_record_set,
    decode_varint,
    encode_batch,
    encode_varint,
    keyed_records,
    named_headers,
    parse_header,
    record_value,
    skip_value,
    stamp,
    stamp_log_append_time,
    validate_record_set,
    verify_crc,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
BASE_TIMESTAMP_MS = 1_700_000_000_000
CALL_SECONDS_MAX = 5.0

# ------------------------------------------------------------------ golden bytes

GOLDEN_RECORDS = [
    Record(offset=100, timestamp=BASE_TIMESTAMP_MS, key=b"k", value=b"v1"),
    Record(
        offset=101, timestamp=BASE_TIMESTAMP_MS + 5, key=None, value=b"v2", headers=(("h", b"x"),)
    ),
    Record(offset=102, timestamp=BASE_TIMESTAMP_MS + 3, key=b"k3", value=None),
]


def _golden_records_bytes() -> bytes:
    record_0 = (
        b"\x12"  # length varint: 9 body bytes (zig-zag 18)
        b"\x00"  # attributes
        b"\x00"  # timestampDelta 0
        b"\x00"  # offsetDelta 0
        b"\x02"  # key length 1
        b"k"  # key
        b"\x04"  # value length 2
        b"v1"  # value
        b"\x00"  # headers count 0
    )
    record_1 = (
        b"\x18"  # length varint: 12 body bytes (zig-zag 24)
        b"\x00"  # attributes
        b"\x0a"  # timestampDelta 5
        b"\x02"  # offsetDelta 1
        b"\x01"  # key length -1: null key
        b"\x04"  # value length 2
        b"v2"  # value
        b"\x02"  # headers count 1
        b"\x02"  # header key length 1
        b"h"  # header key
        b"\x02"  # header value length 1
        b"x"  # header value
    )
    record_2 = (
        b"\x10"  # length varint: 8 body bytes (zig-zag 16)
        b"\x00"  # attributes
        b"\x06"  # timestampDelta 3
        b"\x04"  # offsetDelta 2
        b"\x04"  # key length 2
        b"k3"  # key
        b"\x01"  # value length -1: null value
        b"\x00"  # headers count 0
    )
    assert len(record_0) == 1 + 9
    assert len(record_1) == 1 + 12
    assert len(record_2) == 1 + 8
    return record_0 + record_1 + record_2


def _golden_batch_bytes() -> bytes:
    records = _golden_records_bytes()
    crc_covered = (
        struct.pack(">h", 0)  # attributes: no compression, CreateTime, not transactional
        + struct.pack(">i", 2)  # lastOffsetDelta
        + struct.pack(">q", BASE_TIMESTAMP_MS)  # baseTimestamp: the first record's
        + struct.pack(">q", BASE_TIMESTAMP_MS + 5)  # maxTimestamp: the largest, not the last
        + struct.pack(">q", 42)  # producerId
        + struct.pack(">h", 3)  # producerEpoch
        + struct.pack(">i", 10)  # baseSequence
        + struct.pack(">i", 3)  # recordsCount
        + records
    )
    return (
        struct.pack(">q", 100)  # baseOffset
        + struct.pack(">i", 4 + 1 + 4 + len(crc_covered))  # batchLength: epoch..end
        + struct.pack(">i", 7)  # partitionLeaderEpoch
        + struct.pack(">b", 2)  # magic
        + struct.pack(">I", crc32c(crc_covered))  # crc: CRC-32C of attributes..end
        + crc_covered
    )


def _encode_golden() -> bytes:
    return encode_batch(
        GOLDEN_RECORDS,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=7,
    )


def test_encode_batch_matches_golden_bytes() -> None:
    assert _encode_golden() == _golden_batch_bytes()


def test_decode_batch_reads_golden_bytes() -> None:
    decoded = decode_batch(_golden_batch_bytes())

    assert decoded.records == GOLDEN_RECORDS
    header = decoded.header
    assert header.base_offset == 100
    assert header.partition_leader_epoch == 7
    assert header.records_count == 3
    assert header.last_offset_delta == 2
    assert header.base_timestamp == BASE_TIMESTAMP_MS
    assert header.max_timestamp == BASE_TIMESTAMP_MS + 5
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert header.last_sequence == 12
    assert header.compression is Compression.NONE
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert not header.is_transactional
    assert not header.is_control
    assert header.delete_horizon_ms is None
    assert header.size_bytes == len(_golden_batch_bytes())
    assert header.next_offset == 103


def test_parse_header_reads_a_batch_at_a_position() -> None:
    golden = _golden_batch_bytes()
    buffer = b"\xff" * 17 + golden

    header = parse_header(buffer, 17)

    assert header.position == 17
    assert header.base_offset == 100
    assert decode_batch(buffer, 17).records == GOLDEN_RECORDS


# ------------------------------------------------------------------ round trips

header_keys = st.text(max_size=12)
optional_bytes = st.none() | st.binary(max_size=48)
record_headers = st.lists(st.tuples(header_keys, optional_bytes), max_size=3).map(tuple)
timestamps = st.integers(min_value=-1, max_value=2**50)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 12) -> list[Record]:
    base_offset = draw(st.integers(min_value=0, max_value=2**62))
    fields = draw(
        st.lists(
            st.tuples(timestamps, optional_bytes, optional_bytes, record_headers),
            min_size=1,
            max_size=max_size,
        )
    )
    return [
        Record(base_offset + index, timestamp, key, value, headers)
        for index, (timestamp, key, value, headers) in enumerate(fields)
    ]


@settings(max_examples=200, deadline=None)
@given(
    records=record_lists(),
    compression=st.sampled_from(Compression),
    wanted=st.sampled_from(["", "a", "type"]),
)
def test_the_light_walk_finds_what_decoding_finds(
    records: list[Record], compression: Compression, wanted: str
) -> None:
    """keyed_records with record_value and named_headers read each record's offset, key,
    value and named headers as decode_batch does, batch at any position in a buffer."""
    batch = b"\x00" * 7 + encode_batch(records, compression=compression)
    walked = []
    for index, delta, key, body, at, end in keyed_records(batch, 7):
        value, headers_at = record_value(body, at, end)
        assert skip_value(body, at, end) == headers_at
        named = named_headers(body, headers_at, end, wanted.encode())
        walked.append((index, records[0].offset + delta, key, value, named))
    assert walked == [
        (index, r.offset, r.key, r.value, [v for k, v in r.headers if k == wanted])
        for index, r in enumerate(records)
    ]


@settings(max_examples=200, deadline=None)
@given(
    records=record_lists(),
    compression=st.sampled_from(Compression),
    producer_id=st.integers(min_value=-1, max_value=2**62),
    leader_epoch=st.integers(min_value=-1, max_value=2**31 - 1),
)
def test_decode_inverts_encode(
    records: list[Record], compression: Compression, producer_id: int, leader_epoch: int
) -> None:
    batch = encode_batch(
        records,
        compression=compression,
        producer_id=producer_id,
        partition_leader_epoch=leader_epoch,
    )

    decoded = decode_batch(batch)

    assert decoded.records == records
    header = parse_header(batch)
    assert header == decoded.header
    assert header.base_offset == records[0].offset
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.next_offset == records[-1].offset + 1
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(record.timestamp for record in records)
    assert header.compression is compression
    assert header.producer_id == producer_id
    assert header.partition_leader_epoch == leader_epoch
    assert header.size_bytes == len(batch)
    assert validate_record_set(batch) == [header]


@settings(max_examples=50, deadline=None)
@given(
    batches=st.lists(st.tuples(record_lists(max_size=4), st.sampled_from(Compression)), max_size=5)
)
def test_decode_record_set_reads_concatenated_batches(
    batches: list[tuple[list[Record], Compression]],
) -> None:
    buffer = b"".join(encode_batch(records, compression=codec) for records, codec in batches)

    decoded = decode_record_set(buffer)

    assert [batch.records for batch in decoded] == [records for records, _ in batches]
    assert [batch.header.compression for batch in decoded] == [codec for _, codec in batches]


def test_decode_record_set_ignores_a_partial_last_batch() -> None:
    first = _encode_golden()
    second = encode_batch([Record(103, BASE_TIMESTAMP_MS, b"a", b"b")])

    decoded = decode_record_set(first + second[:-1])

    assert [batch.records for batch in decoded] == [GOLDEN_RECORDS]


def test_delete_horizon_replaces_base_timestamp_and_keeps_record_timestamps() -> None:
    horizon_ms = BASE_TIMESTAMP_MS + 86_400_000

    batch = encode_batch(GOLDEN_RECORDS, delete_horizon_ms=horizon_ms)

    decoded = decode_batch(batch)
    assert decoded.header.delete_horizon_ms == horizon_ms
    assert decoded.header.base_timestamp == horizon_ms
    assert decoded.records == GOLDEN_RECORDS


def test_cleaned_batch_keeps_its_offset_range_when_records_are_dropped() -> None:
    survivors = [GOLDEN_RECORDS[1]]

    batch = encode_batch(survivors, base_offset=100, last_offset_delta=2)

    decoded = decode_batch(batch)
    assert decoded.header.base_offset == 100
    assert decoded.header.next_offset == 103
    assert decoded.records == survivors


def test_empty_batch_keeps_its_offset_range() -> None:
    batch = encode_batch([], base_offset=500, last_offset_delta=9, producer_id=7, base_sequence=0)

    decoded = decode_batch(batch)
    assert decoded.records == []
    assert decoded.header.records_count == 0
    assert decoded.header.next_offset == 510
    assert decoded.header.last_sequence == 9


def test_empty_batch_without_base_offset_is_refused() -> None:
    with pytest.raises(InvalidRecordError):
        encode_batch([])


def test_transactional_flag_round_trips() -> None:
    batch = encode_batch(GOLDEN_RECORDS, is_transactional=True, producer_id=1, producer_epoch=0)

    header = parse_header(batch)
    assert header.is_transactional
    assert not header.is_control
    assert validate_record_set(batch) == [header]


# ------------------------------------------------------------------ stamping


@pytest.mark.parametrize("compression", list(Compression))
def test_stamp_rewrites_base_offset_and_leader_epoch_only(compression: Compression) -> None:
    first = encode_batch(GOLDEN_RECORDS, compression=compression)
    second = encode_batch(
        [Record(0, BASE_TIMESTAMP_MS, b"a", b"b"), Record(1, BASE_TIMESTAMP_MS, b"c", None)],
        compression=compression,
    )
    buffer = bytearray(first + second)
    original = bytes(buffer)
    header = validate_record_set(buffer)[1]

    stamp(buffer, header, base_offset=9_000, leader_epoch=12)

    changed = {index for index in range(len(buffer)) if buffer[index] != original[index]}
    stamped_fields = set(range(len(first), len(first) + 8)) | set(
        range(len(first) + 12, len(first) + 16)
    )
    assert changed <= stamped_fields
    assert bytes(buffer[: len(first)]) == first
    stamped = parse_header(buffer, len(first))
    assert stamped.base_offset == 9_000
    assert stamped.partition_leader_epoch == 12
    assert stamped._replace(base_offset=0, partition_leader_epoch=-1) == header
    verify_crc(buffer, stamped)
    assert [record.offset for record in decode_batch(buffer, len(first)).records] == [9_000, 9_001]


def test_stamp_works_through_a_memoryview() -> None:
    buffer = bytearray(_encode_golden())
    header = parse_header(buffer)

    stamp(memoryview(buffer), header, base_offset=-5 + 2**40, leader_epoch=0)

    assert parse_header(buffer).base_offset == 2**40 - 5
    assert parse_header(buffer).partition_leader_epoch == 0
    validate_record_set(buffer)


@pytest.mark.parametrize("compression", list(Compression))
def test_stamp_log_append_time_rewrites_timestamps_and_reseals_crc(
    compression: Compression,
) -> None:
    first = encode_batch(GOLDEN_RECORDS, compression=compression)
    second = encode_batch(GOLDEN_RECORDS, compression=compression, producer_id=5)
    buffer = bytearray(first + second)
    header = validate_record_set(buffer)[1]
    append_time_ms = BASE_TIMESTAMP_MS + 60_000

    stamp_log_append_time(buffer, header, append_time_ms)

    stamped = parse_header(buffer, len(first))
    assert stamped.attributes == header.attributes | 0x08
    assert stamped.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert stamped.compression is compression
    assert stamped.max_timestamp == append_time_ms
    assert stamped.crc != header.crc
    assert stamped._replace(
        attributes=header.attributes, max_timestamp=0, crc=0
    ) == header._replace(max_timestamp=0, crc=0)
    validate_record_set(buffer)
    assert bytes(buffer[: len(first)]) == first
    assert bytes(buffer[len(first) + HEADER_BYTES :]) == second[HEADER_BYTES:]
    records = decode_batch(buffer, len(first)).records
    assert [record.timestamp for record in records] == [append_time_ms] * len(GOLDEN_RECORDS)
    assert [record.offset for record in records] == [100, 101, 102]
    assert [record.key for record in records] == [record.key for record in GOLDEN_RECORDS]


def test_stamp_log_append_time_keeps_a_transactional_flag() -> None:
    buffer = bytearray(encode_batch(GOLDEN_RECORDS, is_transactional=True, producer_id=1))

    stamp_log_append_time(buffer, parse_header(buffer), 77)

    header = parse_header(buffer)
    assert header.is_transactional
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    verify_crc(buffer, header)


# ------------------------------------------------------------------ validation


def _with_byte(buffer: bytes, position: int, value: int) -> bytes:
    changed = bytearray(buffer)
    changed[position] = value
    return bytes(changed)


def test_validate_record_set_accepts_concatenated_batches() -> None:
    batches = [
        _encode_golden(),
        encode_batch([Record(103, 1, None, b"x")], compression=Compression.GZIP),
        encode_batch(
            [Record(104, 2, b"y", None), Record(105, 3, b"z", b"")], compression=Compression.ZSTD
        ),
    ]

    headers = validate_record_set(b"".join(batches))

    assert [header.position for header in headers] == [
        0,
        len(batches[0]),
        len(batches[0]) + len(batches[1]),
    ]
    assert [header.records_count for header in headers] == [3, 1, 2]
    assert [header.size_bytes for header in headers] == [len(batch) for batch in batches]


@pytest.mark.parametrize(
    "buffer",
    [
        pytest.param(_golden_batch_bytes()[: HEADER_BYTES - 1], id="truncated-header"),
        pytest.param(_golden_batch_bytes()[:-1], id="truncated-batch"),
        pytest.param(_golden_batch_bytes() + b"\x00" * 20, id="trailing-bytes"),
        pytest.param(
            _golden_batch_bytes() + _golden_batch_bytes()[:70], id="truncated-second-batch"
        ),
        pytest.param(_with_byte(_golden_batch_bytes(), 16, 1), id="magic-1"),
        pytest.param(_with_byte(_golden_batch_bytes(), 16, 3), id="magic-3"),
        pytest.param(_with_byte(_golden_batch_bytes(), 17, 0), id="crc-field"),
        pytest.param(
            _golden_batch_bytes()[:8] + struct.pack(">i", 10) + _golden_batch_bytes()[12:],
            id="batch-length-shorter-than-header",
        ),
    ],
)
def test_validate_record_set_rejects_corrupt_framing(buffer: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        validate_record_set(buffer)


@pytest.mark.parametrize("compression", list(Compression))
def test_validate_record_set_rejects_any_flipped_bit_under_the_crc(
    compression: Compression,
) -> None:
    batch = encode_batch(GOLDEN_RECORDS, compression=compression)

    for position in range(21, len(batch)):
        for bit in (0x01, 0x80):
            corrupted = _with_byte(batch, position, batch[position] ^ bit)
            with pytest.raises(CorruptRecordError):
                validate_record_set(corrupted)


def test_bytes_outside_the_crc_can_change_without_failing_it() -> None:
    batch = _golden_batch_bytes()
    restamped = struct.pack(">q", 4) + batch[8:12] + struct.pack(">i", 99) + batch[16:]

    [header] = validate_record_set(restamped)

    assert (header.base_offset, header.partition_leader_epoch) == (4, 99)


def test_validate_record_set_rejects_an_empty_buffer() -> None:
    with pytest.raises(InvalidRecordError):
        validate_record_set(b"")


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(encode_batch(GOLDEN_RECORDS[:1], is_control=True), id="control-batch"),
        pytest.param(encode_batch([], base_offset=0, last_offset_delta=0), id="zero-records"),
        pytest.param(
            encode_batch(GOLDEN_RECORDS, last_offset_delta=5), id="last-offset-delta-too-big"
        ),
        pytest.param(
            encode_batch(GOLDEN_RECORDS, last_offset_delta=1), id="last-offset-delta-too-small"
        ),
        pytest.param(
            encode_batch([Record(0, 1, b"a", b"b"), Record(2, 1, b"c", b"d")]), id="offset-gap"
        ),
    ],
)
def test_validate_record_set_refuses_batches_a_producer_may_not_send(batch: bytes) -> None:
    with pytest.raises(InvalidRecordError):
        validate_record_set(batch)
    with pytest.raises(InvalidRecordError):
        validate_record_set(_encode_golden() + batch)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_check_keys_present_names_every_keyless_record_by_its_index(
    compression: Compression,
) -> None:
    keys = [b"a", None, b"c", None, None]
    records = [Record(n, BASE_TIMESTAMP_MS, key, b"v") for n, key in enumerate(keys)]
    batch = encode_batch(records, compression=compression)
    with pytest.raises(InvalidRecordError) as refused:
        check_keys_present(batch, parse_header(batch))
    assert refused.value.record_errors == tuple(
        RecordError(index, KEYLESS_RECORD_MESSAGE) for index in (1, 3, 4)
    )
    keyed = encode_batch([Record(0, BASE_TIMESTAMP_MS, b"k", b"v")], compression=compression)
    check_keys_present(keyed, parse_header(keyed))


def test_decode_batch_rejects_unknown_codec() -> None:
    batch = bytearray(_encode_golden())
    batch[22] |= 0x05
    batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))

    with pytest.raises(CorruptRecordError):
        decode_batch(batch)


def test_decode_batch_rejects_a_records_count_larger_than_the_records() -> None:
    batch = bytearray(_encode_golden())
    batch[57:61] = struct.pack(">i", 4)

    with pytest.raises(CorruptRecordError):
        decode_batch(batch, check_crc=False)


def test_decode_batch_rejects_bytes_after_the_last_record() -> None:
    batch = bytearray(_encode_golden())
    batch[57:61] = struct.pack(">i", 2)

    with pytest.raises(CorruptRecordError):
        decode_batch(batch, check_crc=False)


def test_decode_batch_checks_the_crc_unless_told_not_to() -> None:
    golden = _golden_batch_bytes()
    header_value_at = len(golden) - 10  # record 1's header value, before record 2's 9 bytes
    assert golden[header_value_at] == ord("x")
    batch = _with_byte(golden, header_value_at, ord("y"))

    with pytest.raises(CorruptRecordError):
        decode_batch(batch)
    records = decode_batch(batch, check_crc=False).records
    assert records[1].headers == (("h", b"y"),)


# ------------------------------------------------------------------ hostile input

ALLOWED_ERRORS = (CorruptRecordError, InvalidRecordError)


def _call_expecting_only_storage_errors(function: Callable[[], object]) -> None:
    """Run ``function``; only the storage errors may escape, and it must finish promptly."""
    started = time.monotonic()
    try:
        function()
    except ALLOWED_ERRORS as exc:
        assert isinstance(exc, StorageError)
    elapsed = time.monotonic() - started
    assert elapsed < CALL_SECONDS_MAX, f"call took {elapsed:.1f}s"


def _feed_every_reader(buffer: bytes) -> None:
    _call_expecting_only_storage_errors(lambda: parse_header(buffer))
    _call_expecting_only_storage_errors(lambda: validate_record_set(buffer))
    _call_expecting_only_storage_errors(lambda: decode_batch(buffer))
    _call_expecting_only_storage_errors(lambda: decode_batch(buffer, check_crc=False))
    _call_expecting_only_storage_errors(lambda: decode_record_set(buffer))
    _call_expecting_only_storage_errors(lambda: decode_record_set(buffer, check_crc=False))


def _reseal(buffer: bytearray) -> None:
    if len(buffer) >= HEADER_BYTES:
        buffer[17:21] = struct.pack(">I", crc32c(bytes(buffer[21:])))


fuzz_settings = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@fuzz_settings
@given(buffer=st.binary(max_size=400))
def test_random_bytes_raise_only_storage_errors(buffer: bytes) -> None:
    _feed_every_reader(buffer)


@fuzz_settings
@given(
    attributes=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    last_offset_delta=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    records_count=st.integers(min_value=-(2**31), max_value=2**31 - 1) | st.integers(0, 8),
    body=st.binary(max_size=300),
)
def test_well_framed_batches_with_random_bodies_raise_only_storage_errors(
    attributes: int, last_offset_delta: int, records_count: int, body: bytes
) -> None:
    header = bytearray(HEADER_BYTES)
    struct.pack_into(">qiib", header, 0, 0, HEADER_BYTES - 12 + len(body), 0, 2)
    struct.pack_into(
        ">hiqqqhii", header, 21, attributes, last_offset_delta, 0, 0, -1, -1, -1, records_count
    )
    buffer = header + body
    _reseal(buffer)

    _feed_every_reader(bytes(buffer))


@st.composite
def mutated_batches(draw: st.DrawFn) -> tuple[bytes, bool]:
    records = draw(record_lists(max_size=6))
    compression = draw(st.sampled_from(Compression))
    buffer = bytearray(encode_batch(records, compression=compression))
    if draw(st.booleans()):
        buffer += encode_batch(draw(record_lists(max_size=3)), compression=compression)
    mutations = draw(
        st.lists(
            st.tuples(st.integers(min_value=0, max_value=len(buffer) - 1), st.integers(0, 255)),
            max_size=6,
        )
    )
    for position, value in mutations:
        buffer[position] = value
    cut = draw(st.none() | st.integers(min_value=0, max_value=len(buffer)))
    if cut is not None:
        del buffer[cut:]
    reseal = draw(st.booleans())
    if reseal:
        _reseal(buffer)
    return bytes(buffer), reseal


@fuzz_settings
@given(case=mutated_batches())
def test_mutated_and_truncated_batches_raise_only_storage_errors(case: tuple[bytes, bool]) -> None:
    buffer, _ = case
    _feed_every_reader(buffer)


@fuzz_settings
@given(records=record_lists(max_size=6), compression=st.sampled_from(Compression), data=st.data())
def test_mutated_record_bodies_raise_only_storage_errors(
    records: list[Record], compression: Compression, data: st.DataObject
) -> None:
    # Mutate only the records area and re-seal the CRC, so every example reaches
    # the codec and the record parser rather than stopping at the CRC.
    buffer = bytearray(encode_batch(records, compression=compression))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=HEADER_BYTES, max_value=len(buffer) - 1))
        buffer[position] = data.draw(st.integers(0, 255))
    _reseal(buffer)

    _feed_every_reader(bytes(buffer))


# ------------------------------------------------------------------ varints


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (-65, "8101"),
        (150, "ac02"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
        (INT64_MAX, "feffffffffffffffff01"),
        (INT64_MIN, "ffffffffffffffffff01"),
    ],
)
def test_varint_known_vectors(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0, len(encoded) // 2) == (value, len(encoded) // 2)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(min_value=INT64_MIN, max_value=INT64_MAX), min_size=1, max_size=8)
)
def test_varints_round_trip_back_to_back(values: list[int]) -> None:
    buffer = b"".join(encode_varint(value) for value in values)
    position = 0
    decoded = []
    for _ in values:
        value, position = decode_varint(buffer, position, len(buffer))
        decoded.append(value)

    assert decoded == values
    assert position == len(buffer)
    assert all(1 <= len(encode_varint(value)) <= 10 for value in values)


def test_decode_varint_never_reads_at_or_past_end() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02", 0, 0)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02\x04", 1, 1)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80\x01", 0, 1)
    with pytest.raises(CorruptRecordError):
        decode_varint(memoryview(b"\x80\x80\x80"), 0, 3)
    assert decode_varint(b"\x80\x01", 0, 2) == (64, 2)


def test_decode_varint_refuses_more_than_ten_bytes() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80" * 10 + b"\x01", 0, 11)
