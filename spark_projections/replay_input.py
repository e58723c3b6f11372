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

from eventplatform.events import Position
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
        found = self.rdd(spark).mapPartitions(scan_for(self.options, correction_type)).collect()
        return sorted((Position(*where), value) for where, value in found)

    def event_ids(self, positions: Sequence[Position]) -> dict[Position, str | None]:
        """The envelope id held at each of ``positions`` that the input covers (absent where
        there is none: outside the input, no record, or no envelope id)."""
        from eventplatform.spark_projections.columns import envelope_id
        from eventplatform.spark_projections.read_paths import read_values

        covered = [p for p in positions if self.covers(p)]
        ids = {p: envelope_id(value) for p, value in read_values(self.options, covered).items()}
        return {p: identifier for p, identifier in ids.items() if identifier is not None}

    def covers(self, position: Position) -> bool:
        return any(
            (chunk.topic, chunk.partition) == (position.topic, position.partition)
            and chunk.start <= position.offset < chunk.end
            for chunk in self.chunks
        )


def scan_for(
    options: ReadOptions, event_type: str
) -> Callable[[Iterator[OffsetRange]], Iterator[tuple[tuple[str, int, int], bytes]]]:
    """The ``mapPartitions`` function of :meth:`ReplayInput.corrections`."""

    def run(chunks: Iterator[OffsetRange]) -> Iterator[tuple[tuple[str, int, int], bytes]]:
        import pyarrow.compute as pc

        from eventplatform.spark_projections.read_paths import read_chunk

        for chunk in chunks:
            for batch in read_chunk(options, chunk):
                types = batch.column("event_type")
                wanted = pc.or_kleene(pc.equal(types, event_type), pc.is_null(types))
                found = batch.filter(wanted)
                offsets = found.column("offset").to_pylist()
                values = found.column("value").to_pylist()
                for offset, value in zip(offsets, values, strict=True):
                    if value is not None:
                        yield (chunk.topic, chunk.partition, offset), value

    return run
