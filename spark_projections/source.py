"""``spark.read.format("eventlog")``: the log as a Spark DataFrame, batch or stream.

    spark.read.format("eventlog")
        .option("topics", "orders,payments")
        .option("dataDir", "/var/lib/eventplatform")      # direct segment reads
        .option("bootstrap.servers", "broker:9092")        # high watermarks, or Kafka reads
        .option("startingOffsets", '{"orders": {"0": 123}}')
        .load()

Columns (``SCHEMA``): topic, partition, offset, timestamp, timestamp_type,
key, value, headers (array of key/value structs), event_type, event_version,
event_id. A record the log erased is a row too, as a consumer sees it: its
offset, timestamp and key, a null value, null event columns and the one header
``eventplatform.erased``; a job reading events skips it
(:func:`eventplatform.events.is_erased`, or ``event_type`` null and the header).
Options, offsets and planning live in
:mod:`~eventplatform.spark_projections.offsets`; the two read paths in
:mod:`~eventplatform.spark_projections.read_paths`. This module only adapts
them to Spark's Python Data Source API (Spark 4.0): one input partition per
planned chunk, and ``read`` yields Arrow batches.

Streams checkpoint offsets as ``{"topic": {"partition": next offset}}``. A
stream starts at ``startingOffsets`` (default ``latest``), picks up new
partitions from their log start, and takes no ending options.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from typing_extensions import override

from eventplatform.spark_projections.errors import ReplayConfigError
from eventplatform.spark_projections.offsets import (
    OffsetRange,
    ReadOptions,
    from_offset_map,
    high_watermarks,
    initial_offsets,
    parse_options,
    plan,
    stream_ranges,
    to_offset_map,
)

if TYPE_CHECKING:
    import pyarrow as pa

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestamp_type", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
        StructField("event_type", StringType()),
        StructField("event_version", IntegerType()),
        StructField("event_id", StringType()),
    ]
)
"""The DataFrame's columns; the replay jobs depend on their names, order and types."""


class EventLogPartition(InputPartition):
    """One planned chunk: ``value`` is its :class:`OffsetRange`."""

    def __init__(self, chunk: OffsetRange) -> None:
        super().__init__(chunk)
        self.chunk = chunk


def _read(options: ReadOptions, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, EventLogPartition):  # Spark sends None for an empty plan
        return iter(())
    # Imported here: the planner processes Spark starts for every query never need it.
    from eventplatform.spark_projections.read_paths import read_chunk

    return read_chunk(options, partition.chunk)


class EventLogDataSource(DataSource):
    """The ``eventlog`` format; see the module docstring and ``docs/replay.md``."""

    @classmethod
    @override
    def name(cls) -> str:
        return "eventlog"

    @override
    def schema(self) -> StructType:
        parse_options(self.options)  # malformed options fail at load(), not at the first job
        return SCHEMA

    @override
    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return EventLogReader(parse_options(self.options))

    @override
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return EventLogStreamReader(parse_options(self.options, streaming=True))


def _check_schema(schema: StructType) -> None:
    if schema.simpleString() != SCHEMA.simpleString():
        raise ReplayConfigError(
            f"eventlog has a fixed schema, {SCHEMA.simpleString()}; got {schema.simpleString()}"
        )


class EventLogReader(DataSourceReader):
    """Batch reads: the plan is made once, when Spark asks for partitions."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    @override
    def partitions(self) -> list[InputPartition]:
        return [EventLogPartition(chunk) for chunk in plan(self.options).chunks]

    @override
    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class EventLogStreamReader(DataSourceStreamReader):
    """Micro-batches from the last end to the current high watermarks."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    @override
    def initialOffset(self) -> dict[str, Any]:
        return to_offset_map(initial_offsets(self.options))

    @override
    def latestOffset(self) -> dict[str, Any]:
        bounds = high_watermarks(self.options)
        return to_offset_map({key: high for key, (_, high) in bounds.items()})

    @override
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        log_starts = {key: low for key, (low, _) in high_watermarks(self.options).items()}
        chunks = stream_ranges(
            self.options, from_offset_map(start), from_offset_map(end), log_starts=log_starts
        )
        return [EventLogPartition(chunk) for chunk in chunks]

    @override
    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    @override
    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""
