"""The ``eventlog`` data source against a real broker: both read paths, offsets, errors, streams.

One ``platform serve`` process serves the module. Its data directory is known,
so the direct path (segment files) and the Kafka path (Fetch through
confluent-kafka) read the same log and must return the same rows.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.events import Event, EventProducer, Position
from eventplatform.spark_projections.errors import (
    OffsetRangeError,
    ReplayConfigError,
    UnknownTopicError,
)
from eventplatform.spark_projections.offsets import plan
from eventplatform.spark_projections.read_paths import read_chunk, read_values
from eventplatform.spark_projections.source import SCHEMA
from eventplatform.testing import BrokerProcess, running_broker

ADMIN_TIMEOUT_S = 30.0
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 120
BASE_TIMESTAMP_MS = 1_700_000_000_000
MIXED = "mixed"
EVENTS = "eventlog_tests"
TRIMMED = "trimmed"
STREAM = "stream"
COLUMNS = [field.name for field in SCHEMA.fields]


class Clicked(Event, type="eventlog_tests.clicked", version=3, key="user"):
    user: str
    button: str


@dataclass
class Log:
    broker: BrokerProcess
    admin: AdminClient
    produced: dict[Position, dict[str, Any]]
    clicks: list[tuple[Position, str]]

    @property
    def data_dir(self) -> str:
        return str(self.broker.data_dir)

    def direct(self, **options: str) -> dict[str, str]:
        return {"dataDir": self.data_dir, "readPath": "direct", **options}

    def kafka(self, **options: str) -> dict[str, str]:
        return {"bootstrap.servers": self.broker.bootstrap, "readPath": "kafka", **options}


def create_topics(admin: AdminClient, names: Mapping[str, int]) -> None:
    topics = [
        NewTopic(name, num_partitions=count, replication_factor=1) for name, count in names.items()
    ]
    for future in admin.create_topics(topics, operation_timeout=ADMIN_TIMEOUT_S).values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def record_of(index: int) -> dict[str, Any]:
    """A mix of event-like and plain records: null keys and values, odd headers."""
    key = None if index % 7 == 0 else f"key-{index}".encode()
    if index % 11 == 0:
        value = None
    elif index % 3 == 0:
        value = b'{"id":"%036d","type":"t","data":{}}' % index
    elif index % 3 == 1:
        value = json.dumps({"type": "t", "id": f"loose-{index}"}).encode()
    else:
        value = bytes(range(index % 256)) * 2
    headers: list[tuple[str, bytes | None]] = []
    if index % 4 != 3:
        headers = [("event-type", b"mixed.thing"), ("event-version", str(index % 9 + 1).encode())]
    if index % 5 == 0:
        headers.append(("trace", None))
    return {"key": key, "value": value, "headers": headers, "timestamp": BASE_TIMESTAMP_MS + index}


def produce_mixed(bootstrap: str) -> dict[Position, dict[str, Any]]:
    produced: dict[Position, dict[str, Any]] = {}

    def delivered(index: int) -> Any:
        def callback(error: Any, message: Any) -> None:
            assert error is None, error
            position = Position(message.topic(), message.partition(), message.offset())
            produced[position] = record_of(index)

        return callback

    index = 0
    for codec in CODECS:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50}
        )
        for _ in range(RECORDS_PER_CODEC):
            record = record_of(index)
            producer.produce(
                MIXED,
                partition=index % 3,
                on_delivery=delivered(index),
                **record,
            )
            index += 1
        assert producer.flush(ADMIN_TIMEOUT_S) == 0
    return produced


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Log]:
    overrides = ("num.partitions=1", "auto.create.topics.enable=false")
    with running_broker(tmp_path_factory.mktemp("eventlog"), overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topics(admin, {MIXED: 3, EVENTS: 2, TRIMMED: 1, STREAM: 2})
        produced = produce_mixed(broker.bootstrap)
        with EventProducer(broker.bootstrap) as events:
            refs = events.append(
                Clicked(user=f"user-{index}", button=f"b{index}") for index in range(40)
            )
        clicks = [(ref.position, str(ref.event_id)) for ref in refs]
        yield Log(broker, admin, produced, clicks)


def rows_of(dataframe: Any) -> list[tuple[Any, ...]]:
    rows = [tuple(row) for row in dataframe.collect()]
    return sorted(rows, key=lambda row: (row[0], row[1], row[2]))


def load(spark: Any, options: Mapping[str, str]) -> Any:
    reader = spark.read.format("eventlog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# ---------------------------------------------------------------- both paths, every codec


def test_both_paths_return_the_same_rows_for_every_codec(spark: Any, log: Log) -> None:
    in_one = sum(1 for position, _ in log.clicks if position.partition == 1)
    assert 0 < in_one < len(log.clicks)
    ranges = json.dumps({MIXED: {"0": 3, "1": -2}, EVENTS: {"1": in_one // 2}})
    ends = json.dumps({MIXED: {"0": 150, "2": -1}})
    common = {"topics": f"{MIXED},{EVENTS}", "startingOffsets": ranges, "endingOffsets": ends}
    direct = load(spark, log.direct(**common, maxRecordsPerPartition="90"))
    kafka = load(spark, log.kafka(**common))
    assert direct.columns == COLUMNS and direct.schema == SCHEMA
    direct_rows, kafka_rows = rows_of(direct), rows_of(kafka)
    assert direct_rows == kafka_rows

    expected_mixed = {
        (position.partition, position.offset)
        for position in log.produced
        if (position.partition == 0 and 3 <= position.offset < 150) or position.partition > 0
    }
    mixed = [row for row in direct_rows if row[0] == MIXED]
    assert {(row[1], row[2]) for row in mixed} == expected_mixed
    assert len(mixed) == len(expected_mixed)
    for row in mixed:
        record = log.produced[Position(MIXED, row[1], row[2])]
        assert row[5] == record["key"] and row[6] == record["value"]
        assert [(h["key"], h["value"]) for h in row[7]] == record["headers"]
        assert int(row[3].timestamp() * 1000) == record["timestamp"] and row[4] == 0
        has_headers = bool(record["headers"]) and record["headers"][0][0] == "event-type"
        assert row[8] == ("mixed.thing" if has_headers else None)
        assert row[9] == (int(record["headers"][1][1]) if has_headers else None)
        value = record["value"]
        expected_id = json.loads(value).get("id") if value and value.startswith(b"{") else None
        assert row[10] == expected_id

    clicks = {position.offset: event_id for position, event_id in log.clicks}
    events = [row for row in direct_rows if row[0] == EVENTS]
    expected_events = [
        position
        for position, _ in log.clicks
        if position.partition == 0 or position.offset >= in_one // 2
    ]
    assert len(events) == len(expected_events)
    for row in events:
        assert row[8] == "eventlog_tests.clicked" and row[9] == 3
        position_ids = {
            (position.partition, position.offset): event_id for position, event_id in log.clicks
        }
        assert row[10] == position_ids[(row[1], row[2])]
    assert clicks  # the SDK's events made it


# ---------------------------------------------------------------- offsets and chunks


def test_offsets_resolve_like_the_kafka_source(log: Log) -> None:
    counts = {p: sum(1 for pos in log.produced if pos.partition == p) for p in range(3)}
    for options in (log.direct(topics=MIXED), log.kafka(topics=MIXED)):
        everything = plan(options)
        assert {(r.partition, r.start, r.end) for r in everything.ranges().values()} == {
            (p, 0, counts[p]) for p in range(3)
        }
        assert everything.bounds() == {(MIXED, p): (0, counts[p]) for p in range(3)}
        latest = plan({**options, "startingOffsets": "latest"})
        assert latest.chunks == ()
        picked = plan(
            {
                **options,
                "startingOffsets": json.dumps({MIXED: {"0": -1, "1": 10}}),
                "endingOffsets": json.dumps({MIXED: {"1": 20, "2": 7}}),
            }
        )
        assert sorted((r.partition, r.start, r.end) for r in picked.ranges().values()) == [
            (0, counts[0], counts[0]),
            (1, 10, 20),
            (2, 0, 7),
        ]
        assert plan({**options, "endingOffsets": "earliest"}).chunks == ()


def test_timestamp_bounds_resolve_like_list_offsets(log: Log) -> None:
    # Record i has timestamp BASE + i and sits in partition i % 3 at offset i // 3.
    stamps = {
        "startingTimestamp": str(BASE_TIMESTAMP_MS + 30),
        "endingOffsetsByTimestamp": json.dumps(
            {MIXED: {"0": BASE_TIMESTAMP_MS + 61, "1": BASE_TIMESTAMP_MS + 10**9}}
        ),
    }
    found = []
    for options in (log.direct(topics=MIXED, **stamps), log.kafka(topics=MIXED, **stamps)):
        ranges = plan(options).ranges()
        found.append(ranges)
        assert (ranges[(MIXED, 0)].start, ranges[(MIXED, 0)].end) == (10, 21)
        assert ranges[(MIXED, 1)].start == 10  # record 31 is the first at or after +30
        high = plan(log.direct(topics=MIXED)).bounds()[(MIXED, 1)][1]
        assert ranges[(MIXED, 1)].end == high  # no record that late: latest
        assert ranges[(MIXED, 2)].start == 10
    assert found[0] == found[1]
    beyond = plan(log.direct(topics=MIXED, startingTimestamp=str(BASE_TIMESTAMP_MS + 10**9)))
    assert beyond.chunks == ()


def test_long_ranges_split_into_gapless_chunks(spark: Any, log: Log) -> None:
    options = log.direct(topics=MIXED, maxRecordsPerPartition="60", minPartitions="16")
    planned = plan(options)
    assert len(planned.chunks) >= 16
    for key, whole in planned.ranges().items():
        pieces = sorted(c for c in planned.chunks if (c.topic, c.partition) == key)
        assert pieces[0].start == whole.start and pieces[-1].end == whole.end
        assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
        assert all(0 < piece.records <= 60 for piece in pieces)
    dataframe = load(spark, options)
    assert dataframe.rdd.getNumPartitions() == len(planned.chunks)
    offsets = dataframe.select("partition", "offset").collect()
    assert sorted((row[0], row[1]) for row in offsets) == sorted(
        (position.partition, position.offset) for position in log.produced
    )


def test_the_log_start_offset_is_honoured_after_delete_records(log: Log) -> None:
    producer = Producer({"bootstrap.servers": log.broker.bootstrap, "linger.ms": 5})
    for index in range(30):
        producer.produce(TRIMMED, value=b"v%d" % index, partition=0)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    futures = log.admin.delete_records([TopicPartition(TRIMMED, 0, 12)])
    for future in futures.values():
        future.result(timeout=ADMIN_TIMEOUT_S)
    for options in (log.direct(topics=TRIMMED), log.kafka(topics=TRIMMED)):
        planned = plan(options)
        assert planned.bounds() == {(TRIMMED, 0): (12, 30)}
        [chunk] = planned.chunks
        assert (chunk.start, chunk.end) == (12, 30)
        rows = [batch.to_pylist() for batch in read_chunk(planned.options, chunk)]
        assert [row["offset"] for batch in rows for row in batch] == list(range(12, 30))
        too_early = {**options, "startingOffsets": json.dumps({TRIMMED: {"0": 5}})}
        with pytest.raises(OffsetRangeError) as caught:
            plan(too_early)
        message = str(caught.value)
        assert f"{TRIMMED}/0" in message and "5" in message and "[12, 30)" in message


def test_the_high_watermark_is_never_crossed(log: Log) -> None:
    producer = Producer({"bootstrap.servers": log.broker.bootstrap})
    for index in range(10):
        producer.produce(TRIMMED, value=b"before-%d" % index, partition=0)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    options = {**log.direct(topics=TRIMMED), "bootstrap.servers": log.broker.bootstrap}
    planned = plan(options)  # the cluster's high watermark, read through the files
    high = planned.bounds()[(TRIMMED, 0)][1]
    for index in range(10):
        producer.produce(TRIMMED, value=b"after-%d" % index, partition=0)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    for path_options in (planned.options, plan(log.kafka(topics=TRIMMED)).options):
        rows = [
            row
            for batch in read_chunk(path_options, planned.chunks[0])
            for row in batch.to_pylist()
        ]
        assert rows[-1]["offset"] == high - 1
        assert all(not row["value"].startswith(b"after") for row in rows)
    with pytest.raises(OffsetRangeError, match="past the high watermark"):
        plan({**options, "startingOffsets": json.dumps({TRIMMED: {"0": high + 100}})})
    with pytest.raises(OffsetRangeError, match="ending offset"):
        plan({**options, "endingOffsets": json.dumps({TRIMMED: {"0": high + 100}})})


# ---------------------------------------------------------------- values at positions


def test_read_values_returns_the_raw_values_on_both_paths(log: Log) -> None:
    wanted = [position for position in sorted(log.produced) if position.offset % 17 == 1]
    wanted += [log.clicks[0][0], log.clicks[-1][0]]
    direct = read_values(log.direct(), wanted)
    kafka = read_values(log.kafka(), wanted)
    assert direct == kafka
    for position in wanted:
        value = log.produced[position]["value"] if position.topic == MIXED else direct[position]
        assert direct.get(position) == value  # tombstones are absent
    assert json.loads(direct[log.clicks[0][0]])["id"] == log.clicks[0][1]
    with pytest.raises(OffsetRangeError, match="outside the log"):
        read_values(log.direct(), [Position(MIXED, 0, 10**6)])


# ---------------------------------------------------------------- errors


def test_bad_options_are_clear_errors(spark: Any, log: Log) -> None:
    for options in (log.direct(topics="nope"), log.kafka(topics="nope")):
        with pytest.raises(UnknownTopicError, match="nope"):
            plan(options)
    cases = [
        ({"topics": MIXED, "readPath": "direct"}, "dataDir"),
        ({"dataDir": log.data_dir}, "topics"),
        (log.direct(topics=MIXED, startingOffsets="{not json"), "startingOffsets"),
        (log.direct(topics=MIXED, startingOffsets=json.dumps({"other": {"0": 1}})), "other"),
        (log.direct(topics=MIXED, endingOffsets=json.dumps({MIXED: {"0": "x"}})), "endingOffsets"),
        (log.direct(topics=MIXED, startingOffsets=json.dumps({MIXED: {"7": 0}})), "3 partitions"),
        (log.direct(topics=MIXED, maxRecordsPerPartition="0"), "maxrecordsperpartition"),
        (log.direct(topics=MIXED, readPath="sideways"), "readPath"),
        (log.direct(topics=MIXED, startingOffset="earliest"), "startingoffset"),
        (log.direct(topics=MIXED, startingTimestamp="yesterday"), "startingTimestamp"),
    ]
    for options, needle in cases:
        with pytest.raises(ReplayConfigError, match=needle):
            plan(options)
    with pytest.raises(OffsetRangeError, match=r"ending offset 2 is before starting offset 5"):
        plan(
            log.direct(
                topics=MIXED,
                startingOffsets=json.dumps({MIXED: {"0": 5}}),
                endingOffsets=json.dumps({MIXED: {"0": 2}}),
            )
        )
    # Through Spark the same messages reach the user: malformed options fail at load().
    with pytest.raises(Exception, match="startingOffsets"):
        load(spark, log.direct(topics=MIXED, startingOffsets="{not json"))
    with pytest.raises(Exception, match="does not exist"):
        load(spark, log.direct(topics="nope")).count()


# ---------------------------------------------------------------- streaming


def test_a_stream_reads_what_arrives_exactly_once(spark: Any, log: Log, tmp_path: Path) -> None:
    producer = Producer({"bootstrap.servers": log.broker.bootstrap})

    def produce(prefix: str, count: int) -> None:
        for index in range(count):
            producer.produce(STREAM, value=f"{prefix}-{index}".encode(), partition=index % 2)
        assert producer.flush(ADMIN_TIMEOUT_S) == 0

    produce("first", 10)
    seen: list[tuple[int, int, bytes]] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(
            (row[0], row[1], bytes(row[2]))
            for row in batch.select("partition", "offset", "value").collect()
        )

    def run() -> None:
        stream = spark.readStream.format("eventlog")
        options = {
            **log.direct(topics=STREAM),
            "startingOffsets": "earliest",
            "maxRecordsPerPartition": "4",
        }
        for key, value in options.items():
            stream = stream.option(key, value)
        query = (
            stream.load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the stream did not finish in time"
        assert query.exception() is None

    run()
    assert sorted(value for _, _, value in seen) == sorted(f"first-{i}".encode() for i in range(10))
    produce("second", 6)
    run()  # the checkpoint resumes where the first run stopped
    values = [value for _, _, value in seen]
    assert sorted(values) == sorted(
        [f"first-{i}".encode() for i in range(10)] + [f"second-{i}".encode() for i in range(6)]
    )
    assert len({(partition, offset) for partition, offset, _ in seen}) == len(seen) == 16


def test_streams_take_no_ending_options(log: Log) -> None:
    from eventplatform.spark_projections.offsets import parse_options

    with pytest.raises(ReplayConfigError, match="batch reads only"):
        parse_options({**log.direct(topics=STREAM), "endingOffsets": "latest"}, streaming=True)
    assert time.monotonic() > 0
