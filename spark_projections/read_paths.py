"""The two ways to read a planned chunk: segment files, or Kafka Fetch requests.

``direct`` opens the partition's segment files under ``dataDir`` read-only
(:class:`~eventplatform.log.storage.reader.PartitionReader`) and decodes the
batches in bulk; it needs the files on the machine that runs the task.
``kafka`` assigns a confluent-kafka consumer to the partition at the chunk's
start, without a group and without commits, so it works against any
Kafka-compatible cluster. Both skip control records and aborted transactional
data as a read-committed consumer does, drop records outside the chunk, and
produce the same Arrow batches (:mod:`eventplatform.spark_projections.columns`).
A record the log erased stays a row, as a consumer sees it: its offset,
timestamp and key, a null value and the one header ``eventplatform.erased``.
Readers of events skip it (:func:`eventplatform.events.is_erased`), and its
offset counts as read like any other.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from eventplatform.client_config import KAFKA_LOG
from eventplatform.events.wire import is_erased
from eventplatform.log.storage.errors import StorageError
from eventplatform.log.storage.reader import PartitionReader
from eventplatform.log.storage.record_batch import decode_batch
from eventplatform.spark_projections.columns import (
    ROWS_PER_ARROW_BATCH,
    columns_from_messages,
    decode_batches,
)
from eventplatform.spark_projections.errors import OffsetRangeError, ReplayError
from eventplatform.spark_projections.offsets import (
    OffsetRange,
    ReadOptions,
    open_metadata,
    parse_options,
)

CONSUME_BATCH_MESSAGES = 10_000
CONSUME_WAIT_S = 0.1
SEEK_GAP_OFFSETS = 1_000
FETCH_QUEUE_BACKOFF_MS = 10
"""In ``read_values``, a wanted offset this far past the last one read is sought, not read to."""
_LOG_APPEND_TIME = 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME

if TYPE_CHECKING:
    from eventplatform.events.erasure import ErasedRecord
    from eventplatform.events.model import Position

    LogValue = bytes | ErasedRecord


def read_chunk(options: ReadOptions, chunk: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``chunk`` as Arrow batches, through the options' read path."""
    if chunk.records <= 0:
        return iter(())
    if options.read_path == "direct":
        return _read_direct(options, chunk)
    return _read_kafka(options, chunk)


# ---------------------------------------------------------------- direct


def _partition_reader(options: ReadOptions, topic: str, partition: int) -> PartitionReader:
    assert options.data_dir is not None, "parse_options requires dataDir for direct reads"
    return PartitionReader(options.data_dir / f"{topic}-{partition}")


def _read_direct(options: ReadOptions, chunk: OffsetRange) -> Iterator[pa.RecordBatch]:
    reader = _partition_reader(options, chunk.topic, chunk.partition)
    try:
        batches = reader.iter_visible_batches(chunk.start, chunk.end)
        yield from decode_batches(
            batches,
            topic=chunk.topic,
            partition=chunk.partition,
            start=chunk.start,
            end=chunk.end,
        )
    except StorageError as exc:
        raise ReplayError(f"{chunk.topic}/{chunk.partition}: {exc}") from exc


# ---------------------------------------------------------------- kafka


def _consumer(options: ReadOptions) -> Any:
    from confluent_kafka import Consumer

    if not options.bootstrap_servers:
        raise ReplayError("the kafka read path needs bootstrap.servers")
    config: dict[str, Any] = {
        "group.id": "eventplatform-eventlog",
        "auto.offset.reset": "error",
        # librdkafka pauses a partition's fetches once 100,000 records wait in its queue,
        # for fetch.queue.backoff.ms (1 s by default): a replay of small records, which
        # drains that queue in well under a second, spent most of its time paused.
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        **options.kafka_settings,
        "bootstrap.servers": options.bootstrap_servers,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "logger": KAFKA_LOG,
    }
    return Consumer(config)


def _read_kafka(options: ReadOptions, chunk: OffsetRange) -> Iterator[pa.RecordBatch]:
    consumer = _consumer(options)
    try:
        pending: list[tuple[int, int, int, bytes | None, bytes | None, object]] = []
        for message in _consume_range(consumer, options, chunk):
            timestamp_type, timestamp_ms = message.timestamp()
            pending.append(
                (
                    message.offset(),
                    timestamp_ms,
                    1 if timestamp_type == _LOG_APPEND_TIME else 0,
                    message.key(),
                    message.value(),
                    message.headers(),
                )
            )
            if len(pending) >= ROWS_PER_ARROW_BATCH:
                yield columns_from_messages(pending, topic=chunk.topic, partition=chunk.partition)
                pending = []
        if pending:
            yield columns_from_messages(pending, topic=chunk.topic, partition=chunk.partition)
    finally:
        consumer.close()


def _consume_range(consumer: Any, options: ReadOptions, chunk: OffsetRange) -> Iterator[Any]:
    """Messages with offsets in ``[chunk.start, chunk.end)``; fails after ``pollTimeoutMs``
    without progress. Offsets may skip (compaction, control records)."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer.assign([KafkaPartition(chunk.topic, chunk.partition, chunk.start)])
    deadline = time.monotonic() + options.poll_timeout_ms / 1000
    while True:
        messages = consumer.consume(CONSUME_BATCH_MESSAGES, CONSUME_WAIT_S)
        if messages:
            deadline = time.monotonic() + options.poll_timeout_ms / 1000
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= chunk.end:
                        return
                    continue
                if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    raise OffsetRangeError(
                        f"{chunk.topic}/{chunk.partition}: offset {chunk.start} is no longer "
                        f"in the log ({error.str()})"
                    )
                raise ReplayError(f"{chunk.topic}/{chunk.partition}: {error.str()}")
            offset = message.offset()
            if offset >= chunk.end:
                return
            if offset >= chunk.start:
                yield message
            if offset == chunk.end - 1:
                return
        if time.monotonic() > deadline:
            raise ReplayError(
                f"{chunk.topic}/{chunk.partition}: no record for {options.poll_timeout_ms} ms "
                f"while reading [{chunk.start}, {chunk.end})"
            )


# ---------------------------------------------------------------- values at positions


def read_values(
    options: Mapping[str, str] | ReadOptions, positions: Sequence[Position]
) -> dict[Position, LogValue]:
    """The raw values at ``positions``, through the options' read path.

    A position holding no value (a tombstone, or an offset compaction
    removed) is absent from the result. A record the log erased holds no value
    either, but is there as an :class:`~eventplatform.events.ErasedRecord` (its
    key and timestamp), which a correction that names it needs. A position
    outside its partition's ``[log start, high watermark)`` raises
    OffsetRangeError. Only the options' path, ``dataDir``, ``bootstrap.servers``
    and ``kafka.*`` settings matter here; ``topics`` may be left out.
    """
    from eventplatform.events.model import Position

    if not positions:
        return {}
    if isinstance(options, ReadOptions):
        parsed = options
    else:
        given = {key.lower(): value for key, value in options.items()}
        given.setdefault("topics", ",".join(sorted({position.topic for position in positions})))
        parsed = parse_options(given)
    wanted: dict[tuple[str, int], list[int]] = defaultdict(list)
    for position in positions:
        wanted[(position.topic, position.partition)].append(position.offset)
    _check_positions(parsed, wanted)
    found: dict[Position, LogValue] = {}
    for (topic, partition), offsets in sorted(wanted.items()):
        ordered = sorted(set(offsets))
        if parsed.read_path == "direct":
            values = _direct_values(parsed, topic, partition, ordered)
        else:
            values = _kafka_values(parsed, topic, partition, ordered)
        for offset, (value, erased) in values.items():
            position = Position(topic, partition, offset)
            found[position] = value if value is not None else _erased(position, erased)
    return found


Kept = tuple[bytes | None, tuple[bytes | None, int] | None]
"""What ``_direct_values`` and ``_kafka_values`` give for an offset: its value, or None and
the key and timestamp (ms) of an erased record."""


def _erased(position: Position, kept: tuple[bytes | None, int] | None) -> LogValue:
    from eventplatform.events.erasure import ErasedRecord

    assert kept is not None, "an offset without a value is read only when it was erased"
    return ErasedRecord.of(position, *kept)


def _check_positions(options: ReadOptions, wanted: Mapping[tuple[str, int], list[int]]) -> None:
    metadata = open_metadata(options)
    try:
        for (topic, partition), offsets in wanted.items():
            count = metadata.partition_count(topic)
            if partition >= count:
                raise OffsetRangeError(f"{topic}/{partition}: {topic!r} has {count} partitions")
            log_start, high_watermark = metadata.bounds(topic, partition)
            for offset in offsets:
                if not log_start <= offset < high_watermark:
                    raise OffsetRangeError(
                        f"{topic}/{partition}: offset {offset} is outside the log, which "
                        f"holds [{log_start}, {high_watermark})"
                    )
    finally:
        metadata.close()


def _direct_values(
    options: ReadOptions, topic: str, partition: int, offsets: Sequence[int]
) -> dict[int, Kept]:
    reader = _partition_reader(options, topic, partition)
    values: dict[int, Kept] = {}
    covered = -1  # offsets below this were decoded already
    try:
        for offset in offsets:
            if offset < covered:
                continue
            for batch in reader.iter_visible_batches(offset, offset + 1):
                for record in decode_batch(batch.data, check_crc=False).records:
                    if record.offset not in offsets:
                        continue
                    if record.value is not None:
                        values[record.offset] = (record.value, None)
                    elif is_erased(record.headers, None):
                        values[record.offset] = (None, (record.key, record.timestamp))
                covered = max(covered, batch.header.next_offset)
    except StorageError as exc:
        raise ReplayError(f"{topic}/{partition}: {exc}") from exc
    return {offset: values[offset] for offset in offsets if offset in values}


def _kafka_values(
    options: ReadOptions, topic: str, partition: int, offsets: Sequence[int]
) -> dict[int, Kept]:
    values: dict[int, Kept] = {}
    consumer = _consumer(options)
    try:
        index = 0
        while index < len(offsets):
            run_end = index + 1
            while (
                run_end < len(offsets)
                and offsets[run_end] - offsets[run_end - 1] < SEEK_GAP_OFFSETS
            ):
                run_end += 1
            run = OffsetRange(topic, partition, offsets[index], offsets[run_end - 1] + 1)
            wanted = set(offsets[index:run_end])
            for message in _consume_range(consumer, options, run):
                if message.offset() not in wanted:
                    continue
                if message.value() is not None:
                    values[message.offset()] = (message.value(), None)
                elif is_erased(message.headers(), None):
                    kept = (message.key(), message.timestamp()[1])
                    values[message.offset()] = (None, kept)
            index = run_end
    finally:
        consumer.close()
    return values
