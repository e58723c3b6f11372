"""Replay jobs: rebuild a projection from the log with Spark, and swap it in.

A rebuild reads the projection's topics over an offset range with the
``eventlog`` data source and computes its tables into shadow tables (see
:mod:`.shadow`) with the same definitions the streaming runner uses (see
:mod:`.execute`). Then one transaction swaps the shadows in, records the
corrections and poison events of the range, and sets the runner's
checkpoints to the end of the range, so a runner continues from there:
without a gap and without applying anything twice. Where a running runner
applied past the end meanwhile, that transaction first applies the records
up to its checkpoint to the shadows through the runner's own path, and the
checkpoint stays (see :func:`_catch_up`).

A rebuild from the start of the log starts from empty shadows, so its tables
hold the fold of the whole log under the projection's current definition: its
transaction also records that definition's fingerprint in the registry (see
:mod:`~eventplatform.projections.registry`), which lets a runner of that
definition continue. A rebuild
from later offsets starts from a copy of the live tables, which must then be
checkpointed exactly at those offsets: the copy holds every event before
them and none after. :func:`~.planning.plan_replay` checks a request before
Spark starts and chooses between the two (see :mod:`.planning`).

A backfill (:func:`~.backfill.backfill`) instead recomputes only the rows a range's
events touch, from the whole log, and merges them into the live tables.
"""

from __future__ import annotations

import logging
import pickle
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Engine, and_, delete, or_, select

from eventplatform.events import Correction, Envelope, EventError, Position
from eventplatform.events.codec import parse
from eventplatform.projections import schema
from eventplatform.projections.batch import Record, plan_batch
from eventplatform.projections.caches import LogValue
from eventplatform.projections.corrections import apply_correction
from eventplatform.projections.database import absolute_database_url, create_store_engine
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.fold import OpaqueEvent
from eventplatform.projections.model import Projection
from eventplatform.projections.premerge import BatchDelta
from eventplatform.projections.registry import store_fingerprint
from eventplatform.projections.statements import upsert_insert
from eventplatform.projections.store import ProjectionStore, StoreTransaction
from eventplatform.spark_projections import execute, shadow
from eventplatform.spark_projections.corrections import Resolution, resolve
from eventplatform.spark_projections.errors import ReplayConfigError, ReplayError
from eventplatform.spark_projections.planning import (  # planned there, importable here
    ReplayRange as ReplayRange,
)
from eventplatform.spark_projections.planning import ReplayRequest as ReplayRequest
from eventplatform.spark_projections.planning import plan_ranges as plan_ranges
from eventplatform.spark_projections.planning import range_of as range_of
from eventplatform.spark_projections.replay_input import ReplayInput

log = logging.getLogger(__name__)


TopicPartition = tuple[str, int]


@dataclass
class ReplaySummary:
    """What a replay did."""

    projection: str
    mode: str
    ranges: list[ReplayRange]
    tables: list[str]
    events_read: int = 0
    events_applied: int = 0
    rows_written: int = 0
    caught_up: int = 0
    """Rebuild: events a running runner applied past the range, applied to the shadows too."""
    rows_touched: int = 0
    """Backfill: the rows recomputed (written, or deleted as no longer there)."""
    parked: int = 0
    corrections: int = 0
    seconds: float = 0.0
    dry_run: bool = False

    @classmethod
    def of(
        cls, projection: Projection, mode: str, ranges: Sequence[ReplayRange], *, dry_run: bool
    ) -> ReplaySummary:
        tables = [str(table.name) for table in projection.tables]
        return cls(projection.name, mode, list(ranges), tables, dry_run=dry_run)

    @property
    def events_per_second(self) -> float:
        return self.events_read / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        """The summary as printed by ``platform replay``."""
        head = "plan" if self.dry_run else "replayed"
        out = [f"{head}: {self.projection} ({self.mode}) into {', '.join(self.tables)}"]
        for r in self.ranges:
            events = f"{r.events} event{'' if r.events == 1 else 's'}"
            out.append(
                f"  {r.topic}/{r.partition}: offsets {r.start}..{r.end} ({events}; "
                f"log {r.log_start}..{r.high_watermark})"
            )
        if not self.dry_run and self.mode == "backfill":
            out.append(f"rows recomputed {self.rows_touched}")
        if self.caught_up:
            more = f"{self.caught_up} more event{'' if self.caught_up == 1 else 's'}"
            out.append(f"caught up with the streaming runner: {more}")
        if not self.dry_run:
            out.append(
                f"events read {self.events_read}, applied {self.events_applied}, "
                f"corrections {self.corrections}, parked {self.parked}, rows written "
                f"{self.rows_written}, {self.seconds:.1f} s, {self.rate()}"
            )
        return out

    def rate(self) -> str:
        """The events read per second, as printed: ``1 event/s``, ``1,200 events/s``."""
        shown = f"{self.events_per_second:,.0f}"
        return f"{shown} event{'' if shown == '1' else 's'}/s"


def rebuild(
    spark: Any,
    projection: Projection,
    database_url: str,
    ranges: Sequence[ReplayRange],
    source_options: Mapping[str, str],
    *,
    from_start: bool,
    dry_run: bool = False,
) -> ReplaySummary:
    """Rebuild ``projection`` over ``ranges`` (one per partition of its topics) and swap it in.

    ``from_start``: the ranges start at the log start (empty shadows), else
    at the live checkpoints (shadows copied from the live tables).
    """
    summary = ReplaySummary.of(projection, "rebuild", ranges, dry_run=dry_run)
    if dry_run:
        return summary
    started = time.monotonic()
    database_url = absolute_database_url(database_url)  # executors run in other directories
    engine = create_store_engine(database_url)
    try:
        if not from_start:
            _check_checkpoints(engine, projection, ranges)
        tables = shadow.create_shadows(engine, projection, copy_live=not from_start)
        try:
            bound = projection.bound_to(tables)
            source = ReplayInput.of(spark, ranges, source_options)
            resolution = resolve_corrections(spark, source, projection, ranges)
            summary.corrections = len(resolution.corrections)
            outcome = run_job(spark, source, projection, bound, database_url, resolution)
            poison = outcome.poison
            summary.events_read = sum(r.events for r in ranges)
            summary.events_applied, summary.rows_written = outcome.applied, outcome.rows
            summary.parked = len(poison) + len(resolution.invalid)
            if summary.parked and projection.on_error == "stop":
                raise ReplayError(stop_reason(projection, poison, resolution))
            with engine.begin() as connection:
                now = lock_checkpoints(connection, projection, ranges)
                store = ProjectionStore(engine, bound)
                reader = log_reader(source_options)
                # The range's corrected roots first: recomputing a row for an earlier
                # root reads every root's current content.
                corrected_from = [
                    (r.topic, r.partition, 0 if from_start else r.start, None) for r in ranges
                ]
                parked = [(r.topic, r.partition, r.start, None) for r in ranges]
                with store.joined(connection, reader) as transaction:
                    record_bookkeeping(
                        transaction, projection, corrected_from, parked, resolution, poison
                    )
                    _apply_earlier_roots(transaction, resolution)
                    caught_up = _catch_up(transaction, source_options, ranges, now)
                summary.caught_up = sum(r.events for r in caught_up)
                shadow.swap(connection, projection, tables)
                ends = {(r.topic, r.partition): r for r in caught_up}
                set_checkpoints(
                    connection,
                    projection,
                    [
                        replace(r, end=ends[(r.topic, r.partition)].end)
                        if (r.topic, r.partition) in ends
                        else r
                        for r in ranges
                    ],
                )
                if from_start:
                    store_fingerprint(connection, projection)
        finally:
            shadow.drop_shadows(engine, projection)
    finally:
        engine.dispose()
    summary.seconds = time.monotonic() - started
    return summary


def position_of(envelope: Envelope[Any]) -> Position:
    assert envelope.position is not None, "a replayed event has its log position"
    return envelope.position


def _catch_up(
    transaction: StoreTransaction,
    source_options: Mapping[str, str],
    ranges: Sequence[ReplayRange],
    now: Mapping[TopicPartition, int],
) -> list[ReplayRange]:
    """Apply to the shadows what a running runner applied past the ranges' ends meanwhile.

    The records from each range's end to the runner's checkpoint go through
    the runner's own path (plan, pre-merge, corrections, parking) into the
    shadow tables, so the swapped-in tables hold exactly what the runner
    had: its checkpoints stay where they are and its next batch applies on
    top. Returns the ranges caught up on.
    """
    from eventplatform.spark_projections import offsets
    from eventplatform.spark_projections.read_paths import read_chunk

    behind = [
        replace(r, start=r.end, end=now[(r.topic, r.partition)])
        for r in ranges
        if now.get((r.topic, r.partition), r.end) > r.end
    ]
    if not behind:
        return []
    options = offsets.parse_options(
        {**source_options, "topics": ",".join(sorted({r.topic for r in behind}))}
    )
    records: list[Record] = []
    for r in behind:
        chunk = offsets.OffsetRange(r.topic, r.partition, r.start, r.end)
        for batch in read_chunk(options, chunk):
            records.extend(execute.records_of(batch))
    projection = transaction.store.projection
    expected: dict[TopicPartition, int | None] = {(r.topic, r.partition): r.start for r in behind}
    plan = plan_batch(projection, records, expected, transaction.store.premerger)
    transaction.history.record_erased(plan.erased)
    for step in plan.steps:
        if isinstance(step, BatchDelta):
            transaction.apply_delta(step)
        elif step.kind == "correct":
            assert step.envelope is not None
            _correct(transaction, step.envelope, step.record.value)
        else:
            assert step.error is not None
            transaction.park(step.record.position, step.error, step.record.value, step.event_type)
    if plan.stop_at is not None:
        step = plan.stop_at
        raise ReplayError(
            f"{projection.name} stops on poison events (on_error='stop') and the event at "
            f"{step.record.position} is one: {step.error}"
        )
    return behind


def _check_checkpoints(
    engine: Engine, projection: Projection, ranges: Sequence[ReplayRange]
) -> None:
    store = ProjectionStore(engine, projection)
    stored = store.checkpoints([(r.topic, r.partition) for r in ranges])
    for r in ranges:
        applied_to = stored.get((r.topic, r.partition), r.log_start)
        if applied_to != r.start:
            raise ReplayConfigError(
                f"{projection.name} has applied {r.topic}/{r.partition} up to offset "
                f"{applied_to}, so a rebuild on top of its tables must start there, not at "
                f"{r.start}: a runner moved it since the plan; run the replay again (its plan "
                "then reads from the log start)"
            )


def resolve_corrections(
    spark: Any, source: ReplayInput, projection: Projection, ranges: Sequence[ReplayRange]
) -> Resolution:
    catalog = projection.decoding_catalog()
    corrections: list[Envelope[Correction]] = []
    values: dict[Position, bytes] = {}
    scan = source.scan(spark, Correction.event_type)
    for position, value in scan.corrections:
        try:
            if parse(value)["type"] != Correction.event_type:
                continue
            envelope = catalog.decode(value, position, Correction.event_type)
        except EventError:
            continue  # poison: the executors park it like any record that does not decode
        if isinstance(envelope.event, Correction):
            corrections.append(cast(Envelope[Correction], envelope))
            values[position] = value
    starts = {(r.topic, r.partition): r.start for r in ranges}
    resolution = resolve(corrections, starts, source.event_ids, scan.erased)
    resolution.values = values
    return resolution


@dataclass
class _Outcome:
    """What the executors computed and wrote."""

    applied: int
    poison: list[tuple[Position, str, str | None, bytes | None]]
    rows: int
    touched: dict[str, list[tuple[Any, ...]]]
    """Backfill only: the keys of the rows its windows touch, per table."""


def run_job(
    spark: Any,
    source: ReplayInput,
    projection: Projection,
    bound: Projection,
    database_url: str,
    resolution: Resolution,
    touch: execute.Touch | None = None,
) -> _Outcome:
    """Run the aggregation and the writes (of touched rows only, given ``touch``)."""

    job = execute.PartialsJob(
        projection,
        resolution.replacements,
        frozenset(resolution.corrections),
        touch,
        resolution.stand_ins,
    )
    renames = dict(zip(projection.plans, bound.plans, strict=True))
    write = execute.WriteJob(database_url, bound, renames)
    premerged = source.rdd(spark).mapPartitions(execute.premerge_chunks(job, source.options))
    partials = premerged.persist()
    try:
        kinds = {execute.POISON, execute.COUNT, execute.TOUCHED}
        side = partials.filter(lambda p: p[0] in kinds).collect()
        applied = sum(
            pickle.loads(payload) for kind, _, _, payload in side if kind == execute.COUNT
        )
        poison = [pickle.loads(payload) for kind, _, _, payload in side if kind == execute.POISON]
        touched: dict[str, dict[str, tuple[Any, ...]]] = {}
        for kind, table, key, payload in side:
            if kind == execute.TOUCHED:
                touched.setdefault(table, {})[key] = pickle.loads(payload)
        rows_in = partials.filter(lambda p: p[0] in (execute.STATE, execute.CONTRIBUTIONS))
        if touch is not None:
            wanted = spark.sparkContext.broadcast(
                {(table, key) for table, keys in touched.items() for key in keys}
            )
            rows_in = rows_in.filter(lambda p: (p[1], p[2]) in wanted.value)
        merge = execute.combine(projection)
        rows = (
            rows_in.map(lambda p: ((p[0], p[1], p[2]), (f"{p[0]}\0{p[1]}", p[3])))
            .reduceByKey(merge)
            .mapPartitions(execute.write_partition(write))
            .sum()
        )
    except Exception as exc:
        raise _replay_error(exc) from exc
    finally:
        partials.unpersist()
    return _Outcome(
        applied,
        poison,
        int(rows),
        {table: list(keys.values()) for table, keys in touched.items()},
    )


def _replay_error(exc: Exception) -> Exception:
    """A failed Spark job as a ReplayError with the executor's message, if it was ours."""
    text = str(exc)
    marker = "ReplayError: "
    if marker in text:
        message = text.split(marker, 1)[1].splitlines()[0]
        return ReplayError(message)
    return exc


def stop_reason(
    projection: Projection,
    poison: list[tuple[Position, str, str | None, bytes | None]],
    resolution: Resolution,
) -> str:
    first = sorted(
        [(p[0], p[1]) for p in poison]
        + [(c.position, reason) for c, reason in resolution.invalid if c.position is not None]
    )[0]
    return (
        f"{projection.name} stops on poison events (on_error='stop') and the event at "
        f"{first[0]} is one: {first[1]}"
    )


def log_reader(options: Mapping[str, str]) -> Any:
    """Reads records back for corrections of earlier events, on the replay's read path."""

    def read(positions: Sequence[Position]) -> dict[Position, LogValue]:
        from eventplatform.spark_projections.read_paths import read_values

        return read_values(options, list(positions))

    return read


def _apply_earlier_roots(transaction: StoreTransaction, resolution: Resolution) -> None:
    """Corrections of events applied before the range: the runner's own correction path."""
    for correction in resolution.before_range:
        _correct(transaction, correction, resolution.values.get(position_of(correction)))


def _correct(
    transaction: StoreTransaction, correction: Envelope[Correction], value: bytes | None
) -> None:
    """Apply one correction as the runner does, or park it if it cannot apply."""
    try:
        with transaction.savepoint():
            apply_correction(transaction, correction)
    except (HandlerError, EventError) as exc:
        transaction.park(position_of(correction), exc, value, Correction.event_type)


Window = tuple[str, int, int, int | None]
"""(topic, partition, first offset, end offset or None for no end)."""


def record_bookkeeping(
    transaction: StoreTransaction,
    projection: Projection,
    corrected_from: Sequence[Window],
    parked: Sequence[Window],
    resolution: Resolution,
    poison: Sequence[tuple[Position, str, str | None, bytes | None]],
) -> None:
    """Corrected events and dead letters, as the runner would have left them.

    The corrected-event records in ``corrected_from`` are replaced by the
    resolution's, and the range's erased records that no correction names are
    recorded as holding nothing (:meth:`~.store.StoreTransaction.record_erased`);
    the parked dead letters in ``parked`` by ``poison`` and the resolution's
    invalid corrections that lie in ``parked``.
    """
    connection = transaction.connection
    corrected, dead = schema.corrected_events, schema.dead_letters
    if corrected_from:
        connection.execute(
            delete(corrected).where(
                corrected.c.projection == projection.name,
                or_(*(_within(corrected, window) for window in corrected_from)),
            )
        )
    if parked:
        connection.execute(
            delete(dead).where(
                dead.c.projection == projection.name,
                dead.c.status == schema.DEAD_LETTER_PARKED,
                or_(*(_within(dead, window) for window in parked)),
            )
        )
    for root_position, (root_id, correction) in sorted(resolution.latest.items()):
        root = Envelope.decoded(
            OpaqueEvent(), uuid.UUID(root_id), datetime.now(UTC), "-", None, None, root_position
        )
        transaction.history.record_correction(root, correction)
    transaction.history.record_erased(
        [p for p in resolution.erased if in_windows(corrected_from, p)]
    )
    for position, error, event_type, value in poison:
        if in_windows(parked, position):
            transaction.park(position, ReplayError(error), value, event_type)
    for correction, reason in resolution.invalid:
        assert correction.position is not None
        if in_windows(parked, correction.position):
            value = resolution.values.get(correction.position)
            transaction.park(correction.position, ReplayError(reason), value, Correction.event_type)


def _within(table: Any, window: Window) -> Any:
    topic, partition, first, end = window
    clauses = [table.c.topic == topic, table.c.partition == partition, table.c.offset >= first]
    if end is not None:
        clauses.append(table.c.offset < end)
    return and_(*clauses)


def in_windows(windows: Sequence[Window], position: Position) -> bool:
    return any(
        (topic, partition) == (position.topic, position.partition)
        and first <= position.offset
        and (end is None or position.offset < end)
        for topic, partition, first, end in windows
    )


def lock_checkpoints(
    connection: Connection, projection: Projection, ranges: Sequence[ReplayRange]
) -> dict[TopicPartition, int]:
    """The checkpoints of ``ranges``' partitions, locked until the transaction ends.

    A runner's transaction moves its checkpoints before it writes rows, so
    taking them first keeps a replay's transaction and a runner's in one
    lock order. (On SQLite the transaction holds the database's write lock.)
    """
    table = schema.checkpoints
    query = select(table.c.topic, table.c.partition, table.c.next_offset).where(
        table.c.projection == projection.name
    )
    if connection.dialect.name == "postgresql":
        query = query.order_by(table.c.topic, table.c.partition).with_for_update()
    wanted = {(r.topic, r.partition) for r in ranges}
    return {
        (topic, partition): offset
        for topic, partition, offset in connection.execute(query)
        if (topic, partition) in wanted
    }


def set_checkpoints(connection: Any, projection: Projection, ranges: Sequence[ReplayRange]) -> None:
    table = schema.checkpoints
    now = datetime.now(UTC)
    postgresql = connection.dialect.name == "postgresql"
    for r in ranges:
        statement = upsert_insert(table, postgresql).values(
            projection=projection.name,
            topic=r.topic,
            partition=r.partition,
            next_offset=r.end,
            updated_at=now,
        )
        statement = statement.on_conflict_do_update(
            index_elements=["projection", "topic", "partition"],
            set_={"next_offset": statement.excluded.next_offset, "updated_at": now},
        )
        connection.execute(statement)
