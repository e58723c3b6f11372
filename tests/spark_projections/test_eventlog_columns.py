"""Bulk decoding of record batches into the eventlog columns, against the reference decoder."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventplatform.events import codec
from eventplatform.log.storage import Compression, CorruptRecordError, LogConfig, PartitionLog
from eventplatform.log.storage.reader import PartitionReader, RawBatch
from eventplatform.log.storage.record_batch import (
    HEADER_BYTES,
    Record,
    TimestampType,
    encode_batch,
    parse_header,
)
from eventplatform.spark_projections import columns
from eventplatform.spark_projections.columns import (
    ARROW_SCHEMA,
    columns_from_messages,
    decode_batches,
)


@pytest.fixture(params=["compiled", "numpy"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each direct-path test runs with the compiled decoder and with the NumPy one."""
    if request.param == "numpy":
        monkeypatch.setattr(columns, "compiled", None)
    else:
        assert columns.compiled is not None, "the _columns extension is not built"
    return str(request.param)


def test_the_compiled_decoder_is_built() -> None:
    """Installs build it (a C compiler is on every machine the project runs CI on)."""
    assert columns.compiled is not None


def test_the_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from eventplatform.spark_projections.source import SCHEMA

    assert to_arrow_schema(SCHEMA) == ARROW_SCHEMA


def random_record(rng: random.Random, offset: int) -> Record:
    roll = rng.random()
    if roll < 0.6:
        value: bytes | None = orjson.dumps(
            {"id": str(uuid.UUID(int=rng.getrandbits(128))), "n": offset}
        )
    elif roll < 0.7:
        value = None
    elif roll < 0.8:
        value = orjson.dumps({"type": "x", "id": f"id-{offset}"})
    elif roll < 0.85:
        value = b'{"id":"' + b"\\" * 36 + b'"}'  # not valid JSON: no id
    else:
        value = rng.randbytes(rng.randrange(0, 20_000 if roll > 0.99 else 300))
    headers: tuple[tuple[str, bytes | None], ...] = ()
    roll = rng.random()
    if roll < 0.5:
        headers = (("event-type", b"a.b"), ("event-version", str(rng.randrange(1, 10**9)).encode()))
    elif roll < 0.7:
        headers = (
            ("x", None),
            ("event-type", None),
            ("event-type", b"second"),
            ("event-version", b"-1"),
        )
    elif roll < 0.8:
        headers = (
            ("\u00e9t\u00e9", rng.randbytes(rng.randrange(0, 40))),
            ("event-version", b"12345678901"),
        )
    key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 200))
    return Record(offset, 1_700_000_000_000 + rng.randrange(-(10**6), 10**6), key, value, headers)


def expected_row(record: Record, topic: str) -> dict[str, object]:
    event_type = codec.header_type(record.headers)
    versions = [v for k, v in record.headers if k == "event-version" and v is not None]
    version = (
        int(versions[0]) if versions and versions[0].isdigit() and len(versions[0]) <= 9 else None
    )
    try:
        document = orjson.loads(record.value or b"")
        event_id = document.get("id") if isinstance(document, dict) else None
    except orjson.JSONDecodeError:
        event_id = None
    return {
        "topic": topic,
        "offset": record.offset,
        "key": record.key,
        "value": record.value,
        "headers": [{"key": k, "value": v} for k, v in record.headers],
        "event_type": event_type,
        "event_version": version,
        "event_id": event_id if isinstance(event_id, str) else None,
    }


def test_bulk_decoding_matches_the_reference_decoder_for_every_codec(
    decoder: str, tmp_path: Path
) -> None:
    rng = random.Random(7)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300_000))
    produced: list[Record] = []
    for index in range(150):
        count = rng.choice([1, 2, 50, 300])
        base = log.log_end_offset
        records = [random_record(rng, base + offset) for offset in range(count)]
        log.append(encode_batch(records, compression=Compression(index % 5)))
        produced.extend(records)
    start, end = 13, len(produced) - 7
    reader = PartitionReader(log.directory)
    batches = list(
        decode_batches(
            reader.iter_batches(start, end), topic="t", partition=0, start=start, end=end
        )
    )
    assert all(batch.schema == ARROW_SCHEMA for batch in batches)
    rows = [row for batch in batches for row in batch.to_pylist()]
    wanted = produced[start:end]
    assert len(rows) == len(wanted)
    for row, record in zip(rows, wanted, strict=True):
        timestamp_ms = int(row.pop("timestamp").timestamp() * 1000)
        assert timestamp_ms == record.timestamp
        assert row.pop("partition") == 0 and row.pop("timestamp_type") == 0
        assert row == expected_row(record, "t")
    # The Kafka path's columns come from the same code and agree.
    messages = [(r.offset, r.timestamp, 0, r.key, r.value, list(r.headers) or None) for r in wanted]
    from_messages = columns_from_messages(messages, topic="t", partition=0)
    assert from_messages.to_pylist() == [row for batch in batches for row in batch.to_pylist()]


def test_malformed_records_raise_with_file_and_byte(decoder: str, tmp_path: Path) -> None:
    good = bytearray(encode_batch([Record(i, 5, b"k", b"value-%d" % i) for i in range(4)]))
    good[61 + 4] = 0x7E  # the first record's key length (at byte 4 of the record) overruns it
    header = parse_header(bytes(good))
    batch = RawBatch(header, memoryview(bytes(good)), tmp_path / "00000000000000000000.log")
    with pytest.raises(CorruptRecordError) as caught:
        list(decode_batches([batch], topic="t", partition=0, start=0, end=4))
    assert "00000000000000000000.log: record batch at byte 0" in str(caught.value)


def direct_rows(batches: list[RawBatch], start: int, end: int) -> list[dict[str, object]]:
    decoded = decode_batches(batches, topic="t", partition=3, start=start, end=end)
    return [row for batch in decoded for row in batch.to_pylist()]


def raw_batch(data: bytes, path: Path) -> RawBatch:
    return RawBatch(parse_header(data), memoryview(data), path)


def test_both_decoders_agree_on_appended_timestamps_and_ranges(tmp_path: Path) -> None:
    rng = random.Random(11)
    data = [
        encode_batch(
            [random_record(rng, base + n) for n in range(40)],
            timestamp_type=TimestampType.LOG_APPEND_TIME if base % 80 else 0,
        )
        for base in range(0, 400, 40)
    ]
    batches = [raw_batch(item, tmp_path / "00000000000000000000.log") for item in data]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(columns, "compiled", None)
        reference = direct_rows(batches, 17, 383)
    assert len(reference) == 383 - 17
    assert direct_rows(batches, 17, 383) == reference


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    damage=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4),
)
def test_damaged_records_fail_alike_in_both_decoders(
    seed: int, damage: list[tuple[float, int]]
) -> None:
    """Bytes overwritten anywhere in the records: both decoders give the same rows, or both
    raise CorruptRecordError for the same batch. Nothing reads outside the buffer."""
    rng = random.Random(seed)
    base = 0
    batches = []
    for _ in range(rng.randrange(1, 4)):
        records = [random_record(rng, base + n) for n in range(rng.randrange(1, 6))]
        data = bytearray(encode_batch(records))
        base += len(records)
        for where, byte in damage:
            data[HEADER_BYTES + int(where * (len(data) - HEADER_BYTES))] = byte
        batches.append(raw_batch(bytes(data), Path(f"{len(batches)}.log")))
    outcomes: list[object] = []
    for compiled in (columns.compiled, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(columns, "compiled", compiled)
            try:
                outcomes.append(direct_rows(batches, 0, base))
            except CorruptRecordError:
                outcomes.append("corrupt")  # either may name another of several bad batches
    assert outcomes[0] == outcomes[1]
