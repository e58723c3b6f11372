"""Options of the ``eventlog`` source and the plan of a read: which offsets, in which chunks.

Everything here runs on the driver and needs no SparkSession: the replay job
calls :func:`plan` directly, and the data source calls it while Spark plans.

Offsets follow Spark's Kafka source. ``startingOffsets`` / ``endingOffsets``
are ``earliest``, ``latest`` or JSON ``{"topic": {"0": 42, "1": -2}}`` with
-2 for earliest (the log start offset) and -1 for latest (the high
watermark); a partition the JSON leaves out takes the default, earliest for
the start and latest for the end. Ends are exclusive. Timestamp bounds
(``startingTimestamp``, ``startingOffsetsByTimestamp`` and the ``ending``
pair) resolve like ListOffsets: the first offset stamped at or after the
time, else latest. The options combine per partition, the most specific
first: its entry in ``*OffsetsByTimestamp``, then its entry in the
``*Offsets`` JSON, then ``*Timestamp``, then the default.

A partition's log start offset and high watermark come from the cluster
(``bootstrap.servers``) when it is given, even for direct reads: only the
broker knows its high watermark. Without it they come from the data
directory's files. No chunk ever reaches past the high watermark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from eventplatform.client_config import KAFKA_LOG
from eventplatform.log.storage.errors import StorageError
from eventplatform.log.storage.reader import PartitionReader
from eventplatform.spark_projections.errors import (
    OffsetRangeError,
    ReplayConfigError,
    ReplayError,
    UnknownTopicError,
)

EARLIEST = -2
LATEST = -1
MAX_RECORDS_PER_PARTITION_DEFAULT = 500_000
"""Records one Spark partition reads at most, unless options say otherwise."""
METADATA_TIMEOUT_S = 30.0
POLL_TIMEOUT_MS_DEFAULT = 120_000
"""How long a Kafka-path read may go without a message before it fails."""
READ_PATHS = ("auto", "direct", "kafka")
TOPICS_FILE = "topics.json"

TopicPartition = tuple[str, int]

_KNOWN_OPTIONS = frozenset(
    {
        "topics",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "bootstrap.servers",
        "datadir",
        "readpath",
        "maxrecordsperpartition",
        "minpartitions",
        "failondataloss",
        "polltimeoutms",
    }
)


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of the range as the options give it, before it meets the log."""

    default: int
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Parsed, validated options (see :func:`parse_options`). Picklable."""

    topics: tuple[str, ...]
    start: Bound
    end: Bound
    read_path: str
    bootstrap_servers: str | None
    data_dir: Path | None
    max_records_per_partition: int
    min_partitions: int | None
    fail_on_data_loss: bool
    poll_timeout_ms: int
    kafka_settings: Mapping[str, str] = field(repr=False)  # may hold a password


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        """Offsets in the range (records, unless compaction left gaps)."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One partition's resolved range and the log bounds it was checked against."""

    range: OffsetRange
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Plan:
    """A resolved read: per partition its range and bounds, and the chunks to read."""

    options: ReadOptions
    partitions: tuple[PartitionPlan, ...]
    chunks: tuple[OffsetRange, ...]

    def bounds(self) -> dict[TopicPartition, tuple[int, int]]:
        """``(log_start_offset, high_watermark)`` per ``(topic, partition)``."""
        return {
            (item.range.topic, item.range.partition): (item.log_start_offset, item.high_watermark)
            for item in self.partitions
        }

    def ranges(self) -> dict[TopicPartition, OffsetRange]:
        """The whole range per ``(topic, partition)``."""
        return {(item.range.topic, item.range.partition): item.range for item in self.partitions}


# ---------------------------------------------------------------- options


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Validate ``options`` (keys are case-insensitive) or raise ReplayConfigError."""
    values = {str(key).lower(): str(value) for key, value in options.items()}
    kafka_settings = {
        key.removeprefix("kafka."): value
        for key, value in values.items()
        if key.startswith("kafka.")
    }
    unknown = sorted(
        key
        for key in values
        if key not in _KNOWN_OPTIONS and key not in kafka_settings and not key.startswith("kafka.")
    )
    if unknown:
        raise ReplayConfigError(f"unknown eventlog option(s): {', '.join(unknown)}")
    bootstrap = kafka_settings.pop("bootstrap.servers", None) or values.get("bootstrap.servers")
    topics = tuple(dict.fromkeys(name.strip() for name in values.get("topics", "").split(",")))
    topics = tuple(name for name in topics if name)
    if not topics:
        raise ReplayConfigError("option 'topics' is required: a comma-separated list of topics")
    if streaming and any(key.startswith("ending") for key in values):
        raise ReplayConfigError("ending offsets and timestamps are for batch reads only")
    data_dir = Path(values["datadir"]) if values.get("datadir") else None
    return ReadOptions(
        topics=topics,
        start=_parse_bound(values, "starting", LATEST if streaming else EARLIEST, topics),
        end=_parse_bound(values, "ending", LATEST, topics),
        read_path=_read_path(values.get("readpath", "auto"), data_dir),
        bootstrap_servers=bootstrap,
        data_dir=data_dir,
        max_records_per_partition=_positive(values, "maxrecordsperpartition")
        or MAX_RECORDS_PER_PARTITION_DEFAULT,
        min_partitions=_positive(values, "minpartitions"),
        fail_on_data_loss=_boolean(values.get("failondataloss", "true"), "failOnDataLoss"),
        poll_timeout_ms=_positive(values, "polltimeoutms") or POLL_TIMEOUT_MS_DEFAULT,
        kafka_settings=kafka_settings,
    )


def _read_path(raw: str, data_dir: Path | None) -> str:
    path = raw.strip().lower()
    if path not in READ_PATHS:
        raise ReplayConfigError(f"readPath is {raw!r}; expected one of {', '.join(READ_PATHS)}")
    if path == "direct" and data_dir is None:
        raise ReplayConfigError("readPath=direct needs dataDir, the broker's data directory")
    if path == "auto":
        return "direct" if data_dir is not None else "kafka"
    return path


def _parse_bound(
    values: Mapping[str, str], prefix: str, default: int, topics: Sequence[str]
) -> Bound:
    name = prefix + "Offsets"
    timestamp_ms = None
    if f"{prefix}timestamp" in values:
        timestamp_ms = _integer(values[f"{prefix}timestamp"], prefix + "Timestamp")
        if timestamp_ms < 0:
            raise ReplayConfigError(f"{prefix}Timestamp must not be negative")
    timestamps = {}
    if f"{prefix}offsetsbytimestamp" in values:
        raw_timestamps = values[f"{prefix}offsetsbytimestamp"]
        timestamps = _partition_json(raw_timestamps, name + "ByTimestamp", topics)
        if any(stamp < 0 for stamp in timestamps.values()):
            raise ReplayConfigError(f"{name}ByTimestamp: timestamps must not be negative")
    offsets = {}
    raw = values.get(f"{prefix}offsets", "").strip()
    if raw.lower() in ("earliest", "latest"):
        default = EARLIEST if raw.lower() == "earliest" else LATEST
    elif raw:
        offsets = _partition_json(raw, name, topics)
        if any(offset < EARLIEST for offset in offsets.values()):
            raise ReplayConfigError(f"{name}: an offset is -2 (earliest), -1 (latest) or >= 0")
        if prefix == "ending" and any(offset == EARLIEST for offset in offsets.values()):
            raise ReplayConfigError("endingOffsets: -2 (earliest) is not allowed as an end")
    return Bound(default, offsets, timestamp_ms, timestamps)


def _partition_json(raw: str, name: str, topics: Sequence[str]) -> dict[TopicPartition, int]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ReplayConfigError(
            f"{name} is not 'earliest', 'latest' or JSON like {{\"topic\": {{\"0\": 42}}}}: {exc}"
        ) from None
    if not isinstance(document, dict):
        raise ReplayConfigError(f'{name} must be a JSON object like {{"topic": {{"0": 42}}}}')
    result: dict[TopicPartition, int] = {}
    for topic, partitions in document.items():
        if topic not in topics:
            raise ReplayConfigError(f"{name} names topic {topic!r}, which 'topics' does not list")
        if not isinstance(partitions, dict):
            raise ReplayConfigError(f"{name}: {topic!r} must map partitions to numbers")
        for partition, value in partitions.items():
            if not str(partition).isdigit() or type(value) is not int:
                raise ReplayConfigError(
                    f"{name}: {topic!r} partition {partition!r} -> {value!r} "
                    "is not a partition number mapped to an integer"
                )
            result[(topic, int(partition))] = value
    return result


def _integer(raw: str, name: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ReplayConfigError(f"{name} is {raw!r}, not an integer") from None


def _positive(values: Mapping[str, str], key: str) -> int | None:
    if key not in values:
        return None
    number = _integer(values[key], key)
    if number < 1:
        raise ReplayConfigError(f"{key} is {number}; it must be at least 1")
    return number


def _boolean(raw: str, name: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ReplayConfigError(f"{name} is {raw!r}; expected true or false")
    return lowered == "true"


# ---------------------------------------------------------------- where bounds come from


class LogMetadata(Protocol):
    """Partition counts, log bounds and timestamp lookups of one log."""

    def partition_count(self, topic: str) -> int: ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]: ...

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...

    def close(self) -> None: ...


class FileMetadata:
    """Bounds read from a data directory's files (``topics.json`` and segments)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        path = data_dir / TOPICS_FILE
        try:
            self.topics: dict[str, int] = {
                name: int(entry["partitions"])
                for name, entry in orjson.loads(path.read_bytes()).items()
            }
        except FileNotFoundError:
            raise ReplayConfigError(f"dataDir {data_dir} holds no {TOPICS_FILE}") from None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"{path} is malformed: {exc}") from exc

    def reader(self, topic: str, partition: int) -> PartitionReader:
        return PartitionReader(self.data_dir / f"{topic}-{partition}")

    def partition_count(self, topic: str) -> int:
        if topic not in self.topics:
            raise UnknownTopicError(f"topic {topic!r} does not exist in {self.data_dir}")
        return self.topics[topic]

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        try:
            return tuple(self.reader(topic, partition).bounds())  # type: ignore[return-value]
        except StorageError as exc:
            raise ReplayError(f"{topic}/{partition}: {exc}") from exc

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        start, end = self.bounds(topic, partition)
        try:
            return self.reader(topic, partition).offset_for_timestamp(
                timestamp_ms, start_offset=start, end_offset=end
            )
        except StorageError as exc:
            raise ReplayError(f"{topic}/{partition}: {exc}") from exc

    def close(self) -> None:
        pass


class ClusterMetadata:
    """Bounds from a Kafka-compatible cluster, through a confluent-kafka consumer."""

    def __init__(self, bootstrap_servers: str, settings: Mapping[str, str]) -> None:
        from confluent_kafka import Consumer, KafkaException

        config: dict[str, Any] = {
            **settings,
            "bootstrap.servers": bootstrap_servers,
            "logger": KAFKA_LOG,
        }
        config.setdefault("group.id", "eventplatform-eventlog")
        config["enable.auto.commit"] = "false"
        try:
            self.consumer = Consumer(config)
        except KafkaException as exc:
            raise ReplayConfigError(f"cannot create a Kafka consumer: {exc}") from exc
        self.bootstrap_servers = bootstrap_servers
        self._counts: dict[str, int] = {}

    def partition_count(self, topic: str) -> int:
        from confluent_kafka import KafkaError, KafkaException

        if topic in self._counts:
            return self._counts[topic]
        try:
            metadata = self.consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise ReplayError(
                f"metadata of {topic!r} from {self.bootstrap_servers}: {exc}"
            ) from exc
        entry = metadata.topics.get(topic)
        if entry is None or (
            entry.error is not None and entry.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            raise UnknownTopicError(f"topic {topic!r} does not exist at {self.bootstrap_servers}")
        if entry.error is not None:
            raise ReplayError(f"metadata of {topic!r}: {entry.error}")
        self._counts[topic] = len(entry.partitions)
        return self._counts[topic]

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KafkaPartition

        try:
            low, high = self.consumer.get_watermark_offsets(
                KafkaPartition(topic, partition), timeout=METADATA_TIMEOUT_S
            )
        except KafkaException as exc:
            raise ReplayError(f"watermarks of {topic}/{partition}: {exc}") from exc
        return int(low), int(high)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KafkaPartition

        try:
            [found] = self.consumer.offsets_for_times(
                [KafkaPartition(topic, partition, timestamp_ms)], timeout=METADATA_TIMEOUT_S
            )
        except KafkaException as exc:
            raise ReplayError(f"offset of {topic}/{partition} at {timestamp_ms}: {exc}") from exc
        if found.error is not None:
            raise ReplayError(f"offset of {topic}/{partition} at {timestamp_ms}: {found.error}")
        return int(found.offset) if found.offset >= 0 else None

    def close(self) -> None:
        self.consumer.close()


def open_metadata(options: ReadOptions) -> LogMetadata:
    """The cluster when ``bootstrap.servers`` is given, else the data directory's files."""
    if options.bootstrap_servers:
        return ClusterMetadata(options.bootstrap_servers, options.kafka_settings)
    if options.data_dir is not None:
        return FileMetadata(options.data_dir)
    raise ReplayConfigError("give bootstrap.servers (a Kafka-compatible cluster) or dataDir")


# ---------------------------------------------------------------- planning


def plan(options: Mapping[str, str] | ReadOptions) -> Plan:
    """Resolve a batch read: every partition's range, checked against its log, and its chunks.

    Raises UnknownTopicError, OffsetRangeError (a start below the log start
    or past the high watermark, an end past the high watermark or before the
    start) and ReplayConfigError.
    """
    parsed = options if isinstance(options, ReadOptions) else parse_options(options)
    metadata = open_metadata(parsed)
    try:
        partitions = []
        for topic in parsed.topics:
            count = metadata.partition_count(topic)
            _check_partitions_exist(parsed, topic, count)
            for partition in range(count):
                partitions.append(_plan_partition(parsed, metadata, topic, partition))
    finally:
        metadata.close()
    ranges = [item.range for item in partitions]
    return Plan(parsed, tuple(partitions), tuple(split_ranges(ranges, parsed)))


def _check_partitions_exist(options: ReadOptions, topic: str, count: int) -> None:
    for bound, name in ((options.start, "starting"), (options.end, "ending")):
        for named_topic, partition in (*bound.offsets, *bound.timestamps):
            if named_topic == topic and partition >= count:
                raise ReplayConfigError(
                    f"{name} options name {topic}/{partition}, but {topic!r} has {count} partitions"
                )


def _plan_partition(
    options: ReadOptions, metadata: LogMetadata, topic: str, partition: int
) -> PartitionPlan:
    log_start, high_watermark = metadata.bounds(topic, partition)
    start = _resolve(options.start, metadata, topic, partition, (log_start, high_watermark))
    end = _resolve(options.end, metadata, topic, partition, (log_start, high_watermark))
    where = f"{topic}/{partition}"
    valid = f"the log holds [{log_start}, {high_watermark})"
    if start < log_start:
        raise OffsetRangeError(
            f"{where}: starting offset {start} is below the log start offset; {valid} "
            "(retention or DeleteRecords removed the rest)"
        )
    if start > high_watermark:
        raise OffsetRangeError(
            f"{where}: starting offset {start} is past the high watermark; {valid}"
        )
    if end > high_watermark:
        raise OffsetRangeError(f"{where}: ending offset {end} is past the high watermark; {valid}")
    if end < start:
        raise OffsetRangeError(f"{where}: ending offset {end} is before starting offset {start}")
    return PartitionPlan(OffsetRange(topic, partition, start, end), log_start, high_watermark)


def _resolve(
    bound: Bound, metadata: LogMetadata, topic: str, partition: int, bounds: tuple[int, int]
) -> int:
    log_start, high_watermark = bounds
    key = (topic, partition)
    timestamp = bound.timestamps.get(key)
    if timestamp is None and key not in bound.offsets:
        timestamp = bound.timestamp_ms
    if timestamp is not None:
        found = metadata.offset_for_timestamp(topic, partition, timestamp)
        return high_watermark if found is None else max(found, log_start)
    offset = bound.offsets.get(key, bound.default)
    if offset == EARLIEST:
        return log_start
    if offset == LATEST:
        return high_watermark
    return offset


def split_ranges(ranges: Iterable[OffsetRange], options: ReadOptions) -> list[OffsetRange]:
    """Chunks of at most ``maxRecordsPerPartition`` offsets; with ``minPartitions``,
    long ranges split further, in proportion to their length, until there are that many.
    Each range's chunks are of equal length (within one). Empty ranges give no chunk."""
    ranges = [item for item in ranges if item.records > 0]
    pieces = [math.ceil(item.records / options.max_records_per_partition) for item in ranges]
    total = sum(item.records for item in ranges)
    if options.min_partitions is not None and total:
        # Shares of min_partitions by length, rounded down, then one more for the largest
        # remainders until the sum is reached: no range gets a chunk it does not need.
        shares = [options.min_partitions * item.records / total for item in ranges]
        pieces = [
            max(count, math.floor(share)) for count, share in zip(pieces, shares, strict=True)
        ]
        missing = options.min_partitions - sum(pieces)
        by_remainder = sorted(
            range(len(ranges)), key=lambda i: shares[i] - math.floor(shares[i]), reverse=True
        )
        for index in by_remainder[: max(0, missing)]:
            pieces[index] += 1
    chunks = []
    for item, count in zip(ranges, pieces, strict=True):
        count = min(count, item.records)
        step, extra = divmod(item.records, count)
        start = item.start
        for index in range(count):
            end = start + step + (1 if index < extra else 0)
            chunks.append(OffsetRange(item.topic, item.partition, start, end))
            start = end
    return chunks


# ---------------------------------------------------------------- streaming


OffsetMap = dict[str, dict[str, int]]
"""Offsets as Spark checkpoints them: ``{"topic": {"0": 42}}``."""


def to_offset_map(offsets: Mapping[TopicPartition, int]) -> OffsetMap:
    """``{(topic, partition): offset}`` as JSON-ready nested dicts, partitions as strings."""
    result: OffsetMap = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_offset_map(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of :func:`to_offset_map`."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }


def high_watermarks(options: ReadOptions) -> dict[TopicPartition, tuple[int, int]]:
    """``(log_start_offset, high_watermark)`` of every partition of the topics, now."""
    metadata = open_metadata(options)
    try:
        return {
            (topic, partition): metadata.bounds(topic, partition)
            for topic in options.topics
            for partition in range(metadata.partition_count(topic))
        }
    finally:
        metadata.close()


def initial_offsets(options: ReadOptions) -> dict[TopicPartition, int]:
    """Where a stream starts: the starting options resolved for every partition."""
    metadata = open_metadata(options)
    try:
        resolved = {}
        for topic in options.topics:
            count = metadata.partition_count(topic)
            _check_partitions_exist(options, topic, count)
            for partition in range(count):
                bounds = metadata.bounds(topic, partition)
                start = _resolve(options.start, metadata, topic, partition, bounds)
                resolved[(topic, partition)] = min(max(start, bounds[0]), bounds[1])
        return resolved
    finally:
        metadata.close()


def stream_ranges(
    options: ReadOptions,
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    log_starts: Mapping[TopicPartition, int] | None = None,
) -> list[OffsetRange]:
    """The chunks of one micro-batch. A partition new since ``start`` starts at its log
    start. Data that retention removed before it was read is an OffsetRangeError unless
    ``failOnDataLoss=false``, which skips it."""
    ranges = []
    for key, stop in sorted(end.items()):
        topic, partition = key
        floor = (log_starts or {}).get(key, 0)
        begin = start.get(key, floor)
        if begin < floor:
            if options.fail_on_data_loss:
                raise OffsetRangeError(
                    f"{topic}/{partition}: offsets [{begin}, {floor}) were removed before they "
                    "were read (set failOnDataLoss=false to skip them)"
                )
            begin = floor
        if stop > begin:
            ranges.append(OffsetRange(topic, partition, begin, stop))
    return split_ranges(ranges, options)
