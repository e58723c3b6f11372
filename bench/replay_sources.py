"""The replay benchmark's own Spark data sources, beside ``eventlog``.

* ``bench_repeated``: what Spark costs to take rows in from a Python source;
* ``eventlog_numpy``: ``eventlog`` with the NumPy decoder instead of the compiled one.

Spark's Python workers import this module as ``bench.replay_sources`` (the repository root
is on their ``PYTHONPATH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from typing_extensions import override

from eventplatform.spark_projections import columns
from eventplatform.spark_projections.columns import ROWS_PER_ARROW_BATCH
from eventplatform.spark_projections.offsets import ReadOptions, parse_options
from eventplatform.spark_projections.offsets import plan as read_plan
from eventplatform.spark_projections.read_paths import read_chunk
from eventplatform.spark_projections.source import (
    SCHEMA,
    EventLogDataSource,
    EventLogPartition,
    EventLogReader,
)

REPEATED_SAMPLE_ROWS = 4_096
"""Records ``bench_repeated`` decodes per partition; it repeats them to a full Arrow batch."""


class RepeatedBatches(DataSource):
    """``bench_repeated``: the eventlog's schema and input partitions, but each partition
    yields one small decoded sample again and again, in full-size Arrow batches, up to its
    record count. Its Python workers do next to nothing; a count of it times what Spark
    spends taking in the same rows from a Python data source."""

    @classmethod
    @override
    def name(cls) -> str:
        return "bench_repeated"

    @override
    def schema(self) -> StructType:
        return SCHEMA

    @override
    def reader(self, schema: StructType) -> DataSourceReader:
        return RepeatedReader(parse_options(self.options))


class RepeatedReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    @override
    def partitions(self) -> list[InputPartition]:
        return [EventLogPartition(chunk) for chunk in read_plan(self.options).chunks]

    @override
    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, EventLogPartition)
        chunk = partition.chunk
        sample = replace(chunk, end=min(chunk.end, chunk.start + REPEATED_SAMPLE_ROWS))
        first = pa.concat_batches(list(read_chunk(self.options, sample)))
        batch = pa.concat_batches([first] * max(1, ROWS_PER_ARROW_BATCH // first.num_rows))
        left = chunk.records
        while left > 0:
            yield batch.slice(0, left)
            left -= batch.num_rows


REPEATED_STEP = "count without decoding (bench_repeated: one sample re-yielded)"


class NumpyDecoded(EventLogDataSource):
    """``eventlog_numpy``: the ``eventlog`` source with the compiled decoder switched off
    in its workers, so a count times the NumPy decoder against the compiled one."""

    @classmethod
    @override
    def name(cls) -> str:
        return "eventlog_numpy"

    @override
    def reader(self, schema: StructType) -> DataSourceReader:
        return NumpyDecodedReader(parse_options(self.options))


class NumpyDecodedReader(EventLogReader):
    @override
    def read(self, partition: InputPartition) -> Iterator[Any]:
        compiled = columns.compiled  # Spark reuses the worker: put the decoder back after
        columns.compiled = None
        try:
            yield from super().read(partition)
        finally:
            columns.compiled = compiled


NUMPY_COUNT_STEP = "count, NumPy decoder (eventlog_numpy)"
