"""A replay's input: its ranges in the ``eventlog`` source's chunks, read where they are used.

A rebuild or a backfill reads every record of its ranges twice: once to
find the corrections, once to plan and pre-merge. Both jobs run over an RDD
of the source's chunks, one Spark partition per chunk, and each Python
worker reads its chunks with the source's own read paths
(:func:`~eventplatform.spark_projections.read_paths.read_chunk`) and
processes the records on the spot. Through the ``eventlog`` DataFrame, every
record would cross into the JVM and back out to a second Python worker,
although only Python reads them: that hand-off took about 40 % of a
rebuild's pre-merge (``docs/benchmarks.md``).

The chunks are planned as the source plans them (``maxRecordsPerPartition``
and ``minPartitions`` apply), with at least two per core by default so that
uneven partitions still keep every core busy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from eventplatform.events import ErasedRecord, Position
from eventplatform.spark_projections.offsets import (
    OffsetRange,
    ReadOptions,
    parse_options,
    split_ranges,
)

if TYPE_CHECKING:
    from eventplatform.spark_projections.replay import ReplayRange

CHUNKS_PER_CORE = 2
"""Chunks planned per core of the Spark application, unless ``minPartitions`` says otherwise."""


@dataclass(frozen=True)
class ReplayInput:
    """The chunks of a replay's ranges and the read options to read them with (picklable)."""

    options: ReadOptions
    chunks: tuple[OffsetRange, ...]

    @classmethod
    def of(
        cls, spark: Any, ranges: Sequence[ReplayRange], source_options: Mapping[str, str]
    ) -> ReplayInput:
        topics = ",".join(sorted({r.topic for r in ranges}))
        options = parse_options({**source_options, "topics": topics})
        if options.min_partitions is None:
            cores = spark.sparkContext.defaultParallelism
            options = replace(options, min_partitions=CHUNKS_PER_CORE * cores)
        pieces = [OffsetRange(r.topic, r.partition, r.start, r.end) for r in ranges]
        return cls(options, tuple(split_ranges(pieces, options)))

    def rdd(self, spark: Any) -> Any:
        """The chunks as an RDD, one partition each (one empty partition if there are none)."""
        return spark.sparkContext.parallelize(self.chunks, max(1, len(self.chunks)))

    def corrections(self, spark: Any, correction_type: str) -> list[tuple[Position, bytes]]:
        """Every record whose ``event-type`` header names ``correction_type``, or that has
        no such header (its value then says what it is), with its value, in log order."""
        return self.scan(spark, correction_type).corrections

    def scan(self, spark: Any, correction_type: str) -> Scan:
        """The records :meth:`corrections` gives, and the records the log erased (which
        carry no ``event-type`` header either), in one pass."""
        found = self.rdd(spark).mapPartitions(scan_for(self.options, correction_type)).collect()
        corrections: list[tuple[Position, bytes]] = []
        erased: list[ErasedRecord] = []
        for where, value, kept in sorted(found, key=lambda item: item[0]):
            position = Position(*where)
            if value is not None:
                corrections.append((position, value))
            elif kept is not None:
                erased.append(ErasedRecord.of(position, *kept))
        return Scan(corrections, erased)

    def event_ids(self, positions: Sequence[Position]) -> dict[Position, str | None]:
        """The envelope id held at each of ``positions`` that the input covers (absent where
        there is none: outside the input, no record, an erased record, or no envelope id)."""
        from eventplatform.spark_projections.columns import envelope_id
        from eventplatform.spark_projections.read_paths import read_values

        covered = [p for p in positions if self.covers(p)]
        ids = {
            p: envelope_id(value)
            for p, value in read_values(self.options, covered).items()
            if isinstance(value, bytes)
        }
        return {p: identifier for p, identifier in ids.items() if identifier is not None}

    def covers(self, position: Position) -> bool:
        return any(
            (chunk.topic, chunk.partition) == (position.topic, position.partition)
            and chunk.start <= position.offset < chunk.end
            for chunk in self.chunks
        )


@dataclass(frozen=True)
class Scan:
    """What the driver reads of a replay's input before the premerge (:meth:`ReplayInput.scan`)."""

    corrections: list[tuple[Position, bytes]]
    """The records that may be corrections, with their values, in log order."""
    erased: list[ErasedRecord]
    """The records the log erased, in log order."""


ScanItem = tuple[tuple[str, int, int], bytes | None, tuple[bytes | None, int] | None]
"""(topic, partition, offset) and either the value of a record that may be a correction,
or None and an erased record's key and timestamp (ms)."""


def scan_for(
    options: ReadOptions, event_type: str
) -> Callable[[Iterator[OffsetRange]], Iterator[ScanItem]]:
    """The ``mapPartitions`` function of :meth:`ReplayInput.scan`."""

    def run(chunks: Iterator[OffsetRange]) -> Iterator[ScanItem]:
        import pyarrow.compute as pc

        from eventplatform.events.wire import is_erased
        from eventplatform.spark_projections.read_paths import read_chunk

        for chunk in chunks:
            for batch in read_chunk(options, chunk):
                types = batch.column("event_type")
                wanted = pc.or_kleene(pc.equal(types, event_type), pc.is_null(types))
                found = batch.filter(wanted)
                offsets = found.column("offset").to_pylist()
                values = found.column("value").to_pylist()
                for row, (offset, value) in enumerate(zip(offsets, values, strict=True)):
                    where = (chunk.topic, chunk.partition, offset)
                    if value is not None:
                        yield where, value, None
                        continue
                    headers = found.column("headers")[row].as_py()
                    if is_erased([(h["key"], h["value"]) for h in headers or ()], None):
                        key = found.column("key")[row].as_py()
                        microseconds = found.column("timestamp")[row].value
                        yield where, None, (key, microseconds // 1000)

    return run
