"""Backfill: recompute the rows a range's events touch, and merge them into the live tables.

After a fix to a window of data (correcting events) or to a handler, a
backfill reads the whole log with Spark, recomputes every row that the
range's events touch (see :class:`~.execute.Touch`), and replaces those rows
of the live tables in one transaction; the other rows stay as they are. It
shares the Spark job and the bookkeeping of a rebuild (:mod:`.replay`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine

from eventplatform.projections.database import absolute_database_url, create_store_engine
from eventplatform.projections.model import Projection
from eventplatform.projections.store import ProjectionStore
from eventplatform.spark_projections import execute, shadow
from eventplatform.spark_projections.errors import ReplayError
from eventplatform.spark_projections.replay import (
    ReplayRange,
    ReplaySummary,
    TopicPartition,
    Window,
    in_windows,
    lock_checkpoints,
    log_reader,
    position_of,
    range_of,
    record_bookkeeping,
    resolve_corrections,
    run_job,
    set_checkpoints,
    stop_reason,
)
from eventplatform.spark_projections.replay_input import ReplayInput

log = logging.getLogger(__name__)


BACKFILL_ATTEMPTS = 3


class _OvertakenError(Exception):
    """A runner applied past the end of a backfill's read while it ran."""


def backfill(
    spark: Any,
    projection: Projection,
    database_url: str,
    ranges: Sequence[ReplayRange],
    source_options: Mapping[str, str],
    *,
    dry_run: bool = False,
) -> ReplaySummary:
    """Recompute the rows the events of ``ranges`` touch, and merge them into the live tables.

    A touched row is recomputed from every event of the log, up to the high
    watermark read at the start, and replaces the live row (or its absence
    does). The events the streaming runner had not applied by then (from its
    checkpoint to that watermark) count as touching too, so the checkpoints
    can move to the watermark in the same transaction: every other row holds
    all events up to it already. A runner that applied past the watermark
    meanwhile makes the attempt start over (up to ``BACKFILL_ATTEMPTS``).
    """
    summary = ReplaySummary.of(projection, "backfill", ranges, dry_run=dry_run)
    if dry_run:
        return summary
    started = time.monotonic()
    database_url = absolute_database_url(database_url)  # executors run in other directories
    engine = create_store_engine(database_url)
    try:
        for attempt in range(1, BACKFILL_ATTEMPTS + 1):
            try:
                _backfill_once(
                    spark, projection, engine, database_url, ranges, source_options, summary
                )
                break
            except _OvertakenError as exc:
                if attempt == BACKFILL_ATTEMPTS:
                    raise ReplayError(
                        f"{exc}; the streaming runner kept overtaking the backfill "
                        f"({BACKFILL_ATTEMPTS} attempts): stop it, or run again"
                    ) from exc
                log.info(
                    "backfill attempt %d of %d: %s; starting over", attempt, BACKFILL_ATTEMPTS, exc
                )
    finally:
        engine.dispose()
    summary.seconds = time.monotonic() - started
    return summary


def _backfill_once(
    spark: Any,
    projection: Projection,
    engine: Engine,
    database_url: str,
    ranges: Sequence[ReplayRange],
    source_options: Mapping[str, str],
    summary: ReplaySummary,
) -> None:
    whole = _whole_log(projection, source_options)
    ends = {(r.topic, r.partition): r.end for r in whole}
    applied = ProjectionStore(engine, projection).checkpoints(ends)
    windows: dict[TopicPartition, list[tuple[int, int]]] = {}
    for r in ranges:
        if r.events:
            windows.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    for r in whole:
        here = applied.get((r.topic, r.partition), r.log_start)
        if here < r.end:
            windows.setdefault((r.topic, r.partition), []).append((here, r.end))
    tables = shadow.create_shadows(engine, projection, copy_live=False)
    try:
        bound = projection.bound_to(tables)
        source = ReplayInput.of(spark, whole, source_options)
        resolution = resolve_corrections(spark, source, projection, whole)
        touch = execute.Touch({tp: tuple(w) for tp, w in windows.items()}, {})
        versions = {
            root: tuple(content for _, content in chain)
            for root, chain in resolution.chains.items()
            if any(touch.covers(*where) for where, _ in chain)
        }
        touch = execute.Touch(touch.windows, versions)
        outcome = run_job(spark, source, projection, bound, database_url, resolution, touch)
        parked: list[Window] = [
            (topic, partition, lo, hi) for (topic, partition), w in windows.items() for lo, hi in w
        ]
        poison = [p for p in outcome.poison if in_windows(parked, p[0])]
        invalid = [c for c, _ in resolution.invalid if in_windows(parked, position_of(c))]
        summary.events_read = sum(r.events for r in whole)
        summary.events_applied, summary.rows_written = outcome.applied, outcome.rows
        summary.rows_touched = sum(len(keys) for keys in outcome.touched.values())
        summary.corrections = len(resolution.corrections)
        summary.parked = len(poison) + len(invalid)
        if summary.parked and projection.on_error == "stop":
            raise ReplayError(stop_reason(projection, poison, resolution))
        with engine.begin() as connection:
            now = lock_checkpoints(connection, projection, whole)
            for r in whole:
                before = applied.get((r.topic, r.partition), r.log_start)
                at = now.get((r.topic, r.partition), r.log_start)
                if not before <= at <= r.end:
                    raise _OvertakenError(
                        f"{projection.name} moved {r.topic}/{r.partition} from offset {before} "
                        f"to {at}, outside the backfill's read (up to {r.end})"
                    )
            store = ProjectionStore(engine, bound)
            corrected_from = [(r.topic, r.partition, r.log_start, None) for r in whole]
            with store.joined(connection, log_reader(source_options)) as transaction:
                record_bookkeeping(
                    transaction, projection, corrected_from, parked, resolution, poison
                )
            shadow.merge(connection, projection, tables, outcome.touched)
            set_checkpoints(connection, projection, whole)
    finally:
        shadow.drop_shadows(engine, projection)


def _whole_log(projection: Projection, source_options: Mapping[str, str]) -> list[ReplayRange]:
    """Every partition of the projection's topics, from its log start to its high watermark."""
    from eventplatform.spark_projections.offsets import plan

    options = {
        **source_options,
        "topics": ",".join(projection.topics),
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
    }
    return [range_of(item) for item in plan(options).partitions]
